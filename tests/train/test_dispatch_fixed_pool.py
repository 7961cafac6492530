"""``fixed_pool``: long-lived workers whose slots keep resources between trajectories, closed at the end.

Fake staged jobs (dispatch_fakes.py) keep a counted fake container in their worker's slot; the assertions count
containers made, uses and closes.
"""

from __future__ import annotations

import asyncio

import pytest

from skyrl_train.rollout.dispatch.fixed_pool import FixedPoolDispatcher

from .dispatch_fakes import FakeJob, Tracker


def test_each_worker_keeps_its_container_for_all_its_trajectories():
    tracker = Tracker()
    jobs = [FakeJob(i, tracker, generate_s=0.001 * (i % 4), keep_container=True) for i in range(15)]
    dispatcher = FixedPoolDispatcher(3)
    assert asyncio.run(dispatcher.run(jobs)) == [("ok", i) for i in range(15)]
    slots = {id(job.slot) for job in jobs}
    assert len(slots) == 3 and len(dispatcher.slots) == 3
    # one container per worker, reused by every job that worker ran
    assert len(tracker.containers) == 3
    assert sum(container.uses for container in tracker.containers) == 15
    by_slot = {}
    for job in jobs:
        by_slot.setdefault(id(job.slot), set()).add(job.container.number)
    assert all(len(numbers) == 1 for numbers in by_slot.values())
    # closed once, at the end of run, by the slot
    assert [container.closed for container in tracker.containers] == [1, 1, 1]
    assert all(not slot.resources for slot in dispatcher.slots)
    # never more jobs at once than workers
    assert tracker.peak_in_any_stage <= 3 and dispatcher.stats.max_in_flight == 3


def test_a_failed_job_leaves_its_worker_and_slot_in_service():
    tracker = Tracker()
    jobs = [FakeJob(i, tracker, keep_container=True) for i in range(8)]
    jobs[2].raise_in = "generate"
    jobs[5].hang_in = "initialize"
    dispatcher = FixedPoolDispatcher(2, timeouts={"initialize": 0.2})
    results = asyncio.run(dispatcher.run(jobs))
    assert results[2] == ("error", "generate", "generate raised RuntimeError: generate broke in job 2")
    assert results[5] == ("error", "initialize", "initialize did not finish within 0.2 s")
    assert [results[i] for i in (0, 1, 3, 4, 6, 7)] == [("ok", i) for i in (0, 1, 3, 4, 6, 7)]
    assert len(tracker.containers) == 2
    assert [container.closed for container in tracker.containers] == [1, 1]
    assert dict(tracker.releases) == {i: 1 for i in range(8)}


def test_fewer_jobs_than_workers_use_one_slot_each():
    tracker = Tracker()
    dispatcher = FixedPoolDispatcher(5)
    jobs = [FakeJob(i, tracker, keep_container=True) for i in range(2)]
    assert asyncio.run(dispatcher.run(jobs)) == [("ok", 0), ("ok", 1)]
    assert len(dispatcher.slots) == 2 and len(tracker.containers) == 2


def test_cancelling_run_releases_every_job_and_closes_every_slot():
    tracker = Tracker()
    jobs = [FakeJob(i, tracker, hang_in="evaluate", keep_container=True) for i in range(7)]
    dispatcher = FixedPoolDispatcher(3)

    async def main() -> None:
        task = asyncio.ensure_future(dispatcher.run(jobs))
        while tracker.current["evaluate"] < 3:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert dict(tracker.releases) == {i: 1 for i in range(7)}
    assert len(tracker.containers) == 3
    assert [container.closed for container in tracker.containers] == [1, 1, 1]
    assert sum(tracker.current.values()) == 0
