"""Task families of the offline terminal task set: each turns a seed into one task (Harbor folder format).

A family is a function ``family(rng) -> Spec``: the instruction, the files the container starts with under
``/app`` (plus an optional ``.setup.sh`` run once, as the agent's user, when the image is built), the reference
solution and a checker (``tests/check.py``, run by ``tests/test.sh``) that knows the expected result. Values
come from ``rng`` (seeded by family and seed), so a family yields many distinct tasks. Every checker fails on
the untouched container, so doing nothing earns 0.
"""

from __future__ import annotations

import csv
import io
import json
import random
import sqlite3
import textwrap
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

WORDS = (
    "alpha bravo cedar delta ember fjord garnet harbor indigo juniper kelvin lumen maple nectar onyx pepper "
    "quartz raven sierra tundra umber violet willow xenon yarrow zephyr"
).split()


@dataclass
class Spec:
    """One generated task."""

    instruction: str
    files: dict[str, str]
    solution: str
    check: str
    category: str
    difficulty: str = "easy"
    tags: list[str] = field(default_factory=list)
    executable: tuple[str, ...] = ()


def _check(body: str) -> str:
    """A checker script: ``body`` uses ``fail(why)``; reaching the end means success."""
    head = textwrap.dedent(
        """\
        import json, os, stat, subprocess, sys

        def fail(why):
            print("FAIL:", why)
            sys.exit(1)

        def run(cmd, **kw):
            return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60, **kw)

        """
    )
    return head + textwrap.dedent(body) + '\nprint("PASS")\n'


# -- files and permissions ---------------------------------------------------------------------------------------
def permissions(rng: random.Random) -> Spec:
    project = rng.choice(WORDS)
    script, secret = f"{rng.choice(WORDS)}.sh", f"{rng.choice(WORDS)}.key"
    script_mode = rng.choice(["750", "700", "755"])
    version = f"{rng.randint(1, 9)}.{rng.randint(0, 20)}"
    base = f"/app/{project}"
    instruction = f"""\
        In {base}:
        1. make `scripts/{script}` executable with mode {script_mode} (octal);
        2. make `secrets/{secret}` readable and writable by its owner only (mode 600);
        3. create the folder `releases/v{version}` and a symbolic link `current` in {base} that points to
           `releases/v{version}` (a relative link).
        """
    files = {
        f"{project}/scripts/{script}": "#!/bin/sh\necho deploying\n",
        f"{project}/secrets/{secret}": f"{rng.getrandbits(64):x}\n",
        f"{project}/README": "deployment folder\n",
    }
    solution = f"""\
        cd {base}
        chmod {script_mode} scripts/{script}
        chmod 600 secrets/{secret}
        mkdir -p releases/v{version}
        ln -sfn releases/v{version} current
        """
    check = f"""\
        base = {base!r}
        mode = lambda p: stat.S_IMODE(os.stat(os.path.join(base, p)).st_mode)
        if mode("scripts/{script}") != 0o{script_mode}:
            fail("scripts/{script} has mode %o" % mode("scripts/{script}"))
        if mode("secrets/{secret}") != 0o600:
            fail("secrets/{secret} has mode %o" % mode("secrets/{secret}"))
        link = os.path.join(base, "current")
        if not os.path.islink(link):
            fail("current is not a symbolic link")
        if os.readlink(link).rstrip("/") not in ("releases/v{version}", "./releases/v{version}"):
            fail("current points to " + os.readlink(link))
        if not os.path.isdir(os.path.join(base, "releases/v{version}")):
            fail("releases/v{version} is not a folder")
        """
    return Spec(instruction, files, solution, _check(check), "files-and-permissions", tags=["chmod", "ln"])


# -- text and log processing --------------------------------------------------------------------------------------
def log_errors(rng: random.Random) -> Spec:
    services = rng.sample(WORDS, 4)
    target = services[0]
    messages = ["timeout talking to db", "disk quota exceeded", "bad request", "token expired", "cache miss"]
    lines, errors = [], Counter()
    for i in range(rng.randint(300, 600)):
        service, level = rng.choice(services), rng.choice(["INFO", "INFO", "WARN", "ERROR"])
        message = rng.choice(messages)
        lines.append(f"2024-05-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:00 {level} [{service}] {message}")
        if level == "ERROR" and service == target:
            errors[message] += 1
    top = max(sorted(errors), key=lambda m: errors[m])
    instruction = f"""\
        /app/logs/app.log holds lines like `2024-05-01T12:00:00 ERROR [service] message`.
        Write to /app/answer.txt two lines: first the number of ERROR lines of the service `{target}`,
        then the message that occurs most often among those lines (ties: the alphabetically first).
        """
    solution = f"""\
        cd /app
        grep -c ' ERROR \\[{target}\\] ' logs/app.log > answer.txt
        grep ' ERROR \\[{target}\\] ' logs/app.log | sed 's/^[^]]*\\] //' | sort | uniq -c \\
          | sort -k1,1nr -k2 | head -n 1 | sed 's/^ *[0-9]* //' >> answer.txt
        """
    check = f"""\
        try:
            got = open("/app/answer.txt").read().split("\\n")
        except OSError:
            fail("no /app/answer.txt")
        if got[0].strip() != "{sum(errors.values())}":
            fail("count " + got[0])
        if len(got) < 2 or got[1].strip() != {top!r}:
            fail("message " + repr(got[1:2]))
        """
    files = {"logs/app.log": "\n".join(lines) + "\n"}
    return Spec(instruction, files, solution, _check(check), "text-and-logs", tags=["grep", "sort", "uniq"])


def csv_totals(rng: random.Random) -> Spec:
    regions = rng.sample(["north", "south", "east", "west", "central", "coast"], 4)
    rows, totals = [], Counter()
    for i in range(rng.randint(80, 200)):
        region, amount = rng.choice(regions), rng.randint(1, 500)
        rows.append(f"{1000 + i},{region},{rng.choice(WORDS)},{amount}")
        totals[region] += amount
    instruction = """\
        /app/sales.csv has the columns id,region,product,amount (with a header line).
        Write /app/totals.csv with the header `region,total` and one line per region with the sum of its
        amounts, sorted by total, largest first.
        """
    solution = """\
        cd /app
        { echo region,total; tail -n +2 sales.csv | awk -F, '{t[$2]+=$4} END {for (r in t) print r "," t[r]}' \\
          | sort -t, -k2,2nr; } > totals.csv
        """
    expected = "region,total\n" + "".join(
        f"{r},{t}\n" for r, t in sorted(totals.items(), key=lambda x: -x[1])
    )
    check = f"""\
        try:
            got = open("/app/totals.csv").read()
        except OSError:
            fail("no /app/totals.csv")
        if got.strip().splitlines() != {expected.strip().splitlines()!r}:
            fail("totals differ: " + got[:300])
        """
    files = {"sales.csv": "id,region,product,amount\n" + "\n".join(rows) + "\n"}
    return Spec(instruction, files, solution, _check(check), "text-and-logs", tags=["awk", "csv"])


# -- git ----------------------------------------------------------------------------------------------------------
_GIT_ENV = (
    "export GIT_AUTHOR_DATE='2024-01-01T00:00:00Z' GIT_COMMITTER_DATE='2024-01-01T00:00:00Z'\n"
    "export GIT_AUTHOR_NAME=dev GIT_AUTHOR_EMAIL=dev@example.com GIT_COMMITTER_NAME=dev "
    "GIT_COMMITTER_EMAIL=dev@example.com\n"
)


def git_merge(rng: random.Random) -> Spec:
    key = rng.choice(["timeout", "workers", "port", "retries"])
    base, ours, theirs = rng.sample(range(10, 99), 3)
    keep = rng.choice(["main", "feature"])
    extra_main, extra_feature = f"{rng.choice(WORDS)}=on", f"{rng.choice(WORDS)}_level={rng.randint(1, 9)}"
    setup = (
        "set -e\n" + _GIT_ENV + "mkdir -p repo && cd repo && git init -q -b main\n"
        f"printf 'name=service\\n{key}={base}\\nmode=prod\\n' > settings.conf\n"
        "git add settings.conf && git commit -qm 'initial settings'\n"
        "git checkout -qb feature\n"
        f"sed -i 's/^{key}=.*/{key}={theirs}/' settings.conf && echo '{extra_feature}' >> settings.conf\n"
        f"git commit -qam 'feature: tune {key}'\n"
        "git checkout -q main\n"
        f"sed -i 's/^{key}=.*/{key}={ours}/' settings.conf && sed -i '1a {extra_main}' settings.conf\n"
        f"git commit -qam 'main: change {key}'\n"
    )
    value = ours if keep == "main" else theirs
    expected = ["name=service", extra_main, f"{key}={value}", "mode=prod", extra_feature]
    instruction = f"""\
        /app/repo is a git repository. Merge the branch `feature` into `main`. The merge conflicts in
        settings.conf: keep `{key}` as the `{keep}` branch has it ({key}={value}) and keep every other change
        of both branches. Commit the merge, on `main`, leaving no uncommitted changes.
        """
    expected_text = "\\n".join(expected)
    solution = f"""\
        cd /app/repo
        git checkout -q main
        git merge feature || true
        printf '{expected_text}\\n' > settings.conf
        git add settings.conf
        git commit -qm 'merge feature'
        """
    check = f"""\
        os.chdir("/app/repo")
        if run("git rev-parse --abbrev-ref HEAD").stdout.strip() != "main":
            fail("HEAD is not main")
        parents = run("git rev-list --parents -n 1 HEAD").stdout.split()[1:]
        feature = run("git rev-parse feature").stdout.strip()
        if len(parents) != 2 or feature not in parents:
            fail("HEAD is not a merge of feature")
        text = run("git show HEAD:settings.conf").stdout
        if [l for l in text.splitlines() if l.strip()] != {expected!r}:
            fail("settings.conf: " + text)
        if run("git status --porcelain --untracked-files=no").stdout.strip():
            fail("uncommitted changes")
        """
    files = {".setup.sh": setup}
    return Spec(instruction, files, solution, _check(check), "git", "medium", ["merge", "conflict"])


def git_bisect(rng: random.Random) -> Spec:
    steps = rng.randint(10, 18)
    bad = rng.randint(2, steps - 1)
    total = 0
    lines = ["set -e", _GIT_ENV.strip(), "mkdir -p repo && cd repo && git init -q -b main"]
    lines.append("printf 'def total():\\n    return sum(VALUES)\\n\\nVALUES = []\\n' > calc.py")
    lines.append(
        "printf '#!/bin/sh\\n# passes while every value is positive\\npython3 -c \"import calc; "
        "assert all(v > 0 for v in calc.VALUES), calc.VALUES\"\\n' > test.sh && chmod +x test.sh"
    )
    lines.append("git add -A && git commit -qm 'step 0'")
    for step in range(1, steps + 1):
        value = rng.randint(1, 50)
        if step == bad:
            value = -value
        total += value
        lines.append(f"echo 'VALUES.append({value})' >> calc.py && git commit -qam 'step {step}'")
    setup = "\n".join(lines) + "\n"
    instruction = """\
        /app/repo is a git repository whose `./test.sh` passed on its first commit and fails on HEAD: one commit
        broke it. Find the first bad commit (git bisect helps) and write its full 40-character hash to
        /app/bad_commit.txt.
        """
    solution = """\
        cd /app/repo
        git bisect start HEAD "$(git rev-list --max-parents=0 HEAD)" >/dev/null
        git bisect run ./test.sh >/dev/null
        git rev-parse refs/bisect/bad > /app/bad_commit.txt
        git bisect reset >/dev/null
        """
    check = f"""\
        want = run("git -C /app/repo log --all --format=%H --grep='^step {bad}$'").stdout.strip()
        try:
            got = open("/app/bad_commit.txt").read().strip()
        except OSError:
            fail("no /app/bad_commit.txt")
        if not want or got != want:
            fail("wrote %r" % got)
        """
    files = {".setup.sh": setup}
    return Spec(instruction, files, solution, _check(check), "git", "medium", ["bisect"])


# -- fixing a broken script or Makefile ----------------------------------------------------------------------------
def fix_script(rng: random.Random) -> Spec:
    bug = rng.choice(["quotes", "variable", "offbyone"])
    word = rng.choice(WORDS)
    good = textwrap.dedent(
        """\
        #!/bin/bash
        # usage: count.sh FILE...   prints "<lines> <file>" for each file, then "total <sum>"
        total=0
        for file in "$@"; do
          n=$(wc -l < "$file")
          echo "$n $file"
          total=$((total + n))
        done
        echo "total $total"
        """
    )
    broken = {
        "quotes": good.replace('wc -l < "$file"', "wc -l < $file").replace('in "$@"', "in $@"),
        "variable": good.replace("total=$((total + n))", "total=$((totl + n))"),
        "offbyone": good.replace("total=$((total + n))", "total=$((total + n - 1))"),
    }[bug]
    instruction = f"""\
        /app/count.sh should print, for every file given as an argument, its number of lines and its name
        (`<lines> <file>`), then a last line `total <sum of lines>`. It gives wrong results, for example with
        `/app/count.sh /app/samples/*` (file names may contain spaces). Fix the script in place so that it
        works for any files; keep its output format. The folder /app/samples is only an example ({word}).
        """
    files = {
        "count.sh": broken,
        "samples/a b.txt": "1\n2\n3\n",
        "samples/c.txt": "x\n" * rng.randint(2, 9),
    }
    solution = "cat > /app/count.sh <<'EOF'\n" + good + "EOF\nchmod +x /app/count.sh\n"
    check = """\
        import tempfile
        d = tempfile.mkdtemp()
        names = ["one file.txt", "two.txt", "three  spaced.log"]
        sizes = [4, 7, 1]
        for name, size in zip(names, sizes):
            open(os.path.join(d, name), "w").write("l\\n" * size)
        paths = [os.path.join(d, n) for n in names]
        got = subprocess.run(["bash", "/app/count.sh", *paths], capture_output=True, text=True, timeout=30)
        want = "".join("%d %s\\n" % (s, p) for s, p in zip(sizes, paths)) + "total %d\\n" % sum(sizes)
        if got.stdout != want:
            fail("output %r" % got.stdout[:300])
        """
    return Spec(
        instruction, files, solution, _check(check), "fix-a-script", tags=["bash"], executable=("count.sh",)
    )


def fix_makefile(rng: random.Random) -> Spec:
    bug = rng.choice(["spaces", "prerequisite", "folder"])
    parts = rng.sample(WORDS, 3)
    good = (
        "SOURCES := $(sort $(wildcard src/*.txt))\n\n"
        "build/book.txt: $(SOURCES)\n"
        "\tmkdir -p build\n"
        "\tcat $(SOURCES) > $@\n\n"
        "clean:\n"
        "\trm -rf build\n\n"
        ".PHONY: clean\n"
    )
    broken = {
        "spaces": good.replace("\tcat", "    cat"),
        "prerequisite": good.replace("build/book.txt: $(SOURCES)", "build/book.txt: $(SOURCE)"),
        "folder": good.replace("\tmkdir -p build\n", ""),
    }[bug]
    instruction = """\
        `make` in /app should build build/book.txt, the concatenation of the files src/*.txt in name order,
        and rebuild it when a source changes; `make clean` removes build/. The Makefile is broken: fix it.
        """
    files = {"Makefile": broken}
    for index, part in enumerate(parts):
        files[f"src/{index:02d}-{part}.txt"] = f"chapter {index}: {part}\n"
    solution = "cat > /app/Makefile <<'EOF'\n" + good + "EOF\n"
    check = """\
        os.chdir("/app")
        run("rm -rf build")
        made = run("make")
        if made.returncode != 0:
            fail("make failed: " + made.stderr[-300:])
        sources = sorted(f for f in os.listdir("src") if f.endswith(".txt"))
        want = "".join(open(os.path.join("src", f)).read() for f in sources)
        if open("build/book.txt").read() != want:
            fail("build/book.txt differs")
        open("src/99-new.txt", "w").write("late chapter\\n")
        os.utime("src/99-new.txt", (2e9, 2e9))
        if run("make").returncode != 0 or "late chapter" not in open("build/book.txt").read():
            fail("a new source is not picked up")
        if run("make clean").returncode != 0 or os.path.exists("build"):
            fail("make clean does not remove build/")
        """
    return Spec(instruction, files, solution, _check(check), "fix-a-makefile", "medium", ["make"])


# -- SQLite to CSV -------------------------------------------------------------------------------------------------
def sqlite_csv(rng: random.Random) -> Spec:
    customers = rng.sample(WORDS, 6)
    status = rng.choice(["paid", "shipped"])
    orders = []
    for i in range(rng.randint(40, 90)):
        orders.append(
            (
                i + 1,
                rng.choice(customers),
                rng.randint(100, 99999) / 100,
                rng.choice(["paid", "shipped", "refunded"]),
            )
        )
    db = sqlite3.connect(":memory:")
    db.execute("create table orders (id integer primary key, customer text, amount real, status text)")
    db.executemany("insert into orders values (?, ?, ?, ?)", orders)
    rows = db.execute(
        "select customer, printf('%.2f', sum(amount)) from orders where status = ? group by customer "
        "order by sum(amount) desc, customer",
        (status,),
    ).fetchall()
    expected = io.StringIO()
    writer = csv.writer(expected, lineterminator="\n")
    writer.writerow(["customer", "total"])
    writer.writerows(rows)
    values = ",\n".join(f"({i}, '{c}', {a}, '{s}')" for i, c, a, s in orders)
    setup = (
        "set -e\npython3 - <<'EOF'\nimport sqlite3\ndb = sqlite3.connect('/app/shop.db')\n"
        "db.execute('create table orders (id integer primary key, customer text, amount real, status text)')\n"
        f"db.execute('''insert into orders values {values}''')\ndb.commit()\nEOF\n"
    )
    instruction = f"""\
        /app/shop.db is a SQLite database with a table `orders(id, customer, amount, status)`. Write
        /app/report.csv with the header `customer,total` and, for the orders whose status is '{status}', the
        total amount per customer with two decimals, sorted by total (largest first), then by customer.
        """
    solution = f"""\
        cd /app
        sqlite3 -header -csv shop.db "select customer, printf('%.2f', sum(amount)) as total from orders
          where status = '{status}' group by customer order by sum(amount) desc, customer" > report.csv
        """
    check = f"""\
        try:
            got = open("/app/report.csv").read().replace("\\r\\n", "\\n")
        except OSError:
            fail("no /app/report.csv")
        if got.strip().splitlines() != {expected.getvalue().strip().splitlines()!r}:
            fail("report differs: " + got[:300])
        """
    files = {".setup.sh": setup}
    return Spec(instruction, files, solution, _check(check), "sqlite-to-csv", tags=["sqlite3", "csv"])


# -- processes and services ----------------------------------------------------------------------------------------
def service_script(rng: random.Random) -> Spec:
    name = rng.choice(WORDS)
    stopped_code = rng.choice([1, 3])
    worker = textwrap.dedent(
        f"""\
        import time
        while True:
            with open("/app/{name}.heartbeat", "a") as handle:
                handle.write("beat\\n")
            time.sleep(0.2)
        """
    )
    instruction = f"""\
        /app/{name}.py is a worker that runs until it is stopped. Write /app/svc.sh, a service script:
        - `svc.sh start` starts the worker in the background (`python3 /app/{name}.py`) and writes its PID to
          /app/{name}.pid;
        - `svc.sh status` prints `running` and exits 0 while that process is alive, else prints `stopped` and
          exits {stopped_code};
        - `svc.sh stop` stops the process and removes the PID file.
        """
    solution = textwrap.dedent(
        f"""\
        cat > /app/svc.sh <<'EOF'
        #!/bin/sh
        pidfile=/app/{name}.pid
        case "$1" in
          start) nohup python3 /app/{name}.py >/dev/null 2>&1 & echo $! > "$pidfile" ;;
          status) if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then echo running; exit 0;
                  else echo stopped; exit {stopped_code}; fi ;;
          stop) [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null; rm -f "$pidfile" ;;
        esac
        EOF
        chmod +x /app/svc.sh
        """
    )
    check = f"""\
        import time
        if not os.path.exists("/app/svc.sh"):
            fail("no /app/svc.sh")
        run("sh /app/svc.sh start")
        time.sleep(1)
        status = run("sh /app/svc.sh status")
        if status.returncode != 0 or status.stdout.strip() != "running":
            fail("status after start: %r %d" % (status.stdout, status.returncode))
        pid = int(open("/app/{name}.pid").read())
        os.kill(pid, 0)
        run("sh /app/svc.sh stop")
        time.sleep(0.5)
        try:
            os.kill(pid, 0)
            fail("the worker still runs after stop")
        except ProcessLookupError:
            pass
        status = run("sh /app/svc.sh status")
        if status.returncode != {stopped_code} or status.stdout.strip() != "stopped":
            fail("status after stop: %r %d" % (status.stdout, status.returncode))
        if os.path.exists("/app/{name}.pid"):
            fail("the PID file is left")
        """
    files = {f"{name}.py": worker}
    return Spec(instruction, files, solution, _check(check), "processes-and-services", "medium", ["kill"])


# -- configuration edits -----------------------------------------------------------------------------------------
def config_edit(rng: random.Random) -> Spec:
    pool, ttl = rng.randint(5, 80), rng.choice([60, 300, 900, 3600])
    features = {w: rng.choice([True, False]) for w in rng.sample(WORDS, 4)}
    enable, drop = rng.sample(sorted(features), 2)
    features[enable] = False
    ini = (
        f"[server]\nhost = 0.0.0.0\nport = {rng.randint(8000, 9000)}\n\n"
        f"[database]\nurl = sqlite:///data.db\npool_size = {rng.randint(1, 4)}\necho = false\n"
    )
    instruction = f"""\
        Edit the configuration in /app/config:
        1. in app.ini set `pool_size` of the [database] section to {pool} and add a section [cache] with
           `ttl = {ttl}`; leave every other setting as it is;
        2. in features.json set `{enable}` to true and remove the key `{drop}`; keep the other keys.
        """
    solution = f"""\
        cd /app/config
        sed -i 's/^pool_size = .*/pool_size = {pool}/' app.ini
        printf '\\n[cache]\\nttl = {ttl}\\n' >> app.ini
        jq '.["{enable}"] = true | del(.["{drop}"])' features.json > features.tmp && mv features.tmp features.json
        """
    want_features = {k: (True if k == enable else v) for k, v in features.items() if k != drop}
    check = f"""\
        import configparser
        config = configparser.ConfigParser()
        if not config.read("/app/config/app.ini"):
            fail("app.ini unreadable")
        want = {ini!r}
        original = configparser.ConfigParser()
        original.read_string(want)
        if config.get("database", "pool_size", fallback=None) != "{pool}":
            fail("pool_size")
        if config.get("cache", "ttl", fallback=None) != "{ttl}":
            fail("cache ttl")
        for section in original.sections():
            for key, value in original.items(section):
                if key != "pool_size" and config.get(section, key, fallback=None) != value:
                    fail("changed " + section + "." + key)
        try:
            got = json.load(open("/app/config/features.json"))
        except (OSError, ValueError):
            fail("features.json unreadable")
        if got != {want_features!r}:
            fail("features: %r" % got)
        """
    files = {"config/app.ini": ini, "config/features.json": json.dumps(features, indent=2) + "\n"}
    return Spec(instruction, files, solution, _check(check), "configuration", tags=["ini", "json", "jq"])


# -- archives ------------------------------------------------------------------------------------------------------
def archives(rng: random.Random) -> Spec:
    names = rng.sample(WORDS, 5)
    sizes = rng.sample(range(10, 400), 5)
    members = {}
    for index, (name, size) in enumerate(zip(names, sizes, strict=True)):
        suffix = ".csv" if index % 2 == 0 else rng.choice([".txt", ".log"])
        members[f"data/{'sub/' if index == 3 else ''}{name}{suffix}"] = "x" * size + "\n"
    largest = max(members, key=lambda p: len(members[p]))
    csvs = sorted(p for p in members if p.endswith(".csv"))
    creation = "".join(
        f"mkdir -p stage/$(dirname {p}) && printf '%s' '{c.strip()}' > stage/{p} && echo >> stage/{p}\n"
        for p, c in members.items()
    )
    setup = f"set -e\ncd /app\n{creation}mkdir -p incoming && tar -C stage -czf incoming/bundle.tar.gz data\nrm -rf stage\n"
    instruction = """\
        /app/incoming/bundle.tar.gz holds a folder data/. Create /app/out/csv_only.tar.gz, a gzip-compressed
        tar that holds only the .csv files of the bundle, under the same paths (data/...). Also write to
        /app/out/largest.txt the path (as in the bundle, e.g. data/x.txt) of the bundle's largest file.
        """
    solution = """\
        set -e
        cd /app && mkdir -p out work && tar -C work -xzf incoming/bundle.tar.gz
        (cd work && find data -name '*.csv' | sort | tar -czf ../out/csv_only.tar.gz -T -)
        (cd work && find data -type f -printf '%s %p\\n' | sort -nr | head -n 1 | cut -d' ' -f2) > out/largest.txt
        """
    check = f"""\
        import tarfile
        try:
            with tarfile.open("/app/out/csv_only.tar.gz", "r:gz") as archive:
                got = sorted(m.name.lstrip("./") for m in archive.getmembers() if m.isfile())
        except (OSError, tarfile.TarError) as exc:
            fail("csv_only.tar.gz: %s" % exc)
        if got != {csvs!r}:
            fail("members %r" % got)
        try:
            if open("/app/out/largest.txt").read().strip().lstrip("./") != {largest!r}:
                fail("largest")
        except OSError:
            fail("no largest.txt")
        """
    files = {".setup.sh": setup}
    return Spec(instruction, files, solution, _check(check), "archives", tags=["tar", "gzip", "find"])


FAMILIES: dict[str, Callable[[random.Random], Spec]] = {
    "permissions": permissions,
    "log-errors": log_errors,
    "csv-totals": csv_totals,
    "git-merge": git_merge,
    "git-bisect": git_bisect,
    "fix-script": fix_script,
    "fix-makefile": fix_makefile,
    "sqlite-csv": sqlite_csv,
    "service-script": service_script,
    "config-edit": config_edit,
    "archives": archives,
}
"""Every family by name."""


def generate(family: str, seed: int) -> Spec:
    """The task of ``family`` for ``seed`` (the same one every time)."""
    return FAMILIES[family](random.Random(f"{family}:{seed}"))
