import json, os, stat, subprocess, sys

def fail(why):
    print("FAIL:", why)
    sys.exit(1)

def run(cmd, **kw):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60, **kw)

import configparser
config = configparser.ConfigParser()
if not config.read("/app/config/app.ini"):
    fail("app.ini unreadable")
want = '[server]\nhost = 0.0.0.0\nport = 8656\n\n[database]\nurl = sqlite:///data.db\npool_size = 2\necho = false\n'
original = configparser.ConfigParser()
original.read_string(want)
if config.get("database", "pool_size", fallback=None) != "55":
    fail("pool_size")
if config.get("cache", "ttl", fallback=None) != "900":
    fail("cache ttl")
for section in original.sections():
    for key, value in original.items(section):
        if key != "pool_size" and config.get(section, key, fallback=None) != value:
            fail("changed " + section + "." + key)
try:
    got = json.load(open("/app/config/features.json"))
except (OSError, ValueError):
    fail("features.json unreadable")
if got != {'xenon': True, 'maple': True, 'lumen': False}:
    fail("features: %r" % got)

print("PASS")
