import json, os, stat, subprocess, sys

def fail(why):
    print("FAIL:", why)
    sys.exit(1)

def run(cmd, **kw):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60, **kw)

want = run("git -C /app/repo log --all --format=%H --grep='^step 10$'").stdout.strip()
try:
    got = open("/app/bad_commit.txt").read().strip()
except OSError:
    fail("no /app/bad_commit.txt")
if not want or got != want:
    fail("wrote %r" % got)

print("PASS")
