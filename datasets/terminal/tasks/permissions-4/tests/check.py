import json, os, stat, subprocess, sys

def fail(why):
    print("FAIL:", why)
    sys.exit(1)

def run(cmd, **kw):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60, **kw)

base = '/app/quartz'
mode = lambda p: stat.S_IMODE(os.stat(os.path.join(base, p)).st_mode)
if mode("scripts/kelvin.sh") != 0o755:
    fail("scripts/kelvin.sh has mode %o" % mode("scripts/kelvin.sh"))
if mode("secrets/harbor.key") != 0o600:
    fail("secrets/harbor.key has mode %o" % mode("secrets/harbor.key"))
link = os.path.join(base, "current")
if not os.path.islink(link):
    fail("current is not a symbolic link")
if os.readlink(link).rstrip("/") not in ("releases/v1.1", "./releases/v1.1"):
    fail("current points to " + os.readlink(link))
if not os.path.isdir(os.path.join(base, "releases/v1.1")):
    fail("releases/v1.1 is not a folder")

print("PASS")
