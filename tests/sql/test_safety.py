"""The read-only guard, the read-only connections, the timeout and the temporary files, on both engines."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from pathlib import Path

import pytest
from shopdb import ENGINES, sha256_of

from skyrl_gym.runtime.sql.database import (
    QueryError,
    QueryTimeout,
    UnparsableQuery,
    UnsafeQuery,
    close_idle_databases,
    open_database,
)
from skyrl_gym.runtime.sql.guard import _cached_verdict, check_read_only

# Statements a model might write to escape, written for either engine. Each must be refused by the guard.
HOSTILE = [
    # writes and schema changes
    "INSERT INTO customers VALUES (99, 'Mallory', 'Nowhere', NULL)",
    "INSERT OR REPLACE INTO customers VALUES (1, 'Mallory', NULL, NULL)",
    "REPLACE INTO customers VALUES (1, 'Mallory', NULL, NULL)",
    "UPDATE customers SET name = 'Mallory'",
    "UPDATE customers SET name = 'x' WHERE id = 1 RETURNING *",
    "DELETE FROM orders",
    "TRUNCATE orders",
    "DROP TABLE orders",
    "DROP VIEW IF EXISTS v",
    "CREATE TABLE t (i INTEGER)",
    "CREATE TEMP TABLE t AS SELECT * FROM customers",
    "CREATE VIEW v AS SELECT 1",
    "CREATE INDEX idx ON customers (name)",
    "CREATE MACRO twice(x) AS x * 2",
    "CREATE SECRET s (TYPE s3, KEY_ID 'k', SECRET 's')",
    "ALTER TABLE customers ADD COLUMN x INTEGER",
    "ALTER TABLE customers RENAME TO clients",
    "WITH gone AS (DELETE FROM orders RETURNING *) SELECT * FROM gone",
    "SELECT * INTO stolen FROM customers",
    # other databases and files
    "ATTACH DATABASE 'other.db' AS other",
    "ATTACH '/tmp/other.duckdb' AS other (READ_ONLY false)",
    "DETACH other",
    "DETACH DATABASE other",
    "USE other",
    "COPY customers TO '/tmp/customers.csv'",
    "COPY (SELECT * FROM customers) TO 'out.parquet' (FORMAT parquet)",
    "COPY customers FROM '/etc/passwd'",
    "EXPORT DATABASE '/tmp/dump'",
    "IMPORT DATABASE '/tmp/dump'",
    "VACUUM",
    "VACUUM INTO '/tmp/copy.db'",
    "CHECKPOINT",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_csv_auto('/etc/passwd')",
    "SELECT * FROM read_csv(['a.csv', 'b.csv'])",
    "SELECT * FROM read_parquet('data.parquet')",
    "SELECT * FROM parquet_scan('data.parquet')",
    "SELECT * FROM read_json_auto('x.json')",
    "SELECT * FROM read_ndjson_objects('x.json')",
    "SELECT content FROM read_text('/etc/passwd')",
    "SELECT content FROM read_blob('/etc/hostname')",
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM sqlite_scan('other.db', 'customers')",
    "SELECT * FROM sqlite_attach('other.db')",
    "SELECT * FROM postgres_scan('host=x', 'public', 't')",
    "SELECT * FROM '/etc/passwd'",
    "SELECT * FROM 'data.csv'",
    'SELECT * FROM "orders.parquet"',
    "SELECT * FROM 'https://example.com/data.parquet'",
    "SELECT * FROM customers, read_csv('x.csv') AS x",
    "SELECT (SELECT count(*) FROM read_text('/etc/passwd')) AS n",
    "SELECT name FROM customers WHERE name IN (SELECT * FROM read_csv('names.csv'))",
    "SELECT * FROM parquet_metadata('x.parquet')",
    "SELECT * FROM sniff_csv('x.csv')",
    # extensions, settings, procedures, SQL in strings
    "INSTALL httpfs",
    "FORCE INSTALL httpfs",
    "LOAD httpfs",
    "LOAD '/tmp/evil.duckdb_extension'",
    "SELECT load_extension('/tmp/evil.so')",
    "SELECT readfile('/etc/passwd')",
    "SELECT writefile('/tmp/x', 'data')",
    "SELECT edit('x')",
    "PRAGMA writable_schema = ON",
    "PRAGMA table_info(customers)",
    "PRAGMA enable_profiling",
    "SELECT * FROM pragma_table_info('customers')",
    "SET enable_external_access = true",
    "SET threads = 1",
    "RESET threads",
    "CALL pragma_version()",
    "CALL dbgen(sf = 1)",
    "SELECT current_setting('temp_directory')",
    "SELECT getenv('HOME')",
    "SELECT * FROM duckdb_settings()",
    "SELECT * FROM duckdb_secrets()",
    "SELECT * FROM duckdb_databases()",
    "SELECT * FROM query('SELECT 1')",
    "SELECT nextval('seq')",
    "PREPARE p AS SELECT 1",
    "EXECUTE p",
    "DESCRIBE customers",
    "SHOW TABLES",
    "SUMMARIZE customers",
    "GRANT ALL ON customers TO public",
    # transactions
    "BEGIN TRANSACTION",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    # several statements, hidden statements, explain of a write
    "SELECT 1; DROP TABLE orders",
    "DROP TABLE orders; SELECT 1",
    "SELECT 1; SELECT 2",
    "SELECT 1 /* ; */ ; DELETE FROM orders",
    "SELECT ';'; DELETE FROM orders --",
    "EXPLAIN DELETE FROM orders",
    "EXPLAIN ANALYZE INSERT INTO customers VALUES (1, 'x', NULL, NULL)",
    "EXPLAIN EXPLAIN SELECT 1",
    # nothing to check
    "",
    "   ",
    "-- only a comment",
    "/* only a comment */",
    ";",
    "SELECT 1 +",
    "SELEC name FROM customers",
    "SELECT 1\x00; DROP TABLE orders",
    "SELECT 'lone \ud800 surrogate'",
]

ALLOWED = [
    "SELECT COUNT(*) FROM customers",
    "select name from customers where country = 'France';",
    "  SELECT 1  ;;  ",
    "-- a comment first\nSELECT name FROM customers",
    "SELECT name /* inline ; comment */ FROM customers",
    "SELECT ';' AS semicolon",
    "WITH fr AS (SELECT * FROM customers WHERE country = 'France') SELECT name FROM fr",
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5) SELECT SUM(i) FROM n",
    "SELECT name FROM customers UNION SELECT name FROM products",
    "SELECT id FROM customers INTERSECT SELECT customer_id FROM orders",
    "SELECT id FROM customers EXCEPT SELECT customer_id FROM orders",
    "VALUES (1, 'a'), (2, 'b')",
    "EXPLAIN SELECT * FROM orders",
    "SELECT c.name, SUM(o.quantity) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.name",
    "SELECT name FROM customers WHERE name LIKE 'A%' ORDER BY name LIMIT 2",
    "SELECT name, ROW_NUMBER() OVER (ORDER BY name) FROM customers",
    "SELECT * FROM customers WHERE id IN (SELECT customer_id FROM orders WHERE quantity > 2)",
    "SELECT CASE WHEN price > 10 THEN 'dear' ELSE 'cheap' END FROM products",
    "SELECT name FROM customers WHERE country IS NULL",
    "SELECT 'drop table orders' AS not_a_statement",
    'SELECT name AS "select" FROM customers',
]
DUCKDB_ALLOWED = [
    "(SELECT name FROM customers)",
    "SELECT * FROM range(3) t(i)",
    "SELECT * FROM generate_series(1, 3)",
    "SELECT unnest([1, 2, 3])",
    "FROM customers SELECT name",
    "SELECT table_name FROM duckdb_tables()",
    "SELECT table_name FROM information_schema.tables",
    "SELECT strftime(order_date, '%Y') FROM orders",
    "EXPLAIN ANALYZE SELECT COUNT(*) FROM orders",
]
SQLITE_ALLOWED = [
    "SELECT name FROM customers WHERE name GLOB 'A*'",
    "SELECT strftime('%Y', order_date) FROM orders",
    "SELECT name FROM sqlite_master WHERE type = 'table'",
    "EXPLAIN QUERY PLAN SELECT * FROM orders",
    "SELECT `name` FROM customers LIMIT 1, 2",
    "SELECT IFNULL(country, 'unknown') FROM customers",
]


def temp_entries() -> set[str]:
    """The private folders of this process's query workers that exist now (``skyrl-sql-<worker>-<caller>-*``;
    other processes may have their own)."""
    mine = re.compile(rf"skyrl-sql-[0-9]+-{os.getpid()}-")
    return {name for name in os.listdir(tempfile.gettempdir()) if mine.match(name)}


def dialect_of(path: Path) -> str:
    return "duckdb" if path.suffix == ".duckdb" else "sqlite"


def test_the_battery_is_large():
    assert len(HOSTILE) >= 40
    assert len(set(HOSTILE)) == len(HOSTILE)


@pytest.mark.parametrize("engine", ENGINES)
def test_every_hostile_statement_is_refused_and_nothing_changes(shop_files, engine, tmp_path):
    path = shop_files[engine]
    close_idle_databases()
    checksum, folder, temps = sha256_of(path), sorted(os.listdir(path.parent)), temp_entries()
    let_through = []
    with open_database(path) as db:
        for sql in HOSTILE:
            try:
                db.execute(sql, timeout_s=2.0)
            except UnsafeQuery as exc:
                message = str(exc)
                assert len(message) > 20, (sql, message)
            except QueryError as exc:
                let_through.append((sql, f"{exc.kind}: {exc}"))
            else:
                let_through.append((sql, "ran"))
    assert not let_through, "the guard let these through:\n" + "\n".join(
        f"{s!r}: {why}" for s, why in let_through
    )
    close_idle_databases()
    assert sha256_of(path) == checksum
    assert sorted(os.listdir(path.parent)) == folder
    assert temp_entries() == temps


@pytest.mark.parametrize("engine", ENGINES)
def test_read_only_queries_pass_the_guard_and_run(shop_files, engine):
    queries = ALLOWED + (DUCKDB_ALLOWED if engine == "duckdb" else SQLITE_ALLOWED)
    with open_database(shop_files[engine]) as db:
        for sql in queries:
            result = db.execute(sql, transpile_from=None)
            assert result.columns, sql


def test_refusals_explain_what_is_allowed():
    with pytest.raises(UnsafeQuery, match=r"INSERT statements are not allowed.*SELECT, WITH"):
        check_read_only("INSERT INTO t VALUES (1)", "duckdb")
    with pytest.raises(UnsafeQuery, match="one statement at a time; found 2"):
        check_read_only("SELECT 1; SELECT 2", "sqlite")
    with pytest.raises(UnsafeQuery, match=r"read_csv\(\) is not allowed"):
        check_read_only("SELECT * FROM read_csv('x.csv')", "duckdb")
    with pytest.raises(UnsafeQuery, match="looks like a file path"):
        check_read_only("SELECT * FROM 'data.csv'", "duckdb")
    with pytest.raises(UnsafeQuery, match="DELETE is not allowed inside a query"):
        check_read_only("WITH x AS (DELETE FROM t RETURNING *) SELECT * FROM x", "duckdb")
    with pytest.raises(UnsafeQuery, match="empty"):
        check_read_only("  ;  ", "duckdb")
    with pytest.raises(UnparsableQuery, match="could not be parsed") as caught:
        check_read_only("SELECT 1 +", "sqlite")
    assert caught.value.kind == "syntax" and "<class" not in str(caught.value)


def test_the_guard_returns_the_statement_and_caches_its_verdict():
    assert check_read_only("  SELECT 1 ;; ", "duckdb") == "SELECT 1"
    query = "SELECT name, COUNT(*) FROM customers GROUP BY name ORDER BY 2 DESC LIMIT 10 -- cached"
    check_read_only(query, "duckdb")
    before = _cached_verdict.cache_info()
    for _ in range(1000):
        assert check_read_only(query, "duckdb") == query
    after = _cached_verdict.cache_info()
    # a dictionary lookup each time, not a parse
    assert (after.hits - before.hits, after.misses - before.misses) == (1000, 0)


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO customers VALUES (99, 'Mallory', NULL, NULL)",
        "UPDATE customers SET name = 'Mallory'",
        "DELETE FROM orders",
        "DROP TABLE orders",
        "CREATE TABLE stolen AS SELECT * FROM customers",
        "ATTACH 'other.db' AS other",
        "COPY customers TO 'out.csv'",
        "SELECT * FROM read_csv('/etc/passwd')",
        "INSTALL httpfs",
        "LOAD httpfs",
    ],
)
@pytest.mark.parametrize("engine", ENGINES)
def test_the_connection_refuses_writes_even_without_the_guard(shop_files, engine, sql):
    """Defence in depth: with the guard off (check=False), the read-only connection still refuses."""
    path = shop_files[engine]
    checksum, folder = sha256_of(path), sorted(os.listdir(path.parent))
    with open_database(path) as db:
        with pytest.raises(QueryError):
            db.execute(sql, check=False)
    assert sha256_of(path) == checksum
    assert sorted(os.listdir(path.parent)) == folder


@pytest.mark.parametrize("engine", ENGINES)
def test_maintenance_statements_without_the_guard_change_nothing(shop_files, engine):
    """DuckDB accepts VACUUM, CHECKPOINT and temporary tables (in memory) on a read-only file; the file stays."""
    path = shop_files[engine]
    checksum, folder = sha256_of(path), sorted(os.listdir(path.parent))
    with open_database(path) as db:
        for sql in ("VACUUM", "CHECKPOINT", "ANALYZE", "CREATE TEMP TABLE t AS SELECT * FROM orders"):
            try:
                db.execute(sql, check=False)
            except QueryError:
                pass
    assert sha256_of(path) == checksum
    assert sorted(os.listdir(path.parent)) == folder


def test_sqlite_connection_refuses_pragmas_and_attach_without_the_guard(shop_files):
    with open_database(shop_files["sqlite"]) as db:
        for sql in ("PRAGMA writable_schema = ON", "PRAGMA query_only = OFF", "ATTACH ':memory:' AS m"):
            with pytest.raises(UnsafeQuery, match="not authorized"):
                db.execute(sql, check=False)
        assert db.execute("SELECT COUNT(*) FROM customers").rows == [(8,)]  # still usable


def test_duckdb_settings_cannot_be_changed_without_the_guard(shop_files):
    with open_database(shop_files["duckdb"]) as db:
        for sql in (
            "SET enable_external_access = true",
            "SET temp_directory = '/tmp'",
            "RESET lock_configuration",
        ):
            with pytest.raises(QueryError):
                db.execute(sql, check=False)


HEAVY = {
    "duckdb": "SELECT COUNT(*) FROM range(1000000000) a, range(1000000000) b WHERE a.range + b.range = 7",
    "sqlite": "SELECT COUNT(*) FROM orders a, orders b, orders c, orders d, orders e, orders f, orders g, orders h",
}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_heavy_query_is_interrupted_at_its_timeout(shop_files, engine):
    # HEAVY runs for hours: only the deadline ends it (the test's own timeout would fail it otherwise)
    with open_database(shop_files[engine]) as db:
        with pytest.raises(QueryTimeout, match="stopped after 1 s") as caught:
            db.execute(HEAVY[engine], timeout_s=1.0)
        assert caught.value.kind == "timeout"
        # the connection is usable right after, and a later query is not interrupted by the old deadline
        assert db.execute("SELECT COUNT(*) FROM orders", timeout_s=1.0).rows == [(15,)]


def test_many_short_queries_are_never_interrupted_by_stale_deadlines(shop_files):
    """A query's deadline ends with it: after each query with a short deadline (its own outcome is not asserted:
    a loaded machine may stop it) and once that deadline has passed, a query with a long one answers."""
    with open_database(shop_files["duckdb"]) as db:
        for _ in range(100):
            with contextlib.suppress(QueryTimeout):
                db.execute("SELECT COUNT(*) FROM orders", timeout_s=0.02)
            time.sleep(0.03)  # past the short deadline: a stale one would fire now or in the next query
            assert db.execute("SELECT COUNT(*) FROM orders", timeout_s=60).rows == [(15,)]


@pytest.mark.parametrize("engine", ENGINES)
def test_results_are_capped_in_rows_and_say_how_many_exist(shop_files, engine):
    with open_database(shop_files[engine]) as db:
        result = db.execute("SELECT * FROM orders", max_rows=4)
        assert len(result.rows) == 4 and result.truncated and result.total_rows == 15
        result = db.execute("SELECT * FROM orders", max_rows=4, count_limit=5)
        assert len(result.rows) == 4 and result.truncated and result.total_rows is None
        result = db.execute("SELECT * FROM orders", max_rows=15)
        assert len(result.rows) == 15 and not result.truncated and result.total_rows == 15


def test_a_missing_file_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.duckdb"):
        open_database(tmp_path / "nowhere.duckdb")
    with pytest.raises(FileNotFoundError, match="directory"):
        open_database(tmp_path)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database at all")
    with pytest.raises(ValueError, match="neither a SQLite nor a DuckDB"):
        open_database(junk)


def test_opening_a_file_many_times_shares_one_duckdb_and_cleans_up(shop_files):
    close_idle_databases()
    before = temp_entries()
    databases = [open_database(shop_files["duckdb"]) for _ in range(5)]
    # one private folder for the one DuckDB instance (none new if an earlier test still holds the file open)
    assert len(temp_entries() - before) <= 1
    assert all(db.execute("SELECT COUNT(*) FROM customers").rows == [(8,)] for db in databases)
    for db in databases:
        db.close()
        db.close()  # idempotent
    close_idle_databases()
    assert temp_entries() == before


def test_a_spilling_query_leaves_no_temporary_files(shop_duckdb):
    close_idle_databases()
    before, folder = temp_entries(), sorted(os.listdir(shop_duckdb.parent))
    with open_database(shop_duckdb, duckdb_config={"memory_limit": "64MB", "threads": 1}) as db:
        result = db.execute(
            "SELECT COUNT(DISTINCT x) FROM (SELECT (i * 7919) % 5000003 AS x, repeat('y', 40) AS pad "
            "FROM range(3000000) t(i) ORDER BY pad, x)",
            timeout_s=30,
        )
        assert result.rows[0][0] > 0
    close_idle_databases()
    assert temp_entries() == before
    assert sorted(os.listdir(shop_duckdb.parent)) == folder


def test_sqlite_text_that_is_not_utf8_is_read_with_replacement_characters(tmp_path):
    import sqlite3

    path = tmp_path / "latin.sqlite"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE t (name TEXT)")
    connection.execute("INSERT INTO t VALUES (CAST(X'43616688e9' AS TEXT))")
    connection.commit()
    connection.close()
    with open_database(path) as db:
        assert db.execute("SELECT name FROM t").rows == [("Caf\ufffd\ufffd",)]


def test_huge_values_and_memory_are_bounded(shop_files):
    with open_database(shop_files["sqlite"]) as db:
        with pytest.raises(QueryError, match="too big"):
            db.execute("SELECT length(randomblob(1000000000))")
    with open_database(shop_files["duckdb"]) as db:
        [(limit,)] = db.execute("SELECT current_setting('memory_limit')", check=False).rows
        assert "GiB" in limit and float(limit.split()[0]) <= 4.0


@pytest.mark.parametrize("dialect", ["duckdb", "sqlite"])
@pytest.mark.parametrize(
    "sql", ["SELEC * FROM t", "SELEC name FROM t", "SELEC", "FOO BAR", "hello world", "The answer is 5"]
)
def test_a_typo_or_prose_is_a_syntax_error_with_the_parsers_message(sql, dialect):
    with pytest.raises(UnparsableQuery) as caught:
        check_read_only(sql, dialect)
    message = str(caught.value)
    assert caught.value.kind == "syntax" and message.startswith("the query could not be parsed: ")
    assert "not allowed" not in message
    if sql in (
        "FOO BAR",
        "hello world",
    ):  # sqlglot reads these as an expression: the engine's own parser says
        first = sql.split()[0]
        expected = (
            f'syntax error at or near "{first}"' if dialect == "duckdb" else f'near "{first}": syntax error'
        )
        assert expected in message


@pytest.mark.parametrize("dialect", ["duckdb", "sqlite"])
@pytest.mark.parametrize(
    "sql",
    [
        "DROP TABLE t",
        "ATTACH 'x.db' AS y",
        "PRAGMA user_version = 3",
        "DELETE FROM t",
        "CHECKPOINT",
        "INSTALL httpfs",
        "SUMMARIZE t",
        "VACUUM",
        "SET threads = 1",
    ],
)
def test_a_real_statement_is_still_forbidden(sql, dialect):
    with pytest.raises(UnsafeQuery, match="statements are not allowed") as caught:
        check_read_only(sql, dialect)
    assert caught.value.kind == "unsafe"
