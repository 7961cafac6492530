import json, os, stat, subprocess, sys

def fail(why):
    print("FAIL:", why)
    sys.exit(1)

def run(cmd, **kw):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60, **kw)

try:
    got = open("/app/totals.csv").read()
except OSError:
    fail("no /app/totals.csv")
if got.strip().splitlines() != ['region,total', 'east,10703', 'south,10419', 'central,7402', 'west,7321']:
    fail("totals differ: " + got[:300])

print("PASS")
