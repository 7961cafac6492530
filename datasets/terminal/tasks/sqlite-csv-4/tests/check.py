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
if got.strip().splitlines() != ['customer,total', 'umber,3804.67', 'maple,2149.19', 'cedar,1944.84', 'garnet,922.27', 'ember,834.61', 'quartz,98.36']:
    fail("report differs: " + got[:300])

print("PASS")
