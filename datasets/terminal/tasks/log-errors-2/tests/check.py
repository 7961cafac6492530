import json, os, stat, subprocess, sys

def fail(why):
    print("FAIL:", why)
    sys.exit(1)

def run(cmd, **kw):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60, **kw)

try:
    got = open("/app/answer.txt").read().split("\n")
except OSError:
    fail("no /app/answer.txt")
if got[0].strip() != "37":
    fail("count " + got[0])
if len(got) < 2 or got[1].strip() != 'bad request':
    fail("message " + repr(got[1:2]))

print("PASS")
