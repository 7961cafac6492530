import json, os, stat, subprocess, sys

def fail(why):
    print("FAIL:", why)
    sys.exit(1)

def run(cmd, **kw):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60, **kw)

import tarfile
try:
    with tarfile.open("/app/out/csv_only.tar.gz", "r:gz") as archive:
        got = sorted(m.name.lstrip("./") for m in archive.getmembers() if m.isfile())
except (OSError, tarfile.TarError) as exc:
    fail("csv_only.tar.gz: %s" % exc)
if got != ['data/cedar.csv', 'data/garnet.csv', 'data/umber.csv']:
    fail("members %r" % got)
try:
    if open("/app/out/largest.txt").read().strip().lstrip("./") != 'data/sub/raven.log':
        fail("largest")
except OSError:
    fail("no largest.txt")

print("PASS")
