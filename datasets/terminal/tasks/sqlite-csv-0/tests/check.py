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
if got.strip().splitlines() != ['customer,total', 'onyx,3794.07', 'fjord,2510.26', 'indigo,2237.55', 'alpha,2101.53', 'violet,1173.55', 'harbor,462.65']:
    fail("report differs: " + got[:300])

print("PASS")
