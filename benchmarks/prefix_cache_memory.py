"""Peak memory and speed of the main job's held-out evaluation at several prefix-cache budgets.

The evaluation is where the hf engine's prefix cache fills: the weights do not change during it, so nothing
is dropped, and 200 questions with their turns hold far more tokens than any budget. Each budget runs in a
fresh process (so each has its own peak resident memory, VmHWM): the sql_cpu trainer (policy worker and
in-process engine, as in the main job) evaluates the held-out questions greedily; the table gives the
process's peak memory, the evaluation's wall time, the share of prompt tokens the cache served, and the
accuracy (the same questions and greedy decoding, so a budget should change memory and speed, not answers).

    python benchmarks/prefix_cache_memory.py [--budgets 32768,8192,2048] [--limit 200] [--model PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parents[1]
HELDOUT = REPO / "data" / "text2sql" / "heldout.jsonl"


def child(budget: int, limit: int, model: str) -> None:
    """One budget in this process: evaluate, print one JSON line."""
    from skyrl_train.config import load_config
    from skyrl_train.loop.trainer import Trainer, _peak_rss_gb

    with tempfile.TemporaryDirectory() as tmp:
        rows = HELDOUT.read_text().splitlines()[:limit]
        data = Path(tmp) / "heldout.jsonl"
        data.write_text("\n".join(rows) + "\n")
        cfg = load_config(
            "sql_cpu",
            [
                f"trainer.policy.model.path={model}",
                f"data.val_data=[{data}]",
                "data.eval_sets={}",
                f"trainer.run_dir={tmp}/run",
                "trainer.logger=[jsonl]",
                f"generator.prefix_cache_tokens={budget}",
            ],
        )
        with Trainer(cfg) as trainer:
            before = _peak_rss_gb()
            start = time.perf_counter()
            metrics = trainer.evaluate()
            wall = time.perf_counter() - start
            stats = dict(trainer.engine.stats)
    prompt_tokens = stats["prefill_tokens"] + stats["reused_tokens"]
    print(
        json.dumps(
            {
                "budget": budget,
                "questions": len(rows),
                "accuracy": metrics.get("eval/accuracy"),
                "eval_s": wall,
                "rss_before_eval_gb": before,
                "peak_rss_gb": _peak_rss_gb(),
                "cache_share": stats["reused_tokens"] / prompt_tokens if prompt_tokens else 0.0,
            }
        ),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--budgets", default="32768,8192,2048", help="prefix-cache budgets in tokens")
    parser.add_argument("--limit", type=int, default=200, help="held-out questions (the first N)")
    parser.add_argument("--model", default="embedded:smollm2-135m", help="the model evaluated")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.limit, args.model)
        return
    if not HELDOUT.exists():
        sys.exit(f"{HELDOUT} is missing: run `make data` first")
    budgets = [int(b) for b in args.budgets.split(",") if b]
    results = []
    for budget in budgets:
        command = [sys.executable, __file__, "--child", str(budget), "--limit", str(args.limit)]
        command += ["--model", args.model]
        done = subprocess.run(command, cwd=REPO, check=True, capture_output=True, text=True)
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(results[-1]), flush=True)
    base = results[0]
    print(
        f"\n| budget (tokens) | questions | accuracy | eval s | peak RSS GB | served from cache | eval s vs {base['budget']} |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['budget']} | {r['questions']} | {r['accuracy']:.3f} | {r['eval_s']:.1f} | {r['peak_rss_gb']:.2f} "
            f"| {r['cache_share']:.1%} | {r['eval_s'] / base['eval_s']:.2f}x |"
        )


if __name__ == "__main__":
    main()
