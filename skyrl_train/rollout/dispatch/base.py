"""The dispatcher interface: staged jobs, worker slots, the rule for running one stage, and the counters.

A *staged job* (:class:`StagedJob`) is one trajectory cut into stages that a dispatcher may schedule apart::

    initialize_trajectory(slot)   set-up: make the environment, init it (start a container, copy a repo)
    generate_trajectory()         the episode: model turns and environment steps
    evaluate_trajectory()         verification after the episode (``env.evaluate()``) and metrics
    release()                     always, exactly once: close the environment or keep it in the slot

Every dispatcher follows the same rules, written once here in :func:`run_stage` and :func:`release_job`:
stages run in that order; a stage is skipped once ``job.failed`` is true, but ``release`` always runs; a
stage that raises or overruns its timeout is cancelled and the job is failed with
``job.fail(stage, "<stage> raised X")`` or ``"<stage> did not finish within N s"``; the other jobs go on;
:meth:`Dispatcher.run` returns every job's ``result`` in job order and never raises for a job.

A plain zero-argument coroutine function (:data:`Job`) is still a job: :func:`as_staged` makes it a staged
job whose whole work is its generate stage. Strategies differ in how they schedule the stages (a bounded
batch, a fixed pool of workers, a pipeline of stages); the runner never depends on which one runs.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import logging
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from skyrl_gym.registries import Registry
from skyrl_train import names
from skyrl_train.config.base import PartSettings

__all__ = [
    "DISPATCHERS",
    "STAGES",
    "Dispatcher",
    "DispatcherSettings",
    "DispatchStats",
    "Job",
    "JobFailure",
    "PlainJob",
    "StageStats",
    "StageTimeouts",
    "StagedJob",
    "WorkerSlot",
    "as_staged",
    "make_dispatcher",
    "register_dispatcher",
    "release_job",
    "run_job",
    "run_stage",
]

logger = logging.getLogger("skyrl_train.rollout.dispatch")

T = TypeVar("T")

Job = Callable[[], Awaitable[T]]
"""A zero-argument function returning an awaitable (usually an ``async def`` function's coroutine)."""

STAGES: tuple[str, ...] = ("initialize", "generate", "evaluate")
"""The stages a dispatcher times and counts, in the order they run (``release`` follows, uncounted)."""

_STAGE_METHODS = {
    "initialize": "initialize_trajectory",
    "generate": "generate_trajectory",
    "evaluate": "evaluate_trajectory",
}


# -- the protocol ---------------------------------------------------------------------------------------
@runtime_checkable
class StagedJob(Protocol):
    """One trajectory as stages a dispatcher schedules; see the module docstring for the rules."""

    async def initialize_trajectory(self, slot: WorkerSlot | None) -> None:
        """Set-up: make the environment (or take one kept in ``slot``) and init it."""

    async def generate_trajectory(self) -> None:
        """The episode: model turns and environment steps."""

    async def evaluate_trajectory(self) -> None:
        """Verification after the episode (``env.evaluate()``) and the episode's metrics."""

    async def release(self) -> None:
        """Close the environment or keep it in the slot; called exactly once, also after a failure."""

    def fail(self, stage: str, message: str) -> None:
        """Mark this job's result as an error of ``stage``; later stages are skipped."""

    @property
    def failed(self) -> bool:
        """Whether the job has failed (its later stages are skipped; ``release`` still runs)."""

    @property
    def result(self) -> Any:
        """What :meth:`Dispatcher.run` returns for this job."""


class WorkerSlot:
    """Resources that outlive one trajectory: what one long-lived worker keeps between the jobs it runs.

    ``fixed_pool`` gives each of its workers one slot and passes it to every job that worker initialises;
    a job may find an environment kept there by the job before it and reuse it. The dispatcher calls
    :meth:`close` once at the end of ``run``. Other dispatchers pass ``slot=None``.
    """

    def __init__(self, index: int = 0) -> None:
        self.index = index
        """Which worker this slot belongs to."""
        self.resources: dict[str, Any] = {}
        """Kept objects by key; persists across the jobs of one worker."""
        self._closers: dict[str, Callable[[Any], Any] | None] = {}

    def keep(self, key: str, obj: Any, closer: Callable[[Any], Any] | None = None) -> None:
        """Keep ``obj`` under ``key`` until :meth:`close` (which calls ``closer(obj)``, or ``obj.close()``).

        Keeping another object under a taken key closes the one it replaces first.
        """
        if key in self.resources and self.resources[key] is not obj:
            self._close_one(key)
        self.resources[key] = obj
        self._closers[key] = closer

    def take(self, key: str) -> Any:
        """Remove and return the object kept under ``key`` (``None`` if none); it is no longer closed here."""
        self._closers.pop(key, None)
        return self.resources.pop(key, None)

    def close(self) -> None:
        """Close every kept resource; a closer that raises is logged, the others still run."""
        for key in list(self.resources):
            self._close_one(key)

    def _close_one(self, key: str) -> None:
        obj = self.resources.pop(key, None)
        closer = self._closers.pop(key, None)
        try:
            if closer is not None:
                closer(obj)
            elif callable(getattr(obj, "close", None)):
                obj.close()
        except Exception:
            logger.warning(
                "closing the kept %r of slot %d failed:\n%s", key, self.index, traceback.format_exc()
            )

    def __repr__(self) -> str:
        return f"WorkerSlot({self.index}, resources={sorted(self.resources)})"


@dataclasses.dataclass(frozen=True)
class JobFailure:
    """The result of a plain job (see :func:`as_staged`) that raised or timed out."""

    stage: str
    message: str


class PlainJob:
    """A plain coroutine function as a staged job: its work is the generate stage; other stages do nothing.

    ``result`` is what the coroutine returned, or a :class:`JobFailure` when it raised or timed out.
    """

    def __init__(self, job: Job[Any]):
        self.job = job
        self._result: Any = None
        self._failure: JobFailure | None = None

    async def initialize_trajectory(self, slot: WorkerSlot | None) -> None:
        """Nothing to set up."""

    async def generate_trajectory(self) -> None:
        """Await the coroutine and keep what it returns."""
        self._result = await self.job()

    async def evaluate_trajectory(self) -> None:
        """Nothing to verify."""

    async def release(self) -> None:
        """Nothing to release."""

    def fail(self, stage: str, message: str) -> None:
        """Record the failure; ``result`` becomes a :class:`JobFailure`."""
        if self._failure is None:
            self._failure = JobFailure(stage, message)

    @property
    def failed(self) -> bool:
        """Whether the coroutine raised or timed out."""
        return self._failure is not None

    @property
    def result(self) -> Any:
        """The coroutine's return value, or the :class:`JobFailure`."""
        return self._failure if self._failure is not None else self._result


def as_staged(job: StagedJob | Job[Any]) -> StagedJob:
    """``job`` itself if it is a staged job, else a :class:`PlainJob` around the coroutine function."""
    if isinstance(job, StagedJob):
        return job
    if not callable(job):
        raise TypeError(f"a job is a staged job or a zero-argument coroutine function, got {job!r}")
    return PlainJob(job)


# -- timeouts and counters --------------------------------------------------------------------------------
@dataclasses.dataclass
class StageTimeouts:
    """Per-stage deadlines in seconds (``None``: no limit); a stage past its deadline is cancelled."""

    initialize: float | None = None
    generate: float | None = None
    evaluate: float | None = None
    release: float | None = 120.0
    """``release`` is bounded by default: a job that never lets go would hold its worker forever. A rollout
    bounds its own release (metrics and close, ``generator.env_close_timeout_s`` each), within this."""

    def __post_init__(self) -> None:
        for stage in (*STAGES, "release"):
            value = getattr(self, stage)
            if value is not None and (isinstance(value, bool) or not value > 0):
                raise ValueError(
                    f"the {stage} timeout must be a positive number of seconds or None, got {value!r}"
                )

    @classmethod
    def of(cls, timeouts: StageTimeouts | Mapping[str, float | None] | None) -> StageTimeouts:
        """``timeouts`` as :class:`StageTimeouts` (a mapping by stage name; ``None``: the defaults)."""
        if timeouts is None:
            return cls()
        if isinstance(timeouts, StageTimeouts):
            return timeouts
        unknown = set(timeouts) - {*STAGES, "release"}
        if unknown:
            raise ValueError(
                f"unknown stage(s) {sorted(unknown)} in timeouts; stages: {[*STAGES, 'release']}"
            )
        return cls(**dict(timeouts))

    def of_stage(self, stage: str) -> float | None:
        """The deadline of ``stage``."""
        return getattr(self, stage)


@dataclasses.dataclass
class StageStats:
    """One stage over the last run: busy seconds summed over jobs, its capacity's idle seconds, failures."""

    capacity: int = 0
    """How many jobs may be in this stage at once."""
    busy_s: float = 0.0
    """Seconds jobs spent in this stage, summed over jobs."""
    idle_s: float = 0.0
    """``capacity * wall_s - busy_s``: the stage's unused capacity."""
    runs: int = 0
    """Jobs that ran this stage (skipped ones not counted)."""
    failures: int = 0
    """Jobs whose stage raised."""
    timeouts: int = 0
    """Jobs whose stage overran its deadline and was cancelled."""


@dataclasses.dataclass
class DispatchStats:
    """What the last :meth:`Dispatcher.run` did.

    ``jobs`` run, the most ever in flight, its wall time, per stage (:data:`STAGES`) a :class:`StageStats`,
    and ``generation_utilisation``: the mean number of jobs in the generate stage over the generation
    capacity (1.0: the engine always had as many trajectories as it was given slots for).
    """

    jobs: int = 0
    max_in_flight: int = 0
    wall_s: float = 0.0
    stages: dict[str, StageStats] = dataclasses.field(
        default_factory=lambda: {stage: StageStats() for stage in STAGES}
    )
    generation_utilisation: float = 0.0
    release_failures: int = 0
    """Releases that raised or overran their deadline."""

    def start(self, capacities: Mapping[str, int]) -> None:
        """Reset the counters for a new run with the given per-stage capacities."""
        self.jobs = self.max_in_flight = self.release_failures = 0
        self.wall_s = self.generation_utilisation = 0.0
        self.stages = {stage: StageStats(capacity=int(capacities.get(stage, 0))) for stage in STAGES}

    def finish(self, jobs: int, wall_s: float) -> None:
        """Close the run: idle times and the generation utilisation from the busy times."""
        self.jobs = jobs
        self.wall_s = wall_s
        for stats in self.stages.values():
            stats.idle_s = max(stats.capacity * wall_s - stats.busy_s, 0.0)
        generation = self.stages["generate"]
        capacity_s = generation.capacity * wall_s
        self.generation_utilisation = generation.busy_s / capacity_s if capacity_s > 0 else 0.0

    def as_metrics(self, prefix: str = "dispatch/") -> dict[str, float]:
        """A flat dict of floats: ``dispatch/jobs``, ``dispatch/generate/busy_s``, ..."""
        metrics = {
            f"{prefix}jobs": float(self.jobs),
            f"{prefix}max_in_flight": float(self.max_in_flight),
            f"{prefix}wall_s": float(self.wall_s),
            f"{prefix}generation_utilisation": float(self.generation_utilisation),
            f"{prefix}release_failures": float(self.release_failures),
        }
        for stage, stats in self.stages.items():
            for field in dataclasses.fields(StageStats):
                metrics[f"{prefix}{stage}/{field.name}"] = float(getattr(stats, field.name))
        return metrics


# -- the shared stage rule --------------------------------------------------------------------------------
def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


async def run_stage(
    job: StagedJob,
    stage: str,
    timeout_s: float | None,
    stats: DispatchStats | None = None,
    slot: WorkerSlot | None = None,
) -> bool:
    """Run one stage of one job under its deadline; ``True`` if the job is still good afterwards.

    Skipped (``False``) when the job has already failed. An exception or an overrun (the stage is
    cancelled) becomes ``job.fail(stage, ...)``; nothing propagates but the caller's own cancellation.
    Busy time, runs, failures and timeouts are counted in ``stats``.
    """
    if job.failed:
        return False
    method = getattr(job, _STAGE_METHODS[stage])
    coroutine = method(slot) if stage == "initialize" else method()
    counters = stats.stages[stage] if stats is not None else None
    started = time.monotonic()
    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            await coroutine
    except TimeoutError as exc:
        if not deadline.expired():  # the stage's own TimeoutError, not the deadline
            if counters is not None:
                counters.failures += 1
            job.fail(stage, f"{stage} raised {_describe(exc)}")
        else:
            if counters is not None:
                counters.timeouts += 1
            job.fail(stage, f"{stage} did not finish within {timeout_s:g} s")
    except Exception as exc:
        if counters is not None:
            counters.failures += 1
        logger.warning("%s of %r raised:\n%s", stage, job, traceback.format_exc())
        job.fail(stage, f"{stage} raised {_describe(exc)}")
    finally:
        if counters is not None:
            counters.busy_s += time.monotonic() - started
            counters.runs += 1
    return not job.failed


async def release_job(job: StagedJob, timeout_s: float | None, stats: DispatchStats | None = None) -> None:
    """Run ``job.release()`` under its deadline; never raises (a failure fails a job not yet failed).

    A release that is cancelled by the caller is still shielded from it until it ends or overruns, so an
    environment is not left open because the batch was cancelled.
    """
    task = asyncio.ensure_future(job.release())
    problem = None
    try:
        await asyncio.wait_for(asyncio.shield(task), timeout_s)
    except asyncio.TimeoutError:
        task.cancel()
        problem = f"release did not finish within {timeout_s:g} s"
    except asyncio.CancelledError:
        try:
            await asyncio.wait_for(task, timeout_s)
        except BaseException:
            pass
        raise
    except Exception as exc:
        logger.warning("release of %r raised:\n%s", job, traceback.format_exc())
        problem = f"release raised {_describe(exc)}"
    if problem is not None:
        if stats is not None:
            stats.release_failures += 1
        if not job.failed:
            job.fail("release", problem)


async def run_job(
    job: StagedJob,
    timeouts: StageTimeouts,
    stats: DispatchStats | None = None,
    slot: WorkerSlot | None = None,
    on_stage: Callable[[str, int], None] | None = None,
) -> Any:
    """All stages of one job in order, then its release; returns ``job.result``.

    ``on_stage(stage, +1 / -1)`` (optional) is told when the job enters and leaves each stage, for
    dispatchers that count jobs per stage.
    """
    try:
        for stage in STAGES:
            if job.failed:
                break
            if on_stage is not None:
                on_stage(stage, 1)
            try:
                await run_stage(job, stage, timeouts.of_stage(stage), stats, slot)
            finally:
                if on_stage is not None:
                    on_stage(stage, -1)
    finally:
        await release_job(job, timeouts.release, stats)
    return job.result


# -- dispatchers ----------------------------------------------------------------------------------------
class DispatcherSettings(PartSettings):
    """Settings of a dispatcher (``generator.dispatcher``): ``type`` and what its own class adds, which
    :meth:`factory_kwargs` hands to the dispatcher's factory. ``async_batch`` has none of its own."""

    def factory_kwargs(self) -> dict[str, Any]:
        """The dispatcher factory's keyword arguments from these settings (all but ``type`` by default)."""
        return self.model_dump(exclude={"type"})


class Dispatcher(abc.ABC):
    """Runs staged jobs (or plain coroutine functions) concurrently; results come back in job order.

    A job's failure is that job's result (see :func:`run_stage`); :meth:`run` never raises for one.
    """

    name: str = "base"
    settings: type[DispatcherSettings] = DispatcherSettings
    """The class of this dispatcher's settings (``generator.dispatcher``); a dispatcher built on a built-in
    inherits the built-in's."""

    def __init__(self) -> None:
        self.stats = DispatchStats()
        """Counters of the last :meth:`run`."""

    @abc.abstractmethod
    async def run(self, jobs: Sequence[StagedJob | Job[Any]]) -> list[Any]:
        """Run every job's stages and return their results, in the order of ``jobs``."""


DISPATCHERS: Registry[Callable[..., Dispatcher]] = names.DISPATCHERS
"""Dispatcher factories by name; see :func:`register_dispatcher`."""


def register_dispatcher(name: str) -> Callable[[Callable[..., Dispatcher]], Callable[..., Dispatcher]]:
    """Class decorator: make a dispatcher available to :func:`make_dispatcher` (``generator.dispatcher``)."""
    return DISPATCHERS.register(name)


def make_dispatcher(name: str, **kwargs: Any) -> Dispatcher:
    """The dispatcher registered as ``name``, built with ``kwargs`` (e.g. ``max_concurrency=64``)."""
    return DISPATCHERS.get(name)(**kwargs)
