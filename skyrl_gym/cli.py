"""``skyrl-gym``: list environments, check them, and play episodes with scripted policies.

skyrl-gym list                        # registered ids, plugins included
skyrl-gym play --episodes 20          # every environment with a default task set, three policies
skyrl-gym play math wordle --policy oracle
skyrl-gym check math                  # the conformance checker, rule by rule
skyrl-gym check my_env --tasks tasks.jsonl   # an environment without a default task set: give it tasks
skyrl-gym sql-eval --data test.jsonl --predictions preds.jsonl   # text-to-SQL execution accuracy

A user's mistake (an unknown environment, a missing file) prints ``error: <message>`` and exits with status 2;
``--debug`` shows the traceback too.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any

import skyrl_gym
from skyrl_gym.core import Env
from skyrl_gym.progress import EpisodeProgress

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


PASS_REWARD = 1.0
"""The reward at which ``play``'s progress counts an episode as passed (full reward)."""

POLICIES: dict[str, Policy] = {"oracle": _oracle, "babbler": _babbler, "noop": _noop}
"""Scripted policies: the reference action, uninformed text, and silence."""


class UsageError(ValueError):
    """A command line that cannot run as given."""


USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, KeyError, FileNotFoundError)
"""Errors that are the user's to fix (unknown environments are KeyErrors): printed as one line."""


def load_tasks(path: str) -> list[dict[str, Any]]:
    """Tasks ``{"prompt", "extras"}`` from a JSON list or JSON lines file (parquet too). A row without
    ``extras`` is a SkyRL dataset row: its columns other than ``prompt`` and ``env_class`` are the extras."""
    from skyrl_gym.rows import read_rows

    tasks = []
    for number, row in enumerate(read_rows(path), 1):
        if not isinstance(row, dict) or row.get("prompt") is None:
            raise UsageError(
                f'{path} task {number}: no \'prompt\' (a task is {{"prompt": ..., "extras": ...}})'
            )
        if "extras" in row:
            extras = row["extras"]
        else:
            extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
        if extras is not None and not isinstance(extras, dict):
            raise UsageError(f"{path} task {number}: 'extras' is {type(extras).__name__}, not an object")
        tasks.append({"prompt": row["prompt"], "extras": extras})
    if not tasks:
        raise UsageError(f"{path} holds no tasks")
    return tasks


def play(
    env_id: str,
    policy: Policy,
    episodes: int,
    seed: int,
    tasks: list[dict[str, Any]] | None = None,
    on_episode: Callable[[float, str], None] | None = None,
) -> dict[str, Any]:
    """Play ``episodes`` episodes of ``env_id`` with ``policy``; return reward and end-state statistics.

    Episode ``i`` plays ``tasks[i % len(tasks)]`` when tasks are given, else the default task for seed
    ``seed + i``. ``on_episode(reward, end)`` is called after each episode."""
    rng = random.Random(seed)
    rewards, turns, ends = [], [], Counter()
    with skyrl_gym.make(env_id) as env:
        for episode in range(episodes):
            if tasks:
                task = tasks[episode % len(tasks)]
                conversation, _ = env.reset(
                    seed=seed + episode, options={"prompt": task["prompt"], "extras": task["extras"]}
                )
            else:
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
            end = output["metadata"].get("end", "?")
            ends[end] += 1
            if on_episode is not None:
                on_episode(total, end)
    return {
        "episodes": episodes,
        "mean_reward": sum(rewards) / len(rewards),
        "mean_turns": sum(turns) / len(turns),
        "ends": dict(ends),
    }


def _playable(ids: list[str], with_tasks: bool = False) -> list[str]:
    if with_tasks:
        if not ids:
            raise UsageError("--tasks needs the environment ids to play them with")
        for env_id in ids:
            skyrl_gym.spec(env_id)  # an unknown id fails here, before any episode
        return list(ids)
    chosen = []
    for env_id in ids or sorted(skyrl_gym.registry):
        with skyrl_gym.make(env_id) as env:
            if env.sample_task(0) is not None:
                chosen.append(env_id)
            elif ids:
                raise UsageError(
                    f"'{env_id}' has no default task set to play from: give it tasks with --tasks FILE "
                    '(a JSON list or JSON lines of {"prompt": ..., "extras": ...})'
                )
    return chosen


def _message(exc: BaseException) -> str:
    if isinstance(exc, KeyError) and type(exc).__str__ is KeyError.__str__ and exc.args:
        return str(exc.args[0])  # KeyError's own str() quotes the message
    return str(exc) or type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv``; a user's error prints ``error: <message>`` and returns 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    try:
        if argv[:1] == ["sql-eval"]:  # its own options: delegate before parsing
            from skyrl_gym.envs.sql.evaluate import main as sql_eval

            return sql_eval([a for a in argv[1:] if a != "--debug"], prog="skyrl-gym sql-eval")
        args = _parser().parse_args(argv)
        debug = getattr(args, "debug", False)
        return _run(args)
    except USER_ERRORS as exc:
        if debug:
            traceback.print_exception(type(exc), exc, exc.__traceback__)
        print(f"error: {_message(exc)}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show the traceback of an error too"
    )
    parser = argparse.ArgumentParser(prog="skyrl-gym", description=__doc__.split("\n")[0], parents=[common])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list registered environments", parents=[common])
    tasks_help = (
        'a JSON list or JSON lines file of tasks {"prompt": ..., "extras": ...} to play instead of the '
        "default task set (needed by an environment without one)"
    )
    p_play = sub.add_parser(
        "play", help="play episodes with scripted policies and print rewards", parents=[common]
    )
    p_play.add_argument("env_ids", nargs="*", help="environment ids (default: all with a default task set)")
    p_play.add_argument("--episodes", type=int, default=20)
    p_play.add_argument(
        "--policy", choices=sorted(POLICIES), action="append", help="repeatable; default: all"
    )
    p_play.add_argument("--seed", type=int, default=0)
    p_play.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p_play.add_argument("--tasks", metavar="FILE", help=tasks_help)
    p_play.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="episodes done, pass rate (full reward) and ETA on stderr (default: when stderr is a terminal; "
        "--progress elsewhere writes one line per episode)",
    )
    p_check = sub.add_parser("check", help="run the conformance checker on environments", parents=[common])
    p_check.add_argument("env_ids", nargs="+")
    p_check.add_argument("--tasks", metavar="FILE", help=tasks_help)
    p_check.add_argument(
        "--no-oracle",
        action="store_true",
        help="leave out the oracle rule (for an environment without reference_action(); else it fails)",
    )
    sub.add_parser("sql-eval", help="score text-to-SQL predictions (skyrl-gym sql-eval --help)")
    return parser


def _run(args: argparse.Namespace) -> int:
    if args.command == "list":
        for env_id in sorted(skyrl_gym.registry):
            print(f"{env_id:24} {skyrl_gym.spec(env_id).description}")
        return 0

    if args.command == "check":
        from skyrl_gym.testing import check_env

        tasks = load_tasks(args.tasks) if args.tasks else None
        for env_id in args.env_ids:
            skyrl_gym.spec(env_id)  # an unknown id is an error, not a failed check
        failed = False
        for env_id in args.env_ids:
            report = check_env(
                lambda env_id=env_id: skyrl_gym.make(env_id),
                tasks=tasks,
                oracle=not args.no_oracle,
                raise_on_failure=False,
            )
            print(report.summary())
            failed |= not report.ok
        return 1 if failed else 0

    policies = args.policy or list(POLICIES)
    tasks = load_tasks(args.tasks) if args.tasks else None
    results = []
    start = time.perf_counter()
    env_ids = _playable(args.env_ids, with_tasks=tasks is not None)
    total = len(env_ids) * len(policies) * args.episodes
    with EpisodeProgress(total, desc="play", enabled=args.progress) as progress:

        def on_episode(reward: float, end: str) -> None:
            progress.update(None if end == "error" else reward >= PASS_REWARD)

        for env_id in env_ids:
            for name in policies:
                progress.set_label(f"{env_id}/{name}")
                stats = play(env_id, POLICIES[name], args.episodes, args.seed, tasks, on_episode)
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
