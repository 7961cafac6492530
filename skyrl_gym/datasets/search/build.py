"""Build the offline search dataset: the passage corpus and the train and test question splits, in a folder.

Files: ``corpus.jsonl``, ``train.jsonl``, ``test.jsonl`` (and ``train.parquet``/``test.parquet`` when pyarrow is
installed), ``countries.jsonl`` (the cleaned country facts the corpus was written from, which the ``searchcode``
environment asks its questions about), ``stats.json``. :func:`generator_version` hashes the builder's source
files, so the bundled dataset's cache folder (:data:`BUNDLE`, which :mod:`skyrl_gym.bundled` builds as
``"search"`` when :mod:`skyrl_gym.envs.search.tasks` first reads it) changes whenever the builder does.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from skyrl_gym.bundled import Bundle
from skyrl_gym.datasets.search.corpus import build_corpus
from skyrl_gym.datasets.search.countries import load_countries
from skyrl_gym.datasets.search.questions import candidate_questions
from skyrl_gym.datasets.search.row_format import make_row
from skyrl_gym.datasets.search.splits import select_splits
from skyrl_gym.envs.search.tasks import DEFAULT_SEED, SPLITS
from skyrl_gym.rows import write_rows, write_split

GENERATOR_VERSION = "1"
DATASET_NAME = "offline-qa"
"""The folder name's prefix under ``cache_root()/search``."""

DEFAULT_SIZES = {"train": 2000, "test": 400}


def _builder_files() -> list[Path]:
    """The source files whose code decides the dataset's bytes: this package's and the rows writer."""
    package = Path(__file__).resolve().parent
    return [*sorted(package.glob("*.py")), package.parents[1] / "rows.py"]


@functools.lru_cache(maxsize=1)
def generator_version() -> str:
    """``GENERATOR_VERSION.<hash>``: a hash of the builder's source files, so that a change to the builder
    builds a new bundled dataset instead of reusing a stale one."""
    digest = hashlib.sha256()
    for path in _builder_files():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{GENERATOR_VERSION}.{digest.hexdigest()[:10]}"


def _counts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    info = [r["extra_info"] for r in rows]
    return {
        "total": len(rows),
        "data_source": dict(sorted(Counter(r["data_source"] for r in rows).items())),
        "hops": {str(k): v for k, v in sorted(Counter(i["hops"] for i in info).items())},
        "held_out": sum(1 for i in info if i["held_out"]),
        "kind": dict(sorted(Counter(i["kind"] for i in info).items())),
    }


def build(
    out_dir: str | Path,
    *,
    seed: int = DEFAULT_SEED,
    n_train: int | None = None,
    n_test: int | None = None,
    full_wordnet: bool = False,
) -> dict[str, Any]:
    """Write the corpus and the QA splits into ``out_dir``; return the counts (also in ``stats.json``).

    Files: ``corpus.jsonl``, ``countries.jsonl``, ``train.jsonl``, ``test.jsonl`` (and
    ``train.parquet``/``test.parquet`` when pyarrow is installed), ``stats.json``. Sizes default to :data:`DEFAULT_SIZES`; the same ``seed`` and
    sizes always give the same files. Question rows have the columns ``data_source`` (``"countries"`` or
    ``"wordnet"``), ``prompt``, ``env_class`` (``"search"``), ``reward_spec`` (``{"method": "rule",
    "ground_truth": {"target": [answer, aliases...]}}``), ``extra_info`` (``split``, ``index``, ``hops``,
    ``kind``, ``question``, ``supporting_ids``, ``held_out``), ``question`` and ``max_turns``.
    ``full_wordnet`` puts every synset in the corpus (about 117,000 passages) instead of the frequent ones.
    """
    started = time.perf_counter()
    n_train = DEFAULT_SIZES["train"] if n_train is None else int(n_train)
    n_test = DEFAULT_SIZES["test"] if n_test is None else int(n_test)
    if n_train < 0 or n_test < 0:
        raise ValueError(f"split sizes must be at least 0, not train={n_train} test={n_test}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    corpus = build_corpus(full_wordnet=full_wordnet)
    write_rows(corpus, out / "corpus.jsonl")
    write_rows([dataclasses.asdict(country) for country in load_countries()], out / "countries.jsonl")
    candidates = candidate_questions()
    drawn = select_splits(candidates, seed=int(seed), n_train=n_train, n_test=n_test)
    summary: dict[str, Any] = {
        "seed": int(seed),
        "version": generator_version(),
        "corpus": {
            "total": len(corpus),
            "countries": sum(1 for p in corpus if p["id"].startswith("country-")),
            "wordnet": sum(1 for p in corpus if p["id"].startswith("wordnet-")),
        },
        "candidates": len(candidates),
    }
    for split in SPLITS:
        rows = [make_row(c, split, i, held_out=held) for i, (c, held) in enumerate(drawn[split])]
        write_split(rows, out, split)
        summary[split] = _counts(rows)
    summary["build_seconds"] = round(time.perf_counter() - started, 2)
    (out / "stats.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


BUNDLE = Bundle(
    prefix=DATASET_NAME,
    version=generator_version,
    build=lambda staging, target, seed: build(staging, seed=seed),
    done="stats.json",
)
"""The bundled dataset that :mod:`skyrl_gym.envs.search.tasks` reads (``skyrl_gym.bundled``'s ``"search"``)."""
