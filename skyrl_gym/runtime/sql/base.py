"""What every database engine shares: results, errors and the query worker's :class:`Engine` contract.

A :class:`~.client.Database` never runs SQL in the calling process. Each query goes to a *query worker*, a child
process that holds the read-only connection (:mod:`.worker`), so that whatever a query does (a single
SQLite ``LIKE`` that runs for an hour, a DuckDB function that allocates outside DuckDB's memory limit, a
result of gigabytes) costs the caller at most the query's timeout plus :data:`KILL_GRACE_S` and a result of
at most ``max_bytes``: the worker stops the query at its deadline itself, and is killed if it has not
answered :data:`KILL_GRACE_S` later; its memory is capped by the kernel (``RLIMIT_DATA``).

The engines (:mod:`.sqlite_engine`, :mod:`.duckdb_engine`) each define an :class:`Engine` subclass (what runs inside
the worker); the caller's side, :class:`~.client.Database` and its subclasses, is in :mod:`.client`.
This module imports only the standard library, because the worker imports it without the rest of the
package.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from collections.abc import Iterable
from typing import Any

from skyrl_gym.errors import Error

__all__ = [
    "DEFAULT_COUNT_LIMIT",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_TIMEOUT_S",
    "KILL_GRACE_S",
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
    """A read-only connection inside a query worker (one per worker; see :mod:`.serve`).

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
