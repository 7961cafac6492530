"""Build the arithmetic word-problem dataset in SkyRL's format.

    python datasets/math/build.py --out data/math --train 1000 --test 200 --seed 0
    python datasets/math/build.py --out data/math_mt --multi-turn --max-turns 3

Writes ``train.jsonl`` and ``test.jsonl`` (and ``train.parquet``/``test.parquet`` when pyarrow is
installed) into ``--out``. Train and test never share a question. See README.md next to this file for the
columns.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skyrl_gym.envs.math.multi_turn import DEFAULT_MAX_TURNS
from skyrl_gym.envs.math.tasks import build_rows
from skyrl_gym.rows import write_split


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to write the splits into")
    parser.add_argument("--train", type=int, default=1000, help="number of training rows")
    parser.add_argument("--test", type=int, default=200, help="number of test rows")
    parser.add_argument("--seed", type=int, default=0, help="the same seed gives the same files")
    parser.add_argument(
        "--multi-turn", action="store_true", help="rows for 'math_multi_turn' (feedback and retries)"
    )
    parser.add_argument(
        "--max-turns", type=int, default=DEFAULT_MAX_TURNS, help="answers per episode (--multi-turn)"
    )
    args = parser.parse_args(argv)
    for name in ("train", "test"):
        if getattr(args, name) < 0:
            parser.error(f"--{name} must be at least 0")
    if args.max_turns < 1:
        parser.error("--max-turns must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env_class = "math_multi_turn" if args.multi_turn else "math"
    max_turns = args.max_turns if args.multi_turn else None
    args.out.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", args.train), ("test", args.test)):
        rows = build_rows(n, seed=args.seed, split=split, env_class=env_class, max_turns=max_turns)
        paths = write_split(rows, args.out, split)
        formats = " + ".join(p.suffix[1:] for p in paths)
        print(f"{split}: {len(rows)} rows ({env_class}, {formats}) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
