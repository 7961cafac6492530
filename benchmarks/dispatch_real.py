"""The three dispatchers on real trajectories: containers or sandboxes set up, commands run, hidden tests run.

``--env terminal`` (default): every trajectory is a row of ``datasets/terminal`` played by the agent runner:
set-up starts the task's container (Docker), the episode runs the model's commands in it, verification runs
the task's tests in the evaluate stage (the terminal environment defers them).

``--env swe``: every trajectory is an instance of the ``swe`` environment's ``--split`` (``datasets/swe``, or
``--instances``): set-up makes the repository at the bugged state (``--swe-backend bwrap``: a folder whose
commands run in the bubblewrap sandbox; ``docker``: a container of the repository version's image), the
episode applies the fix and submits, verification applies the agent's diff to a fresh copy and runs the
repository's own tests (deferred to the evaluate stage).

The same rows go through ``async_batch`` (``--slots``
trajectories at once), ``fixed_pool`` (``--slots`` workers) and ``async_pipeline`` (``--slots`` generation
slots; its set-up and verification workers adapt, so it first runs one warm-up batch and is measured on the
next), and it prints each one's wall, its ratio to async_batch, the stage means and the generation
utilisation from the dispatcher's own ``stats``, and the bound (I+R+E)/R from async_batch's stage means.
R is the whole episode: model turns and the commands run in the container. On a machine with few cores the
stage times grow with how many containers work at once (so the pipeline's R, I and E exceed the batch's);
the replay (``dispatch_replay.py``) assumes they do not.

The engine:

- ``--engine scripted`` (default; no model needed): plays each task's reference solution (the environment's
  ``reference_action()``; for ``swe``, the instance's fix applied with ``git apply``, then ``<submit/>``),
  holding one of ``--slots`` engine slots for ``--turn-s`` seconds per model turn (a stand-in for a GPU's
  decode time; the rewards are real: the tests decide);
- ``--engine hf|vllm|remote --model NAME``: a real model through ``make_engine`` (``--engine-option k=v``
  passes engine options, e.g. ``base_url=http://...`` for ``remote``); the engine's own batching limits
  generation, the dispatchers get ``--slots``.

    images/start-dockerd.sh && images/build.sh terminal
    python benchmarks/dispatch_real.py                                   # scripted engine, test split
    python benchmarks/dispatch_real.py --env swe --rows 8 --samples 1    # swe instances on bwrap
    python benchmarks/dispatch_real.py --engine vllm --model Qwen/Qwen2.5-7B-Instruct --slots 64 --samples 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from skyrl_gym.envs.terminal.env import TerminalEnv
from skyrl_train.inference import SamplingParams, make_engine
from skyrl_train.inference.scripted import ScriptedEngine
from skyrl_train.rollout import AgentRunner
from skyrl_train.rollout.dispatch import AsyncBatchDispatcher
from skyrl_train.rollout.dispatch.async_pipeline import AsyncPipelineDispatcher
from skyrl_train.rollout.dispatch.fixed_pool import FixedPoolDispatcher

REPO = Path(__file__).resolve().parents[1]


def load_rows(split: str, limit: int | None) -> list[dict[str, Any]]:
    """The terminal dataset's rows of ``split`` (at most ``limit``)."""
    with open(REPO / "datasets" / "terminal" / f"{split}.jsonl") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    return rows[:limit] if limit else rows


def swe_rows(split: str, limit: int | None, env_config: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of the swe instances of ``split`` (at most ``limit``, taken in turn from each repository so that
    a short run covers them all), with the prompt the environment gives for its backend."""
    from skyrl_gym.envs.swe.env import SWEEnv, instance_prompt
    from skyrl_gym.envs.swe.tasks import load_split

    workdir = SWEEnv(env_config)._workdir()
    by_repo: dict[str, list[Any]] = {}
    for instance in load_split(split, env_config.get("instances_path")):
        by_repo.setdefault(instance.repo, []).append(instance)
    ordered = [
        group[i]
        for i in range(max(map(len, by_repo.values())))
        for group in by_repo.values()
        if i < len(group)
    ]
    rows, prompts = [], set()
    for instance in ordered:
        prompt = instance_prompt(instance, workdir)
        if prompt[-1]["content"] in prompts:
            continue  # the scripted engine tells tasks apart by their prompt
        prompts.add(prompt[-1]["content"])
        ground_truth = {"instance_id": instance.instance_id}
        rows.append(
            {
                "prompt": prompt,
                "env_class": "swe",
                "reward_spec": {"method": "rule", "ground_truth": ground_truth},
            }
        )
    return rows[:limit] if limit else rows


def references(env_name: str, rows: list[dict[str, Any]], env_config: dict[str, Any]) -> dict[str, list[str]]:
    """Each task's reference replies, by a text of its prompt that names the task."""
    found = {}
    for row in rows:
        extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
        if env_name == "swe":
            from skyrl_gym.envs.swe.env import SWEEnv

            env = SWEEnv(env_config, extras)
            found[row["prompt"][-1]["content"].strip()] = env.reference_action() or ["<submit/>"]
        else:
            env = TerminalEnv(extras=extras)
            found[env.task.instruction.strip()] = env.reference_action() or ["<submit/>"]
    return found


class SlotScriptedEngine(ScriptedEngine):
    """Each task's reference replies, one engine slot of ``slots`` held ``turn_s`` seconds per model turn."""

    def __init__(self, tokenizer: Any, references: dict[str, list[str]], slots: int, turn_s: float):
        def script(text: str) -> str:
            actions = next(actions for key, actions in references.items() if key in text)
            # each reply but the last runs a command whose output comes back as an observation
            return actions[min(text.count("<output>"), len(actions) - 1)]

        super().__init__(tokenizer, script)
        self._slots = asyncio.Semaphore(slots)
        self.turn_s = turn_s

    async def generate(self, prompts, params):
        async with self._slots:
            await asyncio.sleep(self.turn_s)
            return await super().generate(prompts, params)


def build_engine(args: argparse.Namespace, rows: list[dict[str, Any]]) -> Any:
    if args.engine == "scripted":
        from skyrl_train.models import load_tokenizer

        found = references(args.env, rows, args.env_config)
        return SlotScriptedEngine(load_tokenizer(args.model), found, args.slots, args.turn_s)
    options = dict(option.split("=", 1) for option in args.engine_option)
    return make_engine(args.engine, model_path=args.model, **options)


async def play(engine: Any, dispatcher: Any, rows: list[dict[str, Any]], args: argparse.Namespace) -> dict:
    """One batch through ``dispatcher``: wall, rewards, errors and the dispatcher's stats."""
    runner = AgentRunner(engine, dispatcher=dispatcher, env_configs={args.env: args.env_config})
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature)
    started = time.monotonic()
    output = await runner.run(rows, args.samples, params)
    wall = time.monotonic() - started
    trajectories = output.trajectories
    for t in trajectories:
        if t.end == "error":
            print(f"error trajectory (group {t.group_id}): {str(t.error)[:500]}", flush=True)
    return {
        "wall": wall,
        "reward": statistics.fmean(t.reward for t in trajectories),
        "errors": sum(t.end == "error" for t in trajectories),
        "stage_s": AsyncPipelineDispatcher.mean_stage_s(dispatcher.stats),
        "utilisation": dispatcher.stats.generation_utilisation,
        "in_flight": dispatcher.stats.max_in_flight,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--env", default="terminal", choices=["terminal", "swe"], help="the tasks' environment"
    )
    parser.add_argument(
        "--swe-backend", default="bwrap", choices=["bwrap", "docker"], help="swe: where episodes run"
    )
    parser.add_argument("--instances", default=None, help="swe: instance file (default: datasets/swe)")
    parser.add_argument("--engine", default="scripted", help="scripted, hf, vllm or remote")
    parser.add_argument("--model", default="embedded:smollm2-135m", help="model (or, scripted: tokenizer)")
    parser.add_argument("--engine-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--split", default="test", choices=["train", "test"])
    parser.add_argument("--rows", type=int, default=None, help="at most this many tasks")
    parser.add_argument("--samples", type=int, default=2, help="trajectories per task")
    parser.add_argument("--slots", type=int, default=4, help="generation slots (async_batch's whole budget)")
    parser.add_argument("--turn-s", type=float, default=0.5, help="scripted: seconds per model turn")
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="per model turn (default 512; swe: 16384, a whole fix)"
    )
    parser.add_argument("--temperature", type=float, default=1.0)
    args = parser.parse_args()

    args.env_config = {"timings": False}
    if args.max_tokens is None:
        # the scripted swe reply is the whole fix as one base64 command: a large patch is thousands of tokens
        args.max_tokens = 16384 if args.env == "swe" else 512
    if args.env == "swe":
        args.env_config.update(backend=args.swe_backend, instances_path=args.instances)
        rows = swe_rows(args.split, args.rows, args.env_config)
    else:
        rows = load_rows(args.split, args.rows)
    engine = build_engine(args, rows)
    pipeline = AsyncPipelineDispatcher(args.slots)
    asyncio.run(play(engine, pipeline, rows, args))  # warm-up: images built, the pipeline sizes itself
    dispatchers = {
        "async_batch": AsyncBatchDispatcher(args.slots),
        "fixed_pool": FixedPoolDispatcher(args.slots),
        "async_pipeline": pipeline,
    }
    runs = {
        name: asyncio.run(play(engine, dispatcher, rows, args)) for name, dispatcher in dispatchers.items()
    }

    means = runs["async_batch"]["stage_s"]
    bound = sum(means.values()) / means["generate"] if means["generate"] > 0 else float("nan")
    print(
        f"\n{len(rows)} {args.env} tasks x {args.samples} samples, {args.slots} slots, engine {args.engine}; "
        f"async_batch's stage means I {means['initialize']:.2f}s R {means['generate']:.2f}s "
        f"E {means['evaluate']:.2f}s: bound (I+R+E)/R = {bound:.2f}x"
    )
    print(
        f"{'dispatcher':<15} {'wall':>7} {'vs batch':>8} {'gen util':>8} {'I s':>5} {'R s':>5} {'E s':>5} "
        f"{'in flight':>9} {'reward':>6} {'errors':>6}"
    )
    for name, run in runs.items():
        stage_s = run["stage_s"]
        print(
            f"{name:<15} {run['wall']:>6.1f}s {runs['async_batch']['wall'] / run['wall']:>7.2f}x "
            f"{run['utilisation']:>8.2f} {stage_s['initialize']:>5.2f} {stage_s['generate']:>5.2f} "
            f"{stage_s['evaluate']:>5.2f} {run['in_flight']:>9} {run['reward']:>6.2f} {run['errors']:>6}"
        )
    ratio = runs["async_batch"]["wall"] / runs["async_pipeline"]["wall"]
    print(f"async_pipeline against bounded async_batch: {ratio:.2f}x (async_batch's wall / async_pipeline's)")
    sizes = (pipeline.initialize_concurrency, pipeline.evaluate_concurrency, pipeline.max_ahead)
    print(f"async_pipeline's set-up, verification workers and max_ahead after this batch: {sizes}")
    engine.close()


if __name__ == "__main__":
    main()
