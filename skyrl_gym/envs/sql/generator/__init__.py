"""A procedural Spider-style generator of text-to-SQL questions on realistic synthetic databases.

- :mod:`.schema`: the domain model (tables, columns, foreign keys) with the English words for them;
- :mod:`.domains`: the database domains, one module each, with their value lists and ``populate``;
- :mod:`.templates`: question templates of four levels (easy, medium, hard, extra) and the checks that keep
  every gold answer non-empty and well defined;
- :mod:`.build`: database instances per split, question generation, rows in SkyRL's format.

Importing this package does not import duckdb; building does.
"""

from __future__ import annotations

from skyrl_gym.envs.sql.generator.build import (
    DEFAULT_SIZES,
    GENERATOR_VERSION,
    SPLITS,
    build_synthetic,
    level_counts,
    plan_instances,
    write_rows,
)
from skyrl_gym.envs.sql.generator.domains import DOMAINS
from skyrl_gym.envs.sql.generator.templates import LEVELS

__all__ = [
    "DEFAULT_SIZES",
    "DOMAINS",
    "GENERATOR_VERSION",
    "LEVELS",
    "SPLITS",
    "build_synthetic",
    "level_counts",
    "plan_instances",
    "write_rows",
]
