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
if got.strip().splitlines() != ['customer,total', 'pepper,2522.01', 'juniper,2442.66', 'cedar,2226.01', 'harbor,2042.65', 'bravo,1492.51', 'yarrow,964.10']:
    fail("report differs: " + got[:300])

print("PASS")
