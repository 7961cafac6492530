"""Read-only access to a DuckDB or SQLite database file, with a guard, a timeout and capped results.

:func:`open_database` opens a file read-only and returns a :class:`Database`. Every query that comes from a
model goes through :meth:`Database.execute`, which

- checks that it is one read-only statement that reads only this database's own tables and views
  (:func:`skyrl_gym.runtime.sql.guard.check_read_only`);
- optionally rewrites it from another SQL dialect with sqlglot (``transpile_from``);
- runs it in a query worker, a child process that holds the read-only connection (:mod:`.worker`), with
  a deadline for the whole call: the worker interrupts the query at the deadline, and is killed if it has
  not answered :data:`KILL_GRACE_S` later (a single SQLite ``LIKE`` or DuckDB ``list_sort`` can outlive any
  interrupt); its memory is capped by the kernel;
- fetches at most ``max_rows`` rows, values cut to ``max_value_chars`` and the whole result to ``max_bytes``,
  inside the worker, and says whether (and how many) rows were cut.

The connections themselves refuse to write or to read anything but the database, whatever the guard lets
through (:mod:`.duckdb_engine`, :mod:`.sqlite_engine`). Each worker keeps its temporary files (DuckDB's spill files)
in a private folder that it removes when it ends; the folders of workers that were killed are removed when
the next database opens (:func:`~.folders.sweep_stale_folders`).

Errors raised for a query (:class:`QueryError` and its subclasses) carry a message written for the model,
without host paths, and a ``kind``: ``syntax``, ``schema`` (unknown table or column), ``execution``,
``timeout``, ``unsafe`` or ``resources`` (too much memory, or a result over ``max_bytes``).

A :class:`Database` is used by one thread at a time (calls are serialised by a lock); open one per
environment. The databases open on one file with the same settings share their idle workers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from skyrl_gym.runtime.sql.base import (
    DEFAULT_COUNT_LIMIT,
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT_S,
    KILL_GRACE_S,
    TRANSPILE_CANDIDATES,
    QueryError,
    QueryResult,
    QueryTimeout,
    UnparsableQuery,
    UnsafeQuery,
    quote_identifier,
    transpile_query,
)
from skyrl_gym.runtime.sql.client import Database, DuckDBDatabase, SQLiteDatabase
from skyrl_gym.runtime.sql.folders import sweep_stale_folders
from skyrl_gym.runtime.sql.pool import POOLS, WORKER_LINGER_S

__all__ = [
    "DATA_LAYOUTS",
    "DEFAULT_COUNT_LIMIT",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_TIMEOUT_S",
    "DUCKDB_LINGER_S",
    "KILL_GRACE_S",
    "TRANSPILE_CANDIDATES",
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
    "quote_identifier",
    "resolve_database",
    "sweep_stale_folders",
    "transpile_query",
]

DUCKDB_LINGER_S = WORKER_LINGER_S
"""The former name of :data:`~.pool.WORKER_LINGER_S` (it now applies to both engines)."""

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
        duckdb_config: DuckDB settings for the query workers over :data:`~.duckdb_engine.DEFAULT_CONFIG` (for
            example ``{"threads": 2, "memory_limit": "2GB"}``: each worker may use that plus
            :data:`~.serve.MEMORY_SLACK_BYTES`); the safety settings cannot be overridden.
        sqlite_temp_store: where SQLite keeps the temporary tables of a sort or a ``GROUP BY``: ``"memory"``
            (the default: nothing on disk, but such queries cost up to 1.5-2x the CPU), or ``"file"`` (SQLite's
            own default: files in the query worker's private folder, deleted as soon as they are made; each
            is capped at :data:`~.serve.TEMP_FILE_LIMIT_BYTES`).

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


def close_idle_databases() -> int:
    """End at once the query workers no open :class:`Database` uses (see :data:`DUCKDB_LINGER_S`).

    Call it before writing to a file this process has read (a worker holds a read lock on a DuckDB file),
    or to check that no worker or temporary folder is left. Returns how many files were released.
    """
    return POOLS.close_idle()
