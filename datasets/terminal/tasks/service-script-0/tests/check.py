import json, os, stat, subprocess, sys

def fail(why):
    print("FAIL:", why)
    sys.exit(1)

def run(cmd, **kw):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60, **kw)

import time
if not os.path.exists("/app/svc.sh"):
    fail("no /app/svc.sh")
run("sh /app/svc.sh start")
time.sleep(1)
status = run("sh /app/svc.sh status")
if status.returncode != 0 or status.stdout.strip() != "running":
    fail("status after start: %r %d" % (status.stdout, status.returncode))
pid = int(open("/app/zephyr.pid").read())
os.kill(pid, 0)
run("sh /app/svc.sh stop")
time.sleep(0.5)
try:
    os.kill(pid, 0)
    fail("the worker still runs after stop")
except ProcessLookupError:
    pass
status = run("sh /app/svc.sh status")
if status.returncode != 1 or status.stdout.strip() != "stopped":
    fail("status after stop: %r %d" % (status.stdout, status.returncode))
if os.path.exists("/app/zephyr.pid"):
    fail("the PID file is left")

print("PASS")
