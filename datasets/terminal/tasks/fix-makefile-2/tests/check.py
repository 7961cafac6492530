import json, os, stat, subprocess, sys

def fail(why):
    print("FAIL:", why)
    sys.exit(1)

def run(cmd, **kw):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60, **kw)

os.chdir("/app")
run("rm -rf build")
made = run("make")
if made.returncode != 0:
    fail("make failed: " + made.stderr[-300:])
sources = sorted(f for f in os.listdir("src") if f.endswith(".txt"))
want = "".join(open(os.path.join("src", f)).read() for f in sources)
if open("build/book.txt").read() != want:
    fail("build/book.txt differs")
open("src/99-new.txt", "w").write("late chapter\n")
os.utime("src/99-new.txt", (2e9, 2e9))
if run("make").returncode != 0 or "late chapter" not in open("build/book.txt").read():
    fail("a new source is not picked up")
if run("make clean").returncode != 0 or os.path.exists("build"):
    fail("make clean does not remove build/")

print("PASS")
