import json, os, stat, subprocess, sys

def fail(why):
    print("FAIL:", why)
    sys.exit(1)

def run(cmd, **kw):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60, **kw)

base = '/app/ember'
mode = lambda p: stat.S_IMODE(os.stat(os.path.join(base, p)).st_mode)
if mode("scripts/yarrow.sh") != 0o700:
    fail("scripts/yarrow.sh has mode %o" % mode("scripts/yarrow.sh"))
if mode("secrets/cedar.key") != 0o600:
    fail("secrets/cedar.key has mode %o" % mode("secrets/cedar.key"))
link = os.path.join(base, "current")
if not os.path.islink(link):
    fail("current is not a symbolic link")
if os.readlink(link).rstrip("/") not in ("releases/v7.17", "./releases/v7.17"):
    fail("current points to " + os.readlink(link))
if not os.path.isdir(os.path.join(base, "releases/v7.17")):
    fail("releases/v7.17 is not a folder")

print("PASS")
