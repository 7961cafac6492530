"""Build a compact text-to-SQL training set for small models and CPU budgets (the main job's data).

Takes rows of the bundled synthetic dataset (``skyrl_gym.envs.sql.tasks``; built on first use) at the chosen
difficulty levels and rewrites their prompts with :func:`~skyrl_gym.envs.sql.prompts.build_compact_prompt`:
a short system message, a one-shot example and one line per table, about 250 tokens instead of about 1,400.
Training rows come from the synthetic train split and validation rows from its dev split, whose databases
are disjoint from train's; both leave out the held-out domains
(:data:`~skyrl_gym.datasets.sql.heldout.HELDOUT_DOMAINS`). With ``--heldout N`` it also writes ``heldout``:
N easy and N medium questions on fresh databases of those domains, and ``chinook``: the 60 hand-written
Chinook questions (the transfer set), both with the same compact prompt. Writes every split as JSONL, and as
parquet when pyarrow is installed.

    python datasets/sql/build_compact.py --out data/text2sql --levels easy --train 512 --validation 64 \
        --heldout 120
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from pathlib import Path

from skyrl_gym.datasets.sql.heldout import build_heldout, chinook_rows, training_domain_rows
from skyrl_gym.envs.sql.prompts import build_compact_prompt
from skyrl_gym.envs.sql.tasks import load_split
from skyrl_gym.rows import write_split
from skyrl_gym.runtime.sql.database import open_database

LEVELS = ("easy", "medium", "hard", "extra")


def compact_rows(split: str, levels: list[str], limit: int, seed: int, max_turns: int | None) -> list[dict]:
    """Up to ``limit`` rows of the synthetic ``split`` at ``levels`` outside the held-out domains, with compact
    prompts, shuffled by seed."""
    rows = [r for r in training_domain_rows(load_split(split)) if r["extra_info"]["level"] in levels]
    random.Random(seed).shuffle(rows)
    out = []
    for row in rows[:limit]:
        with open_database(row["db_path"]) as db:
            row["prompt"] = build_compact_prompt(db, row["extra_info"]["question"])
        row["data_source"] = "skyrl_sql_synthetic_compact"
        if max_turns is not None:
            row["max_turns"] = max_turns
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--levels", nargs="+", default=["easy"], choices=LEVELS)
    parser.add_argument("--train", type=int, default=512, help="training rows (at most)")
    parser.add_argument("--validation", type=int, default=64, help="validation rows (at most)")
    parser.add_argument("--max-turns", type=int, default=None, help="max_turns column for every row")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--heldout", type=int, default=0, help="held-out questions per level (easy, medium); 0: none"
    )
    args = parser.parse_args(argv)
    for split, name, limit in (("train", "train", args.train), ("dev", "validation", args.validation)):
        rows = compact_rows(split, args.levels, limit, args.seed, args.max_turns)
        paths = write_split(rows, args.out, name)
        levels = Counter(r["extra_info"]["level"] for r in rows)
        print(f"{name}: {len(rows)} rows {dict(levels)} -> {', '.join(str(p) for p in paths)}")
    if args.heldout:
        heldout = build_heldout(args.out, per_level=args.heldout, seed=args.seed)
        chinook = chinook_rows(copy_to=args.out / "databases")
        for name, rows in (("heldout", heldout), ("chinook", chinook)):
            paths = write_split(rows, args.out, name)
            counts = Counter((r["db_id"], r["extra_info"]["level"]) for r in rows)
            print(f"{name}: {len(rows)} rows {dict(sorted(counts.items()))} -> {', '.join(map(str, paths))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
