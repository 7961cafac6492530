"""Dispatchers: strategies for running many rollout coroutines at once (``generator.dispatcher``).

- :class:`~skyrl_train.dispatch.async_batch.AsyncBatchDispatcher` (``"async_batch"``): the batch's jobs as
  asyncio tasks with a concurrency limit.

:func:`make_dispatcher` builds one by name; :func:`register_dispatcher` adds a strategy.
"""

from skyrl_train.dispatch.async_batch import AsyncBatchDispatcher
from skyrl_train.dispatch.base import (
    DISPATCHERS,
    Dispatcher,
    DispatchStats,
    Job,
    make_dispatcher,
    register_dispatcher,
)

__all__ = [
    "DISPATCHERS",
    "AsyncBatchDispatcher",
    "DispatchStats",
    "Dispatcher",
    "Job",
    "make_dispatcher",
    "register_dispatcher",
]
