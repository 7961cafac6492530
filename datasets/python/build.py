"""Build the ``python`` environment's dataset: reasoning-gym math tasks in SkyRL's format.

    python datasets/python/build.py --out data/python --train 2000 --test 200 --seed 0
    python datasets/python/build.py --out data/python_small --train 100 --test 20 --tasks gcd,lcm,products

Writes ``train.jsonl`` and ``test.jsonl`` (and ``train.parquet``/``test.parquet`` when pyarrow is installed)
into ``--out`` and prints how many rows each task has. Train and test never share a question. See README.md
next to this file for the columns.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

from skyrl_gym.envs.python.tasks import DEFAULT_MAX_TURNS, TASKS, build_rows
from skyrl_gym.rows import write_split

PARQUET_JSON_COLUMNS = ("reward_spec.entry", "reward_spec.config")
"""Stored as JSON text in parquet: their fields differ from one task to the next, and a parquet column has one
schema. The environment reads both forms."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to write the splits into")
    parser.add_argument("--train", type=int, default=2000, help="number of training rows")
    parser.add_argument("--test", type=int, default=200, help="number of test rows")
    parser.add_argument("--seed", type=int, default=0, help="the same seed gives the same files")
    parser.add_argument("--max-turns", type=int, default=DEFAULT_MAX_TURNS, help="replies per episode")
    parser.add_argument(
        "--tasks", default=",".join(TASKS), help="comma-separated reasoning-gym tasks (default: all)"
    )
    parser.add_argument(
        "--fresh-scripts",
        action="store_true",
        help="prompts for env_config.persistent=false (each code block runs as a fresh program)",
    )
    args = parser.parse_args(argv)
    for name in ("train", "test"):
        if getattr(args, name) < 0:
            parser.error(f"--{name} must be at least 0")
    if args.max_turns < 1:
        parser.error("--max-turns must be at least 1")
    args.tasks = [name.strip() for name in args.tasks.split(",") if name.strip()]
    unknown = [name for name in args.tasks if name not in TASKS]
    if unknown or not args.tasks:
        parser.error(f"unknown --tasks {unknown}; choose from {', '.join(TASKS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", args.train), ("test", args.test)):
        rows = build_rows(
            n,
            seed=args.seed,
            split=split,
            tasks=args.tasks,
            max_turns=args.max_turns,
            persistent=not args.fresh_scripts,
        )
        paths = write_split(rows, args.out, split, json_columns=PARQUET_JSON_COLUMNS)
        formats = " + ".join(p.suffix[1:] for p in paths)
        counts = collections.Counter(row["reward_spec"]["task"] for row in rows)
        print(f"{split}: {len(rows)} rows ({formats}) -> {args.out}")
        for name in args.tasks:
            print(f"  {name:<24} {counts.get(name, 0)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
