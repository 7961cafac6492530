"""What every database engine shares: results, errors, the :class:`Database` API and the query worker's contract.

A :class:`Database` never runs SQL in the calling process. Each query goes to a *query worker*, a child
process that holds the read-only connection (:mod:`.db_worker`), so that whatever a query does (a single
SQLite ``LIKE`` that runs for an hour, a DuckDB function that allocates outside DuckDB's memory limit, a
result of gigabytes) costs the caller at most the query's timeout plus :data:`KILL_GRACE_S` and a result of
at most ``max_bytes``: the worker stops the query at its deadline itself, and is killed if it has not
answered :data:`KILL_GRACE_S` later; its memory is capped by the kernel (``RLIMIT_DATA``).

The engines (:mod:`.db_sqlite`, :mod:`.db_duckdb`) each define a :class:`Database` subclass (the caller's
side) and an :class:`Engine` subclass (what runs inside the worker). This module imports only the standard
library, because the worker imports it without the rest of the package.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from skyrl_gym.errors import Error

__all__ = [
    "DEFAULT_COUNT_LIMIT",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_TIMEOUT_S",
    "KILL_GRACE_S",
    "Database",
    "Engine",
    "QueryError",
    "QueryResult",
    "QueryTimeout",
    "UnparsableQuery",
    "UnsafeQuery",
    "quote_identifier",
    "transpile_query",
]

DEFAULT_TIMEOUT_S = 5.0
"""Seconds a query may run before it is interrupted."""
DEFAULT_COUNT_LIMIT = 10_000
"""When a result is cut at ``max_rows``, at most this many more rows are counted, to say how many were cut."""
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
"""The most a result may hold (strings and blobs by their length, other values 16 bytes each) by default."""
KILL_GRACE_S = 0.5
"""Seconds past a query's deadline after which a worker that has not answered is killed."""
TRANSPILE_CANDIDATES = ("sqlite", "mysql", "postgres", "duckdb")
"""Dialects tried, in order, by ``transpile_from="auto"`` (the database's own dialect is skipped)."""


# -- results and errors ------------------------------------------------------------------------------------
@dataclasses.dataclass
class QueryResult:
    """The result of one query.

    Attributes:
        columns: the column names, in order.
        rows: the rows fetched (at most ``max_rows``), each a tuple of Python values.
        truncated: more rows existed than were fetched (``max_rows``, or ``max_bytes`` for a capped query).
        total_rows: how many rows the query returned in all; ``None`` when it is unknown (more than
            ``len(rows) + count_limit``, or counting ran out of time or size).
        sql: the statement that ran (after transpilation).
        transpiled_from: the dialect the query was rewritten from, or ``None`` when it ran as written.
        values_cut: how many values were cut to ``max_value_chars`` (their beginning is kept).
    """

    columns: list[str]
    rows: list[tuple]
    truncated: bool = False
    total_rows: int | None = None
    sql: str | None = None
    transpiled_from: str | None = None
    values_cut: int = 0

    def __post_init__(self) -> None:
        if self.total_rows is None and not self.truncated:
            self.total_rows = len(self.rows)


class QueryError(Error):
    """A query failed; the message is written for the model. ``kind`` says how.

    Kinds: ``syntax``, ``schema`` (unknown table or column), ``execution``, ``timeout``, ``unsafe`` (the
    guard or the connection refused it) and ``resources`` (it needed more memory than the worker may use,
    or its result was larger than ``max_bytes``).
    """

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


def timeout_message(timeout_s: float | None) -> str:
    """The model's message for a query stopped at its time limit."""
    return (
        f"the query was stopped after {timeout_s or 0:g} s (time limit); "
        "write a cheaper query (filter early, avoid cross joins, add LIMIT)"
    )


def clean_message(message: str, limit: int = 1000) -> str:
    """``message`` stripped and cut at ``limit`` characters."""
    message = message.strip()
    return message if len(message) <= limit else message[:limit] + " ..."


_TEMP_ROOT = os.path.realpath(tempfile.gettempdir())
_PRIVATE_DIR = re.compile(r"(?:/[^\s'\"/]+)*/skyrl-sql-[0-9]+-[0-9]+-[^\s'\"/]+(?:/[^\s'\"]*)?")


def scrub_paths(message: str, paths: Iterable[str | os.PathLike[str]]) -> str:
    """``message`` without the host paths it may name (``paths``, the temporary folders, the home folder).

    Each of ``paths`` is replaced by its last component, a worker's private folder by ``<temp>``, the
    temporary and home folders by ``<tmp>`` and ``~``: an error a model reads says what went wrong without
    telling it where anything lives on the host.
    """
    message = _PRIVATE_DIR.sub("<temp>", message)
    names = sorted({os.fspath(p) for p in paths if os.fspath(p)}, key=len, reverse=True)
    for path in names:
        if len(path) > 1 and path in message:
            message = message.replace(path, os.path.basename(path.rstrip("/")) or "<path>")
    for root, short in (
        (_TEMP_ROOT, "<tmp>"),
        (tempfile.gettempdir(), "<tmp>"),
        (os.path.expanduser("~"), "~"),
    ):
        if len(root) > 1:
            message = message.replace(root, short)
    return message


# -- identifiers and DDL -----------------------------------------------------------------------------------
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


def render_table(
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


# -- the engine, inside the worker -------------------------------------------------------------------------
class Engine:
    """A read-only connection inside a query worker (one per worker; see :mod:`.db_worker`).

    Subclasses open the file in ``__init__(path, options, private_dir)``, where ``private_dir`` is the
    worker's own temporary folder, removed when the worker ends.
    """

    first_batch = 1
    """Rows converted by the first fetch (then more at a time): the smaller, the less a result of huge
    values costs before its size limit stops it; the larger, the fewer calls for ordinary results."""

    def execute(self, sql: str, *, internal: bool, lenient: bool) -> Any:
        """Start ``sql`` and return a cursor (``description``, ``fetchmany``).

        ``internal``: trusted SQL (the schema queries; SQL run without the guard). ``lenient``: decode text
        that is not valid UTF-8 with replacement characters (see :meth:`retry_lenient`).
        """
        raise NotImplementedError

    def memory_bytes(self) -> int:
        """The memory the engine itself may use; the worker's limit is this plus a margin."""
        raise NotImplementedError

    def set_deadline(self, deadline: float) -> None:
        """From now on, stop any statement that runs past ``deadline`` (``time.monotonic()``; ``inf``: none)."""
        raise NotImplementedError

    def interrupt(self) -> None:
        """Stop the running statement, from another thread."""

    def error(self, exc: BaseException, timed_out: bool) -> tuple[str, str] | None:
        """``(kind, message)`` for an exception the engine raised, or ``None`` when it is not the engine's."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """The schema: ``names`` (tables and views), ``ddl`` and what the guard needs (see ``Relations``)."""
        raise NotImplementedError

    def changes_state(self, sql: str) -> bool:
        """Whether trusted SQL (run without the guard) may have changed the connection's state."""
        return False

    def retry_lenient(self, exc: BaseException) -> bool:
        """Whether to run the query again with lenient text decoding (SQLite files that are not UTF-8)."""
        return False

    def close(self) -> None:
        """Close the connection."""


# -- the database, in the caller ---------------------------------------------------------------------------
_SCHEMA_CACHE: dict[tuple[str, int, int], dict[str, Any]] = {}
_SCHEMA_LOCK = threading.Lock()
_DESCRIBE_TIMEOUT_S = 60.0


class Database:
    """A read-only database file. Make one with :func:`~skyrl_gym.envs.sql.database.open_database`.

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
        from skyrl_gym.envs.sql.db_worker import POOLS

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
            from skyrl_gym.envs.sql.safety import MAX_QUERY_CHARS

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
            from skyrl_gym.envs.sql.safety import check_read_only

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
            from skyrl_gym.envs.sql.safety import Relations

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
