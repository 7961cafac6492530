import json, os, stat, subprocess, sys

def fail(why):
    print("FAIL:", why)
    sys.exit(1)

def run(cmd, **kw):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60, **kw)

try:
    got = open("/app/report.csv").read().replace("\r\n", "\n")
except OSError:
    fail("no /app/report.csv")
if got.strip().splitlines() != ['customer,total', 'cedar,2818.55', 'lumen,2808.58', 'zephyr,2636.47', 'nectar,2635.86', 'juniper,2634.91', 'delta,1927.13']:
    fail("report differs: " + got[:300])

print("PASS")
