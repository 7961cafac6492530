"""``async_pipeline``: set-up, generation and verification as stages, each with its own workers.

A bounded batch (``async_batch``) holds a generation slot for a trajectory's whole life, so while a trajectory
starts its container or runs its hidden tests the engine has one request less than it could serve. Here the
three stages are apart, as in SkyRL-Agent's asynchronous pipeline::

    jobs --> [initialize x I] --ready (<= max_ahead)--> [generate x G] --done (<= max_behind)--> [evaluate x E]
                                                                                                   |
                                     release (its own task, exactly once per job, also after a failure) <--

- ``generate_concurrency`` (G) is the number of trajectories the engine is given at once: the generation
  slots. It is what ``async_batch``'s ``max_concurrency`` bounds, and the trainer's
  ``generator.max_concurrent_trajectories`` sets it (``make_dispatcher`` passes it as ``max_concurrency``).
- ``initialize_concurrency`` (I) and ``evaluate_concurrency`` (E) bound how many set-ups and verifications run
  at once (they cost CPU and containers, not engine slots).
- ``max_ahead`` bounds how far set-up runs ahead of generation: a job takes one of ``max_ahead`` places before
  its set-up starts and gives it back when its generation starts. So at most ``max_ahead`` set up (or
  setting up) environments ever wait for a generation slot, and resources such as containers never pile up
  however fast set-up is.
- ``max_behind`` bounds the generated trajectories waiting for a verification worker; when it is full the
  generation workers wait (back-pressure) instead of piling up finished environments.

How many set-up and verification workers keep G slots fed depends on the stage times (Little's law: G x mean
stage time / mean generation time, with some headroom). Caps given to the constructor stay fixed; caps not
given adapt after every run to the stage times that run measured (:meth:`AsyncPipelineDispatcher.resize`);
:meth:`AsyncPipelineDispatcher.sized_for` builds a fixed pipeline for known stage times.

Set-ups start in job order; a job enters generation as soon as its set-up is done and a slot is free (so a slow
set-up never holds the others back); results come back in job order. Each stage runs under its own deadline
(``timeouts``); a stage that raises or overruns fails that job alone (:func:`~skyrl_train.rollout.dispatch.base.run_stage`)
and the job goes straight to its release.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import AliasChoices, Field

from skyrl_train.config.base import Float
from skyrl_train.rollout.dispatch.base import (
    Dispatcher,
    DispatcherSettings,
    DispatchStats,
    Job,
    StagedJob,
    StageTimeouts,
    as_staged,
    register_dispatcher,
    release_job,
    run_stage,
)

__all__ = ["AsyncPipelineDispatcher", "AsyncPipelineSettings"]


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _or(value: Any, default: int) -> Any:
    return default if value is None else value


ADAPT_LIMIT = 4
"""An adapting stage gets at most this many times the generation slots as workers."""


def _littles_law(
    slots: int, stage_s: Mapping[str, float], headroom: float, limit: int | None = None
) -> tuple[int, int, int]:
    """(set-up workers, verification workers, max_ahead) that keep ``slots`` generation slots fed.

    By Little's law a stage must hold ``slots x its mean time / the mean generation time`` jobs to pass them
    at the rate generation takes them; ``headroom`` covers the spread of those times. Set-up may run ahead by
    its own workers plus one wave of ready jobs for the slots that free up next.
    """
    if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not headroom > 0:
        raise ValueError(f"headroom must be a positive number, got {headroom!r}")
    generate_s = stage_s.get("generate", 0.0)
    if not generate_s > 0:
        raise ValueError(f"the mean generation time must be positive to size a pipeline, got {generate_s!r}")

    def workers(stage: str) -> int:
        count = max(1, math.ceil(headroom * slots * stage_s.get(stage, 0.0) / generate_s))
        return count if limit is None else min(count, limit)

    setups = workers("initialize")
    return setups, workers("evaluate"), setups + slots


class AsyncPipelineSettings(DispatcherSettings):
    """Settings of ``generator.dispatcher: {type: async_pipeline}``: set-up, generation and verification as
    stages with their own workers. The generation slots are generator.max_concurrent_trajectories. A cap left
    null adapts after every batch to the stage times measured (Little's law)."""

    initialize_concurrency: int | None = Field(None, ge=1)
    """Set-ups at once (never more than max_ahead); null: adapts."""
    evaluate_concurrency: int | None = Field(
        None, ge=1, validation_alias=AliasChoices("evaluate_concurrency", "max_eval_parallel_agents")
    )
    """Verifications at once (SkyRL-Agent's max_eval_parallel_agents); null: adapts."""
    max_ahead: int | None = Field(None, ge=1)
    """Trajectories set up (or setting up) that wait for a generation slot, at most; null: adapts."""
    max_behind: int | None = Field(None, ge=1)
    """Generated trajectories waiting for a verification worker, at most; null: the verification workers."""
    headroom: Float = Field(1.5, gt=0, allow_inf_nan=False)
    """How much more than Little's law the adapting caps get (covers the spread of stage times)."""


@register_dispatcher("async_pipeline")
class AsyncPipelineDispatcher(Dispatcher):
    """The stages of every job as a pipeline with per-stage workers and bounded queues between them.

    Args:
        generate_concurrency: generation slots G (default 64). ``max_concurrency``, the name every dispatcher
            is built with by :func:`~skyrl_train.rollout.dispatch.base.make_dispatcher`, is the same setting.
        initialize_concurrency: set-ups at once.
        evaluate_concurrency: verifications at once.
        max_ahead: jobs set up or setting up that wait for a generation slot, at most. Set-up concurrency is
            at most this too.
        max_behind: generated jobs waiting for a verification worker, at most (default: the verification
            workers).
        headroom: for the caps that adapt (below), how much more than Little's law asks for.
        timeouts: per-stage deadlines, a :class:`~skyrl_train.rollout.dispatch.base.StageTimeouts` or a mapping.

    Of ``initialize_concurrency``, ``evaluate_concurrency`` and ``max_ahead``, those given stay as given; those
    not given adapt: the first run uses G (G and 2G for ``max_ahead``) and each run sets them to what would
    have kept the generation slots fed in that run (:meth:`resize` with the stage means it measured, at most
    ``ADAPT_LIMIT`` x G workers a stage). So a pipeline made from the config alone (``generator.dispatcher=
    async_pipeline``) sizes itself from the batches it runs.

    ``stats`` (a :class:`~skyrl_train.rollout.dispatch.base.DispatchStats`) has per stage the busy seconds and the
    idle seconds of its workers, failures and timeouts, and the generation slots' utilisation;
    ``max_ready`` and ``max_waiting_verification`` are the deepest the two queues got in the last run.
    """

    name = "async_pipeline"
    settings = AsyncPipelineSettings

    def __init__(
        self,
        generate_concurrency: int | None = None,
        *,
        max_concurrency: int | None = None,
        initialize_concurrency: int | None = None,
        evaluate_concurrency: int | None = None,
        max_ahead: int | None = None,
        max_behind: int | None = None,
        headroom: float = 1.5,
        timeouts: StageTimeouts | Mapping[str, float | None] | None = None,
    ):
        super().__init__()
        if (
            generate_concurrency is not None
            and max_concurrency is not None
            and generate_concurrency != max_concurrency
        ):
            raise ValueError(
                f"generate_concurrency={generate_concurrency} and max_concurrency={max_concurrency} name the same "
                "setting (the generation slots); pass one"
            )
        slots = generate_concurrency if generate_concurrency is not None else max_concurrency
        self.generate_concurrency = _positive_int("generate_concurrency", 64 if slots is None else slots)
        """Generation slots: jobs in the generate stage at once."""
        given = {
            "initialize_concurrency": initialize_concurrency,
            "evaluate_concurrency": evaluate_concurrency,
            "max_ahead": max_ahead,
        }
        self.adapting = frozenset(name for name, value in given.items() if value is None)
        """The caps that were not given, which :meth:`resize` (after every run) sets."""
        # before the first run there is nothing measured: as many set-ups and verifications as slots
        g = self.generate_concurrency
        self.initialize_concurrency = _positive_int("initialize_concurrency", _or(initialize_concurrency, g))
        """Set-ups at once (never more than ``max_ahead``)."""
        self.evaluate_concurrency = _positive_int("evaluate_concurrency", _or(evaluate_concurrency, g))
        """Verifications at once."""
        self.max_ahead = _positive_int("max_ahead", _or(max_ahead, 2 * g))
        """Jobs past (or in) set-up that have not started generating, at most."""
        self._max_behind = None if max_behind is None else _positive_int("max_behind", max_behind)
        _littles_law(1, {"generate": 1.0}, headroom)  # refuses a bad headroom now, not after the first run
        self.headroom = headroom
        """How much more than Little's law the adapting caps get."""
        self.timeouts = StageTimeouts.of(timeouts)
        """The per-stage deadlines."""
        self.stage_s: dict[str, float] = {}
        """The mean seconds a job spent in each stage in the last run (the event loop's clock)."""
        self.max_ready = 0
        """The most set-up jobs ever waiting for a generation slot in the last run (<= ``max_ahead``)."""
        self.max_waiting_verification = 0
        """The most generated jobs ever waiting for a verification worker in the last run."""

    @property
    def max_behind(self) -> int:
        """Generated jobs waiting for verification, at most (the verification workers unless given)."""
        return self.evaluate_concurrency if self._max_behind is None else self._max_behind

    @classmethod
    def sized_for(
        cls,
        generate_concurrency: int,
        stage_s: Mapping[str, float],
        *,
        headroom: float = 1.5,
        timeouts: StageTimeouts | Mapping[str, float | None] | None = None,
    ) -> AsyncPipelineDispatcher:
        """A pipeline with fixed caps that keep ``generate_concurrency`` slots fed at these stage times.

        ``stage_s`` holds the mean seconds of ``"initialize"``, ``"generate"`` and ``"evaluate"`` (for example
        :meth:`mean_stage_s` of a previous run's ``stats``). By Little's law a stage must hold ``slots x its
        mean time / the mean generation time`` jobs to pass them at the rate generation takes them;
        ``headroom`` covers the spread of those times. Set-up may run ahead by its own workers plus one wave
        of ready jobs for the slots that free up next.
        """
        setups, verifiers, ahead = _littles_law(generate_concurrency, stage_s, headroom)
        return cls(
            generate_concurrency,
            initialize_concurrency=setups,
            evaluate_concurrency=verifiers,
            max_ahead=ahead,
            headroom=headroom,
            timeouts=timeouts,
        )

    def resize(self, stage_s: Mapping[str, float]) -> None:
        """Set the adapting caps (those not given) for these mean stage times, as :meth:`sized_for` would
        (at most ``ADAPT_LIMIT`` x G workers a stage). Nothing changes without a positive generation time."""
        if not self.adapting or not stage_s.get("generate", 0.0) > 0:
            return
        limit = ADAPT_LIMIT * self.generate_concurrency
        setups, verifiers, ahead = _littles_law(self.generate_concurrency, stage_s, self.headroom, limit)
        sized = {"initialize_concurrency": setups, "evaluate_concurrency": verifiers, "max_ahead": ahead}
        for name in self.adapting:
            setattr(self, name, sized[name])

    @staticmethod
    def mean_stage_s(stats: DispatchStats) -> dict[str, float]:
        """The mean seconds one job spent in each stage in the run ``stats`` counted (0.0 for a stage not run)."""
        return {
            stage: (counters.busy_s / counters.runs if counters.runs else 0.0)
            for stage, counters in stats.stages.items()
        }

    async def run(self, jobs: Sequence[StagedJob | Job[Any]]) -> list[Any]:
        """Run every job through the three stages; their results in job order."""
        staged = [as_staged(job) for job in jobs]
        count = len(staged)
        initializers = min(self.initialize_concurrency, self.max_ahead)
        self.stats.start(
            {
                "initialize": initializers,
                "generate": self.generate_concurrency,
                "evaluate": self.evaluate_concurrency,
            }
        )
        self.max_ready = self.max_waiting_verification = 0
        started = time.monotonic()
        timeouts, stats = self.timeouts, self.stats

        ahead = asyncio.Semaphore(self.max_ahead)
        behind = asyncio.Semaphore(self.max_behind)
        ready: asyncio.Queue[int] = asyncio.Queue()
        generated: asyncio.Queue[int] = asyncio.Queue()
        results: list[Any] = [None] * count
        releasing = [False] * count
        releases: set[asyncio.Task[None]] = set()
        all_released = asyncio.Event()
        progress = {"next": 0, "released": 0, "in_flight": 0}
        loop = asyncio.get_running_loop()
        spent = {stage: [0.0, 0] for stage in ("initialize", "generate", "evaluate")}  # seconds, jobs

        async def stage(index: int, name: str, timeout_s: float | None) -> bool:
            # timed on the loop's clock (the one the stages sleep on) for resize()
            begin = loop.time()
            try:
                return await run_stage(staged[index], name, timeout_s, stats)
            finally:
                spent[name][0] += loop.time() - begin
                spent[name][1] += 1

        async def release(index: int) -> None:
            try:
                await release_job(staged[index], timeouts.release, stats)
            finally:
                results[index] = staged[index].result
                if index < progress["next"]:  # a job never admitted (run cancelled) was not in flight
                    progress["in_flight"] -= 1
                progress["released"] += 1
                if progress["released"] == count:
                    all_released.set()

        def finish(index: int) -> None:
            # the job's one release runs as its own task, so a slow close never holds a stage's worker
            if releasing[index]:
                return
            releasing[index] = True
            task = asyncio.ensure_future(release(index))
            releases.add(task)
            task.add_done_callback(releases.discard)

        async def initializer() -> None:
            while True:
                await ahead.acquire()  # the place is given back when the job starts generating (or fails)
                if progress["next"] >= count:
                    ahead.release()
                    return
                index = progress["next"]
                progress["next"] += 1
                progress["in_flight"] += 1
                stats.max_in_flight = max(stats.max_in_flight, progress["in_flight"])
                if await stage(index, "initialize", timeouts.initialize):
                    ready.put_nowait(index)
                    self.max_ready = max(self.max_ready, ready.qsize())
                else:
                    ahead.release()
                    finish(index)

        async def generator() -> None:
            while True:
                index = await ready.get()
                ahead.release()
                if not await stage(index, "generate", timeouts.generate):
                    finish(index)
                    continue
                await behind.acquire()  # given back when a verification worker takes the job
                generated.put_nowait(index)
                self.max_waiting_verification = max(self.max_waiting_verification, generated.qsize())

        async def evaluator() -> None:
            while True:
                index = await generated.get()
                behind.release()
                await stage(index, "evaluate", timeouts.evaluate)
                finish(index)

        workers = [asyncio.ensure_future(initializer()) for _ in range(initializers)]
        workers += [asyncio.ensure_future(generator()) for _ in range(self.generate_concurrency)]
        workers += [asyncio.ensure_future(evaluator()) for _ in range(self.evaluate_concurrency)]
        if count == 0:
            all_released.set()
        done_waiter = asyncio.ensure_future(all_released.wait())
        try:
            pending = {done_waiter, *workers}
            while not done_waiter.done():
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task is not done_waiter and not task.cancelled() and task.exception() is not None:
                        raise task.exception()  # a worker broke (a bug, not a job's failure): stop the run
            return results
        finally:
            done_waiter.cancel()
            for task in workers:
                task.cancel()
            await asyncio.gather(done_waiter, *workers, return_exceptions=True)
            # cancelled (or stopped by a bug) midway: every job not yet releasing gets its one release
            for index in range(count):
                finish(index)
            if releases:
                await asyncio.gather(*releases, return_exceptions=True)
            self.stats.finish(count, time.monotonic() - started)
            self.stage_s = {name: (total / jobs if jobs else 0.0) for name, (total, jobs) in spent.items()}
            self.resize(self.stage_s)
