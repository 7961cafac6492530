"""SQLite: :class:`SQLiteDatabase` (the caller's side) and :class:`SQLiteEngine` (the query worker's side).

The worker's connection refuses anything but reading the database's own tables, whatever the guard lets
through: a ``mode=ro`` URI (``immutable`` for WAL files, which would otherwise get ``-wal``/``-shm`` files),
``PRAGMA query_only``, ``trusted_schema = OFF``, no extension loading, no attached databases
(``SQLITE_LIMIT_ATTACHED = 0``), and an authorizer that allows only ``SELECT``, recursive CTEs, functions
other than the file ones, and reads of the tables and views listed in ``sqlite_master`` (and
``sqlite_master`` itself), so no ``PRAGMA``, eponymous virtual table (``pragma_*``, ``json_each``,
``dbstat``: making one updates ``sqlite_master``, which is denied), temporary table or write can run. Values are capped at :data:`MAX_VALUE_BYTES`, ``LIKE``/``GLOB``
patterns at :data:`MAX_PATTERN_BYTES`; a progress handler stops a query at its deadline, and the worker is
killed if one function call outlives it (see :mod:`.worker`).
"""

from __future__ import annotations

import math
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from skyrl_gym.runtime.sql.base import Engine, quote_identifier, render_table

__all__ = ["MAX_PATTERN_BYTES", "MAX_VALUE_BYTES", "SQLiteEngine"]

MAX_VALUE_BYTES = 100_000_000
"""The longest string or blob a SQLite query may make or read."""
MAX_PATTERN_BYTES = 10_000
"""The longest ``LIKE`` or ``GLOB`` pattern (SQLite's default is 50,000)."""
_PROGRESS_EVERY = 100_000
"""SQLite virtual-machine instructions between two checks of the deadline."""
_DENIED_FUNCTIONS = frozenset(
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
_INTERNAL_PRAGMAS = frozenset({"table_info", "table_xinfo", "foreign_key_list"})
_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, getattr(sqlite3, "SQLITE_RECURSIVE", 33)})
_CATALOG_TABLES = frozenset({"sqlite_master", "sqlite_temp_master"})  # sqlite_schema reads as sqlite_master


class SQLiteEngine(Engine):
    """The read-only SQLite connection inside a query worker."""

    def __init__(self, path: str, options: dict[str, Any], private_dir: str):
        os.environ["SQLITE_TMPDIR"] = (
            private_dir  # temporary files (temp_store=file) go to the private folder
        )
        uri = Path(path).as_uri() + "?mode=ro"
        with open(path, "rb") as handle:
            header = handle.read(20)
        if len(header) >= 20 and header[18] == 2:
            uri += "&immutable=1"
        self._deadline = math.inf
        self._internal = False
        connection = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        try:
            connection.execute("PRAGMA query_only = ON")
            connection.execute(f"PRAGMA temp_store = {str(options.get('temp_store', 'memory')).upper()}")
            connection.execute("PRAGMA trusted_schema = OFF")
            if hasattr(connection, "setlimit"):  # Python 3.11+
                connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
                connection.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, MAX_PATTERN_BYTES)
                connection.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            if hasattr(connection, "enable_load_extension"):
                connection.enable_load_extension(False)
            self._readable = _CATALOG_TABLES | {
                str(name).lower() for (name,) in connection.execute("SELECT name FROM sqlite_master")
            }
            connection.set_authorizer(self._authorize)
            connection.set_progress_handler(self._past_deadline, _PROGRESS_EVERY)
        except Exception:
            connection.close()
            raise
        self._connection = connection

    def _authorize(self, action: int, arg1: Any, arg2: Any, database: Any, source: Any) -> int:
        if action in _ALLOWED_ACTIONS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ:
            # SQLite names no database for a read without columns (count(*)) or of a common table
            # expression; the virtual tables, which could be read that way, cannot be made (SQLITE_UPDATE of
            # sqlite_master is denied), so those reads are allowed.
            readable = database is None or (
                database in ("main", "temp") and str(arg1).lower() in self._readable
            )
            return sqlite3.SQLITE_OK if readable else sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION:
            return sqlite3.SQLITE_DENY if str(arg2).lower() in _DENIED_FUNCTIONS else sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and self._internal and str(arg1).lower() in _INTERNAL_PRAGMAS:
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY

    def _past_deadline(self) -> int:
        return 1 if time.monotonic() > self._deadline else 0

    def set_deadline(self, deadline: float) -> None:
        self._deadline = deadline

    def interrupt(self) -> None:
        self._connection.interrupt()

    def memory_bytes(self) -> int:
        return 0  # SQLite has no limit of its own: the worker's margin is all it may use

    def execute(self, sql: str, *, internal: bool, lenient: bool) -> Any:
        self._connection.text_factory = _lenient_text if lenient else str
        return self._connection.execute(sql)

    def retry_lenient(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and "could not decode" in str(exc).lower()

    def error(self, exc: BaseException, timed_out: bool) -> tuple[str, str] | None:
        if isinstance(exc, (ValueError, OverflowError)):
            return "execution", f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, sqlite3.Error):
            return None
        message = str(exc)
        lowered = message.lower()
        if message == "interrupted":
            return ("timeout", "") if timed_out else ("execution", "the query was interrupted")
        if "not authorized" in lowered:
            return (
                "unsafe",
                "the database refused the query (not authorized): queries may only read this database's "
                "own tables and views",
            )
        if "out of memory" in lowered:
            return "resources", ""
        if "too big" in lowered:
            return "resources", f"{message} (values are limited to {MAX_VALUE_BYTES // 1_000_000} MB)"
        return _error_kind(lowered), message

    def describe(self) -> dict[str, Any]:
        self._internal = True
        try:
            return self._describe()
        finally:
            self._internal = False

    def _rows(self, sql: str) -> list[tuple]:
        return self._connection.execute(sql).fetchall()

    def _describe(self) -> dict[str, Any]:
        entries = self._rows(
            "SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
        )
        readable = self._rows("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
        names, ddl = [], []
        for kind, name, sql in entries:
            names.append(name)
            if kind == "view":
                ddl.append((sql or f"CREATE VIEW {quote_identifier(name)}").strip().rstrip(";") + ";")
                continue
            info = self._rows(f"PRAGMA table_info({quote_identifier(name)})")
            columns = [
                (column, type_name or "", bool(not_null)) for _, column, type_name, not_null, _, _ in info
            ]
            primary = [row[1] for row in sorted((r for r in info if r[5]), key=lambda r: r[5])]
            groups: dict[int, list[tuple]] = {}
            for row in self._rows(f"PRAGMA foreign_key_list({quote_identifier(name)})"):
                groups.setdefault(row[0], []).append(row)
            foreign = []
            for key in sorted(groups):
                rows = sorted(groups[key], key=lambda r: r[1])
                targets = [r[4] for r in rows]
                foreign.append(([r[3] for r in rows], rows[0][2], [] if None in targets else targets))
            ddl.append(render_table(name, columns, primary, foreign))
        return {
            "names": names,
            "ddl": "\n\n".join(ddl),
            "relations": [("main", str(name)) for (name,) in readable],
            "catalog": None,
        }

    def close(self) -> None:
        self._connection.close()


def _lenient_text(value: bytes) -> str:
    return value.decode("utf-8", errors="replace")


def _error_kind(message: str) -> str:
    if "syntax error" in message or "incomplete input" in message or "unrecognized token" in message:
        return "syntax"
    if "no such" in message or "ambiguous column" in message:
        return "schema"
    return "execution"
