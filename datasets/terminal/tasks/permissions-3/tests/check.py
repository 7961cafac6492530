import json, os, stat, subprocess, sys

def fail(why):
    print("FAIL:", why)
    sys.exit(1)

def run(cmd, **kw):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60, **kw)

base = '/app/kelvin'
mode = lambda p: stat.S_IMODE(os.stat(os.path.join(base, p)).st_mode)
if mode("scripts/indigo.sh") != 0o700:
    fail("scripts/indigo.sh has mode %o" % mode("scripts/indigo.sh"))
if mode("secrets/xenon.key") != 0o600:
    fail("secrets/xenon.key has mode %o" % mode("secrets/xenon.key"))
link = os.path.join(base, "current")
if not os.path.islink(link):
    fail("current is not a symbolic link")
if os.readlink(link).rstrip("/") not in ("releases/v5.13", "./releases/v5.13"):
    fail("current points to " + os.readlink(link))
if not os.path.isdir(os.path.join(base, "releases/v5.13")):
    fail("releases/v5.13 is not a folder")

print("PASS")
