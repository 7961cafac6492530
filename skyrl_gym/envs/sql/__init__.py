"""The text-to-SQL environment (``text2sql``), SkyRL-SQL's protocol on a real DuckDB or SQLite database.

- :mod:`skyrl_gym.runtime.sql`: the query service the environment runs every query in (read-only databases
  with a guard, a timeout and capped results; :func:`open_database` is re-exported here);
- :mod:`.scoring`: execution match and SkyRL's format rule, also for offline evaluation;
- :mod:`.utils`: SkyRL-SQL's format rule and reward (``verify_format_and_extract``, ``compute_score_single``);
- :mod:`.env`: :class:`~skyrl_gym.envs.sql.env.Text2SQLEnv` (SkyRL's ``SQLEnv``), registered as ``text2sql``.

Importing this package imports neither duckdb nor sqlglot; the modules that need them import them when used.
"""

from __future__ import annotations

from typing import Any

from skyrl_gym.runtime.sql.database import (
    Database,
    QueryError,
    QueryResult,
    QueryTimeout,
    UnparsableQuery,
    UnsafeQuery,
    open_database,
    resolve_database,
)

__all__ = [
    "Database",
    "QueryError",
    "QueryResult",
    "QueryTimeout",
    "SQLEnv",
    "Text2SQLEnv",
    "Text2SQLEnvConfig",
    "UnparsableQuery",
    "UnsafeQuery",
    "execution_match",
    "open_database",
    "resolve_database",
    "score_completion",
]

_LAZY = {
    "SQLEnv": "skyrl_gym.envs.sql.env",
    "Text2SQLEnv": "skyrl_gym.envs.sql.env",
    "Text2SQLEnvConfig": "skyrl_gym.envs.sql.env",
    "execution_match": "skyrl_gym.envs.sql.scoring",
    "score_completion": "skyrl_gym.envs.sql.scoring",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
