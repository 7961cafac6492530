"""The SQL query service: read-only DuckDB and SQLite databases queried in sandboxed worker processes.

Untrusted SQL (a model's queries) runs here, never in the caller's process:

- :mod:`.database`: :func:`~.database.open_database` and the service's public names;
- :mod:`.guard`: the read-only guard that every query passes first (:func:`~.guard.check_read_only`);
- :mod:`.client`: :class:`~.client.Database`, the caller's side (a deadline per call, capped results);
- :mod:`.worker`, :mod:`.pool`, :mod:`.zygote`: the worker processes, the idle ones kept per file, and the
  process that forks them;
- :mod:`.serve`, :mod:`.values`, :mod:`.frames`, :mod:`.folders`: what runs inside a worker, and the frames on
  its pipes;
- :mod:`.base`, :mod:`.duckdb_engine`, :mod:`.sqlite_engine`: the engines (inside a worker).

This package imports nothing when imported (workers load its modules without running any package's
``__init__``); environments and tools import :mod:`.database`.
"""
