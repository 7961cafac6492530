"""What the framework's episode guard costs per step, against stepping the bare environment.

Runs the same episodes three ways in one process and prints the time per step and the ratio to the bare
environment: bare ``env.step``; ``skyrl_gym.make``'s guard (validation, budgets, named ends); the guard
with a wall-clock step budget (each step then runs on a helper thread).

    python benchmarks/guard_overhead.py [--steps 20000]
"""

from __future__ import annotations

import argparse
import resource
import time

from skyrl_gym import EpisodeGuard
from skyrl_gym.envs.math.multi_turn import MultiTurnMathEnv

PROMPT = [{"role": "user", "content": "What is 6 * 7?"}]
EXTRAS = {"reward_spec": {"method": "rule", "ground_truth": "42"}, "max_turns": 1_000_000}


def run(env, steps: int) -> float:
    env.init(PROMPT)
    start = time.perf_counter()
    for _ in range(steps):
        env.step("I think it is #### 41")
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    variants = {
        "bare env.step": lambda: MultiTurnMathEnv(extras=EXTRAS),
        "guarded (make's default)": lambda: EpisodeGuard(
            MultiTurnMathEnv(extras=EXTRAS), {"max_observation_chars": 4096}
        ),
        "guarded + step_timeout_s": lambda: EpisodeGuard(
            MultiTurnMathEnv(extras=EXTRAS), {"step_timeout_s": 10.0}
        ),
    }
    best = {
        name: min(run(make(), args.steps) for _ in range(args.repeats)) for name, make in variants.items()
    }
    base = best["bare env.step"]
    print(f"{'variant':28} {'us/step':>9} {'ratio':>7}")
    for name, seconds in best.items():
        print(f"{name:28} {seconds * 1e6:9.2f} {seconds / base:7.2f}x")
    print(f"peak resident memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
