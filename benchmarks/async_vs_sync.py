"""Fully asynchronous against synchronous training on the CPU main-job workload (recipe sql_cpu), same run.

Both modes start from the same short supervised warm-up, then train by RL for the same wall-clock budget
(``--budget-s``, evaluations not counted), and are scored on the same held-out questions (greedy). Sync runs
the recipe as it is (the engine shares the policy's model); async runs ``trainer.mode=async`` with the hf
engine in its own process (``generator.engine_process=true``) so generation and training overlap. Printed:
steps, steps per hour, the trainer's wait for data, held-out accuracy (the main job's held-out set,
``--heldout``, questions from databases training never sees; n and standard error), and the async/sync
ratios, with the accuracy difference and its standard error.

    python benchmarks/async_vs_sync.py [--budget-s 180] [--batch 2] [--warmup-steps 4] [--staleness 1]

On 2 cores the engine process and the trainer share the same two cores, so the overlap buys little; on a
machine with cores (or a GPU) for each side the replay benchmark (async_replay.py) shows the bound.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

from skyrl_train.config import load_config
from skyrl_train.loop.trainer import Trainer


def run(mode: str, args: argparse.Namespace, root: Path) -> dict:
    """One run of ``mode``; its summary and step metrics."""
    run_dir = root / mode
    overrides = [
        f"trainer.run_dir={run_dir}",
        "trainer.resume_mode=none",
        f"trainer.max_wall_time_s={args.budget_s + args.warmup_allow_s}",
        f"trainer.train_batch_size={args.batch}",
        f"trainer.policy_mini_batch_size={args.batch}",
        f"trainer.sft_warmup.steps={args.warmup_steps}",
        "trainer.sft_warmup.eval_after=false",
        "trainer.eval_before_train=false",
        "data.val_data=[]",
        f"data.eval_sets={{heldout: {{paths: [{args.heldout}], stages: [after_rl]}}}}",
        "trainer.ckpt_interval=0",
        "trainer.logger=[jsonl]",
        f"trainer.seed={args.seed}",
    ]
    if args.train_data:
        overrides.append(f"data.train_data=[{args.train_data}]")
    if mode == "async":
        overrides += [
            "trainer.mode=async",
            "generator.engine_process=true",
            f"trainer.fully_async.max_staleness_steps={args.staleness}",
            f"trainer.algorithm.off_policy_correction.method={args.correction}",
        ]
    config = load_config("sql_cpu", [*overrides, *args.override])
    with Trainer(config) as trainer:
        summary = trainer.fit()
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [line for line in lines if "policy/loss" in line and "time/generate_s" in line]
    return {"summary": summary, "steps": steps}


def main() -> None:
    """Run both modes and print the table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--budget-s", type=float, default=180.0, help="RL seconds per mode")
    parser.add_argument("--warmup-allow-s", type=float, default=120.0, help="budget added for the warm-up")
    parser.add_argument("--batch", type=int, default=2, help="prompts per step")
    parser.add_argument("--warmup-steps", type=int, default=4)
    parser.add_argument("--staleness", type=int, default=1)
    parser.add_argument("--correction", default="tis", choices=["none", "tis", "decoupled_ppo"])
    parser.add_argument("--heldout", default="data/text2sql/heldout.parquet", help="the held-out set")
    parser.add_argument("--train-data", default=None)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--override", action="append", default=[], help="a dotted override for both runs")
    parser.add_argument("--one-mode", choices=["sync", "async"], help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_mode:  # a child: one mode, so each mode's peak memory is its own
        result = run(args.one_mode, args, Path(args.result).parent)
        Path(args.result).write_text(json.dumps(result))
        return
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("sync", "async"):
            out = Path(tmp) / f"{mode}.json"
            subprocess.run(
                [sys.executable, __file__, *sys.argv[1:], "--one-mode", mode, "--result", str(out)],
                check=True,
            )
            results[mode] = json.loads(out.read_text())
    print(
        f"{'mode':<6} {'RL steps':>8} {'RL s':>7} {'steps/h':>8} {'wait s/step':>12} {'n':>4} "
        f"{'accuracy':>15} {'trainer RSS GB':>15}"
    )
    rates, accs = {}, {}
    for mode, r in results.items():
        steps = r["steps"]
        rl_s = sum(s["time/step_s"] for s in steps)
        rates[mode] = len(steps) / rl_s * 3600 if rl_s else 0.0
        wait = sum(s["time/generate_s"] for s in steps) / max(len(steps), 1)
        stage = r["summary"]["eval_sets"]["heldout"]["stages"][-1]
        accs[mode] = stage
        acc = f"{stage['accuracy']:.1%} ± {stage['se']:.1%}"
        rss = r["summary"].get("peak_rss_gb", float("nan"))
        print(
            f"{mode:<6} {len(steps):>8} {rl_s:>7.0f} {rates[mode]:>8.1f} {wait:>12.1f} {stage['n']:>4} "
            f"{acc:>15} {rss:>15.2f}"
        )
    if rates["sync"]:
        diff = accs["async"]["accuracy"] - accs["sync"]["accuracy"]
        se = math.hypot(accs["async"]["se"], accs["sync"]["se"])
        print(
            f"async/sync steps per hour: {rates['async'] / rates['sync']:.2f}x; held-out accuracy async - sync: "
            f"{diff:+.1%} ± {se:.1%} (independent runs)"
        )


if __name__ == "__main__":
    main()
