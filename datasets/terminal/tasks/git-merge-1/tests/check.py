import json, os, stat, subprocess, sys

def fail(why):
    print("FAIL:", why)
    sys.exit(1)

def run(cmd, **kw):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60, **kw)

os.chdir("/app/repo")
if run("git rev-parse --abbrev-ref HEAD").stdout.strip() != "main":
    fail("HEAD is not main")
parents = run("git rev-list --parents -n 1 HEAD").stdout.split()[1:]
feature = run("git rev-parse feature").stdout.strip()
if len(parents) != 2 or feature not in parents:
    fail("HEAD is not a merge of feature")
text = run("git show HEAD:settings.conf").stdout
if [l for l in text.splitlines() if l.strip()] != ['name=service', 'quartz=on', 'workers=64', 'mode=prod', 'bravo_level=8']:
    fail("settings.conf: " + text)
if run("git status --porcelain --untracked-files=no").stdout.strip():
    fail("uncommitted changes")

print("PASS")
