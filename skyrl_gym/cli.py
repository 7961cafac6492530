"""``skyrl-gym``: list environments, check them, and play episodes with scripted policies.

skyrl-gym list                        # registered ids, plugins included
skyrl-gym play --episodes 20          # every environment with a default task set, three policies
skyrl-gym play math wordle --policy oracle
skyrl-gym check math                  # the conformance checker, rule by rule
skyrl-gym sql-eval --data test.jsonl --predictions preds.jsonl   # text-to-SQL execution accuracy
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import skyrl_gym
from skyrl_gym.core import Env

Policy = Callable[[Env, list[dict[str, Any]], random.Random], str]


def _oracle(env: Env, conversation: list[dict[str, Any]], rng: random.Random) -> str:
    reference = env.reference_action()
    if isinstance(reference, (list, tuple)):  # a multi-step reference: play it step by step
        done = sum(1 for m in conversation if m["role"] == "assistant")
        return reference[min(done, len(reference) - 1)]
    return reference if reference is not None else ""


def _noop(env: Env, conversation: list[dict[str, Any]], rng: random.Random) -> str:
    return ""


def _babbler(env: Env, conversation: list[dict[str, Any]], rng: random.Random) -> str:
    """Says something plausible-looking but uninformed: random words and a random number."""
    words = ["the", "answer", "is", "maybe", "#### ", "\\boxed{", "}", "<answer>", "</answer>", "crane"]
    text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 8)))
    return f"{text} {rng.randint(0, 100)}"


POLICIES: dict[str, Policy] = {"oracle": _oracle, "babbler": _babbler, "noop": _noop}
"""Scripted policies: the reference action, uninformed text, and silence."""


def play(env_id: str, policy: Policy, episodes: int, seed: int) -> dict[str, Any]:
    """Play ``episodes`` episodes of ``env_id`` with ``policy``; return reward and end-state statistics."""
    rng = random.Random(seed)
    rewards, turns, ends = [], [], Counter()
    with skyrl_gym.make(env_id) as env:
        for episode in range(episodes):
            conversation, _ = env.reset(seed=seed + episode)
            conversation = list(conversation)
            total, done, n = 0.0, False, 0
            while not done:
                action = policy(env, conversation, rng)
                output = env.step(action)
                conversation += [{"role": "assistant", "content": action}, *output["observations"]]
                total += output["reward"]
                done, n = output["done"], n + 1
            rewards.append(total)
            turns.append(n)
            ends[output["metadata"].get("end", "?")] += 1
    return {
        "episodes": episodes,
        "mean_reward": sum(rewards) / len(rewards),
        "mean_turns": sum(turns) / len(turns),
        "ends": dict(ends),
    }


def _playable(ids: list[str]) -> list[str]:
    chosen = []
    for env_id in ids or sorted(skyrl_gym.registry):
        with skyrl_gym.make(env_id) as env:
            if env.sample_task(0) is not None:
                chosen.append(env_id)
            elif ids:
                raise SystemExit(f"'{env_id}' has no default task set to play from")
    return chosen


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["sql-eval"]:  # its own options: delegate before parsing
        from skyrl_gym.envs.sql.evaluate import main as sql_eval

        return sql_eval(argv[1:], prog="skyrl-gym sql-eval")
    parser = argparse.ArgumentParser(prog="skyrl-gym", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list registered environments")
    p_play = sub.add_parser("play", help="play episodes with scripted policies and print rewards")
    p_play.add_argument("env_ids", nargs="*", help="environment ids (default: all with a default task set)")
    p_play.add_argument("--episodes", type=int, default=20)
    p_play.add_argument(
        "--policy", choices=sorted(POLICIES), action="append", help="repeatable; default: all"
    )
    p_play.add_argument("--seed", type=int, default=0)
    p_play.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p_check = sub.add_parser("check", help="run the conformance checker on environments")
    p_check.add_argument("env_ids", nargs="+")
    sub.add_parser("sql-eval", help="score text-to-SQL predictions (skyrl-gym sql-eval --help)")
    args = parser.parse_args(argv)

    if args.command == "list":
        for env_id in sorted(skyrl_gym.registry):
            print(f"{env_id:24} {skyrl_gym.spec(env_id).description}")
        return 0

    if args.command == "check":
        from skyrl_gym.testing import check_env

        failed = False
        for env_id in args.env_ids:
            report = check_env(lambda env_id=env_id: skyrl_gym.make(env_id), raise_on_failure=False)
            print(report.summary())
            failed |= not report.ok
        return 1 if failed else 0

    policies = args.policy or list(POLICIES)
    results = []
    start = time.perf_counter()
    for env_id in _playable(args.env_ids):
        for name in policies:
            stats = play(env_id, POLICIES[name], args.episodes, args.seed)
            results.append({"env": env_id, "policy": name, **stats})
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{'environment':20} {'policy':8} {'episodes':>8} {'reward':>7} {'turns':>6}  ends")
    for r in results:
        ends = ", ".join(f"{k} {v}" for k, v in sorted(r["ends"].items()))
        print(
            f"{r['env']:20} {r['policy']:8} {r['episodes']:8d} {r['mean_reward']:7.3f} {r['mean_turns']:6.2f}  {ends}"
        )
    print(f"played in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
