"""``async_batch``: every job of the batch is a task on one event loop, at most ``max_concurrency`` at once.

The simplest strategy and SkyRL's default: the whole batch is started together (up to the limit) and the
call returns when the slowest trajectory is done. Environment calls must run in threads (the generator uses
:mod:`skyrl_gym.vector`'s ``ainit``/``astep``) so that one slow environment never blocks the loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TypeVar

from skyrl_train.dispatch.base import Dispatcher, Job, register_dispatcher

__all__ = ["AsyncBatchDispatcher"]

T = TypeVar("T")


@register_dispatcher("async_batch")
class AsyncBatchDispatcher(Dispatcher):
    """Run the jobs as asyncio tasks, gated by a semaphore of ``max_concurrency`` (``None``: no limit).

    Jobs start in order. If one raises, the others are cancelled (and awaited, so that their ``finally``
    blocks run: environments get closed) before the exception propagates.
    """

    name = "async_batch"

    def __init__(self, max_concurrency: int | None = 64):
        super().__init__()
        if max_concurrency is not None and (
            isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1
        ):
            raise ValueError(
                f"max_concurrency (generator.max_concurrent_trajectories) must be a positive int or None, "
                f"got {max_concurrency!r}"
            )
        self.max_concurrency = max_concurrency

    async def run(self, jobs: Sequence[Job[T]]) -> list[T]:
        started = time.monotonic()
        limit = asyncio.Semaphore(self.max_concurrency or max(len(jobs), 1))
        in_flight = 0
        max_in_flight = 0

        async def guarded(job: Job[T]) -> T:
            nonlocal in_flight, max_in_flight
            async with limit:
                in_flight += 1
                max_in_flight = max(max_in_flight, in_flight)
                try:
                    return await job()
                finally:
                    in_flight -= 1

        tasks = [asyncio.ensure_future(guarded(job)) for job in jobs]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            self.stats.jobs = len(jobs)
            self.stats.max_in_flight = max_in_flight
            self.stats.wall_s = time.monotonic() - started
