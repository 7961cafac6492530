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
if got.strip().splitlines() != ['customer,total', 'tundra,5537.56', 'indigo,2797.90', 'garnet,2538.26', 'fjord,2510.46', 'onyx,1517.77', 'juniper,389.66']:
    fail("report differs: " + got[:300])

print("PASS")
