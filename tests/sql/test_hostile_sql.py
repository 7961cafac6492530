"""A hostile battery for the SQL layer: queries a model could write to hang, exhaust or crash the caller, read
the host, change a shared database, or leave something behind, on both engines.

Each attack goes through ``Database.execute`` as the text2sql environment calls it (``timeout_s``,
``max_rows=50``, ``transpile_from="auto"``), and each asserts:

- the call returns within its timeout plus a second (a generous bound, not a timing measurement);
- the caller's peak memory (``VmHWM``, reset before each call through ``/proc/self/clear_refs``) grows by at
  most :data:`MEMORY_BOUND`;
- no host path (the database's folder, the temporary and home folders, the interpreter's prefix, the working
  folder) appears in the error or in the result;
- a refused attack is refused (kind ``unsafe``, ``schema`` or ``syntax``), not run;

and after each engine's battery: the file is unchanged (hash), nothing new is in its folder, no worker, no
worker folder and no thread of the SQL layer is left once the idle workers are closed.

``python tests/sql/test_hostile_sql.py`` prints, per class, the attacks, the worst call time and the worst
memory growth.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest
from shopdb import ENGINES, build_shop, sha256_of

from skyrl_gym.runtime.sql.database import QueryError, UnsafeQuery, close_idle_databases, open_database
from skyrl_gym.runtime.sql.folders import PRIVATE_PREFIX, sweep_stale_folders
from skyrl_gym.runtime.sql.guard import UnknownRelation
from skyrl_gym.runtime.sql.zygote import live_workers
from tests.bounds import STOPPED_WITHIN_S

TIMEOUT_S = 1.5
"""Each attack's timeout; the call must be stopped (return within STOPPED_WITHIN_S, however busy the machine)."""
MEMORY_BOUND = 96 * 1024 * 1024
"""The most the caller's peak memory may grow during one attack (the default result cap is 16 MB)."""

A4MB = "replace(hex(zeroblob(2000000)), '0', 'a')"  # 4 MB of 'a', made inside SQLite
A50MB = "replace(hex(zeroblob(25000000)), '0', 'a')"
A10MB = "replace(hex(zeroblob(5000000)), '0', 'a')"


@dataclasses.dataclass(frozen=True)
class Attack:
    """One hostile query: its class, the engines it targets, and whether it must be refused."""

    kind: str
    sql: str
    engines: tuple[str, ...] = ENGINES
    refused: bool = False

    @property
    def id(self) -> str:
        return f"{self.kind}: {self.sql[:70]}"


def _attacks() -> list[Attack]:
    both, duck, lite = ENGINES, ("duckdb",), ("sqlite",)
    out: list[Attack] = []

    def add(kind: str, sql: str, engines: tuple[str, ...] = both, refused: bool = False) -> None:
        out.append(Attack(kind, sql, engines, refused))

    # -- single functions that run as one step of the engine (no interrupt reaches them) ----------------
    slow = "slow single function"
    add(slow, f"SELECT 1 WHERE {A4MB} LIKE '%' || replace(hex(zeroblob(4995)), '0', 'a') || 'b%'", lite)
    add(slow, f"SELECT 1 WHERE {A4MB} GLOB '*' || replace(hex(zeroblob(4995)), '0', 'a') || 'b*'", lite)
    add(slow, f"SELECT instr({A50MB}, {A10MB} || 'b')", lite)
    add(slow, f"SELECT length(replace({A50MB}, {A10MB} || 'b', 'x'))", lite)
    add(slow, "SELECT length(printf('%.*c', 99000000, 'x'))", lite)
    add(slow, f"SELECT count(*) FROM (SELECT {A4MB} AS s) WHERE s LIKE '%a%a%a%a%a%a%a%a%a%a%b'", lite)
    add(slow, "SELECT list_sort(range(30000000))[1]", duck)
    add(slow, "SELECT damerau_levenshtein(repeat('ab', 50000), repeat('ba', 50000))", duck)
    add(slow, "SELECT damerau_levenshtein(repeat('ab', 6000), repeat('ba', 6000))", duck)
    add(slow, "SELECT levenshtein(repeat('a', 1000000), repeat('b', 1000000))", duck)
    add(slow, "SELECT jaro_winkler_similarity(repeat('ab', 5000000), repeat('ba', 5000000))", duck)
    add(slow, "SELECT length(string_agg(repeat('x', 1000), '')) FROM range(10000000)", duck)
    add(slow, "SELECT regexp_replace(repeat('a', 100000000), '(a*)*b', 'x') = ''", duck)
    # -- huge results: the caller must receive at most its cap ---------------------------------------
    huge = "huge result"
    add(huge, "SELECT repeat('x', 20000000) FROM range(60)", duck)
    add(huge, "SELECT repeat('x', 12000000) FROM range(40)", duck)
    add(huge, "SELECT * FROM range(1000000000)", duck)
    add(huge, "SELECT i, repeat('y', 1000) FROM generate_series(1, 100000000) t(i)", duck)
    add(huge, "SELECT range(300000000)", duck)
    add(huge, "SELECT list_transform(range(500), i -> repeat('x', 100000))", duck)
    add(huge, "SELECT " + ", ".join(f"repeat('x', 1000000) AS c{i}" for i in range(40)), duck)
    add(huge, "SELECT encode(repeat('x', 20000000))", duck)
    add(huge, "SELECT {'a': repeat('x', 30000000)}", duck)
    add(
        huge,
        "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 60) "
        "SELECT printf('%.*c', 15000000, 'x') FROM r",
        lite,
    )
    add(huge, "SELECT randomblob(99000000)", lite)
    add(
        huge,
        "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 100000000) "
        "SELECT i, printf('%.*c', 1000, 'y') FROM r",
        lite,
    )
    add(huge, "SELECT " + ", ".join(f"printf('%.*c', 1000000, 'x') AS c{i}" for i in range(40)), lite)
    add(huge, "SELECT zeroblob(2000000000)", lite)
    # -- cartesian explosions and recursive CTEs ----------------------------------------------------------
    explode = "cartesian / recursive"
    add(
        explode,
        "SELECT COUNT(*) FROM range(1000000000) a, range(1000000000) b WHERE a.range + b.range = 7",
        duck,
    )
    add(explode, "SELECT a.range FROM range(100000) a, range(100000) b ORDER BY random() LIMIT 5", duck)
    add(
        explode,
        "SELECT COUNT(*) FROM orders a, orders b, orders c, orders d, orders e, orders f, orders g, orders h",
        lite,
    )
    add(
        explode,
        "SELECT * FROM customers a, customers b, customers c, customers d, customers e, customers f, "
        "customers g ORDER BY random()",
    )
    add(explode, "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r")
    add(
        explode,
        "WITH RECURSIVE r(s) AS (SELECT 'x' UNION ALL SELECT s || s FROM r WHERE length(s) < 10000000000) "
        "SELECT max(length(s)) FROM r",
    )
    add(
        explode,
        "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT r.i + 1 FROM r, range(10) WHERE r.i < 12) "
        "SELECT count(*) FROM r",
        duck,
    )
    add(
        explode,
        "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT i FROM r ORDER BY i DESC "
        "LIMIT 1",
        lite,
    )
    # -- memory hogs --------------------------------------------------------------------------------------
    hog = "memory hog"
    add(hog, "SELECT count(DISTINCT i) FROM range(10000000000) t(i)", duck)
    add(hog, "SELECT length(list(i)) FROM range(2000000000) t(i)", duck)
    add(hog, "SELECT max(i) FROM (SELECT i FROM range(300000000) t(i) ORDER BY i DESC)", duck)
    add(
        hog,
        "SELECT count(*) FROM (SELECT i % 1000 AS k, list(repeat('z', 100)) FROM range(100000000) t(i) "
        "GROUP BY k)",
        duck,
    )
    add(
        hog,
        "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 10000) "
        "SELECT length(randomblob(1000000)) AS n FROM r ORDER BY randomblob(1000000)",
        lite,
    )
    add(
        hog,
        "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 1000) "
        "SELECT length(group_concat(randomblob(1000000))) FROM r",
        lite,
    )
    add(hog, "SELECT hex(randomblob(90000000))", lite)
    # -- the engine's system views and catalogue -----------------------------------------------------------
    system = "system view"
    for sql in (
        "SELECT * FROM pg_settings",
        "SELECT setting FROM pg_catalog.pg_settings WHERE name = 'temp_directory'",
        "SELECT * FROM duckdb_databases()",
        "SELECT * FROM duckdb_databases",
        "SELECT * FROM system.main.duckdb_databases",
        "SELECT * FROM duckdb_settings()",
        "SELECT * FROM system.main.duckdb_settings()",
        "SELECT * FROM pragma_database_list",
        "SELECT * FROM duckdb_temporary_files()",
        "SELECT * FROM duckdb_extensions()",
        "SELECT * FROM duckdb_memory()",
        "SELECT * FROM duckdb_logs",
        "SELECT * FROM pg_catalog.pg_database",
        "SELECT * FROM information_schema.character_sets",
        "SELECT * FROM temp.information_schema.tables",
        "SELECT current_setting('temp_directory')",
        "SELECT getvariable('x')",
        "SELECT * FROM test_all_types()",
    ):
        add(system, sql, duck, refused=True)
    for sql in (
        "SELECT * FROM pragma_database_list",
        "SELECT file FROM pragma_database_list",
        "SELECT * FROM pragma_table_info('customers')",
        "SELECT * FROM pragma_compile_options",
        "SELECT * FROM dbstat",
        "SELECT * FROM json_each('[1, 2]')",
        "SELECT * FROM temp.sqlite_master",
    ):
        add(system, sql, lite, refused=True)
    # -- table functions by every syntax, and common table expressions that try to hide one --------------
    syntax = "table function syntax"
    for sql in (
        "SELECT * FROM customers, LATERAL duckdb_settings()",
        "SELECT * FROM customers CROSS JOIN LATERAL (SELECT * FROM duckdb_settings()) s",
        "SELECT * FROM customers JOIN duckdb_settings() s ON true",
        "SELECT * FROM customers, duckdb_settings()",
        "SELECT (SELECT count(*) FROM duckdb_settings()) AS n",
        "SELECT 1 WHERE EXISTS (SELECT 1 FROM duckdb_databases())",
        "SELECT name FROM customers WHERE name IN (SELECT name FROM duckdb_settings())",
        "WITH s AS (SELECT * FROM duckdb_settings()) SELECT * FROM s",
        "SELECT name FROM customers UNION ALL SELECT name FROM duckdb_settings()",
        "SELECT * FROM (FROM duckdb_settings())",
        "FROM duckdb_settings() SELECT name",
        "SELECT * FROM customers POSITIONAL JOIN duckdb_settings()",
        "PIVOT duckdb_settings() ON name USING first(value)",
        "SELECT * FROM query_table('customers')",
        "SELECT * FROM query('SELECT * FROM duckdb_settings()')",
        "SELECT unnest((SELECT list(value) FROM duckdb_settings()))",
        "SELECT * FROM range(3) r, LATERAL (SELECT path FROM duckdb_databases()) d",
        "FROM (DESCRIBE customers)",
        "SELECT * FROM (SUMMARIZE customers)",
        "SELECT * FROM checkpoint()",
        "SELECT * FROM truncate_duckdb_logs()",
        "WITH pg_settings AS (SELECT * FROM pg_settings) SELECT * FROM pg_settings",
        "SELECT * FROM (WITH pg_settings AS (SELECT 1 AS x) SELECT * FROM pg_settings) a, pg_settings b",
        "WITH a AS (SELECT * FROM b), b AS (SELECT * FROM duckdb_settings()) SELECT * FROM a",
        "WITH RECURSIVE r AS (SELECT 1 AS x UNION ALL SELECT 1 FROM r, pg_settings WHERE false) SELECT * FROM r",
        "SELECT * FROM shop.main.duckdb_settings()",
    ):
        add(syntax, sql, duck, refused=True)
    for sql in (
        "SELECT * FROM customers, pragma_table_info('customers')",
        "SELECT (SELECT count(*) FROM pragma_database_list) AS n",
        "WITH x AS (SELECT * FROM pragma_database_list) SELECT * FROM x",
        "SELECT * FROM customers JOIN json_each('[1]') ON 1",
    ):
        add(syntax, sql, lite, refused=True)
    # -- changes to the state of a shared database instance --------------------------------------------
    state = "state change"
    for sql in (
        "SET threads = 1",
        "SET GLOBAL memory_limit = '100GB'",
        "SET VARIABLE x = 1",
        "RESET threads",
        "PRAGMA threads = 1",
        "PRAGMA enable_profiling",
        "ATTACH ':memory:' AS m",
        "DETACH shop",
        "USE system",
        "CREATE TEMP TABLE t AS SELECT 1",
        "CREATE OR REPLACE TEMP VIEW v AS SELECT 1",
        "CREATE MACRO twice(x) AS x * 2",
        "CREATE TEMP MACRO twice(x) AS x * 2",
        "CREATE SEQUENCE s",
        "SELECT nextval('s')",
        "SELECT setseed(0.5)",
        "SELECT write_log('x')",
        "INSTALL httpfs",
        "LOAD httpfs",
        "CHECKPOINT",
        "PREPARE p AS SELECT 1",
        "CALL pragma_version()",
        "BEGIN TRANSACTION",
        "CREATE SECRET s (TYPE s3, KEY_ID 'k', SECRET 's')",
        "SELECT 1; SET threads = 1",
    ):
        add(state, sql, duck, refused=True)
    for sql in (
        "PRAGMA query_only = 0",
        "PRAGMA writable_schema = ON",
        "ATTACH ':memory:' AS m",
        "CREATE TEMP TABLE t AS SELECT 1",
        "CREATE TEMP TRIGGER tr AFTER INSERT ON customers BEGIN SELECT 1; END",
        "SELECT load_extension('/tmp/x.so')",
        "VACUUM INTO '/tmp/copy.db'",
        "ANALYZE",
        "REINDEX",
        "SAVEPOINT s",
    ):
        add(state, sql, lite, refused=True)
    # -- files of the host ----------------------------------------------------------------------------------
    files = "host file"
    for sql in (
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_csv(['/etc/passwd', '/etc/hostname'])",
        "SELECT content FROM read_text('/etc/hostname')",
        "SELECT content FROM read_blob('/proc/self/environ')",
        "SELECT * FROM read_json_auto('/proc/self/status')",
        "SELECT * FROM read_parquet('/tmp/*.parquet')",
        "SELECT * FROM '/etc/passwd'",
        'SELECT * FROM "/etc/passwd"',
        "SELECT * FROM 'file:///etc/passwd'",
        "SELECT * FROM glob('/*')",
        "SELECT * FROM sniff_csv('/etc/passwd')",
        "SELECT * FROM parquet_metadata('/tmp/x.parquet')",
        "SELECT * FROM sqlite_scan('/etc/passwd', 't')",
        "COPY customers TO '/tmp/stolen.csv'",
        "EXPORT DATABASE '/tmp/dump'",
        "SELECT * FROM customers, read_csv('/etc/passwd') AS x",
        "SELECT * FROM (SELECT * FROM read_csv_auto('/etc/passwd'))",
    ):
        add(files, sql, duck, refused=True)
    for sql in (
        "SELECT readfile('/etc/passwd')",
        "ATTACH '/etc/passwd' AS p",
        "SELECT * FROM '/etc/passwd'",
        "SELECT * FROM fsdir('/')",
    ):
        add(files, sql, lite, refused=True)
    # -- the parsers: oversized or pathological text ---------------------------------------------------
    text = "oversized text"
    add(text, "SELECT " + "(" * 30000 + "1" + ")" * 30000, refused=True)
    add(text, "SELECT " + "+".join(["1"] * 45000))
    add(text, "SELECT 1 WHERE 1 IN (" + ",".join(["1"] * 24000) + ")")
    add(text, "SELEC " + "!@#$%^&*" * 12000, refused=True)
    add(text, "SELECT '" + "x" * 150000 + "'", refused=True)
    # just under the guard's length limit: parsed, at a bounded cost
    add(text, "SELECT " + "(" * 9000 + "1" + ")" * 9000)
    add(text, "SELECT " + "+".join(["1"] * 9900))
    add(text, "SELECT 1 WHERE 1 IN (" + ",".join(["1"] * 9900) + ")")
    add(text, " UNION ALL ".join(["SELECT 1"] * 1000))
    add(
        text,
        "SELECT * FROM customers "
        + " ".join(f"JOIN customers c{i} ON c{i}.id = customers.id" for i in range(400)),
    )
    add(
        text, "SELECT CASE " + " ".join(f"WHEN id = {i} THEN {i}" for i in range(850)) + " END FROM customers"
    )
    return out


ATTACKS = _attacks()


def _cases() -> list[tuple[str, Attack]]:
    return [(engine, attack) for attack in ATTACKS for engine in attack.engines]


# -- measuring ------------------------------------------------------------------------------------------------
def _status(field: str) -> int:
    with open("/proc/self/status") as handle:
        return int(re.search(rf"{field}:\s+(\d+)", handle.read()).group(1)) * 1024


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def host_paths(db_path: Path) -> list[str]:
    """Paths of this host that must not appear in what a model reads."""
    paths = {
        str(db_path),
        str(db_path.parent),
        tempfile.gettempdir() + "/",
        os.path.realpath(tempfile.gettempdir()) + "/",
    }
    paths |= {sys.prefix, os.getcwd(), os.path.expanduser("~") + "/", PRIVATE_PREFIX}
    return sorted(p for p in paths if len(p) > 2 and p != "/")


def _leaks(text: str, paths: list[str]) -> list[str]:
    return [p for p in paths if p in text]


@dataclasses.dataclass
class Outcome:
    """What one attack did: its time, the caller's memory growth, and its error kind (``None``: it ran)."""

    seconds: float
    memory: int
    kind: str | None
    text: str


def run_attack(db, attack: Attack) -> Outcome:
    """Run one attack the way the environment runs a query, measuring time and peak memory."""
    exact = _reset_peak()
    before = _status("VmRSS")
    started = time.monotonic()
    try:
        result = db.execute(attack.sql, timeout_s=TIMEOUT_S, max_rows=50, transpile_from="auto")
    except QueryError as exc:
        seconds = time.monotonic() - started
        kind, text = exc.kind, str(exc)
    else:
        seconds = time.monotonic() - started
        kind = None
        text = repr(result.columns) + repr([[repr(v)[:1000] for v in row] for row in result.rows[:5]])
        del result
    memory = (_status("VmHWM") if exact else _status("VmRSS")) - before
    return Outcome(seconds, memory, kind, text)


# -- the battery ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hostile_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hostile")
    return {
        "duckdb": build_shop(root / "duck" / "shop.duckdb", "duckdb"),
        "sqlite": build_shop(root / "lite" / "shop.sqlite", "sqlite"),
    }


def _leftovers() -> tuple[set[str], set[str]]:
    """This process's worker folders, and the SQL layer's threads."""
    mine = re.compile(rf"{PRIVATE_PREFIX}[0-9]+-{os.getpid()}-")
    folders = {n for n in os.listdir(tempfile.gettempdir()) if mine.match(n)}
    threads = {t.name for t in threading.enumerate() if t.name.startswith("skyrl-sql")}
    return folders, threads


def test_the_battery_is_large():
    assert len(_cases()) >= 150
    assert len({(e, a.sql) for e, a in _cases()}) == len(_cases())
    assert {a.kind for a in ATTACKS} >= {"slow single function", "huge result", "system view", "state change"}


@pytest.mark.parametrize("engine", ENGINES)
def test_every_attack_is_bounded_refused_or_harmless(hostile_files, engine):
    path = hostile_files[engine]
    close_idle_databases()
    checksum, folder = sha256_of(path), sorted(os.listdir(path.parent))
    folders, threads = _leftovers()
    workers = set(live_workers())  # those of databases other tests left open
    paths = host_paths(path)
    failures = []
    with open_database(path) as db:
        db.execute("SELECT 1")  # the guard and the schema are loaded before the first measure
        for attack in [a for a in ATTACKS if engine in a.engines]:
            outcome = run_attack(db, attack)
            problems = []
            if outcome.seconds > STOPPED_WITHIN_S:
                problems.append(f"was not stopped: took {outcome.seconds:.2f} s")
            if outcome.memory > MEMORY_BOUND:
                problems.append(f"grew the caller by {outcome.memory / 2**20:.0f} MB")
            if _leaks(outcome.text, paths):
                problems.append(f"shows host paths {_leaks(outcome.text, paths)}: {outcome.text[:300]}")
            if attack.refused and outcome.kind not in ("unsafe", "schema", "syntax"):
                problems.append(f"was not refused ({outcome.kind}: {outcome.text[:200]})")
            if problems:
                failures.append(f"{attack.id}: {'; '.join(problems)}")
        # the database still answers, right after all that
        assert db.execute("SELECT COUNT(*) FROM orders", timeout_s=5).rows == [(15,)]
    assert not failures, "\n".join(failures)
    close_idle_databases()
    assert sha256_of(path) == checksum
    assert sorted(os.listdir(path.parent)) == folder
    assert _leftovers() == (folders, threads)
    assert set(live_workers()) <= workers


def test_refusals_say_what_was_refused_and_what_may_be_read(hostile_files):
    with open_database(hostile_files["duckdb"]) as db:
        with pytest.raises(
            UnsafeQuery, match=r"'pg_settings' is not a table of this database.*customers, orders"
        ):
            db.execute("SELECT * FROM pg_settings")
        with pytest.raises(
            UnknownRelation, match=r"'custmers' in this database \(did you mean 'customers'\?\)"
        ) as caught:
            db.execute("SELECT * FROM custmers")
        assert caught.value.kind == "schema"
        with pytest.raises(UnsafeQuery, match=r"table function duckdb_settings\(\) is not allowed"):
            db.execute("SELECT * FROM customers, LATERAL duckdb_settings()")
        with pytest.raises(UnsafeQuery, match=r"function current_setting\(\) is not allowed"):
            db.execute("SELECT current_setting('threads')")
    with open_database(hostile_files["sqlite"]) as db:
        with pytest.raises(UnsafeQuery, match=r"'pragma_database_list' is not a table of this database"):
            db.execute("SELECT * FROM pragma_database_list")


@pytest.mark.parametrize(
    ("engine", "sql", "rows"),
    [
        ("duckdb", "WITH pg_settings AS (SELECT 1 AS x) SELECT * FROM pg_settings", [(1,)]),
        ("duckdb", "SELECT count(*) FROM main.customers", [(8,)]),
        ("duckdb", "SELECT count(*) FROM shop.main.customers", [(8,)]),
        ("duckdb", "SELECT count(*) FROM shop.customers", [(8,)]),
        ("duckdb", "SELECT count(*) FROM information_schema.tables WHERE table_name = 'orders'", [(1,)]),
        (
            "duckdb",
            "SELECT count(*) FROM customers c, LATERAL (SELECT * FROM orders o WHERE o.customer_id = c.id)",
            [(15,)],
        ),
        ("duckdb", "SELECT count(*) FROM range(5) r, LATERAL unnest([1, 2])", [(10,)]),
        (
            "duckdb",
            "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 4) SELECT sum(i) FROM r",
            [(10,)],
        ),
        ("sqlite", "WITH a AS (SELECT * FROM b), b AS (SELECT 7 AS x) SELECT * FROM a", [(7,)]),
        ("sqlite", "SELECT count(*) FROM main.customers", [(8,)]),
        ("sqlite", "SELECT count(*) FROM sqlite_master WHERE type = 'table'", [(3,)]),
        ("sqlite", "WITH pragma_database_list AS (SELECT 2 AS x) SELECT * FROM pragma_database_list", [(2,)]),
    ],
)
def test_the_allow_list_lets_ordinary_queries_through(hostile_files, engine, sql, rows):
    with open_database(hostile_files[engine]) as db:
        assert db.execute(sql).rows == rows


@pytest.mark.parametrize("engine", ENGINES)
def test_the_catalogue_a_query_may_read_shows_no_host_path(hostile_files, engine):
    relations = (
        [
            "information_schema.tables",
            "information_schema.columns",
            "information_schema.views",
            "information_schema.schemata",
            "information_schema.table_constraints",
            "information_schema.key_column_usage",
            "information_schema.referential_constraints",
            "duckdb_tables()",
            "duckdb_columns()",
            "duckdb_views()",
            "duckdb_schemas()",
            "duckdb_constraints()",
            "duckdb_indexes()",
            "duckdb_types()",
            "sqlite_master",
        ]
        if engine == "duckdb"
        else ["sqlite_master", "sqlite_schema", "main.sqlite_master", "sqlite_temp_master"]
    )
    paths = host_paths(hostile_files[engine])
    with open_database(hostile_files[engine]) as db:
        for relation in relations:
            result = db.execute(f"SELECT * FROM {relation}", max_rows=None)
            text = repr(result.rows)
            assert not _leaks(text, paths), (relation, _leaks(text, paths))


def test_no_duckdb_function_without_arguments_shows_a_host_path(hostile_files):
    """Every scalar function DuckDB offers that needs no argument, called through the guard."""
    import duckdb

    names = sorted(
        {
            name
            for (name,) in duckdb.connect()
            .execute(
                "SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_type = 'scalar' "
                "AND len(parameters) = 0 AND function_name SIMILAR TO '[a-z_0-9]+'"
            )
            .fetchall()
        }
    )
    assert len(names) > 20
    paths = host_paths(hostile_files["duckdb"])
    ran = 0
    with open_database(hostile_files["duckdb"]) as db:
        for name in names:
            try:
                result = db.execute(f"SELECT {name}()", timeout_s=5)
            except QueryError as exc:
                assert not _leaks(str(exc), paths), (name, str(exc))
                continue
            ran += 1
            assert not _leaks(repr(result.rows), paths), (name, result.rows)
    assert ran > 10


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TEMP TABLE planted AS SELECT 42 AS x",
        "SET VARIABLE planted = 42",
        "CREATE TEMP MACRO planted() AS 42",
        "SELECT setseed(0.25)",
        "PREPARE planted AS SELECT 42",
    ],
)
def test_trusted_sql_that_changes_a_session_leaves_nothing_for_the_next_query(hostile_files, sql):
    """Even without the guard (``check=False``), a DuckDB session's state dies with its query."""
    path = hostile_files["duckdb"]
    with open_database(path) as first, open_database(path) as second:
        first.execute(sql, check=False)
        for db in (first, second):
            probe = db.execute(
                "SELECT (SELECT count(*) FROM duckdb_tables() WHERE temporary), getvariable('planted'), "
                "(SELECT count(*) FROM duckdb_functions() WHERE function_name = 'planted'), "
                "(SELECT count(*) FROM duckdb_prepared_statements())",
                check=False,
            )
            assert probe.rows == [(0, None, 0, 0)], (sql, probe.rows)


def test_a_huge_result_costs_the_caller_its_cap_and_values_can_be_cut_in_the_worker(hostile_files):
    with open_database(hostile_files["duckdb"]) as db:
        _reset_peak()
        before = _status("VmRSS")
        result = db.execute("SELECT repeat('x', 12000000) AS v FROM range(40)", max_rows=50, timeout_s=10)
        assert result.truncated and len(result.rows) == 1 and len(result.rows[0][0]) == 12_000_000
        del result
        assert _status("VmHWM") - before < MEMORY_BOUND
        result = db.execute(
            "SELECT repeat('x', 12000000) AS v FROM range(40)", max_rows=50, max_value_chars=100, timeout_s=10
        )
        assert len(result.rows) == 40 and result.values_cut == 40 and result.rows[0][0] == "x" * 100
        with pytest.raises(QueryError, match="larger than 1 MB") as caught:
            db.execute("SELECT repeat('x', 1000) FROM range(5000)", max_bytes=1 << 20)
        assert caught.value.kind == "resources"


@pytest.mark.parametrize("engine", ENGINES)
def test_a_stuck_query_holds_up_no_other_database_on_the_file(hostile_files, engine):
    """Queries on one file run in parallel workers: one function call that never yields blocks nobody."""
    bomb = {
        "sqlite": f"SELECT instr({A50MB}, {A10MB} || 'b')",
        "duckdb": "SELECT list_sort(range(30000000))[1]",
    }[engine]
    path = hostile_files[engine]
    outcome: dict[str, str] = {}
    with open_database(path) as slow, open_database(path) as quick:

        def run() -> None:
            try:
                slow.execute(bomb, timeout_s=5)
            except QueryError as exc:
                outcome["kind"] = exc.kind

        thread = threading.Thread(target=run)
        thread.start()
        answers = [quick.execute("SELECT COUNT(*) FROM orders", timeout_s=5).rows for _ in range(20)]
        answered_first = "kind" not in outcome  # 20 small queries end long before a 5 s timeout
        thread.join(30)
    assert answers == [[(15,)]] * 20
    assert answered_first and outcome["kind"] in ("timeout", "resources")  # stopped, or out of memory


def test_a_fork_of_the_caller_never_uses_or_stops_its_workers(hostile_files):
    close_idle_databases()
    workers = set(live_workers())
    with open_database(hostile_files["sqlite"]) as db:
        db.execute("SELECT 1")
        pid = os.fork()
        if pid == 0:  # the child: the database refuses, and exiting leaves the parent's workers alone
            code = 3
            try:
                db.execute("SELECT 1")
                code = 1
            except RuntimeError as exc:
                code = 0 if "another process" in str(exc) else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert db.execute("SELECT COUNT(*) FROM orders").rows == [(15,)]
    close_idle_databases()
    assert set(live_workers()) <= workers


# -- temporary folders of dead owners --------------------------------------------------------------------
_CHILD = textwrap.dedent(
    """
    import os, sys, time
    from skyrl_gym.runtime.sql.database import open_database
    from skyrl_gym.runtime.sql.zygote import ZYGOTE, live_workers
    db = open_database(sys.argv[1], duckdb_config={"memory_limit": "64MB", "threads": 1})
    db.execute(
        "SELECT COUNT(DISTINCT x) FROM (SELECT (i * 7919) % 5000003 AS x, repeat('y', 40) AS pad "
        "FROM range(3000000) t(i) ORDER BY pad, x)", timeout_s=60)
    print(ZYGOTE.proc.pid, *live_workers(), flush=True)
    time.sleep(600)
    """
)


def _spawn_caller(path: Path) -> tuple[subprocess.Popen, list[int]]:
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path)], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    line = child.stdout.readline()
    if not line.strip():
        child.kill()
        child.wait()
        raise AssertionError("the child process did not report its workers")
    return child, [int(p) for p in line.split()]


def _folders_of(caller: int) -> dict[str, int]:
    """The worker folders made for ``caller``, with the pid of the worker that made each."""
    found = {}
    for name in os.listdir(tempfile.gettempdir()):
        match = re.match(rf"{PRIVATE_PREFIX}([0-9]+)-{caller}-", name)
        if match:
            found[name] = int(match.group(1))
    return found


def _wait_gone(pid: int) -> None:
    """Wait until every thread of ``pid`` has ended (its files, and so its locks, are released then)."""
    for _ in range(1000):  # a bounded number of polls, not a timing assertion
        try:
            with open(f"/proc/{pid}/stat") as handle:
                zombie = handle.read().rsplit(")", 1)[1].split()[0] == "Z"
            if zombie and len(os.listdir(f"/proc/{pid}/task")) <= 1:
                return  # a zombie whose other threads are gone, waiting for its new parent to reap it
        except FileNotFoundError:
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} did not end")


def test_a_sigkilled_callers_worker_folders_are_swept_by_the_next_database(hostile_files, tmp_path):
    path = tmp_path / "spill.duckdb"
    shutil.copy(hostile_files["duckdb"], path)
    child, (zygote, *workers) = _spawn_caller(path)
    try:
        folders = _folders_of(child.pid)
        assert folders, "the worker made no private folder"
    finally:
        for pid in (child.pid, zygote, *workers):  # all at once: nobody is left to clean up
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        child.wait()
    for pid in {zygote, *workers, *folders.values()}:
        _wait_gone(pid)
    assert _folders_of(child.pid), "the folders vanished before any sweep"
    with open_database(hostile_files["sqlite"]) as db:
        db.execute("SELECT 1")
    assert _folders_of(child.pid) == {}


def test_the_workers_of_a_sigkilled_caller_end_and_clean_up_themselves(hostile_files, tmp_path):
    path = tmp_path / "spill.duckdb"
    shutil.copy(hostile_files["duckdb"], path)
    child, (zygote, *workers) = _spawn_caller(path)
    folders = _folders_of(child.pid)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    for pid in {zygote, *workers, *folders.values()}:
        _wait_gone(pid)
    for _ in range(500):  # the reaper of a retired worker may still be removing its folder
        if not _folders_of(child.pid):
            break
        time.sleep(0.02)
    assert _folders_of(child.pid) == {}


def test_folders_of_an_older_layout_are_swept_when_their_owner_is_dead(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    folder = Path(tempfile.mkdtemp(prefix=f"{PRIVATE_PREFIX}{dead.pid}-"))
    (folder / "spill").mkdir()
    (folder / "spill" / "block.tmp").write_bytes(b"x" * 1000)
    alive = Path(tempfile.mkdtemp(prefix=f"{PRIVATE_PREFIX}{os.getpid()}-"))  # a living owner: kept
    try:
        assert sweep_stale_folders() >= 1
        assert not folder.exists() and alive.exists()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(alive, ignore_errors=True)


# -- the report ------------------------------------------------------------------------------------------------
def main() -> None:
    """Run the battery once per engine and print, per class, the attacks, the worst time and memory."""
    folder = Path(tempfile.mkdtemp(prefix="hostile-sql-"))
    try:
        files = {
            "duckdb": build_shop(folder / "shop.duckdb", "duckdb"),
            "sqlite": build_shop(folder / "shop.sqlite", "sqlite"),
        }
        worst: dict[str, list[float]] = {}
        for engine in ENGINES:
            with open_database(files[engine]) as db:
                db.execute("SELECT 1")
                for attack in [a for a in ATTACKS if engine in a.engines]:
                    outcome = run_attack(db, attack)
                    entry = worst.setdefault(attack.kind, [0, 0.0, 0.0, 0])
                    entry[0] += 1
                    entry[1] = max(entry[1], outcome.seconds)
                    entry[2] = max(entry[2], outcome.memory / 2**20)
                    entry[3] += outcome.kind in ("unsafe", "schema", "syntax")
                    print(
                        f"{engine:7} {outcome.seconds:6.2f} s {outcome.memory / 2**20:7.1f} MB "
                        f"{outcome.kind or 'ran':10} {attack.id}",
                        flush=True,
                    )
        close_idle_databases()
        print(f"\n{'class':24} {'attacks':>7} {'refused':>7} {'worst s':>8} {'worst MB':>9}")
        for kind, (n, seconds, memory, refused) in worst.items():
            print(f"{kind:24} {n:7d} {refused:7d} {seconds:8.2f} {memory:9.1f}")
        print(f"(timeout {TIMEOUT_S} s; bound {STOPPED_WITHIN_S} s and {MEMORY_BOUND / 2**20:.0f} MB)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
