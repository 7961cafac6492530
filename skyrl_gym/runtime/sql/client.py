"""The caller's side of a database: :class:`Database` (queries sent to query workers) and one subclass per
engine, :class:`DuckDBDatabase` and :class:`SQLiteDatabase`.

Apart from :mod:`.base` (what the worker imports too) so that the worker, the guard and the engines never
import this module back.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from skyrl_gym.errors import Error
from skyrl_gym.runtime.sql.base import (
    DEFAULT_COUNT_LIMIT,
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT_S,
    TRANSPILE_CANDIDATES,
    QueryError,
    QueryResult,
    QueryTimeout,
    UnsafeQuery,
    quote_identifier,
    scrub_paths,
    timeout_message,
    transpile_query,
)
from skyrl_gym.runtime.sql.duckdb_engine import DEFAULT_CONFIG, SAFE_CONFIG
from skyrl_gym.runtime.sql.pool import POOLS

__all__ = ["Database", "DuckDBDatabase", "SQLiteDatabase"]

_SCHEMA_CACHE: dict[tuple[str, int, int], dict[str, Any]] = {}
_SCHEMA_LOCK = threading.Lock()
_DESCRIBE_TIMEOUT_S = 60.0


class Database:
    """A read-only database file. Make one with :func:`~skyrl_gym.runtime.sql.database.open_database`.

    Queries run in query workers (child processes) shared by every :class:`Database` open on the same file
    with the same settings; one is started when the database opens, so that opening errors show at once.
    A :class:`Database` is used by one thread at a time (calls are serialised by a lock); open one per
    environment.

    Attributes:
        path: the absolute path of the file.
        dialect: ``"duckdb"`` or ``"sqlite"`` (also the sqlglot dialect name).
        stamp: (path, modification time, size): a key for caches of results computed from this file.
    """

    dialect: str = ""

    def __init__(self, path: Path, options: Mapping[str, Any]):
        self.path = path
        stat = path.stat()
        self.stamp: tuple[str, int, int] = (str(path), stat.st_mtime_ns, stat.st_size)
        self._lock = threading.RLock()
        self._closed = True  # until the pool is joined: __del__ of a half-made database does nothing
        self._schema: dict[str, Any] | None = None
        self._relations: Any = None
        self._pool = POOLS.join(self.dialect, path, dict(options), self.stamp)
        self._closed = False

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
        max_value_chars: int | None = None,
        max_bytes: int | None = DEFAULT_MAX_BYTES,
    ) -> QueryResult:
        """Run one query and return its result.

        Args:
            sql: the query.
            timeout_s: seconds this call may take (the guard, the query and fetching its rows); past it the
                query is interrupted (:class:`QueryTimeout`), at worst :data:`KILL_GRACE_S` later by killing
                its worker. ``None``: no limit (trusted SQL only).
            max_rows: fetch at most this many rows (the result then says ``truncated``); ``None``: all.
            check: run the read-only guard first (:class:`UnsafeQuery` when it refuses). Turn it off only for
                trusted SQL; the connection stays read-only either way.
            transpile_from: ``None`` runs the query as written; a sqlglot dialect name (``"sqlite"``,
                ``"mysql"``...) rewrites it from that dialect first; ``"auto"`` runs it as written and, on a
                syntax or schema error, retries it rewritten from each of :data:`TRANSPILE_CANDIDATES`.
            count_limit: when rows are cut, count at most this many more to report the total.
            max_value_chars: cut longer strings, blobs and nested values to this many characters (in the
                worker, so that long values never reach this process); ``None``: keep them whole.
            max_bytes: the most the result may hold (strings and blobs by length, other values 16 bytes).
                With ``max_rows`` the rows past it are cut (``truncated``); without, the query fails with
                kind ``resources``. ``None``: no limit (trusted SQL only).

        Raises:
            QueryError: the query failed; its ``kind`` and message say why.
        """
        if not isinstance(sql, str):
            raise QueryError(f"the query must be a string, got {type(sql).__name__}")
        if max_rows is not None and max_rows < 0:
            raise ValueError(f"max_rows must be >= 0 or None, got {max_rows}")
        deadline = math.inf if timeout_s is None else time.monotonic() + timeout_s
        limits = {
            "max_rows": max_rows,
            "count_limit": count_limit,
            "max_value_chars": max_value_chars,
            "max_bytes": max_bytes,
        }
        if check:
            from skyrl_gym.runtime.sql.guard import MAX_QUERY_CHARS  # sqlglot: imported when first needed

            if len(sql) > MAX_QUERY_CHARS:  # before any rewriting, which would parse it
                raise UnsafeQuery(f"the query is {len(sql)} characters long; the limit is {MAX_QUERY_CHARS}")
        with self._lock:
            if self._closed:
                raise Error(f"{self} is closed")
            source = None if transpile_from in (None, "", self.dialect) else transpile_from
            if source is None or source != "auto":
                statement = sql if source is None else transpile_query(sql, source, self.dialect)
                result = self._checked_run(statement, check, deadline, timeout_s, limits)
                result.transpiled_from = source
                return result
            try:
                return self._checked_run(sql, check, deadline, timeout_s, limits)
            except QueryError as first:
                if first.kind not in ("syntax", "schema"):
                    raise
                tried = {sql.strip().rstrip(";").strip()}  # each distinct rewrite runs once
                for candidate in TRANSPILE_CANDIDATES:
                    if candidate == self.dialect:
                        continue
                    if time.monotonic() >= deadline:
                        break  # no time left to try another dialect: the first error stands
                    try:
                        rewritten = transpile_query(sql, candidate, self.dialect)
                    except QueryError:
                        continue
                    if rewritten in tried:
                        continue
                    tried.add(rewritten)
                    try:
                        result = self._checked_run(rewritten, check, deadline, timeout_s, limits)
                    except QueryError as again:
                        if again.kind in ("timeout", "unsafe", "resources"):
                            raise
                        continue
                    result.transpiled_from = candidate
                    return result
                raise first

    def _checked_run(
        self, sql: str, check: bool, deadline: float, timeout_s: float | None, limits: dict[str, Any]
    ) -> QueryResult:
        statement = sql
        if check:
            from skyrl_gym.runtime.sql.guard import check_read_only

            statement = check_read_only(sql, self.dialect, self.relations())
        if time.monotonic() >= deadline:
            raise QueryTimeout(timeout_message(timeout_s))
        reply = self._call(
            {"op": "query", "sql": statement, "internal": not check, **limits}, deadline, timeout_s
        )
        return QueryResult(
            list(reply["columns"]),
            reply["rows"],
            truncated=reply["truncated"],
            total_rows=reply["total_rows"],
            sql=statement,
            values_cut=reply["values_cut"],
        )

    def _call(self, message: dict[str, Any], deadline: float, timeout_s: float | None) -> dict[str, Any]:
        """A worker's answer to ``message``; a failure it reports is raised as a :class:`QueryError`."""
        reply = self._pool.request(message, deadline, timeout_s)
        kind = reply.get("error")
        if kind is None:
            return reply
        if kind == "timeout":
            raise QueryTimeout(timeout_message(timeout_s))
        text = scrub_paths(reply.get("message") or "the query failed", [self.path, self.path.parent])
        if kind == "unsafe":
            raise UnsafeQuery(text)
        raise QueryError(text, kind=kind)

    # -- schema --------------------------------------------------------------------------------------------
    def tables(self) -> list[str]:
        """The names of the tables and views, in creation order."""
        return list(self._described()["names"])

    def schema_ddl(self) -> str:
        """``CREATE TABLE`` statements for every table (column types, primary and foreign keys), and views."""
        return self._described()["ddl"]

    def relations(self) -> Any:
        """What the guard lets a query read: this database's tables and views (a ``safety.Relations``)."""
        if self._relations is None:
            from skyrl_gym.runtime.sql.guard import Relations

            described = self._described()
            self._relations = Relations.of(self.dialect, described["relations"], described.get("catalog"))
        return self._relations

    def sample_rows(self, table: str, n: int = 3) -> QueryResult:
        """The first ``n`` rows of ``table`` (a name from :meth:`tables`)."""
        if table not in self._described()["names"]:
            raise QueryError(f"no table named {table!r}; tables: {', '.join(self.tables())}", kind="schema")
        sql = f"SELECT * FROM {quote_identifier(table)} LIMIT {int(n)}"
        return self.execute(sql, check=False, max_rows=int(n))

    def _described(self) -> dict[str, Any]:
        if self._schema is None:
            with self._lock:
                with _SCHEMA_LOCK:
                    cached = _SCHEMA_CACHE.get(self.stamp)
                if cached is None:
                    if self._closed:
                        raise Error(f"{self} is closed")
                    try:
                        cached = self._call(
                            {"op": "describe"}, time.monotonic() + _DESCRIBE_TIMEOUT_S, _DESCRIBE_TIMEOUT_S
                        )
                    except QueryError as exc:
                        raise Error(f"could not read the schema of {self.path}: {exc}") from None
                    with _SCHEMA_LOCK:
                        _SCHEMA_CACHE[self.stamp] = cached
                self._schema = cached
        return self._schema

    # -- lifetime --------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the database (idempotent). Its workers stay a moment for the next database on the file."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._pool.leave()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
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


class DuckDBDatabase(Database):
    """A DuckDB file opened read-only (see the module docstring for the settings).

    ``duckdb_config``: DuckDB settings for its workers (for example ``{"threads": 2, "memory_limit":
    "2GB"}``) over :data:`DEFAULT_CONFIG`; the :data:`SAFE_CONFIG` settings cannot be overridden.
    """

    dialect = "duckdb"

    def __init__(self, path: Path, *, duckdb_config: Mapping[str, Any] | None = None):
        extra = dict(duckdb_config or {})
        for name in ("temp_directory", "access_mode"):
            if name in extra:
                raise ValueError(f"duckdb_config may not set {name!r}: the query worker sets it")
        super().__init__(path, {**DEFAULT_CONFIG, **extra, **SAFE_CONFIG})


class SQLiteDatabase(Database):
    """A SQLite file opened read-only (see the module docstring for the settings).

    ``temp_store``: where SQLite keeps the temporary tables of a sort or a ``GROUP BY``: ``"memory"`` (no
    files at all, but such queries cost up to 1.5-2x the CPU) or ``"file"`` (files in the worker's private
    folder, which SQLite deletes as soon as it creates them).
    """

    dialect = "sqlite"

    def __init__(self, path: Path, *, temp_store: Literal["memory", "file"] = "memory"):
        if temp_store not in ("memory", "file"):
            raise ValueError(f"sqlite_temp_store must be 'memory' or 'file', got {temp_store!r}")
        super().__init__(path, {"temp_store": temp_store})
