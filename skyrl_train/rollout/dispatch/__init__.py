"""Dispatchers: strategies for running many staged rollout jobs at once (``generator.dispatcher``).

- :mod:`~skyrl_train.rollout.dispatch.base`: the staged-job protocol (:class:`StagedJob`, :class:`WorkerSlot`,
  :func:`as_staged`), the one rule for running a stage (:func:`run_stage`, :func:`release_job`,
  :func:`run_job`) and the counters (:class:`DispatchStats`).
- :class:`~skyrl_train.rollout.dispatch.async_batch.AsyncBatchDispatcher` (``"async_batch"``): the batch's jobs as
  asyncio tasks with a concurrency limit.
- :class:`~skyrl_train.rollout.dispatch.fixed_pool.FixedPoolDispatcher` (``"fixed_pool"``): N long-lived workers,
  each keeping its :class:`WorkerSlot` (e.g. a started container) between the trajectories it runs.
- :class:`~skyrl_train.rollout.dispatch.async_pipeline.AsyncPipelineDispatcher` (``"async_pipeline"``): set-up,
  generation and verification as stages with their own caps and bounded queues between them.

:func:`make_dispatcher` builds one by name; :func:`register_dispatcher` adds a strategy.
"""

from skyrl_train.rollout.dispatch.async_batch import AsyncBatchDispatcher
from skyrl_train.rollout.dispatch.async_pipeline import AsyncPipelineDispatcher, AsyncPipelineSettings
from skyrl_train.rollout.dispatch.base import (
    DISPATCHERS,
    STAGES,
    Dispatcher,
    DispatcherSettings,
    DispatchStats,
    Job,
    JobFailure,
    PlainJob,
    StagedJob,
    StageStats,
    StageTimeouts,
    WorkerSlot,
    as_staged,
    make_dispatcher,
    register_dispatcher,
    release_job,
    run_job,
    run_stage,
)
from skyrl_train.rollout.dispatch.fixed_pool import FixedPoolDispatcher, FixedPoolSettings

__all__ = [
    "DISPATCHERS",
    "STAGES",
    "AsyncBatchDispatcher",
    "AsyncPipelineDispatcher",
    "AsyncPipelineSettings",
    "DispatchStats",
    "Dispatcher",
    "DispatcherSettings",
    "FixedPoolDispatcher",
    "FixedPoolSettings",
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
