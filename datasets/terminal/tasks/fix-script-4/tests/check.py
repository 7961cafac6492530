import json, os, stat, subprocess, sys

def fail(why):
    print("FAIL:", why)
    sys.exit(1)

def run(cmd, **kw):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60, **kw)

import tempfile
d = tempfile.mkdtemp()
names = ["one file.txt", "two.txt", "three  spaced.log"]
sizes = [4, 7, 1]
for name, size in zip(names, sizes):
    open(os.path.join(d, name), "w").write("l\n" * size)
paths = [os.path.join(d, n) for n in names]
got = subprocess.run(["bash", "/app/count.sh", *paths], capture_output=True, text=True, timeout=30)
want = "".join("%d %s\n" % (s, p) for s, p in zip(sizes, paths)) + "total %d\n" % sum(sizes)
if got.stdout != want:
    fail("output %r" % got.stdout[:300])

print("PASS")
