"""The bundled synthetic text-to-SQL dataset: built on first use, cached, loaded by split.

:func:`load_split` returns the rows of ``"train"``, ``"dev"`` or ``"test"`` in SkyRL's format (see
:func:`~skyrl_gym.envs.sql.prompts.build_row`); :func:`default_task` picks one test row for a seed, which is
what ``Text2SQLEnv.reset(seed=...)`` plays when it is given no task.

The first call builds the whole dataset (DuckDB files and rows, about 15 s of CPU) into
``cache_root()/sql/synthetic-v<version>-<fingerprint>-seed<seed>/`` with the question synthesiser
(:mod:`skyrl_gym.datasets.sql.synth`). The folder name carries the synthesiser's version and a hash of its
sources, so a change to it builds a new dataset instead of reusing a stale one. A build writes into a
temporary folder next to the final one and renames it into place, so two processes building at once cannot
leave a half-written dataset: the first rename wins and the other process uses its result.
"""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path
from typing import Any

from skyrl_gym.core import Task
from skyrl_gym.envs.cache import build_once, cache_root

__all__ = [
    "DATASET_NAME",
    "SPLITS",
    "cache_root",
    "dataset_dir",
    "default_task",
    "ensure_dataset",
    "load_split",
]

SPLITS = ("train", "dev", "test")

DEFAULT_SEED = 0


def _version() -> str:
    from skyrl_gym.datasets.sql.synth import build

    return f"{build.GENERATOR_VERSION}-{_fingerprint()}"


@functools.lru_cache(maxsize=1)
def _fingerprint() -> str:
    from skyrl_gym.datasets.sql.synth.build import fingerprint

    return fingerprint()


DATASET_NAME = "synthetic"
"""The folder name's prefix under ``cache_root()/sql``."""


def dataset_dir(seed: int = DEFAULT_SEED) -> Path:
    """The folder of the bundled dataset for ``seed`` (it may not be built yet)."""
    return cache_root() / "sql" / f"{DATASET_NAME}-v{_version()}-seed{int(seed)}"


def ensure_dataset(seed: int = DEFAULT_SEED) -> Path:
    """Build the bundled dataset for ``seed`` unless it is in the cache already; return its folder.

    Safe against other threads and processes building the same dataset at the same time.
    """
    target = dataset_dir(seed)
    return build_once(target, lambda staging: _build_into(staging, target, seed), done="test.jsonl")


def _build_into(staging: Path, target: Path, seed: int) -> None:
    # The builder lives in the datasets layer; the rows' db_path point at the final folder, not the staging one.
    from skyrl_gym.datasets.rows import write_split
    from skyrl_gym.datasets.sql.synth.build import build_synthetic

    rows = build_synthetic(staging, seed=seed, db_root=target)
    for split, split_rows in rows.items():
        write_split(split_rows, staging, split, parquet=False)


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
