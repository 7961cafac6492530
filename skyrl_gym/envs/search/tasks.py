"""The offline question-answering data of the ``search`` environment, as the environment loads it: the passage
corpus and the QA splits of the bundled dataset.

The dataset is built from WordNet and the ``countryinfo`` package by the datasets layer (its builder is
``skyrl_gym.datasets.search``: see there for what the corpus and the questions hold), which this module never
imports: :func:`ensure_dataset` asks :mod:`skyrl_gym.bundled` for the bundled dataset ``"search"``, built on
first use (a few seconds) into ``cache_root()/search/<name>-v<version>-seed<seed>/``; the version carries a hash
of the builder's source files, so a change to the builder builds a new dataset instead of reusing a stale one.
:func:`load_corpus`, :func:`load_split`, :func:`load_countries` and :func:`default_task` read it.
"""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path
from typing import Any

from skyrl_gym.bundled import bundled_dir, ensure_bundled
from skyrl_gym.core import Task

__all__ = [
    "DEFAULT_SEED",
    "SPLITS",
    "corpus_path",
    "dataset_dir",
    "default_task",
    "ensure_dataset",
    "load_corpus",
    "load_countries",
    "load_split",
]

SPLITS = ("train", "test")
"""The question splits of the bundled dataset."""
DEFAULT_SEED = 0


def dataset_dir(seed: int = DEFAULT_SEED) -> Path:
    """The folder of the bundled dataset for ``seed`` (it may not be built yet)."""
    return bundled_dir("search", seed)


def ensure_dataset(seed: int = DEFAULT_SEED) -> Path:
    """Build the bundled dataset for ``seed`` unless it is in the cache already; return its folder.

    The build goes into a temporary folder next to the final one and is renamed into place, so other
    threads and processes building at the same time never see half a dataset: the first rename wins.
    """
    return ensure_bundled("search", seed)


def corpus_path(seed: int = DEFAULT_SEED) -> Path:
    """The bundled corpus file (``corpus.jsonl``), built first if needed."""
    return ensure_dataset(seed) / "corpus.jsonl"


def load_corpus(path: str | Path | None = None) -> list[dict[str, str]]:
    """The passages of a corpus file (or of a dataset folder's ``corpus.jsonl``); the bundled one by default."""
    path = corpus_path() if path is None else Path(path)
    if path.is_dir():
        path = path / "corpus.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"no corpus at {path}: build one with datasets/search/build.py --out DIR")
    return [json.loads(line) for line in _read_lines(str(path))]


@functools.lru_cache(maxsize=8)
def _read_lines(path: str) -> tuple[str, ...]:
    with open(path, encoding="utf-8") as handle:
        return tuple(line for line in handle if line.strip())


def load_countries(seed: int = DEFAULT_SEED) -> list[dict[str, Any]]:
    """The cleaned facts of every country and territory the corpus was written from (``countries.jsonl``:
    ``code``, ``name``, ``population``, ``area``, ``calling_codes``... as lists), built first if needed."""
    return [json.loads(line) for line in _read_lines(str(ensure_dataset(seed) / "countries.jsonl"))]


def load_split(split: str, seed: int = DEFAULT_SEED) -> list[dict[str, Any]]:
    """The rows of ``split`` (``"train"`` or ``"test"``) of the bundled dataset, built first if needed.

    Each call returns fresh dictionaries, which the caller may change.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; the search dataset has {', '.join(SPLITS)}")
    folder = ensure_dataset(seed)
    return [json.loads(line) for line in _read_lines(str(folder / f"{split}.jsonl"))]


def default_task(seed: int | None = None) -> Task:
    """One row of the bundled test split as a task, the same row for the same ``seed`` (any row for ``None``).

    ``prompt`` is the row's chat prompt; ``extras`` holds every other column but ``env_class``:
    ``data_source``, ``reward_spec``, ``extra_info``, ``question`` and ``max_turns``.
    """
    folder = ensure_dataset(DEFAULT_SEED)
    lines = _read_lines(str(folder / "test.jsonl"))
    pick = random.Random(f"skyrl_search/default_task/{seed}") if seed is not None else random.Random()
    row = json.loads(lines[pick.randrange(len(lines))])
    prompt = row.pop("prompt")
    row.pop("env_class", None)
    return Task(prompt=prompt, extras=row)
