"""``fixed_pool``: a fixed number of long-lived workers pull jobs from one queue, each keeping its resources.

Each worker owns a :class:`~skyrl_train.rollout.dispatch.base.WorkerSlot` for the whole :meth:`FixedPoolDispatcher.run`
and hands it to every job it initialises, so what one trajectory kept in the slot (a started container, a
prepared repository) is there for the next trajectory of the same worker instead of being made again. At the
end of ``run`` every slot is closed, whatever happened (also when ``run`` is cancelled).

A worker runs one job at a time through all its stages (set-up, generation, verification, release); the
number of workers therefore bounds whole trajectories, as ``async_batch`` does, but the set-up cost of a kept
resource is paid once per worker instead of once per trajectory.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field

from skyrl_train.rollout.dispatch.base import (
    STAGES,
    Dispatcher,
    DispatcherSettings,
    Job,
    StagedJob,
    StageTimeouts,
    WorkerSlot,
    as_staged,
    register_dispatcher,
    release_job,
    run_job,
)

__all__ = ["FixedPoolDispatcher", "FixedPoolSettings"]


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


class FixedPoolSettings(DispatcherSettings):
    """Settings of ``generator.dispatcher: {type: fixed_pool}``: long-lived workers, each running one
    trajectory at a time and keeping its resources (a started environment) for the next one."""

    num_workers: int | None = Field(None, ge=1)
    """Workers of the pool; null: generator.max_concurrent_trajectories."""
    reuse_envs: bool = True
    """A worker keeps an environment that supports reuse (a terminal task's started container) for its next
    trajectory of the same environment, brought back to its start state, instead of making a new one (the
    rollout runner reads it)."""

    def factory_kwargs(self) -> dict[str, Any]:
        return {} if self.num_workers is None else {"max_concurrency": self.num_workers}


@register_dispatcher("fixed_pool")
class FixedPoolDispatcher(Dispatcher):
    """``max_concurrency`` workers (``generator.max_concurrent_trajectories``), each with its own slot.

    Jobs are taken in job order by whichever worker is free. A stage that raises or overruns its deadline in
    ``timeouts`` (a :class:`~skyrl_train.rollout.dispatch.base.StageTimeouts` or a mapping by stage name) fails that
    job alone; the worker goes on with the next job and keeps its slot. ``slots`` holds the last run's slots
    (closed) so that callers can see what each worker kept.
    """

    name = "fixed_pool"
    settings = FixedPoolSettings

    def __init__(
        self,
        max_concurrency: int = 64,
        *,
        timeouts: StageTimeouts | Mapping[str, float | None] | None = None,
    ):
        super().__init__()
        self.max_concurrency = _positive_int("max_concurrency (the number of workers)", max_concurrency)
        self.timeouts = StageTimeouts.of(timeouts)
        """The per-stage deadlines."""
        self.slots: list[WorkerSlot] = []
        """The workers' slots of the last run, one per worker."""

    async def run(self, jobs: Sequence[StagedJob | Job[Any]]) -> list[Any]:
        """Run every job on the pool's workers; their results in job order."""
        staged = [as_staged(job) for job in jobs]
        workers = min(self.max_concurrency, max(len(staged), 1))
        self.stats.start({stage: workers for stage in STAGES})
        self.slots = [WorkerSlot(index) for index in range(workers)]
        started = time.monotonic()
        results: list[Any] = [None] * len(staged)
        taken = 0  # jobs handed to a worker so far; the rest never started
        in_flight = 0

        async def worker(slot: WorkerSlot) -> None:
            nonlocal taken, in_flight
            while taken < len(staged):
                index = taken
                taken += 1
                in_flight += 1
                self.stats.max_in_flight = max(self.stats.max_in_flight, in_flight)
                try:
                    results[index] = await run_job(staged[index], self.timeouts, self.stats, slot)
                finally:
                    in_flight -= 1

        tasks = [asyncio.ensure_future(worker(slot)) for slot in self.slots]
        try:
            await asyncio.gather(*tasks)
            return results
        except BaseException:
            # cancelled (or a bug): stop the workers; run_job releases the job each one held
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # a job never handed to a worker still gets its one release
            for index in range(taken, len(staged)):
                await release_job(staged[index], self.timeouts.release, self.stats)
            raise
        finally:
            await _close_slots(self.slots)
            self.stats.finish(len(staged), time.monotonic() - started)


async def _close_slots(slots: Sequence[WorkerSlot]) -> None:
    """Close every slot on a thread (closers may block: removing a container); finished even if cancelled."""
    closing = asyncio.ensure_future(asyncio.to_thread(lambda: [slot.close() for slot in slots]))
    try:
        await asyncio.shield(closing)
    except asyncio.CancelledError:
        await closing
        raise
