"""``async_batch``: every job of the batch is a task on one event loop, at most ``max_concurrency`` at once.

The simplest strategy and SkyRL's default: the whole batch is started together (up to the limit) and the
call returns when the slowest trajectory is done. A job holds its place from set-up to release, so the
limit bounds whole trajectories, not stages. Environment calls must run in threads (the runner uses
:mod:`skyrl_gym.vector`'s ``ainit``/``astep``) so that one slow environment never blocks the loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_train.rollout.dispatch.base import (
    STAGES,
    Dispatcher,
    Job,
    StagedJob,
    StageTimeouts,
    as_staged,
    register_dispatcher,
    run_job,
)

__all__ = ["AsyncBatchDispatcher"]


@register_dispatcher("async_batch")
class AsyncBatchDispatcher(Dispatcher):
    """Run the jobs as asyncio tasks, at most ``max_concurrency`` whole jobs at once (``None``: no limit).

    Jobs start in order. Each runs its stages (see :mod:`skyrl_train.rollout.dispatch.base`) with the deadlines in
    ``timeouts`` (a :class:`~skyrl_train.rollout.dispatch.base.StageTimeouts` or a mapping by stage name); a stage
    that raises or overruns fails that job alone. If ``run`` itself is cancelled, every started job is
    cancelled and its release still runs.
    """

    name = "async_batch"

    def __init__(
        self,
        max_concurrency: int | None = 64,
        *,
        timeouts: StageTimeouts | Mapping[str, float | None] | None = None,
    ):
        super().__init__()
        if max_concurrency is not None and (
            isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1
        ):
            raise ValueError(
                f"max_concurrency (generator.max_concurrent_trajectories) must be a positive int or None, "
                f"got {max_concurrency!r}"
            )
        self.max_concurrency = max_concurrency
        self.timeouts = StageTimeouts.of(timeouts)
        """The per-stage deadlines."""

    async def run(self, jobs: Sequence[StagedJob | Job[Any]]) -> list[Any]:
        """Run every job, at most ``max_concurrency`` at once; their results in job order."""
        staged = [as_staged(job) for job in jobs]
        capacity = self.max_concurrency or max(len(staged), 1)
        self.stats.start({stage: capacity for stage in STAGES})
        started = time.monotonic()
        limit = asyncio.Semaphore(capacity)
        in_flight = 0

        async def guarded(job: StagedJob) -> Any:
            nonlocal in_flight
            async with limit:
                in_flight += 1
                self.stats.max_in_flight = max(self.stats.max_in_flight, in_flight)
                try:
                    return await run_job(job, self.timeouts, self.stats)
                finally:
                    in_flight -= 1

        tasks = [asyncio.ensure_future(guarded(job)) for job in staged]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            self.stats.finish(len(staged), time.monotonic() - started)
