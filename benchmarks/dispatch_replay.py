"""The three dispatchers on a replayed workload: bounded async batching, a fixed pool, and the stage pipeline.

Each trajectory is three timed stages: set-up I, generation R and verification E. I and E are replayed from
this project's own environments, measured on this machine (``--measure`` measures them again and prints the
samples to paste into ``MEASURED``):

- terminal set-up: ``TerminalEnv.init`` (image cached, container and persistent shell started), its
  ``info["setup_s"]``; terminal verification: the deferred ``TerminalEnv.evaluate()`` (the task's hidden tests
  copied in and run), its ``duration_s``; both for every task of ``datasets/terminal`` (train and test splits),
  each task once, after one warm-up episode that builds the task's image;
- code verification: ``CodeEnv``'s judging of the reference program in the sandbox (``judge_s``), for bundled
  problems; a code trajectory's set-up is nothing to measure (no container).

A job draws its I and E from those samples (with replacement: a replay of the measured distribution, tail
included) and its R from a lognormal with sigma ``--generation-sigma`` (response lengths are heavy-tailed; no
engine runs here to measure it). R is scaled so that the share of set-up plus verification, sum(I+E) over
sum(I+R+E), is each ``--shares`` value.

The engine (``SlotEngine``) has ``--slots`` generation slots: a request waits for a free slot and then takes
its fixed R (the model of an engine whose batch is full at ``slots`` sequences: a request's time does not
depend on how many others run, and no more than ``slots`` run at once). Its utilisation, busy slot-seconds
over ``slots`` x wall, is measured by the engine itself, the same way for every dispatcher.

The clock: by default a virtual one (``VirtualClockLoop``): the dispatchers run unchanged on an event loop
whose time jumps to the next timer when nothing is ready, so a replay is exact, repeatable on a loaded
machine and takes seconds; ``--clock real`` sleeps for real instead (``--time-scale`` real seconds per mean
R), which adds the dispatchers' own CPU time and the machine's scheduling noise.

The comparison is fair: every dispatcher gets the same jobs and the same engine; ``async_batch`` and
``fixed_pool`` are given ``--slots`` trajectories at once (a bounded batch's whole budget is its generation
slots), and the pipeline ``--slots`` generation workers. Only the pipeline's set-up and verification workers
(containers and CPU, not engine slots) are sized, with ``AsyncPipelineDispatcher.sized_for`` from the stage
means of the previous batch (another draw of the same workload; a trainer takes them from the last step's
``stats``), by Little's law: ``--headroom`` x slots x mean stage time / mean R. ``1st`` is a pipeline made
with no caps given (as ``generator.dispatcher=async_pipeline`` makes it) on its first batch: set-up and
verification workers = slots, ``max_ahead`` = 2 x slots; ``auto`` is that pipeline after one batch (the
previous one), from which it sized itself. ``fixed_pool`` replays the same set-up times: a terminal task's
container comes from the task's own image, so a worker cannot reuse the previous task's container (its reuse
pays where one image serves every task).

Printed per share: the walls, the ratios to async_batch, the bound on the speedup sum(I+R+E)/sum(R) (what a
dispatcher keeping the engine always full could reach), the straggler floor max(I+R+E) (a floor for any
dispatcher), the "R floor" (generation alone list-scheduled in job order on the slots: the generation tail
that no dispatcher ignorant of R avoids, even with free set-up and verification), the pipeline's share of
the bound (its speedup over the bound) and of the R floor, and each dispatcher's generation utilisation.
The bound is asymptotic: a finite batch also pays its head (the first set-ups) and its generation tail, which
weigh more the fewer jobs each slot runs (compare ``--jobs 256``).

    python benchmarks/dispatch_replay.py                     # replay the recorded measurements
    python benchmarks/dispatch_replay.py --measure           # measure the environments again (needs Docker)
    python benchmarks/dispatch_replay.py --shares 0.5 0.75 --jobs 256 --slots 16 --clock real
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from skyrl_train.rollout.dispatch import AsyncBatchDispatcher
from skyrl_train.rollout.dispatch.async_pipeline import AsyncPipelineDispatcher
from skyrl_train.rollout.dispatch.fixed_pool import FixedPoolDispatcher

REPO = Path(__file__).resolve().parents[1]

MEASURED_ON = "2026-12-02, 2 cores shared with other work (load average about 7), Docker 28 overlay2"
# fmt: off
MEASURED: dict[str, list[float]] = {
    "terminal_setup_s": [
        0.6762, 0.5017, 0.6058, 0.8648, 0.427, 0.3035, 0.3064, 0.2685, 0.4875, 0.276, 0.1742, 0.2199,
        0.3717, 0.3219, 0.2541, 0.2847, 0.3124, 0.3181, 0.2429, 0.2746, 0.2897, 0.2753, 0.2748, 0.3094,
        0.238, 0.3202, 0.4235, 0.6774, 0.279, 0.3187, 0.2433, 0.4268, 0.4288, 0.2986, 0.5124, 0.6677,
        0.4797, 0.434, 0.3025, 0.5416, 0.3537, 0.5387, 0.305, 0.399, 0.3698, 0.4123, 0.381, 0.4012, 0.4357,
        0.3475, 0.2587, 0.2603, 0.2582, 0.3413, 0.4209
    ],
    "terminal_verify_s": [
        1.7088, 1.2048, 1.716, 1.4125, 1.0793, 0.6547, 0.6316, 0.646, 0.7493, 0.727, 0.5846, 0.5073,
        0.6276, 0.6611, 0.6586, 0.6201, 0.5236, 0.7962, 0.6338, 0.5971, 0.5828, 0.604, 0.6278, 0.6588,
        0.6126, 0.7893, 1.1117, 1.0815, 0.6454, 0.4967, 0.8105, 0.7603, 2.4727, 2.4441, 2.9039, 2.6617,
        0.9033, 0.7505, 0.8372, 1.11, 0.8749, 0.8925, 0.7934, 0.8229, 0.7056, 0.8526, 0.8021, 0.803,
        0.7893, 0.7108, 0.677, 0.6386, 2.3587, 0.9265, 1.0723
    ],
    "code_verify_s": [
        1.0967, 0.2108, 0.5504, 0.1879, 1.5993, 0.9434, 2.5848, 0.5749, 2.399, 0.4153, 2.6828, 0.7504,
        1.8183, 0.5647, 2.3893, 0.6564, 2.2783, 0.5847, 2.4591, 0.7759, 1.8142, 0.7454, 2.2749, 0.5947,
        2.4572, 0.55, 1.3614, 0.3295, 5.2227, 0.4709, 1.3884, 0.5704, 1.3724, 0.3193, 1.1626, 0.1727,
        1.3522, 0.556, 1.9882, 0.5802
    ],
}
# fmt: on
"""Seconds, from ``python benchmarks/dispatch_replay.py --measure`` (``MEASURED_ON``): the 55 terminal tasks of
``datasets/terminal`` (train and test), each task's second episode (its image already built): set-up median
0.32 s (max 0.86), verification median 0.79 s (max 2.90; the service tasks start and probe a server); 40 code
problems (HumanEval and stdin/stdout alternating): judging median 0.86 s (max 5.22)."""


# -- measuring the environments ----------------------------------------------------------------------------
def measure_terminal(limit: int | None) -> tuple[list[float], list[float]]:
    """Set-up and verification seconds of every terminal task's reference episode (image built beforehand)."""
    from skyrl_gym.envs.terminal.env import TerminalEnv

    rows = []
    for split in ("train", "test"):
        with open(REPO / "datasets" / "terminal" / f"{split}.jsonl") as lines:
            rows += [json.loads(line) for line in lines if line.strip()]
    rows = rows[:limit] if limit else rows
    setups, verifications = [], []
    for number, row in enumerate(rows):
        extras = {key: value for key, value in row.items() if key not in ("prompt", "env_class")}
        samples = []
        for _ in range(2):  # the first episode builds the task's image (once per task in a training run)
            env = TerminalEnv(extras=extras)
            env.defer_verification()
            try:
                _, info = env.init(row["prompt"])
                for action in env.reference_action() or ["<submit/>"]:
                    if env.step(action)["done"]:
                        break
                verification = env.evaluate()
            finally:
                env.close()
            samples.append((info["setup_s"], verification["duration_s"], verification["reward"]))
        setup_s, verify_s, reward = samples[-1]
        setups.append(setup_s)
        verifications.append(verify_s)
        print(f"  terminal {number + 1:>2}/{len(rows)} {row['task_path']:<20} set-up {setup_s:.3f}s "
              f"verify {verify_s:.3f}s reward {reward}")  # fmt: skip
    return setups, verifications


def measure_code(count: int) -> list[float]:
    """Seconds the code environment spends judging the reference program of ``count`` bundled problems."""
    from skyrl_gym.envs.code.env import CodeEnv

    judged = []
    for seed in range(count):
        env = CodeEnv()
        try:
            env.reset(seed=seed)
            action = env.reference_action()
            if action is None:
                continue
            output = env.step(action)
            assert output["reward"] == 1.0, output
            judged.append(env.get_metrics()["judge_s"])
        finally:
            env.close()
    return judged


def measure(limit: int | None, code_problems: int) -> dict[str, Any]:
    """Measure the stage times again; print them as the ``MEASURED`` literal to record in this file."""
    setups, verifications = measure_terminal(limit)
    code = measure_code(code_problems)
    measured = {
        "terminal_setup_s": [round(x, 4) for x in setups],
        "terminal_verify_s": [round(x, 4) for x in verifications],
        "code_verify_s": [round(x, 4) for x in code],
    }
    for key, values in measured.items():
        print(f"{key}: n={len(values)} median={statistics.median(values):.4f} mean={statistics.fmean(values):.4f} "
              f"max={max(values):.4f}")  # fmt: skip
    print("MEASURED = " + json.dumps(measured))
    return measured


# -- the replay ----------------------------------------------------------------------------------------------
class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock jumps to the next timer whenever nothing is ready to run.

    The dispatchers' code runs unchanged (every ``asyncio.sleep``, semaphore and queue is real); only the
    waiting is skipped, so a replay is exact and repeatable on a loaded machine and takes milliseconds. What
    it leaves out is the dispatchers' own CPU time, which ``--clock real`` includes.
    """

    def __init__(self) -> None:
        super().__init__()
        self._virtual_now = 0.0

    def time(self) -> float:
        return self._virtual_now

    def _run_once(self) -> None:
        # asyncio's private scheduler state: nothing ready, so the next timer's time is "now"
        if not self._ready and self._scheduled:
            self._virtual_now = max(self._virtual_now, self._scheduled[0].when())
        super()._run_once()


def run_on(clock: str, coroutine: Any) -> Any:
    """Run ``coroutine`` on a virtual-clock loop or a real one."""
    if clock == "real":
        return asyncio.run(coroutine)
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


class SlotEngine:
    """A generation engine with ``slots`` slots: a request waits for a slot, then takes its own fixed time."""

    def __init__(self, slots: int):
        self.slots = slots
        self._free = asyncio.Semaphore(slots)
        self.busy_s = 0.0
        """Slot-seconds spent generating."""
        self.peak = 0
        self._running = 0

    async def generate(self, seconds: float) -> None:
        """One request of ``seconds`` (already scaled)."""
        async with self._free:
            self._running += 1
            self.peak = max(self.peak, self._running)
            loop = asyncio.get_running_loop()
            begin = loop.time()
            try:
                await asyncio.sleep(seconds)
            finally:
                self.busy_s += loop.time() - begin
                self._running -= 1


class ReplayJob:
    """One trajectory of the replay: its stages sleep the drawn times; generation goes through the engine."""

    def __init__(self, index: int, times: tuple[float, float, float], engine: SlotEngine):
        self.index = index
        self.setup_s, self.generation_s, self.verify_s = times
        self.engine = engine
        self.error: str | None = None

    async def initialize_trajectory(self, slot: Any) -> None:
        await asyncio.sleep(self.setup_s)

    async def generate_trajectory(self) -> None:
        await self.engine.generate(self.generation_s)

    async def evaluate_trajectory(self) -> None:
        await asyncio.sleep(self.verify_s)

    async def release(self) -> None:
        pass

    def fail(self, stage: str, message: str) -> None:
        self.error = self.error or message

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def result(self) -> Any:
        return self.index if self.error is None else self.error


def draw_workload(
    setups: list[float], verifications: list[float], jobs: int, share: float, sigma: float, seed: int
) -> list[tuple[float, float, float]]:
    """``jobs`` (I, R, E): I and E replayed from the samples, R lognormal, scaled so (I+E)/(I+R+E) = share."""
    rng = random.Random(seed)
    setup = [rng.choice(setups) for _ in range(jobs)]
    verify = [rng.choice(verifications) for _ in range(jobs)]
    raw = [rng.lognormvariate(0.0, sigma) for _ in range(jobs)]
    overhead = sum(setup) + sum(verify)
    scale = overhead * (1 - share) / share / sum(raw)
    return [(i, r * scale, e) for i, r, e in zip(setup, raw, verify, strict=True)]


def in_order_floor(times: list[tuple[float, float, float]], slots: int) -> float:
    """The wall of generation alone, started in job order on ``slots`` slots the moment one frees.

    No dispatcher that starts generations in job order (none knows R in advance) ends before this, even with
    set-up and verification free: it is the generation tail a finite batch cannot avoid.
    """
    free = [0.0] * slots
    for _, generation, _ in times:
        heapq.heappush(free, heapq.heappop(free) + generation)
    return max(free)


def mean_stage_s(times: list[tuple[float, float, float]]) -> dict[str, float]:
    """Mean seconds per stage of a workload, as a previous batch's ``stats`` would report them."""
    mean_i, mean_r, mean_e = (statistics.fmean(column) for column in zip(*times, strict=True))
    return {"initialize": mean_i, "generate": mean_r, "evaluate": mean_e}


async def replay(dispatcher: Any, times: list[tuple[float, float, float]], slots: int, scale: float) -> dict:
    """Run the jobs through ``dispatcher`` on a fresh engine: wall seconds (unscaled) and utilisation."""
    engine = SlotEngine(slots)
    jobs = [ReplayJob(n, (i * scale, r * scale, e * scale), engine) for n, (i, r, e) in enumerate(times)]
    loop = asyncio.get_running_loop()
    begin = loop.time()
    results = await dispatcher.run(jobs)
    wall = loop.time() - begin
    assert results == list(range(len(jobs))), [r for r in results if isinstance(r, str)][:3]
    assert engine.peak <= slots
    return {
        "wall": wall / scale,
        "utilisation": engine.busy_s / (slots * wall),
        "max_in_flight": dispatcher.stats.max_in_flight,
    }


def run_share(
    args: argparse.Namespace, setups: list[float], verifications: list[float], share: float
) -> dict:
    """Replay one workload at ``share`` through every dispatcher; walls, utilisations and the bounds."""
    times = draw_workload(setups, verifications, args.jobs, share, args.generation_sigma, args.seed)
    # the pipeline is sized from the previous batch's stage means (another draw), as a trainer sizes it from
    # the last step's stats; the workload itself stays unseen
    previous = draw_workload(setups, verifications, args.jobs, share, args.generation_sigma, args.seed + 1)
    # R's mean fixes the time scale, so a real-clock run lasts about as long at every share
    scale = args.time_scale / statistics.fmean(r for _, r, _ in times)
    dispatchers = {
        "async_batch": AsyncBatchDispatcher(args.slots),
        "fixed_pool": FixedPoolDispatcher(args.slots),
        "async_pipeline": AsyncPipelineDispatcher.sized_for(
            args.slots, mean_stage_s(previous), headroom=args.headroom
        ),
        "pipeline_first": AsyncPipelineDispatcher(args.slots),
        "pipeline_auto": AsyncPipelineDispatcher(args.slots),
    }
    # the adapting pipeline runs the previous batch first and sizes itself from what it measured there
    run_on(args.clock, replay(dispatchers["pipeline_auto"], previous, args.slots, scale))
    runs = {name: run_on(args.clock, replay(d, times, args.slots, scale)) for name, d in dispatchers.items()}
    pipeline = dispatchers["async_pipeline"]
    return {
        "share": share,
        "runs": runs,
        "bound": sum(i + r + e for i, r, e in times) / sum(r for _, r, _ in times),
        "floor": max(i + r + e for i, r, e in times),
        "in_order": in_order_floor(times, args.slots),
        "sizes": (pipeline.initialize_concurrency, pipeline.evaluate_concurrency, pipeline.max_ahead),
    }


def print_table(rows: list[dict], args: argparse.Namespace) -> None:
    """One line per share; walls in replayed (measured-scale) seconds."""
    print(
        f"\n{args.jobs} jobs, {args.slots} generation slots, R lognormal sigma {args.generation_sigma}, I and E "
        f"replayed from {args.env} measurements ({'measured in this run' if args.measure else MEASURED_ON}), {args.clock} clock"
    )
    names = ("async_batch", "fixed_pool", "async_pipeline", "pipeline_first", "pipeline_auto")
    print(
        f"{'I+E share':>9} {'batch':>7} {'pool':>7} {'pipe':>7} {'pool/b':>7} {'pipe/b':>7} {'1st/b':>6} "
        f"{'auto/b':>6} {'bound':>6} {'floor':>6} {'R floor':>7} {'of bound':>8} {'of R fl':>7} {'gen util b/pool/pipe/1st/auto':>30} "
        f"{'pipe I,E,ahead':>14} {'in flight':>9}"
    )
    for row in rows:
        runs = row["runs"]
        batch, pool, pipe, first, auto = (runs[name]["wall"] for name in names)
        speedup = batch / pipe
        utils = "/".join(f"{runs[name]['utilisation']:.2f}" for name in names)
        sizes = ",".join(str(x) for x in row["sizes"])
        print(
            f"{row['share']:>9.2f} {batch:>7.1f} {pool:>7.1f} {pipe:>7.1f} {batch / pool:>6.2f}x {speedup:>6.2f}x "
            f"{batch / first:>5.2f}x {batch / auto:>5.2f}x {row['bound']:>5.2f}x {row['floor']:>6.1f} "
            f"{row['in_order']:>7.1f} {speedup / row['bound']:>8.0%} {row['in_order'] / pipe:>7.0%} {utils:>30} {sizes:>14} {runs['async_pipeline']['max_in_flight']:>9}"
        )
    legend = (
        f"pipe: async_pipeline sized from the previous batch's stage means (sized_for, headroom {args.headroom})",
        "1st: async_pipeline with no caps given, first batch (set-up and verification workers = slots, "
        "max_ahead = 2 x slots)",
        "auto: the same after one batch, sized from what it measured there",
        "bound: sum(I+R+E)/sum(R); floor: max(I+R+E); R floor: generation alone list-scheduled in job order",
        "of bound: (batch/pipe)/bound; of R fl: R floor/pipe; walls in replayed seconds",
    )
    print("\n".join(legend))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--measure", action="store_true", help="measure the environments again (needs Docker)"
    )
    parser.add_argument(
        "--measure-tasks", type=int, default=None, help="terminal tasks to measure (default all)"
    )
    parser.add_argument("--measure-code", type=int, default=40, help="code problems to measure")
    parser.add_argument("--env", choices=["terminal", "code"], default="terminal",
                        help="whose set-up and verification times to replay")  # fmt: skip
    parser.add_argument("--shares", type=float, nargs="+", default=[0.25, 0.5, 0.6, 0.75])
    parser.add_argument("--jobs", type=int, default=1280, help="trajectories per batch (SkyRL-SQL: 256 x 5)")
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--generation-sigma", type=float, default=1.0)
    parser.add_argument("--headroom", type=float, default=1.5)
    parser.add_argument(
        "--time-scale", type=float, default=0.01, help="real seconds per mean generation time"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clock", choices=["virtual", "real"], default="virtual",
                        help="virtual: exact and repeatable; real: asyncio sleeps in real time")  # fmt: skip
    args = parser.parse_args()
    measured = measure(args.measure_tasks, args.measure_code) if args.measure else MEASURED
    if args.env == "terminal":
        setups, verifications = measured["terminal_setup_s"], measured["terminal_verify_s"]
    else:
        setups, verifications = [0.0], measured["code_verify_s"]
    started = time.monotonic()
    rows = [run_share(args, setups, verifications, share) for share in args.shares]
    print_table(rows, args)
    print(f"(ran in {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
