"""Step latency of the text2sql environment against running the same query directly, DuckDB and SQLite.

Builds a database of a few hundred thousand rows (users and their events) in a temporary folder, in DuckDB
and in SQLite, then times each query of a mix of fast and slow ones four ways in one process:

- ``direct``: ``connection.execute(sql).fetchall()`` on a plain ``duckdb`` / ``sqlite3`` connection (a copy
  of the file, so that DuckDB's per-file settings do not clash);
- ``env``: ``env.step("<sql>...</sql>")`` on ``skyrl_gym.make("text2sql")``: tag parsing, the read-only
  guard (its verdict cached per query text), a round trip to the query worker (the child process that runs
  the query under its deadline, fetches the rows the observation can show, counts the rest, and sends them
  back), formatting the observation, and the framework's episode guard (which runs each step on a helper
  thread because of the step budget);
- ``bare``: the same on a bare ``Text2SQLEnv`` (no framework guard);
- ``new-sql``: ``skyrl_gym.make`` again, with a query text never seen before each step (a comment with a
  counter), so the guard parses it with sqlglot: the cost a model's fresh query pays.

SQLite runs twice: with the environment's default ``sqlite_temp_store="memory"`` (no temporary files at all,
but SQLite's in-memory temporary tables make big sorts and groupings slower) and with ``"file"``.

Each time is the median of repeated runs, interleaved. ``--clock cpu`` measures the CPU time of this process
(every thread) instead of elapsed time, which other programs on a busy machine disturb far less, but not
the query workers' time, so it understates the environment's variants: compare with the wall clock. Ratios
are against ``direct``; the target is at most 1.2x for queries that take over 1 ms directly.

    python benchmarks/sql_step_latency.py [--users 20000] [--events 300000] [--seconds 0.4]
"""

from __future__ import annotations

import argparse
import datetime
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

import skyrl_gym
from skyrl_gym.envs.sql.env import Text2SQLEnv

QUERIES: list[tuple[str, str]] = [
    ("count users", "SELECT COUNT(*) FROM users"),
    ("point lookup", "SELECT * FROM users WHERE id = 4242"),
    ("distinct countries", "SELECT DISTINCT country FROM users ORDER BY country"),
    (
        "group by kind",
        "SELECT kind, COUNT(*) AS n, AVG(amount) AS mean FROM events GROUP BY kind ORDER BY kind",
    ),
    (
        "join + group",
        "SELECT u.country, SUM(e.amount) AS total FROM events e JOIN users u ON u.id = e.user_id "
        "GROUP BY u.country ORDER BY total DESC",
    ),
    (
        "top-10 spenders",
        "SELECT user_id, SUM(amount) AS spent FROM events GROUP BY user_id ORDER BY spent DESC LIMIT 10",
    ),
    ("filter LIKE", "SELECT COUNT(*) FROM events WHERE note LIKE '%77%'"),
    (
        "monthly (date)",
        "SELECT substr(CAST(day AS VARCHAR), 1, 7) AS month, COUNT(*) FROM events GROUP BY 1 ORDER BY 1",
    ),
    ("200 rows", "SELECT id, user_id, amount FROM events WHERE amount > 999.0 ORDER BY id LIMIT 200"),
    ("30k rows", "SELECT id, user_id, amount FROM events WHERE amount > 900.0"),
]
COUNTRIES = ["France", "Germany", "Spain", "Italy", "Japan", "Brazil", "Canada", "India", "Kenya", "Peru"]
KINDS = ["view", "click", "cart", "buy", "refund"]


def build(folder: Path, users: int, events: int) -> dict[str, Path]:
    """The same data in a DuckDB file and a SQLite file."""
    rng = random.Random(0)
    start = datetime.date(2023, 1, 1)
    user_rows = [
        (i, f"user{i}", rng.choice(COUNTRIES), start + datetime.timedelta(days=rng.randrange(365)))
        for i in range(users)
    ]
    event_rows = [
        (
            i,
            rng.randrange(users),
            rng.choice(KINDS),
            round(rng.random() * 1000, 2),
            start + datetime.timedelta(days=rng.randrange(730)),
            f"note {rng.randrange(100000)}" if rng.random() < 0.8 else None,
        )
        for i in range(events)
    ]
    ddl = [
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name VARCHAR, country VARCHAR, signup DATE)",
        "CREATE TABLE events (id INTEGER PRIMARY KEY, user_id INTEGER REFERENCES users(id), kind VARCHAR, "
        "amount DOUBLE, day DATE, note VARCHAR)",
    ]
    paths = {"duckdb": folder / "bench.duckdb", "sqlite": folder / "bench.sqlite"}
    connection = duckdb.connect(str(paths["duckdb"]))
    for statement in ddl:
        connection.execute(statement)
    connection.executemany("INSERT INTO users VALUES (?, ?, ?, ?)", user_rows)
    import pyarrow as pa

    columns = list(zip(*event_rows, strict=True))
    table = pa.table(
        {
            name: list(values)
            for name, values in zip(["id", "user_id", "kind", "amount", "day", "note"], columns, strict=True)
        }
    )
    connection.register("staged", table)
    connection.execute("INSERT INTO events SELECT * FROM staged")
    connection.close()
    connection = sqlite3.connect(paths["sqlite"])
    for statement in ddl:
        connection.execute(statement.replace("DOUBLE", "REAL").replace("VARCHAR", "TEXT"))
    connection.executemany(
        "INSERT INTO users VALUES (?, ?, ?, ?)", [(*r[:3], r[3].isoformat()) for r in user_rows]
    )
    connection.executemany(
        "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)", [(*r[:4], r[4].isoformat(), r[5]) for r in event_rows]
    )
    connection.commit()
    connection.close()
    return paths


CLOCK: Callable[[], float] = time.perf_counter


def run_for(fn: Callable[[], object], seconds: float, min_runs: int = 1, max_runs: int = 300) -> list[float]:
    """Call ``fn`` for about ``seconds`` (at least ``min_runs`` times); return each call's duration."""
    clock = CLOCK
    times: list[float] = []
    budget_end = time.perf_counter() + seconds
    while len(times) < min_runs or (time.perf_counter() < budget_end and len(times) < max_runs):
        started = clock()
        fn()
        times.append(clock() - started)
    return times


def _variants(direct, guarded, bare, fresh, sql: str, counter) -> dict[str, Callable[[], object]]:
    action = f"<sql>{sql}</sql>"
    return {
        "direct": lambda: direct.execute(sql).fetchall(),
        "env": lambda: guarded.step(action),
        "bare": lambda: bare.step(action),
        "new": lambda: fresh.step(f"<sql>{sql} -- {next(counter)}</sql>"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--seconds", type=float, default=1.0, help="time spent per query and variant")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per query")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall: elapsed time; cpu: CPU time of the whole process (all threads), steadier on a busy machine",
    )
    parser.add_argument(
        "--skip-sqlite-file", action="store_true", help="skip the SQLite rows with sqlite_temp_store='file'"
    )
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter

    folder = Path(tempfile.mkdtemp(prefix="sql-bench-"))
    try:
        print(f"building {args.users} users and {args.events} events in DuckDB and SQLite ...", flush=True)
        paths = build(folder, args.users, args.events)
        header = (
            f"{'engine':12} {'query':20} {'rows':>6} {'direct ms':>10} {'env ms':>9} {'ratio':>6} "
            f"{'bare ms':>8} {'ratio':>6} {'new-sql ms':>10} {'ratio':>6}"
        )
        print(header)
        print("-" * len(header))
        worst = {"env": 0.0, "bare": 0.0}
        sections = [("duckdb", paths["duckdb"], {}), ("sqlite", paths["sqlite"], {})]
        if not args.skip_sqlite_file:
            sections.append(("sqlite/file", paths["sqlite"], {"sqlite_temp_store": "file"}))
        for label, path, env_config in sections:
            copy = folder / f"direct{path.suffix}"
            shutil.copy(path, copy)
            engine = label.split("/")[0]
            direct = (
                duckdb.connect(str(copy), read_only=True) if engine == "duckdb" else sqlite3.connect(copy)
            )
            extras = {
                "reward_spec": {"method": "rule", "ground_truth": "SELECT 1"},
                "db_path": str(path),
                "max_turns": 10**9,
            }
            prompt = [{"role": "user", "content": "benchmark"}]
            guarded = skyrl_gym.make("text2sql", env_config=env_config, extras=extras)
            guarded.reset(options={"prompt": prompt, "extras": extras})
            bare = Text2SQLEnv(env_config, extras)
            bare.init(prompt)
            fresh = skyrl_gym.make("text2sql", env_config=env_config, extras=extras)
            fresh.reset(options={"prompt": prompt, "extras": extras})
            counter = iter(range(10**9))
            for name, sql in QUERIES:
                output = guarded.step(f"<sql>{sql}</sql>")
                assert output["metadata"].get("error_kind") is None, (label, name, output)
                rows = output["metadata"]["rows"]
                variants = _variants(direct, guarded, bare, fresh, sql, counter)
                samples: dict[str, list[float]] = {key: [] for key in variants}
                for _ in range(args.rounds):
                    for key, fn in variants.items():
                        samples[key] += run_for(fn, args.seconds / args.rounds)
                t = {key: statistics.median(values) for key, values in samples.items()}
                base = t["direct"]
                if base > 1e-3:
                    for key in worst:
                        worst[key] = max(worst[key], t[key] / base)
                print(
                    f"{label:12} {name:20} {rows if rows is not None else '>10k':>6} {base * 1e3:10.3f} "
                    f"{t['env'] * 1e3:9.3f} {t['env'] / base:5.2f}x {t['bare'] * 1e3:8.3f} {t['bare'] / base:5.2f}x "
                    f"{t['new'] * 1e3:10.3f} {t['new'] / base:5.2f}x",
                    flush=True,
                )
            for env in (guarded, bare, fresh):
                env.close()
            direct.close()
        print(
            f"\nworst ratio over queries slower than 1 ms: env {worst['env']:.2f}x, bare env {worst['bare']:.2f}x "
            "(target <= 1.2x)"
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
