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
if got.strip().splitlines() != ['region,total', 'west,10762', 'coast,10532', 'east,8391', 'north,7642']:
    fail("totals differ: " + got[:300])

print("PASS")
