"""Build the text-to-SQL datasets in SkyRL's format (for the ``text2sql`` environment).

    python datasets/sql/build.py --out data/sql
    python datasets/sql/build.py --out data/sql --seed 1 --train 4000 --dev 400 --test 500
    python datasets/sql/build.py --out data/sql_lite --engine sqlite

Writes ``train``, ``dev`` and ``test`` of the procedural synthetic dataset into ``--out``, each as ``.jsonl``
and ``.parquet``, and the DuckDB (or, with ``--engine sqlite``, SQLite) files they run on into
``--out/databases``; every row's ``db_path`` points there. Prints the number of rows per split and level. The same ``--seed`` and sizes give the same rows.
See README.md next to this file.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skyrl_gym.datasets.sql import importers, realdb
from skyrl_gym.datasets.sql.synth.build import (
    DEFAULT_SIZES,
    ENGINES,
    SPLITS,
    build_synthetic,
    level_counts,
)
from skyrl_gym.datasets.sql.synth.templates import LEVELS
from skyrl_gym.rows import write_split


@dataclasses.dataclass(frozen=True)
class ExtraBuilder:
    """A dataset built by the same command next to the synthetic one (real databases, imported downloads).

    ``add_arguments(parser)`` adds the builder's options; ``build(args, out)`` returns ``{file stem: rows}``
    (nothing when its options were not given), with any database it uses copied or built under ``out`` so
    that the rows' ``db_path`` point inside it. Each stem is written as ``<stem>.jsonl`` and
    ``<stem>.parquet`` and counted in the summary.
    """

    name: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    build: Callable[[argparse.Namespace, Path], dict[str, list[dict[str, Any]]]]


EXTRA_BUILDERS: list[ExtraBuilder] = [
    # Real databases (--real) and imports of downloaded data (--import-*): realdb.py and importers.py.
    ExtraBuilder("real", realdb.add_build_arguments, realdb.build_for_command),
    ExtraBuilder("imports", importers.add_build_arguments, importers.build_for_command),
]
"""Builders run after the synthetic splits, in order. Real databases (``--real``) and importers
(``--import-*``) plug in here."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the splits and their databases")
    parser.add_argument("--seed", type=int, default=0, help="the same seed gives the same rows")
    parser.add_argument(
        "--engine", choices=ENGINES, default="duckdb", help="the synthetic databases' engine (default duckdb)"
    )
    for split in SPLITS:
        parser.add_argument(
            f"--{split}",
            type=int,
            default=DEFAULT_SIZES[split],
            help=f"questions in the synthetic {split} split (default {DEFAULT_SIZES[split]}; 0 skips it)",
        )
    for extra in EXTRA_BUILDERS:
        extra.add_arguments(parser)
    args = parser.parse_args(argv)
    for split in SPLITS:
        if getattr(args, split) < 0:
            parser.error(f"--{split} must be at least 0")
    return args


def summary(name: str, rows: list[dict[str, Any]]) -> str:
    """One line: the rows of a file and how many there are of each level."""
    counts = level_counts(rows)
    levels = "  ".join(f"{level} {counts.get(level, 0):5d}" for level in LEVELS)
    others = sum(n for level, n in counts.items() if level not in LEVELS)
    return f"{name:<18} {len(rows):6d} rows   {levels}" + (f"  other {others}" if others else "")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    outputs: dict[str, list[dict[str, Any]]] = {}
    sizes = {split: getattr(args, split) for split in SPLITS}
    if any(sizes.values()):
        synthetic = build_synthetic(
            out, seed=args.seed, sizes=sizes, engine=args.engine, log=lambda line: print(line, flush=True)
        )
        outputs.update({split: rows for split, rows in synthetic.items() if sizes[split]})
    for extra in EXTRA_BUILDERS:
        for stem, rows in extra.build(args, out).items():
            if stem in outputs:
                raise SystemExit(f"builder {extra.name!r} writes {stem!r}, which another part already wrote")
            outputs[stem] = rows
    for stem, rows in outputs.items():
        write_split(rows, out, stem, parquet=True)
    print(f"wrote {len(outputs)} files (jsonl + parquet) to {out} in {time.perf_counter() - started:.1f} s")
    for stem, rows in outputs.items():
        print(summary(stem, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
