"""Build the ``swe`` instances: bugs injected into pinned PyPI projects, validated by their own test suites.

    python datasets/swe/build.py                      # build, oracle over every instance, write all files
    python datasets/swe/build.py --projects tinydb --target 12 --out /tmp/swe.jsonl.gz
    python datasets/swe/build.py --rows-only          # SkyRL rows of the committed instances, no build
    python datasets/swe/build.py --check --sample 20  # re-validate 20 committed instances (0: all of them)

A build writes the instances (SWE-bench's schema plus ``bug_patch``, ``bug_kinds``, ``function``, ``split``,
``test_command``) to ``--out`` (default: the committed ``datasets/swe/instances.jsonl.gz``), the counts and
times to ``--stats``, and the SkyRL-format ``train`` and ``test`` splits (JSONL and parquet) to ``--data``.
The same seed and options give the same file. ``--check`` rebuilds each sampled instance's bugged repository
from its sdist (its sha must be ``base_commit``), checks that its ``FAIL_TO_PASS`` fail there and that its
``patch`` makes every listed test pass; it exits 1 when one does not. See README.md next to this file.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from skyrl_gym.datasets.swe.build import build, counts, oracle, read_instances, skyrl_row, write_instances
from skyrl_gym.envs.swe.projects import PROJECTS
from skyrl_gym.rows import write_split

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "instances.jsonl.gz"
DEFAULT_STATS = HERE / "stats.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--projects", nargs="+", default=list(PROJECTS), choices=sorted(PROJECTS))
    parser.add_argument("--target", type=int, default=48, help="instances to keep per project")
    parser.add_argument(
        "--max-attempts", type=int, default=400, help="candidates validated per project at most"
    )
    parser.add_argument(
        "--max-per-function", type=int, default=2, help="instances mutating one function at most"
    )
    parser.add_argument(
        "--test-fraction", type=float, default=0.2, help="share of each project's instances in test"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="projects built at once (one process each)")
    parser.add_argument(
        "--no-oracle", action="store_true", help="skip the oracle run over the built instances"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the instance file (.jsonl.gz)")
    parser.add_argument(
        "--stats", type=Path, default=DEFAULT_STATS, help="counts and times of the build (JSON)"
    )
    parser.add_argument(
        "--data", type=Path, default=Path("data/swe"), help="folder of the SkyRL train/test rows"
    )
    parser.add_argument(
        "--rows-only", action="store_true", help="write the SkyRL rows of --out, build nothing"
    )
    parser.add_argument("--check", action="store_true", help="re-validate a sample of --out, build nothing")
    parser.add_argument("--sample", type=int, default=20, help="instances --check validates (0: all)")
    return parser.parse_args(argv)


def write_rows(instances: list[dict], data: Path) -> list[Path]:
    """Write the SkyRL rows of each split into ``data``; return the files."""
    paths = []
    for split in ("train", "test"):
        rows = [skyrl_row(i) for i in instances if i["split"] == split]
        paths += write_split(rows, data, split)
    return paths


def check(path: Path, sample: int, seed: int) -> int:
    """Re-validate ``sample`` instances of ``path`` (all with 0); print each result; return the exit code."""
    instances = read_instances(path)
    chosen = instances if sample <= 0 else random.Random(seed).sample(instances, min(sample, len(instances)))
    failures = 0
    for instance in sorted(chosen, key=lambda i: i["instance_id"]):
        result = oracle(instance, check_no_op=True)
        good = result["resolved"] and not result["no_op_resolved"]
        failures += not good
        print(
            f"{'ok  ' if good else 'FAIL'} {instance['instance_id']} ({result['seconds']:.1f}s)", flush=True
        )
    print(f"{len(chosen) - failures}/{len(chosen)} instances: the bug fails its tests and the patch fixes it")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.check:
        return check(args.out, args.sample, args.seed)
    if args.rows_only:
        instances = read_instances(args.out)
        for p in write_rows(instances, args.data):
            print(p)
        return 0
    started = time.monotonic()
    instances, stats = build(
        args.projects,
        target=args.target,
        max_attempts=args.max_attempts,
        max_per_function=args.max_per_function,
        test_fraction=args.test_fraction,
        seed=args.seed,
        run_oracle=not args.no_oracle,
        jobs=args.jobs,
        verbose=True,
    )
    write_instances(instances, args.out)
    paths = write_rows(instances, args.data)
    stats["total_seconds"] = round(time.monotonic() - started, 1)
    args.stats.parent.mkdir(parents=True, exist_ok=True)
    args.stats.write_text(json.dumps(stats, indent=2, sort_keys=True) + "\n")
    summary = counts(instances)
    print(f"{summary['instances']} instances -> {args.out}; rows: {', '.join(map(str, paths))}")
    print("per repository:", json.dumps(summary["per_repo"]))
    print("per bug kind:  ", json.dumps(summary["per_kind"]))
    print("per split:     ", json.dumps(summary["per_split"]))
    if "oracle" in stats:
        oracle_stats = stats["oracle"]
        print(f"oracle: {oracle_stats['resolved']}/{oracle_stats['instances']} resolved by their patch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
