"""Replayed asynchronous training: the real RolloutProducer and staleness gate, a simulated engine and trainer.

Each group's generation takes the measured per-step generation time (the groups of a step run concurrently),
with a seeded spread, plus the environment's latency per turn; each training step takes the measured training
time. The times come from the synchronous main job's metrics (``--metrics``, default the last sql_cpu run:
``time/generate_s``, ``time/train_s``, ``generate/env_s_mean`` medians) or from the flags. Times are scaled by
``--scale`` to run quickly and reported back in the measured seconds. For each staleness bound K the table
shows the seconds per step beside the ideal overlap bound max(gen, train) and the synchronous gen + train.

    python benchmarks/async_replay.py [--metrics runs/sql_cpu/metrics.jsonl] [--steps 12] [--scale 0.02]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from pathlib import Path

from skyrl_train.loop.async_training import AsyncPlan, RolloutProducer
from skyrl_train.rollout.records import GeneratorOutput, TrajectoryResult

DEFAULT_METRICS = "/work/mainjob/runs/sql_cpu/metrics.jsonl"


def measured(path: str) -> dict[str, float]:
    """Median generation, training and environment seconds of the synchronous run's steps."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    steps = [r for r in rows if "time/generate_s" in r and "policy/loss" in r]
    if not steps:
        raise SystemExit(f"{path} holds no training steps")

    def median(key: str) -> float:
        return statistics.median(r[key] for r in steps if key in r)

    return {
        "gen_s": median("time/generate_s"),
        "train_s": median("time/train_s"),
        "env_s": median("generate/env_s_mean"),
        "steps": float(len(steps)),
    }


class ReplayRunner:
    """Stands in for the agent runner: a group takes ``gen_s`` (+-spread) plus ``turns`` x ``env_s``."""

    def __init__(self, gen_s: float, env_s: float, turns: int, spread: float, seed: int) -> None:
        self.gen_s, self.env_s, self.turns, self.spread = gen_s, env_s, turns, spread
        self.rng = random.Random(seed)
        self.version = 0

    async def generate(self, rows, n_samples, params, *, group_offset=0):
        started = self.version
        await asyncio.sleep(self.gen_s * self.rng.uniform(1 - self.spread, 1 + self.spread))
        await asyncio.sleep(self.env_s * self.turns)
        trajectories = [
            TrajectoryResult(
                prompt_ids=[1], response_ids=[2], loss_mask=[1], policy_versions=[started], end="terminated"
            )
            for _ in range(n_samples)
        ]
        return GeneratorOutput(trajectories)


def replay(k: int, times: dict[str, float], args: argparse.Namespace) -> dict[str, float]:
    """Run ``args.steps`` simulated steps at staleness bound ``k``; seconds per step (measured scale)."""
    plan = AsyncPlan(args.batch, k, args.batch * (k + 1), args.samples)
    runner = ReplayRunner(
        times["gen_s"] * args.scale, times["env_s"] * args.scale, args.turns, 0.3, args.seed
    )
    rows = iter([{"i": i} for i in range(args.batch * (args.steps + k + 2) * 4)])
    producer = RolloutProducer(runner, rows, plan, lambda s: None)
    started = time.perf_counter()
    with producer:
        for step in range(args.steps):
            producer.take(args.batch)
            time.sleep(times["train_s"] * args.scale)
            runner.version = step + 1
            producer.set_version(step + 1)
        wall = time.perf_counter() - started
    stats = producer.stats
    return {
        "step_s": wall / args.steps / args.scale,
        "held_back_s": stats.held_back_s / args.scale,
        "trainer_wait_s": stats.trainer_wait_s / args.steps / args.scale,
        "dropped": stats.groups_dropped_stale,
    }


def main() -> None:
    """Print the replay table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--metrics", default=DEFAULT_METRICS)
    parser.add_argument("--gen-s", type=float, default=None, help="override the measured generation s/step")
    parser.add_argument("--train-s", type=float, default=None, help="override the measured training s/step")
    parser.add_argument("--env-s", type=float, default=None, help="override the environment s per turn")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch", type=int, default=4, help="groups per step (sql_cpu: 4)")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--scale", type=float, default=0.02, help="simulated seconds per measured second")
    parser.add_argument("--bounds", default="0,1,2,4")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    times = (
        measured(args.metrics)
        if Path(args.metrics).exists()
        else {"gen_s": 8.0, "train_s": 32.0, "env_s": 0.1}
    )
    source = args.metrics if Path(args.metrics).exists() else "built-in defaults (no metrics file)"
    for key, flag in (("gen_s", args.gen_s), ("train_s", args.train_s), ("env_s", args.env_s)):
        if flag is not None:
            times[key] = flag
            source += f"; {key} from the flag"
    gen = times["gen_s"] + args.turns * times["env_s"]
    ideal, serial = max(gen, times["train_s"]), gen + times["train_s"]
    print(f"measured times from {source}:")
    print(
        f"  generation {times['gen_s']:.2f} s/step, training {times['train_s']:.2f} s/step, environment "
        f"{times['env_s']:.3f} s/turn x {args.turns} turns; {args.steps} steps of {args.batch} groups"
    )
    print(
        f"{'K':>3} {'s/step':>8} {'ideal max(gen,train)':>21} {'sync gen+train':>15} {'speed-up':>9} "
        f"{'of ideal':>9} {'held back s':>12} {'trainer wait s/step':>20} {'dropped':>8}"
    )
    for k in (int(b) for b in args.bounds.split(",")):
        r = replay(k, times, args)
        print(
            f"{k:>3} {r['step_s']:>8.2f} {ideal:>21.2f} {serial:>15.2f} {serial / r['step_s']:>8.2f}x "
            f"{ideal / r['step_s']:>8.0%} {r['held_back_s']:>12.1f} {r['trainer_wait_s']:>20.2f} {r['dropped']:>8}"
        )


if __name__ == "__main__":
    main()
