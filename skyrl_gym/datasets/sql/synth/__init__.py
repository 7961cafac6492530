"""The question synthesiser: procedural Spider-style text-to-SQL questions on realistic synthetic databases.

It builds the bundled dataset that :mod:`skyrl_gym.envs.sql.tasks` loads (and ``datasets/sql/build.py``
writes).

- :mod:`.schema`: the domain model (tables, columns, foreign keys) with the English words for them;
- :mod:`.domains`: the database domains, one module each, with their value lists and ``populate``;
- :mod:`.templates`: question templates of four levels (easy, medium, hard, extra) and the checks that keep
  every gold answer non-empty and well defined;
- :mod:`.build`: database instances per split, question generation, rows in SkyRL's format.

Importing this package does not import duckdb; building does.
"""

from __future__ import annotations

from skyrl_gym.datasets.sql.synth.build import (
    DEFAULT_SIZES,
    GENERATOR_VERSION,
    SPLITS,
    build_synthetic,
    level_counts,
    plan_instances,
)
from skyrl_gym.datasets.sql.synth.domains import DOMAINS
from skyrl_gym.datasets.sql.synth.templates import LEVELS

__all__ = [
    "DEFAULT_SIZES",
    "DOMAINS",
    "GENERATOR_VERSION",
    "LEVELS",
    "SPLITS",
    "build_synthetic",
    "level_counts",
    "plan_instances",
]
