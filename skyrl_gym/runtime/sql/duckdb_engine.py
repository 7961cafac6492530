"""DuckDB: :class:`DuckDBDatabase` (the caller's side) and :class:`DuckDBEngine` (the query worker's side).

The worker opens the file with ``read_only=True`` and :data:`SAFE_CONFIG`: no files, network or extensions
(``enable_external_access=false``, no extension auto-install or auto-load), no Python replacement scans,
and ``lock_configuration=true`` so that no ``SET`` can undo any of it. Each query runs on a fresh cursor, so
whatever a statement leaves in its session (temporary tables, variables, prepared statements, the random
seed) is gone before the next query. DuckDB's own limits (:data:`DEFAULT_CONFIG`: memory, spill size,
threads) are the caller's to change; the worker's process may use ``memory_limit`` plus a margin, enforced
by the kernel, because some functions allocate outside DuckDB's accounting. Spill files go to the worker's
private temporary folder.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any

from skyrl_gym.runtime.sql.base import Engine, quote_identifier, render_table

__all__ = ["DEFAULT_CONFIG", "SAFE_CONFIG", "DuckDBEngine"]

DEFAULT_CONFIG: dict[str, Any] = {
    "memory_limit": "1GiB",
    "max_temp_directory_size": "4GiB",
    "threads": max(1, min(4, os.cpu_count() or 1)),
}
"""DuckDB settings a caller may change with ``duckdb_config``, per query worker (many workers run at once
when many environments query together: each gets a few threads and a share of the memory)."""
SAFE_CONFIG: dict[str, Any] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "python_enable_replacements": False,  # no reading Python variables by name (``FROM my_dataframe``)
    "lock_configuration": True,
}
"""DuckDB settings that cannot be changed."""
_SIZE = re.compile(r"\s*([0-9.]+)\s*([KMGTP]?i?B|bytes?)?\s*\Z", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "byte": 1, "bytes": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS.update({"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "pb": 10**15, "pib": 1 << 50})


class DuckDBEngine(Engine):
    """The read-only DuckDB connection inside a query worker."""

    first_batch = 2  # a fetch costs ~30 us here: two rows tell a one-row result from a longer one in one call

    def __init__(self, path: str, options: dict[str, Any], private_dir: str):
        import duckdb

        self._duckdb = duckdb
        settings = {**options, "temp_directory": str(Path(private_dir) / "spill")}
        self._connection = duckdb.connect(path, read_only=True, config=settings)
        self._current: Any = None
        self._lock = threading.Lock()
        [(limit,)] = self._connection.execute("SELECT current_setting('memory_limit')").fetchall()
        self._memory = _parse_size(str(limit))

    def memory_bytes(self) -> int:
        return self._memory

    def set_deadline(self, deadline: float) -> None:
        pass  # the worker's watchdog calls interrupt() at the deadline

    def interrupt(self) -> None:
        with self._lock:
            if self._current is not None:
                self._current.interrupt()

    def execute(self, sql: str, *, internal: bool, lenient: bool) -> Any:
        cursor = self._connection.cursor()
        with self._lock:
            self._current = cursor
        cursor.execute(sql)
        return cursor

    def error(self, exc: BaseException, timed_out: bool) -> tuple[str, str] | None:
        duckdb = self._duckdb
        if isinstance(exc, duckdb.InterruptException):
            return ("timeout", "") if timed_out else ("execution", "the query was interrupted")
        if isinstance(exc, duckdb.OutOfMemoryException):
            return "resources", ""
        if isinstance(exc, duckdb.Error):
            return _error_kind(exc), str(exc)
        if isinstance(exc, (ValueError, TypeError, OverflowError)):  # converting values
            return "execution", f"{type(exc).__name__}: {exc}"
        return None

    def changes_state(self, sql: str) -> bool:
        try:
            statements = self._connection.extract_statements(sql)
        except Exception:
            return True
        return any(
            getattr(s.type, "name", str(s.type)).upper() not in ("SELECT", "EXPLAIN") for s in statements
        )

    def _rows(self, sql: str) -> list[tuple]:
        return self._connection.cursor().execute(sql).fetchall()

    def describe(self) -> dict[str, Any]:
        [(catalog,)] = self._rows("SELECT current_database()")
        tables = self._rows(
            "SELECT schema_name, table_name FROM duckdb_tables() "
            "WHERE NOT internal AND NOT temporary AND database_name = current_database() ORDER BY table_oid"
        )
        views = self._rows(
            "SELECT schema_name, view_name, sql FROM duckdb_views() "
            "WHERE NOT internal AND NOT temporary AND database_name = current_database() ORDER BY view_oid"
        )
        columns: dict[tuple[str, str], list[tuple[str, str, bool]]] = {}
        for schema, table, column, type_name, nullable in self._rows(
            "SELECT schema_name, table_name, column_name, data_type, is_nullable FROM duckdb_columns() "
            "WHERE NOT internal AND database_name = current_database() ORDER BY table_oid, column_index"
        ):
            columns.setdefault((schema, table), []).append((column, type_name, not nullable))
        primary: dict[tuple[str, str], list[str]] = {}
        foreign: dict[tuple[str, str], list[tuple[list[str], str, list[str]]]] = {}
        for schema, table, kind, names, target, target_names in self._rows(
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
                render_table(
                    name_of(schema, table), columns.get(key, []), primary.get(key, []), foreign.get(key, [])
                )
            )
        for schema, view, sql in views:
            names.append(name_of(schema, view))
            ddl.append(sql.strip() if sql else f"CREATE VIEW {quote_identifier(view)};")
        relations = [(str(s), str(t)) for s, t in tables] + [(str(s), str(v)) for s, v, _ in views]
        return {"names": names, "ddl": "\n\n".join(ddl), "relations": relations, "catalog": str(catalog)}

    def close(self) -> None:
        self._connection.close()


def _parse_size(text: str) -> int:
    """Bytes in a DuckDB size such as ``"1.0 GiB"`` or ``"953.6 MiB"``."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"cannot read the DuckDB size {text!r}")
    unit = (match.group(2) or "").lower()
    return int(float(match.group(1)) * _UNITS[unit])


def _error_kind(exc: BaseException) -> str:
    name = type(exc).__name__
    if name in ("ParserException", "SyntaxException"):
        return "syntax"
    if name in ("CatalogException", "BinderException"):
        return "schema"
    if name == "PermissionException":
        return "unsafe"
    return "execution"
