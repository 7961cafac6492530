import json, os, stat, subprocess, sys

def fail(why):
    print("FAIL:", why)
    sys.exit(1)

def run(cmd, **kw):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60, **kw)

base = '/app/nectar'
mode = lambda p: stat.S_IMODE(os.stat(os.path.join(base, p)).st_mode)
if mode("scripts/quartz.sh") != 0o755:
    fail("scripts/quartz.sh has mode %o" % mode("scripts/quartz.sh"))
if mode("secrets/zephyr.key") != 0o600:
    fail("secrets/zephyr.key has mode %o" % mode("secrets/zephyr.key"))
link = os.path.join(base, "current")
if not os.path.islink(link):
    fail("current is not a symbolic link")
if os.readlink(link).rstrip("/") not in ("releases/v4.0", "./releases/v4.0"):
    fail("current points to " + os.readlink(link))
if not os.path.isdir(os.path.join(base, "releases/v4.0")):
    fail("releases/v4.0 is not a folder")

print("PASS")
