"""The rules every dispatcher follows, checked on all three with fake staged jobs (see dispatch_fakes.py).

Results in job order; a stage that raises or hangs fails that job alone, with its later stages skipped;
``release`` exactly once per job; plain coroutine functions still run; cancelling ``run`` releases every job it
started. Counts, never clocks.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from skyrl_train.rollout.dispatch import STAGES, AsyncBatchDispatcher, JobFailure, make_dispatcher
from skyrl_train.rollout.dispatch.async_pipeline import AsyncPipelineDispatcher
from skyrl_train.rollout.dispatch.fixed_pool import FixedPoolDispatcher

from .dispatch_fakes import FakeJob, Tracker, stages_run_in_order

TIMEOUTS = {"initialize": 0.3, "generate": 0.3, "evaluate": 0.3, "release": 5.0}

FACTORIES = {
    "async_batch": lambda timeouts=None: AsyncBatchDispatcher(3, timeouts=timeouts),
    "fixed_pool": lambda timeouts=None: FixedPoolDispatcher(3, timeouts=timeouts),
    "async_pipeline": lambda timeouts=None: AsyncPipelineDispatcher(
        2, initialize_concurrency=2, evaluate_concurrency=1, max_ahead=2, timeouts=timeouts
    ),
}
# fixed_pool and async_pipeline also release jobs that never started when the run is cancelled
RELEASE_EVERY_JOB_ON_CANCEL = {"fixed_pool", "async_pipeline"}


@pytest.fixture(params=sorted(FACTORIES))
def kind(request) -> str:
    return request.param


def test_results_come_back_in_job_order_whatever_order_jobs_finish_in(kind):
    tracker = Tracker()
    rng = random.Random(7)
    jobs = [
        FakeJob(
            i,
            tracker,
            initialize_s=rng.choice([0.0, 0.002, 0.01]),
            generate_s=0.003 * (12 - i),
            evaluate_s=rng.choice([0.0, 0.004]),
        )
        for i in range(12)
    ]
    dispatcher = FACTORIES[kind]()
    results = asyncio.run(dispatcher.run(jobs))
    assert results == [("ok", i) for i in range(12)]
    assert all(job.ran == list(STAGES) for job in jobs)
    assert dict(tracker.releases) == {i: 1 for i in range(12)}
    assert dispatcher.stats.jobs == 12
    assert [dispatcher.stats.stages[stage].runs for stage in STAGES] == [12, 12, 12]
    assert 0.0 < dispatcher.stats.generation_utilisation <= 1.0


def test_a_stage_that_raises_or_hangs_fails_that_job_alone(kind):
    tracker = Tracker()
    broken = {1: ("raise", "initialize"), 2: ("hang", "initialize"), 4: ("raise", "generate"),
              5: ("hang", "generate"), 7: ("raise", "evaluate"), 8: ("hang", "evaluate")}  # fmt: skip
    jobs = []
    for i in range(10):
        how, stage = broken.get(i, (None, None))
        jobs.append(
            FakeJob(
                i,
                tracker,
                generate_s=0.002,
                raise_in=stage if how == "raise" else None,
                hang_in=stage if how == "hang" else None,
            )
        )
    dispatcher = FACTORIES[kind](TIMEOUTS)
    results = asyncio.run(dispatcher.run(jobs))

    for i, result in enumerate(results):
        if i not in broken:
            assert result == ("ok", i)
            continue
        how, stage = broken[i]
        assert result[:2] == ("error", stage)
        if how == "raise":
            assert result[2] == f"{stage} raised RuntimeError: {stage} broke in job {i}"
        else:
            assert result[2] == f"{stage} did not finish within 0.3 s"
        # the later stages were skipped
        assert jobs[i].ran == list(STAGES[: STAGES.index(stage) + 1])
    assert all(stages_run_in_order(job) for job in jobs)
    assert dict(tracker.releases) == {i: 1 for i in range(10)}
    for stage in STAGES:
        assert dispatcher.stats.stages[stage].failures == 1
        assert dispatcher.stats.stages[stage].timeouts == 1
    # nothing is left running in any stage
    assert sum(tracker.current.values()) == 0


def test_a_release_that_raises_fails_the_job_and_the_batch_goes_on(kind):
    tracker = Tracker()
    jobs = [FakeJob(i, tracker, release_raises=(i == 1)) for i in range(4)]
    dispatcher = FACTORIES[kind](TIMEOUTS)
    results = asyncio.run(dispatcher.run(jobs))
    assert results[1] == ("error", "release", "release raised RuntimeError: release broke")
    assert [results[i] for i in (0, 2, 3)] == [("ok", 0), ("ok", 2), ("ok", 3)]
    assert dispatcher.stats.release_failures == 1
    assert dict(tracker.releases) == {i: 1 for i in range(4)}


def test_plain_coroutine_functions_are_jobs_too(kind):
    async def value(i: int) -> int:
        await asyncio.sleep(0.001 * (5 - i))
        return i

    async def boom() -> int:
        raise ValueError("boom")

    jobs = [lambda i=i: value(i) for i in range(5)]
    jobs.insert(2, boom)
    results = asyncio.run(FACTORIES[kind]().run(jobs))
    assert results == [0, 1, JobFailure("generate", "generate raised ValueError: boom"), 2, 3, 4]
    assert asyncio.run(FACTORIES[kind]().run([])) == []


def test_cancelling_run_releases_every_started_job_once(kind):
    tracker = Tracker()
    # generation hangs and no deadline is set: only the cancellation ends the run
    jobs = [FakeJob(i, tracker, hang_in="generate") for i in range(9)]
    dispatcher = FACTORIES[kind]()

    async def main() -> None:
        task = asyncio.ensure_future(dispatcher.run(jobs))
        await tracker.generation_started.wait()
        for _ in range(5):  # let the other workers reach their hanging stage too
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    started = {job.index for job in jobs if job.ran}
    assert started and len(started) < 9
    assert all(count == 1 for count in tracker.releases.values())
    assert started <= set(tracker.releases)
    if kind in RELEASE_EVERY_JOB_ON_CANCEL:
        assert dict(tracker.releases) == {i: 1 for i in range(9)}
    assert sum(tracker.current.values()) == 0
    # every container made was closed exactly once
    assert all(container.closed == 1 for container in tracker.containers)


def test_every_dispatcher_is_built_by_name_with_the_trainers_concurrency():
    assert isinstance(make_dispatcher("fixed_pool", max_concurrency=5), FixedPoolDispatcher)
    pipeline = make_dispatcher("async_pipeline", max_concurrency=5)
    assert isinstance(pipeline, AsyncPipelineDispatcher)
    assert pipeline.generate_concurrency == 5
    assert make_dispatcher("fixed_pool", max_concurrency=5).max_concurrency == 5
    with pytest.raises(ValueError, match="positive int"):
        FixedPoolDispatcher(0)
    with pytest.raises(ValueError, match="name the same setting"):
        AsyncPipelineDispatcher(4, max_concurrency=8)
    with pytest.raises(ValueError, match="max_ahead must be a positive int"):
        AsyncPipelineDispatcher(4, max_ahead=-1)
    with pytest.raises(ValueError, match="unknown stage"):
        FixedPoolDispatcher(2, timeouts={"verify": 1.0})
