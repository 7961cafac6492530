"""Build the offline search QA dataset (passage corpus and questions) in SkyRL's format.

    python datasets/search/build.py --out data/search
    python datasets/search/build.py --out data/search --seed 1 --train 4000 --test 500
    python datasets/search/build.py --out data/search_full --full-wordnet

Writes ``corpus.jsonl`` (Search-R1-style passages: id, title, text, contents), ``train.jsonl`` and
``test.jsonl`` (and their ``.parquet`` copies when pyarrow is installed) and ``stats.json`` into ``--out``,
then prints the questions per split, source, number of hops and kind. The same ``--seed`` and sizes give
the same files. Needs WordNet's database files (``apt-get install wordnet-base``) and the ``countryinfo``
package. See README.md next to this file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from skyrl_gym.datasets.search.build import DEFAULT_SIZES, SPLITS, build
from skyrl_gym.datasets.search.questions import TEMPLATES


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the corpus and the splits")
    parser.add_argument("--seed", type=int, default=0, help="the same seed gives the same questions")
    for split in SPLITS:
        parser.add_argument(
            f"--{split}",
            type=int,
            default=DEFAULT_SIZES[split],
            help=f"questions in the {split} split (default {DEFAULT_SIZES[split]})",
        )
    parser.add_argument(
        "--full-wordnet",
        action="store_true",
        help="a passage for every WordNet synset (about 118,000 passages) instead of the frequent ones",
    )
    args = parser.parse_args(argv)
    for split in SPLITS:
        if getattr(args, split) < 0:
            parser.error(f"--{split} must be at least 0")
    return args


def summary_table(summary: dict[str, Any]) -> str:
    """The counts of :func:`build` as a table: one row per question kind, one column per split."""
    lines = [f"{'':<34}" + "".join(f"{split:>8}" for split in SPLITS)]

    def row(label: str, values: list[int]) -> None:
        lines.append(f"{label:<34}" + "".join(f"{v:>8}" for v in values))

    row("questions", [summary[s]["total"] for s in SPLITS])
    for source in sorted({k for s in SPLITS for k in summary[s]["data_source"]}):
        row(f"  {source}", [summary[s]["data_source"].get(source, 0) for s in SPLITS])
    for hops in sorted({k for s in SPLITS for k in summary[s]["hops"]}):
        row(f"  {hops} hop{'s' if hops != '1' else ''}", [summary[s]["hops"].get(hops, 0) for s in SPLITS])
    row("  about held-out entities", [summary[s]["held_out"] for s in SPLITS])
    for kind in TEMPLATES:
        row(f"  {kind}", [summary[s]["kind"].get(kind, 0) for s in SPLITS])
    corpus = summary["corpus"]
    lines.append(
        f"corpus: {corpus['total']} passages ({corpus['countries']} about countries, "
        f"{corpus['wordnet']} WordNet synsets)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out.resolve()
    summary = build(out, seed=args.seed, n_train=args.train, n_test=args.test, full_wordnet=args.full_wordnet)
    print(f"wrote the search dataset to {out} in {summary['build_seconds']:.1f} s")
    print(summary_table(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
