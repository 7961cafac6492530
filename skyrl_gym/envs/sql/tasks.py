"""The bundled synthetic text-to-SQL dataset: built on first use, cached, loaded by split.

:func:`load_split` returns the rows of ``"train"``, ``"dev"`` or ``"test"`` in SkyRL's format (see
:func:`~skyrl_gym.envs.sql.prompts.build_row`); :func:`default_task` picks one test row for a seed, which is
what ``Text2SQLEnv.reset(seed=...)`` plays when it is given no task.

The first call builds the whole dataset (DuckDB files and rows, about 15 s of CPU) into
``cache_root()/sql/synthetic-v<version>-<fingerprint>-seed<seed>/``: the environment asks for the bundled
dataset ``"sql"`` by name (:mod:`skyrl_gym.bundled`) and never imports its builder, the question synthesiser
in the datasets layer. The folder name carries the synthesiser's version and a hash of its sources, so a
change to it builds a new dataset instead of reusing a stale one. A build writes into a temporary folder next
to the final one and renames it into place, so two processes building at once cannot leave a half-written
dataset: the first rename wins and the other process uses its result.
"""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path
from typing import Any

from skyrl_gym.bundled import bundled_dir, ensure_bundled
from skyrl_gym.core import Task
from skyrl_gym.envs.cache import cache_root

__all__ = [
    "SPLITS",
    "cache_root",
    "dataset_dir",
    "default_task",
    "ensure_dataset",
    "load_split",
]

SPLITS = ("train", "dev", "test")

DEFAULT_SEED = 0


def dataset_dir(seed: int = DEFAULT_SEED) -> Path:
    """The folder of the bundled dataset for ``seed`` (it may not be built yet)."""
    return bundled_dir("sql", seed)


def ensure_dataset(seed: int = DEFAULT_SEED) -> Path:
    """Build the bundled dataset for ``seed`` unless it is in the cache already; return its folder.

    Safe against other threads and processes building the same dataset at the same time.
    """
    return ensure_bundled("sql", seed)


def _lines(split: str, seed: int) -> tuple[Path, tuple[str, ...]]:
    """The dataset folder and the JSON lines of ``split`` (built first if needed)."""
    folder = ensure_dataset(seed)
    return folder, _read_lines(str(folder / f"{split}.jsonl"))


@functools.lru_cache(maxsize=16)
def _read_lines(path: str) -> tuple[str, ...]:
    with open(path, encoding="utf-8") as handle:
        return tuple(line for line in handle if line.strip())


def _row(line: str, folder: Path) -> dict[str, Any]:
    row = json.loads(line)
    # the folder may have moved since it was built: point at the database where it is now
    row["db_path"] = str(folder / "databases" / f"{row['db_id']}.duckdb")
    return row


def load_split(split: str, *, seed: int = DEFAULT_SEED) -> list[dict[str, Any]]:
    """The rows of ``split`` (``"train"``, ``"dev"`` or ``"test"``) of the bundled synthetic dataset.

    Built on first use (see the module docstring); the same ``seed`` always gives the same rows. Each call
    returns fresh dictionaries, which the caller may change.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; the bundled SQL dataset has {', '.join(SPLITS)}")
    folder, lines = _lines(split, int(seed))
    return [_row(line, folder) for line in lines]


def default_task(seed: int | None = None) -> Task:
    """One row of the bundled test split as a task, the same row for the same ``seed`` (any row for ``None``).

    ``prompt`` is the row's chat prompt; ``extras`` holds every other column but ``env_class``: ``db_id``,
    ``db_path`` (absolute), ``data``, ``reward_spec``, ``data_source`` and ``extra_info``.
    """
    folder, lines = _lines("test", DEFAULT_SEED)
    pick = random.Random(f"skyrl_sql/default_task/{seed}") if seed is not None else random.Random()
    row = _row(lines[pick.randrange(len(lines))], folder)
    prompt = row.pop("prompt")
    row.pop("env_class", None)
    return Task(prompt=prompt, extras=row)
