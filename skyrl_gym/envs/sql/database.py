"""Read-only access to a DuckDB or SQLite database file, with a guard, a timeout and capped results.

:func:`open_database` opens a file read-only and returns a :class:`Database`. Every query that comes from a
model goes through :meth:`Database.execute`, which

- checks that it is one read-only statement (:func:`skyrl_gym.envs.sql.safety.check_read_only`);
- optionally rewrites it from another SQL dialect with sqlglot (``transpile_from``);
- runs it with a deadline that *interrupts* it (DuckDB: ``interrupt()`` from a watchdog thread; SQLite: a
  progress handler), raising :class:`QueryTimeout`;
- fetches at most ``max_rows`` rows and says whether (and how many) rows were cut.

The connections themselves refuse to write, whatever the guard lets through:

- DuckDB: ``read_only=True`` with ``enable_external_access=false`` (no files, no network, no ATTACH),
  extension auto-install/auto-load off, no Python replacement scans, a 4 GB memory limit by default and
  ``lock_configuration=true`` (no ``SET`` can undo any of it). Its spill directory is a private temporary
  folder, removed when the DuckDB instance closes: :data:`DUCKDB_LINGER_S` after the last :class:`Database`
  on the file closed (so that the next episode on it starts fast), or at once by :func:`close_idle_databases`.
- SQLite: a ``mode=ro`` URI, ``PRAGMA query_only``, temporary tables in memory, extension loading off, values
  capped at 100 MB and an authorizer that denies everything but reading (no ATTACH, no PRAGMA, no writes, no
  file functions).

Errors raised for a query (:class:`QueryError` and its subclasses) carry a message written for the model and
a ``kind``: ``syntax``, ``schema`` (unknown table or column), ``execution``, ``timeout`` or ``unsafe``.

A :class:`Database` is used by one thread at a time (calls are serialised by a lock); open one per
environment. Opening the same DuckDB file many times in one process shares one DuckDB instance.
"""

from __future__ import annotations

import atexit
import dataclasses
import heapq
import itertools
import math
import os
import re
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from skyrl_gym.errors import Error

__all__ = [
    "DATA_LAYOUTS",
    "DUCKDB_LINGER_S",
    "DEFAULT_COUNT_LIMIT",
    "DEFAULT_TIMEOUT_S",
    "Database",
    "DuckDBDatabase",
    "QueryError",
    "QueryResult",
    "QueryTimeout",
    "SQLiteDatabase",
    "UnparsableQuery",
    "UnsafeQuery",
    "close_idle_databases",
    "detect_engine",
    "open_database",
    "resolve_database",
    "transpile_query",
]

DEFAULT_TIMEOUT_S = 5.0
"""Seconds a query may run before it is interrupted."""
DEFAULT_COUNT_LIMIT = 10_000
"""When a result is cut at ``max_rows``, at most this many more rows are counted, to say how many were cut."""
TRANSPILE_CANDIDATES = ("sqlite", "mysql", "postgres", "duckdb")
"""Dialects tried, in order, by ``transpile_from="auto"`` (the database's own dialect is skipped)."""

DATA_LAYOUTS: dict[str, tuple[str, ...]] = {
    "synsql": ("SynSQL-2.5M/databases/{db_id}/{db_id}.sqlite",),
    "spider": ("spider/database/{db_id}/{db_id}.sqlite", "spider/test_database/{db_id}/{db_id}.sqlite"),
    "bird": (
        "bird/train/train_databases/{db_id}/{db_id}.sqlite",
        "bird/dev/dev_databases/{db_id}/{db_id}.sqlite",
    ),
}
"""Where SkyRL finds ``db_id`` for each ``data`` value, relative to the configured root (first match wins)."""
_GENERIC_LAYOUTS = (
    "{data}/{db_id}/{db_id}.duckdb",
    "{data}/{db_id}/{db_id}.sqlite",
    "{data}/{db_id}.duckdb",
    "{data}/{db_id}.sqlite",
    "{db_id}/{db_id}.duckdb",
    "{db_id}/{db_id}.sqlite",
    "{db_id}.duckdb",
    "{db_id}.sqlite",
)

_SQLITE_HEADER = b"SQLite format 3\x00"
_DUCKDB_MAGIC = b"DUCK"  # bytes 8-11 of a DuckDB file


# -- results and errors ------------------------------------------------------------------------------------
@dataclasses.dataclass
class QueryResult:
    """The result of one query.

    Attributes:
        columns: the column names, in order.
        rows: the rows fetched (at most ``max_rows``), each a tuple of Python values.
        truncated: more rows existed than were fetched.
        total_rows: how many rows the query returned in all; ``None`` when it is unknown (more than
            ``len(rows) + DEFAULT_COUNT_LIMIT``, or the count ran out of time).
        sql: the statement that ran (after transpilation).
        transpiled_from: the dialect the query was rewritten from, or ``None`` when it ran as written.
    """

    columns: list[str]
    rows: list[tuple]
    truncated: bool = False
    total_rows: int | None = None
    sql: str | None = None
    transpiled_from: str | None = None

    def __post_init__(self) -> None:
        if self.total_rows is None and not self.truncated:
            self.total_rows = len(self.rows)


class QueryError(Error):
    """A query failed; the message is written for the model. ``kind`` says how (see the module docstring)."""

    kind: str = "execution"

    def __init__(self, message: str, *, kind: str | None = None):
        super().__init__(message)
        if kind is not None:
            self.kind = kind


class QueryTimeout(QueryError):
    """The query ran past its time limit and was interrupted."""

    kind = "timeout"


class UnsafeQuery(QueryError):
    """The guard refused the query: it is not one read-only statement, or it reaches outside the database."""

    kind = "unsafe"


class UnparsableQuery(UnsafeQuery):
    """The guard refused the query because sqlglot could not parse it (so it cannot be checked)."""

    kind = "syntax"


# -- the watchdog that interrupts DuckDB queries -----------------------------------------------------------
class _Watchdog:
    """One daemon thread that calls ``callback()`` for every armed deadline that passes before it is disarmed.

    Arming is a dictionary insert; the thread is only woken when a new deadline comes before the moment it
    already plans to wake at, so the common case (many short queries with equal timeouts) costs no wake-ups.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._armed: dict[int, tuple[float, Callable[[], Any]]] = {}
        self._heap: list[tuple[float, int]] = []
        self._ids = itertools.count()
        self._wake_at = math.inf
        self._thread: threading.Thread | None = None

    def arm(self, deadline: float, callback: Callable[[], Any]) -> int:
        with self._cond:
            token = next(self._ids)
            self._armed[token] = (deadline, callback)
            heapq.heappush(self._heap, (deadline, token))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="skyrl-sql-watchdog", daemon=True)
                self._thread.start()
            elif deadline < self._wake_at:
                self._cond.notify()
        return token

    def disarm(self, token: int) -> None:
        with self._cond:
            self._armed.pop(token, None)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                while self._heap and (self._heap[0][0] <= now or self._heap[0][1] not in self._armed):
                    _, token = heapq.heappop(self._heap)
                    entry = self._armed.pop(token, None)
                    if entry is not None:
                        try:
                            entry[1]()
                        except Exception:  # a closed connection: nothing left to interrupt
                            pass
                self._wake_at = self._heap[0][0] if self._heap else math.inf
                self._cond.wait(None if self._wake_at == math.inf else self._wake_at - now)


_WATCHDOG = _Watchdog()


# -- opening ---------------------------------------------------------------------------------------------
def detect_engine(path: str | os.PathLike[str]) -> Literal["duckdb", "sqlite"]:
    """``"sqlite"`` or ``"duckdb"`` from the file's header; raises ``ValueError`` for anything else."""
    with open(path, "rb") as handle:
        header = handle.read(16)
    if header.startswith(_SQLITE_HEADER):
        return "sqlite"
    if header[8:12] == _DUCKDB_MAGIC:
        return "duckdb"
    raise ValueError(
        f"{os.fspath(path)!r} is neither a SQLite nor a DuckDB database file (header {header[:16]!r})"
    )


def open_database(
    path: str | os.PathLike[str],
    *,
    engine: Literal["auto", "duckdb", "sqlite"] = "auto",
    duckdb_config: Mapping[str, Any] | None = None,
    sqlite_temp_store: Literal["memory", "file"] = "memory",
) -> Database:
    """Open the database file at ``path`` read-only.

    Args:
        path: a DuckDB or SQLite file.
        engine: ``"auto"`` reads the file header (``SQLite format 3`` means SQLite, DuckDB's magic means
            DuckDB); ``"duckdb"`` or ``"sqlite"`` force one.
        duckdb_config: extra DuckDB settings (for example ``{"threads": 2, "memory_limit": "2GB"}``); the
            safety settings cannot be overridden.
        sqlite_temp_store: where SQLite keeps the temporary tables of a sort or a ``GROUP BY``: ``"memory"``
            (the default: nothing on disk, but such queries cost up to 1.5-2x the CPU), or ``"file"`` (SQLite's
            own default: files it deletes as soon as it creates them, so none is ever visible; a runaway query
            can still fill the disk until its timeout interrupts it).

    Raises:
        FileNotFoundError: no file at ``path`` (the message names the path tried).
        ValueError: the file is not a database, or ``engine`` is unknown.
    """
    resolved = Path(os.fspath(path)).expanduser().resolve()
    if not resolved.is_file():
        what = "is a directory, not a database file" if resolved.is_dir() else "does not exist"
        raise FileNotFoundError(f"database file not found: {os.fspath(path)!r} ({resolved} {what})")
    if engine == "auto":
        engine = detect_engine(resolved)
    if engine == "duckdb":
        return DuckDBDatabase(resolved, duckdb_config=duckdb_config)
    if engine == "sqlite":
        if duckdb_config:
            raise ValueError("duckdb_config was given for a SQLite database")
        return SQLiteDatabase(resolved, temp_store=sqlite_temp_store)
    raise ValueError(f"unknown engine {engine!r}; use 'auto', 'duckdb' or 'sqlite'")


def resolve_database(extras: Mapping[str, Any], root: str | os.PathLike[str] | None = None) -> Path:
    """The database file a dataset row names: ``extras["db_path"]``, or SkyRL's ``db_id`` + ``data``.

    ``db_path`` may be absolute or relative to ``root``. ``db_id`` + ``data`` follow SkyRL's layouts under
    ``root`` (:data:`DATA_LAYOUTS`: ``synsql``, ``spider``, ``bird``), then a few generic ones
    (``{root}/{data}/{db_id}/{db_id}.duckdb`` ...). Raises ``FileNotFoundError`` naming every path tried, or
    ``ValueError`` when the row names no database.
    """
    db_path = extras.get("db_path")
    if db_path:
        candidate = Path(os.fspath(db_path)).expanduser()
        if not candidate.is_absolute() and root is not None:
            candidate = Path(os.fspath(root)).expanduser() / candidate
        if not candidate.is_file():
            raise FileNotFoundError(
                f"database file not found: tried {str(candidate)!r} (from extras['db_path'])"
            )
        return candidate
    db_id = extras.get("db_id")
    if not db_id:
        raise ValueError(
            "the task names no database: give extras['db_path'] (a DuckDB or SQLite file) or "
            "extras['db_id'] with extras['data'] and env_config.db_path (the root folder)"
        )
    if root is None:
        raise ValueError(
            f"extras['db_id'] is {db_id!r} but no root folder is configured: set env_config.db_path "
            "(the folder holding SynSQL-2.5M/, spider/ or bird/), or give extras['db_path']"
        )
    data = str(extras.get("data") or "")
    if any(sep in str(db_id) for sep in ("/", "\\")) or str(db_id) in (".", ".."):
        raise ValueError(f"extras['db_id'] must be a plain name, got {db_id!r}")
    base = Path(os.fspath(root)).expanduser()
    patterns = DATA_LAYOUTS.get(data.lower(), ()) + (_GENERIC_LAYOUTS if data else _GENERIC_LAYOUTS[4:])
    tried = []
    for pattern in patterns:
        candidate = base / pattern.format(db_id=db_id, data=data)
        if candidate.is_file():
            return candidate
        tried.append(str(candidate))
    raise FileNotFoundError(
        f"database file not found for db_id={db_id!r}, data={data!r}; tried: " + ", ".join(tried)
    )


def transpile_query(sql: str, source: str, target: str) -> str:
    """``sql`` rewritten from dialect ``source`` to ``target`` with sqlglot; raises ``QueryError`` if it can't."""
    import sqlglot
    from sqlglot.errors import SqlglotError

    try:
        statements = sqlglot.transpile(sql, read=source, write=target)
    except (SqlglotError, ValueError, RecursionError) as exc:
        raise QueryError(
            f"could not rewrite the query from {source} to {target}: {exc}", kind="syntax"
        ) from None
    if len(statements) != 1:
        raise UnsafeQuery("write exactly one SQL statement")
    return statements[0]


# -- the database ------------------------------------------------------------------------------------------
_PLAIN_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RESERVED = frozenset(
    "all and as asc between by case check collate column constraint create cross default delete desc "
    "distinct drop else end except exists foreign from full group having in index inner insert intersect "
    "into is join key left like limit natural not null offset on or order outer primary references right "
    "select set table then to union unique update using values when where with".split()
)


def quote_identifier(name: str) -> str:
    """``name`` as an SQL identifier, double-quoted only when it has to be."""
    if _PLAIN_IDENTIFIER.match(name) and name.lower() not in _RESERVED:
        return name
    return '"' + name.replace('"', '""') + '"'


class Database:
    """A read-only database file. Make one with :func:`open_database`.

    Attributes:
        path: the absolute path of the file.
        dialect: ``"duckdb"`` or ``"sqlite"`` (also the sqlglot dialect name).
    """

    dialect: str = ""

    def __init__(self, path: Path):
        self.path = path
        stat = path.stat()
        self.stamp: tuple[str, int, int] = (str(path), stat.st_mtime_ns, stat.st_size)
        """(path, modification time, size): a key for caches of results computed from this file."""
        self._lock = threading.RLock()
        self._closed = False
        self._schema: tuple[list[str], str] | None = None

    # -- queries -------------------------------------------------------------------------------------------
    def execute(
        self,
        sql: str,
        *,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        max_rows: int | None = None,
        check: bool = True,
        transpile_from: str | None = None,
        count_limit: int = DEFAULT_COUNT_LIMIT,
    ) -> QueryResult:
        """Run one query and return its result.

        Args:
            sql: the query.
            timeout_s: seconds before the query is interrupted (:class:`QueryTimeout`); ``None``: no limit.
            max_rows: fetch at most this many rows (the result then says ``truncated``); ``None``: all.
            check: run the read-only guard first (:class:`UnsafeQuery` when it refuses). Turn it off only for
                trusted SQL; the connection stays read-only either way.
            transpile_from: ``None`` runs the query as written; a sqlglot dialect name (``"sqlite"``,
                ``"mysql"``...) rewrites it from that dialect first; ``"auto"`` runs it as written and, on a
                syntax or schema error, retries it rewritten from each of :data:`TRANSPILE_CANDIDATES`.
            count_limit: when rows are cut, count at most this many more to report the total.

        Raises:
            QueryError: the query failed; its ``kind`` and message say why.
        """
        if not isinstance(sql, str):
            raise QueryError(f"the query must be a string, got {type(sql).__name__}")
        if max_rows is not None and max_rows < 0:
            raise ValueError(f"max_rows must be >= 0 or None, got {max_rows}")
        with self._lock:
            if self._closed:
                raise Error(f"{self} is closed")
            source = None if transpile_from in (None, "", self.dialect) else transpile_from
            if source is None or source != "auto":
                statement = sql if source is None else transpile_query(sql, source, self.dialect)
                result = self._checked_run(statement, check, timeout_s, max_rows, count_limit)
                result.transpiled_from = source
                return result
            try:
                return self._checked_run(sql, check, timeout_s, max_rows, count_limit)
            except QueryError as first:
                if first.kind not in ("syntax", "schema"):
                    raise
                tried = {sql.strip().rstrip(";").strip()}  # each distinct rewrite runs once
                for candidate in TRANSPILE_CANDIDATES:
                    if candidate == self.dialect:
                        continue
                    try:
                        rewritten = transpile_query(sql, candidate, self.dialect)
                    except QueryError:
                        continue
                    if rewritten in tried:
                        continue
                    tried.add(rewritten)
                    try:
                        result = self._checked_run(rewritten, check, timeout_s, max_rows, count_limit)
                    except QueryError as again:
                        if again.kind in ("timeout", "unsafe"):
                            raise
                        continue
                    result.transpiled_from = candidate
                    return result
                raise first

    def _checked_run(
        self, sql: str, check: bool, timeout_s: float | None, max_rows: int | None, count_limit: int
    ) -> QueryResult:
        statement = sql
        if check:
            from skyrl_gym.envs.sql.safety import check_read_only

            statement = check_read_only(sql, self.dialect)
        deadline = math.inf if timeout_s is None else time.monotonic() + timeout_s
        result = self._run(statement, deadline, timeout_s, max_rows, count_limit)
        result.sql = statement
        return result

    def _run(
        self, sql: str, deadline: float, timeout_s: float | None, max_rows: int | None, count_limit: int
    ) -> QueryResult:
        raise NotImplementedError

    # -- schema --------------------------------------------------------------------------------------------
    def tables(self) -> list[str]:
        """The names of the tables and views, in creation order."""
        return list(self._described()[0])

    def schema_ddl(self) -> str:
        """``CREATE TABLE`` statements for every table (column types, primary and foreign keys), and views."""
        return self._described()[1]

    def sample_rows(self, table: str, n: int = 3) -> QueryResult:
        """The first ``n`` rows of ``table`` (a name from :meth:`tables`)."""
        if table not in self._described()[0]:
            raise QueryError(f"no table named {table!r}; tables: {', '.join(self.tables())}", kind="schema")
        sql = f"SELECT * FROM {quote_identifier(table)} LIMIT {int(n)}"
        return self.execute(sql, check=False, max_rows=int(n))

    def _described(self) -> tuple[list[str], str]:
        if self._schema is None:
            with self._lock:
                cached = _SCHEMA_CACHE.get(self.stamp)
                if cached is None:
                    cached = self._describe()
                    _SCHEMA_CACHE[self.stamp] = cached
                self._schema = cached
        return self._schema

    def _describe(self) -> tuple[list[str], str]:
        raise NotImplementedError

    # -- lifetime --------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._close()

    def _close(self) -> None:
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"


_SCHEMA_CACHE: dict[tuple[str, int, int], tuple[list[str], str]] = {}


def _render_table(
    name: str,
    columns: list[tuple[str, str, bool]],
    primary_key: list[str],
    foreign_keys: list[tuple[list[str], str, list[str]]],
) -> str:
    """One ``CREATE TABLE``; ``columns`` are (name, type, not_null)."""
    lines = []
    for column, type_name, not_null in columns:
        line = f"    {quote_identifier(column)} {type_name}".rstrip()
        if not_null and column not in primary_key:
            line += " NOT NULL"
        lines.append(line)
    if primary_key:
        lines.append(f"    PRIMARY KEY ({', '.join(quote_identifier(c) for c in primary_key)})")
    for source, target, target_columns in foreign_keys:
        reference = quote_identifier(target)
        if target_columns:
            reference += f" ({', '.join(quote_identifier(c) for c in target_columns)})"
        lines.append(
            f"    FOREIGN KEY ({', '.join(quote_identifier(c) for c in source)}) REFERENCES {reference}"
        )
    return f"CREATE TABLE {quote_identifier(name)} (\n" + ",\n".join(lines) + "\n);"


# -- DuckDB ------------------------------------------------------------------------------------------------
_DEFAULT_DUCKDB_CONFIG = {"memory_limit": "4GB"}
"""DuckDB settings a caller may override with ``duckdb_config`` (a query past the memory limit fails or spills)."""
_SAFE_DUCKDB_CONFIG = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "python_enable_replacements": False,  # no reading Python variables by name (``FROM my_dataframe``)
    "lock_configuration": True,
}


DUCKDB_LINGER_S = 2.0
"""Seconds a DuckDB file stays open after its last user closes it, so that the next episode on the same file
(a ``reset``) does not pay DuckDB's start-up again (about 15 ms). 0 closes at once. The instance is reopened
if the file changed meanwhile; :func:`close_idle_databases` closes idle ones at once."""


class _DuckDBInstance:
    def __init__(self, connection: Any, temp_dir: str, config: dict[str, Any], stamp: tuple[str, int, int]):
        self.connection = connection
        self.temp_dir = temp_dir
        self.config = config
        self.stamp = stamp
        self.users = 0
        self.timer: threading.Timer | None = None


class _DuckDBInstances:
    """One DuckDB connection per open file, shared (through ``cursor()``) by every Database on it.

    DuckDB refuses two connections to one file with different settings, so the private spill folder must be
    the same for all of them; it is removed when the instance closes, :data:`DUCKDB_LINGER_S` after its last
    user closed it.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()  # re-entrant: a Database closed by the garbage collector releases here
        self._open: dict[str, _DuckDBInstance] = {}

    def acquire(
        self, path: Path, extra_config: Mapping[str, Any] | None, stamp: tuple[str, int, int]
    ) -> tuple[Any, _DuckDBInstance]:
        import duckdb

        key = str(path)
        config = {**_DEFAULT_DUCKDB_CONFIG, **dict(extra_config or {}), **_SAFE_DUCKDB_CONFIG}
        with self._lock:
            instance = self._open.get(key)
            if (
                instance is not None
                and instance.users == 0
                and (instance.stamp != stamp or instance.config != config)
            ):
                del self._open[key]  # the file changed, or other settings are asked for: start afresh
                _close_instance(instance)
                instance = None
            if instance is not None and instance.config != config:
                raise ValueError(
                    f"{key!r} is already open in this process with other DuckDB settings "
                    f"({_settings_diff(instance.config, config)}); close those databases first"
                )
            if instance is None:
                temp_dir = tempfile.mkdtemp(prefix=f"skyrl-sql-{os.getpid()}-")
                # DuckDB creates the spill folder only when it spills, and deletes its files itself.
                settings = {**config, "temp_directory": os.path.join(temp_dir, "spill")}
                try:
                    connection = duckdb.connect(key, read_only=True, config=settings)
                except duckdb.Error as exc:
                    shutil.rmtree(temp_dir, ignore_errors=True)
                    message = str(exc)
                    if "different configuration" in message:
                        message += (
                            " (the file is already open in this process through another connection, "
                            "for example a writable one: close it first)"
                        )
                    raise ValueError(f"could not open DuckDB database {key!r}: {message}") from None
                instance = _DuckDBInstance(connection, temp_dir, config, stamp)
                self._open[key] = instance
            if instance.timer is not None:
                instance.timer.cancel()
                instance.timer = None
            instance.users += 1
            try:
                return instance.connection.cursor(), instance
            except Exception:
                self._release_locked(key, instance)
                raise

    def release(self, path: Path, instance: _DuckDBInstance) -> None:
        with self._lock:
            self._release_locked(str(path), instance)

    def _release_locked(self, key: str, instance: _DuckDBInstance) -> None:
        instance.users -= 1
        if instance.users > 0 or self._open.get(key) is not instance:
            return
        if DUCKDB_LINGER_S <= 0:
            del self._open[key]
            _close_instance(instance)
            return
        instance.timer = threading.Timer(DUCKDB_LINGER_S, self._expire, (key, instance))
        instance.timer.daemon = True
        instance.timer.start()

    def _expire(self, key: str, instance: _DuckDBInstance) -> None:
        with self._lock:
            if instance.users > 0 or self._open.get(key) is not instance:
                return
            del self._open[key]
        _close_instance(instance)

    def close_idle(self) -> int:
        with self._lock:
            idle = [(key, i) for key, i in self._open.items() if i.users <= 0]
            for key, _ in idle:
                del self._open[key]
        for _, instance in idle:
            _close_instance(instance)
        return len(idle)

    def close_all(self) -> None:
        with self._lock:
            instances, self._open = list(self._open.values()), {}
        for instance in instances:
            _close_instance(instance)


def _settings_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return ", ".join(f"{k}: {old.get(k)!r} != {new.get(k)!r}" for k in keys)


def _close_instance(instance: _DuckDBInstance) -> None:
    if instance.timer is not None:
        instance.timer.cancel()
        instance.timer = None
    try:
        instance.connection.close()
    finally:
        shutil.rmtree(instance.temp_dir, ignore_errors=True)


_DUCKDB_INSTANCES = _DuckDBInstances()
atexit.register(_DUCKDB_INSTANCES.close_all)


def close_idle_databases() -> int:
    """Close the DuckDB files no :class:`Database` uses any more (see :data:`DUCKDB_LINGER_S`) at once.

    Call it before writing to a DuckDB file this process has read, or to check that no temporary folder is
    left. Returns how many were closed.
    """
    return _DUCKDB_INSTANCES.close_idle()


def _duckdb_error_kind(exc: BaseException) -> str:
    name = type(exc).__name__
    if name in ("ParserException", "SyntaxException"):
        return "syntax"
    if name in ("CatalogException", "BinderException"):
        return "schema"
    if name == "PermissionException":
        return "unsafe"
    return "execution"


class DuckDBDatabase(Database):
    """A DuckDB file opened read-only (see the module docstring for the settings)."""

    dialect = "duckdb"

    def __init__(self, path: Path, *, duckdb_config: Mapping[str, Any] | None = None):
        super().__init__(path)
        self._cursor, self._instance = _DUCKDB_INSTANCES.acquire(path, duckdb_config, self.stamp)

    def _run(
        self, sql: str, deadline: float, timeout_s: float | None, max_rows: int | None, count_limit: int
    ) -> QueryResult:
        import duckdb

        cursor = self._cursor
        token = None if deadline == math.inf else _WATCHDOG.arm(deadline, cursor.interrupt)
        try:
            try:
                cursor.execute(sql)
                description = cursor.description
                columns = [d[0] for d in description] if description else []
                if max_rows is None:
                    return QueryResult(columns, cursor.fetchall())
                rows = cursor.fetchmany(max_rows + 1) if description else []
            except duckdb.InterruptException:
                if time.monotonic() >= deadline:
                    raise QueryTimeout(_timeout_message(timeout_s)) from None
                raise QueryError("the query was interrupted") from None
            except duckdb.Error as exc:
                raise QueryError(_clean_message(str(exc)), kind=_duckdb_error_kind(exc)) from None
            except (ValueError, TypeError, OverflowError, MemoryError) as exc:  # converting values
                raise QueryError(f"{type(exc).__name__}: {_clean_message(str(exc))}") from None
            if len(rows) <= max_rows:
                return QueryResult(columns, rows)
            total: int | None = len(rows)
            try:  # count some more rows, to say how many were cut; give up quietly on any trouble
                while total is not None:
                    chunk = cursor.fetchmany(min(2048, count_limit + max_rows + 1 - total))
                    if not chunk:
                        break
                    total += len(chunk)
                    if total > max_rows + count_limit:
                        total = None
            except Exception:
                total = None
            return QueryResult(columns, rows[:max_rows], truncated=True, total_rows=total)
        finally:
            if token is not None:
                _WATCHDOG.disarm(token)

    def _internal(self, sql: str, parameters: list[Any] | None = None) -> list[tuple]:
        return self._cursor.execute(sql, parameters or []).fetchall()

    def _describe(self) -> tuple[list[str], str]:
        tables = self._internal(
            "SELECT schema_name, table_name FROM duckdb_tables() "
            "WHERE NOT internal AND NOT temporary AND database_name = current_database() ORDER BY table_oid"
        )
        views = self._internal(
            "SELECT schema_name, view_name, sql FROM duckdb_views() "
            "WHERE NOT internal AND NOT temporary AND database_name = current_database() ORDER BY view_oid"
        )
        columns: dict[tuple[str, str], list[tuple[str, str, bool]]] = {}
        for schema, table, column, type_name, nullable in self._internal(
            "SELECT schema_name, table_name, column_name, data_type, is_nullable FROM duckdb_columns() "
            "WHERE NOT internal AND database_name = current_database() ORDER BY table_oid, column_index"
        ):
            columns.setdefault((schema, table), []).append((column, type_name, not nullable))
        primary: dict[tuple[str, str], list[str]] = {}
        foreign: dict[tuple[str, str], list[tuple[list[str], str, list[str]]]] = {}
        for schema, table, kind, names, target, target_names in self._internal(
            "SELECT schema_name, table_name, constraint_type, constraint_column_names, referenced_table, "
            "referenced_column_names FROM duckdb_constraints() WHERE database_name = current_database() "
            "AND constraint_type IN ('PRIMARY KEY', 'FOREIGN KEY') ORDER BY table_oid, constraint_index"
        ):
            if kind == "PRIMARY KEY":
                primary[(schema, table)] = list(names)
            else:
                foreign.setdefault((schema, table), []).append(
                    (list(names), target, list(target_names or []))
                )

        def name_of(schema: str, table: str) -> str:
            return table if schema == "main" else f"{schema}.{table}"

        names, ddl = [], []
        for schema, table in tables:
            names.append(name_of(schema, table))
            key = (schema, table)
            ddl.append(
                _render_table(
                    name_of(schema, table), columns.get(key, []), primary.get(key, []), foreign.get(key, [])
                )
            )
        for schema, view, sql in views:
            names.append(name_of(schema, view))
            ddl.append(sql.strip() if sql else f"CREATE VIEW {quote_identifier(view)};")
        return names, "\n\n".join(ddl)

    def _close(self) -> None:
        try:
            self._cursor.close()
        finally:
            _DUCKDB_INSTANCES.release(self.path, self._instance)


# -- SQLite ------------------------------------------------------------------------------------------------
_SQLITE_DENIED_FUNCTIONS = frozenset(
    {
        "load_extension",
        "readfile",
        "writefile",
        "edit",
        "fts3_tokenizer",
        "sqlite_dbpage",
        "sqlite_dbdata",
        "sqlite_dbptr",
        "zipfile",
        "sqlar_compress",
        "sqlar_uncompress",
        "fsdir",
        "lsmode",
        "shell_add_schema",
        "shell_module_schema",
    }
)
_SQLITE_INTERNAL_PRAGMAS = frozenset({"table_info", "table_xinfo", "foreign_key_list"})
_SQLITE_ALLOWED_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, getattr(sqlite3, "SQLITE_RECURSIVE", 33)}
)
_SQLITE_MAX_VALUE_BYTES = 100_000_000
"""The longest string or blob a SQLite query may make or read."""
_PROGRESS_EVERY = 100_000
"""SQLite virtual-machine instructions between two checks of the deadline."""


class SQLiteDatabase(Database):
    """A SQLite file opened read-only (see the module docstring for the settings)."""

    dialect = "sqlite"

    def __init__(self, path: Path, *, temp_store: Literal["memory", "file"] = "memory"):
        if temp_store not in ("memory", "file"):
            raise ValueError(f"sqlite_temp_store must be 'memory' or 'file', got {temp_store!r}")
        super().__init__(path)
        uri = path.as_uri() + "?mode=ro"
        with open(path, "rb") as handle:
            header = handle.read(20)
        if len(header) >= 20 and header[18] == 2:
            # A WAL-mode file would get -wal/-shm files next to it even when read; read it as immutable.
            uri += "&immutable=1"
        self._deadline = math.inf
        self._allow_pragmas = False
        connection = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        try:
            connection.execute("PRAGMA query_only = ON")
            connection.execute(f"PRAGMA temp_store = {temp_store.upper()}")
            connection.execute("PRAGMA trusted_schema = OFF")
            if hasattr(connection, "setlimit"):  # Python 3.11+: no 1 GB randomblob() or zeroblob()
                connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _SQLITE_MAX_VALUE_BYTES)
            if hasattr(connection, "enable_load_extension"):
                connection.enable_load_extension(False)
            connection.set_authorizer(self._authorize)
            connection.set_progress_handler(self._past_deadline, _PROGRESS_EVERY)
        except Exception:
            connection.close()
            raise
        self._connection = connection

    def _authorize(self, action: int, arg1: Any, arg2: Any, database: Any, source: Any) -> int:
        if action in _SQLITE_ALLOWED_ACTIONS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            return sqlite3.SQLITE_DENY if str(arg2).lower() in _SQLITE_DENIED_FUNCTIONS else sqlite3.SQLITE_OK
        if (
            action == sqlite3.SQLITE_PRAGMA
            and self._allow_pragmas
            and str(arg1).lower() in _SQLITE_INTERNAL_PRAGMAS
        ):
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY

    def _past_deadline(self) -> int:
        return 1 if time.monotonic() > self._deadline else 0

    def _run(
        self, sql: str, deadline: float, timeout_s: float | None, max_rows: int | None, count_limit: int
    ) -> QueryResult:
        connection = self._connection
        self._deadline = deadline
        try:
            try:
                return self._fetch(sql, max_rows, count_limit)
            except sqlite3.OperationalError as exc:
                if "could not decode" not in str(exc).lower():
                    raise
                # Text that is not UTF-8 (old Spider/BIRD files): read it with replacement characters.
                connection.text_factory = _lenient_text
                try:
                    return self._fetch(sql, max_rows, count_limit)
                finally:
                    connection.text_factory = str
        except sqlite3.Error as exc:
            message = str(exc)
            if message == "interrupted" and time.monotonic() > deadline:
                raise QueryTimeout(_timeout_message(timeout_s)) from None
            if "not authorized" in message:
                raise UnsafeQuery(
                    "the database refused the query (not authorized): only reading queries may run"
                ) from None
            raise QueryError(_clean_message(message), kind=_sqlite_error_kind(exc)) from None
        except (ValueError, OverflowError, MemoryError) as exc:
            raise QueryError(f"{type(exc).__name__}: {_clean_message(str(exc))}") from None
        finally:
            self._deadline = math.inf

    def _fetch(self, sql: str, max_rows: int | None, count_limit: int) -> QueryResult:
        cursor = self._connection.execute(sql)
        try:
            description = cursor.description
            columns = [d[0] for d in description] if description else []
            if max_rows is None:
                return QueryResult(columns, cursor.fetchall())
            rows = cursor.fetchmany(max_rows + 1)
            if len(rows) <= max_rows:
                return QueryResult(columns, rows)
            total: int | None = len(rows)
            try:
                while total is not None:
                    chunk = cursor.fetchmany(min(2048, count_limit + max_rows + 1 - total))
                    if not chunk:
                        break
                    total += len(chunk)
                    if total > max_rows + count_limit:
                        total = None
            except sqlite3.Error:
                total = None
            return QueryResult(columns, rows[:max_rows], truncated=True, total_rows=total)
        finally:
            cursor.close()

    def _internal(self, sql: str) -> list[tuple]:
        self._allow_pragmas = True
        try:
            return self._connection.execute(sql).fetchall()
        finally:
            self._allow_pragmas = False

    def _describe(self) -> tuple[list[str], str]:
        entries = self._internal(
            "SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
        )
        names, ddl = [], []
        for kind, name, sql in entries:
            names.append(name)
            if kind == "view":
                ddl.append((sql or f"CREATE VIEW {quote_identifier(name)}").strip().rstrip(";") + ";")
                continue
            info = self._internal(f"PRAGMA table_info({quote_identifier(name)})")
            columns = [
                (column, type_name or "", bool(not_null)) for _, column, type_name, not_null, _, _ in info
            ]
            primary = [row[1] for row in sorted((r for r in info if r[5]), key=lambda r: r[5])]
            groups: dict[int, list[tuple]] = {}
            for row in self._internal(f"PRAGMA foreign_key_list({quote_identifier(name)})"):
                groups.setdefault(row[0], []).append(row)
            foreign = []
            for key in sorted(groups):
                rows = sorted(groups[key], key=lambda r: r[1])
                targets = [r[4] for r in rows]
                foreign.append(([r[3] for r in rows], rows[0][2], [] if None in targets else targets))
            ddl.append(_render_table(name, columns, primary, foreign))
        return names, "\n\n".join(ddl)

    def _close(self) -> None:
        self._connection.close()


def _lenient_text(value: bytes) -> str:
    return value.decode("utf-8", errors="replace")


def _sqlite_error_kind(exc: BaseException) -> str:
    message = str(exc).lower()
    if "syntax error" in message or "incomplete input" in message or "unrecognized token" in message:
        return "syntax"
    if "no such" in message or "ambiguous column" in message:
        return "schema"
    return "execution"


def _timeout_message(timeout_s: float | None) -> str:
    return (
        f"the query was stopped after {timeout_s:g} s (time limit); "
        "write a cheaper query (filter early, avoid cross joins, add LIMIT)"
    )


def _clean_message(message: str, limit: int = 1000) -> str:
    message = message.strip()
    return message if len(message) <= limit else message[:limit] + " ..."
