"""The staged-job protocol and the async_batch dispatcher: stage order, failures, timeouts, release, stats."""

from __future__ import annotations

import asyncio

import pytest

from skyrl_train.rollout.dispatch import (
    AsyncBatchDispatcher,
    JobFailure,
    StagedJob,
    StageTimeouts,
    WorkerSlot,
    as_staged,
    make_dispatcher,
    run_stage,
)


def run(coro):
    return asyncio.run(coro)


class Recorder:
    """A staged job that records the stages it ran; ``behaviour[stage]`` is "raise", "hang" or a delay."""

    def __init__(self, name: str, behaviour: dict[str, object] | None = None, log: list | None = None):
        self.name = name
        self.behaviour = behaviour or {}
        self.log = log if log is not None else []
        self.ran: list[str] = []
        self.released = 0
        self.failure: tuple[str, str] | None = None

    async def _act(self, stage: str) -> None:
        self.ran.append(stage)
        what = self.behaviour.get(stage)
        if what == "raise":
            raise RuntimeError(f"{self.name} broke in {stage}")
        if what == "hang":
            await asyncio.Event().wait()
        if isinstance(what, (int, float)):
            await asyncio.sleep(what)

    async def initialize_trajectory(self, slot):
        await self._act("initialize")

    async def generate_trajectory(self):
        await self._act("generate")

    async def evaluate_trajectory(self):
        await self._act("evaluate")

    async def release(self):
        self.released += 1
        await self._act("release")

    def fail(self, stage, message):
        if self.failure is None:
            self.failure = (stage, message)

    @property
    def failed(self):
        return self.failure is not None

    @property
    def result(self):
        return (self.name, self.failure)


def test_a_staged_job_runs_its_stages_in_order_and_releases_once():
    job = Recorder("a")
    assert isinstance(job, StagedJob)
    dispatcher = AsyncBatchDispatcher(2)
    assert run(dispatcher.run([job])) == [("a", None)]
    assert job.ran == ["initialize", "generate", "evaluate", "release"] and job.released == 1
    assert dispatcher.stats.jobs == 1
    assert {s: st.runs for s, st in dispatcher.stats.stages.items()} == {
        "initialize": 1,
        "generate": 1,
        "evaluate": 1,
    }


@pytest.mark.parametrize("stage", ["initialize", "generate", "evaluate"])
def test_a_stage_that_raises_fails_that_job_alone_and_skips_the_later_stages(stage):
    broken = Recorder("broken", {stage: "raise"})
    fine = [Recorder(f"ok{i}") for i in range(3)]
    dispatcher = AsyncBatchDispatcher(2)
    results = run(dispatcher.run([fine[0], broken, fine[1], fine[2]]))
    assert [r[0] for r in results] == ["ok0", "broken", "ok1", "ok2"]
    assert [r[1] for r in results if r[0] != "broken"] == [None, None, None]
    failed_stage, message = results[1][1]
    assert failed_stage == stage
    assert message == f"{stage} raised RuntimeError: broken broke in {stage}"
    order = ["initialize", "generate", "evaluate"]
    assert broken.ran == [*order[: order.index(stage) + 1], "release"] and broken.released == 1
    assert dispatcher.stats.stages[stage].failures == 1
    assert all(job.released == 1 for job in fine)


def test_a_stage_past_its_deadline_is_cancelled_and_named():
    hung = Recorder("hung", {"generate": "hang"})
    dispatcher = AsyncBatchDispatcher(None, timeouts={"generate": 0.05})
    results = run(dispatcher.run([hung, Recorder("ok")]))
    assert results[0][1] == ("generate", "generate did not finish within 0.05 s")
    assert results[1] == ("ok", None)
    assert hung.ran == ["initialize", "generate", "release"]
    assert dispatcher.stats.stages["generate"].timeouts == 1
    assert dispatcher.stats.stages["generate"].failures == 0


def test_a_timeout_error_raised_by_the_stage_itself_is_a_failure_not_a_deadline():
    class RaisesTimeout(Recorder):
        async def generate_trajectory(self):
            raise TimeoutError("the engine timed out")

    job = RaisesTimeout("t")
    dispatcher = AsyncBatchDispatcher(None, timeouts={"generate": 30})
    (result,) = run(dispatcher.run([job]))
    assert result[1] == ("generate", "generate raised TimeoutError: the engine timed out")
    assert dispatcher.stats.stages["generate"].failures == 1


def test_a_release_that_hangs_or_raises_is_bounded_and_fails_the_job():
    hangs = Recorder("hangs", {"release": "hang"})
    raises = Recorder("raises", {"release": "raise"})
    dispatcher = AsyncBatchDispatcher(None, timeouts=StageTimeouts(release=0.05))
    results = run(dispatcher.run([hangs, raises]))
    assert results[0][1] == ("release", "release did not finish within 0.05 s")
    assert results[1][1] == ("release", "release raised RuntimeError: raises broke in release")
    assert dispatcher.stats.release_failures == 2


def test_concurrency_bounds_whole_jobs_and_stats_add_up():
    in_stage = {"n": 0, "max": 0}

    class Counting(Recorder):
        async def generate_trajectory(self):
            in_stage["n"] += 1
            in_stage["max"] = max(in_stage["max"], in_stage["n"])
            await asyncio.sleep(0.01)
            in_stage["n"] -= 1

    jobs = [Counting(str(i)) for i in range(6)]
    dispatcher = make_dispatcher("async_batch", max_concurrency=2)
    run(dispatcher.run(jobs))
    stats = dispatcher.stats
    assert stats.max_in_flight == 2 and in_stage["max"] == 2 and stats.jobs == 6
    generate = stats.stages["generate"]
    assert generate.capacity == 2 and generate.runs == 6
    assert generate.idle_s == pytest.approx(2 * stats.wall_s - generate.busy_s, abs=1e-9)
    assert 0 < stats.generation_utilisation <= 1
    metrics = stats.as_metrics()
    assert metrics["dispatch/jobs"] == 6.0 and metrics["dispatch/generate/runs"] == 6.0
    assert set(metrics) >= {
        "dispatch/generation_utilisation",
        "dispatch/initialize/busy_s",
        "dispatch/evaluate/idle_s",
        "dispatch/generate/timeouts",
    }
    assert all(isinstance(v, float) for v in metrics.values())


def test_plain_coroutine_functions_are_jobs_and_a_failure_is_their_result():
    def job(i: int, delay: float):
        async def go() -> int:
            await asyncio.sleep(delay)
            return i

        return go

    async def boom() -> int:
        raise ValueError("boom")

    dispatcher = AsyncBatchDispatcher(2)
    results = run(dispatcher.run([job(0, 0.03), boom, job(2, 0.0)]))
    assert results == [0, JobFailure("generate", "generate raised ValueError: boom"), 2]
    assert as_staged(boom) is not boom and as_staged(as_staged(boom)).failed is False
    with pytest.raises(TypeError, match="zero-argument coroutine function"):
        as_staged(42)


def test_cancelling_run_cancels_the_jobs_and_still_releases_them():
    jobs = [Recorder(str(i), {"generate": "hang"}) for i in range(3)]

    async def main():
        task = asyncio.ensure_future(AsyncBatchDispatcher(2).run(jobs))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    # the two that started were released; the third never started
    assert sorted(job.released for job in jobs) == [0, 1, 1]


def test_run_stage_skips_a_failed_job():
    job = Recorder("x")
    job.fail("initialize", "no")
    assert run(run_stage(job, "generate", None)) is False and job.ran == []


def test_worker_slot_keeps_resources_and_closes_them_once():
    closed = []

    class Resource:
        def __init__(self, name):
            self.name = name

        def close(self):
            closed.append(self.name)

    slot = WorkerSlot(3)
    slot.keep("env", Resource("first"))
    slot.keep("env", Resource("second"))  # replaces and closes the first
    slot.keep("db", "handle", closer=lambda obj: closed.append(f"closer:{obj}"))
    slot.keep("bad", Resource("bad"), closer=lambda obj: 1 / 0)
    assert closed == ["first"] and slot.resources["env"].name == "second"
    taken = slot.keep("taken", Resource("taken")) or slot.take("taken")
    assert taken.name == "taken"
    slot.close()
    assert closed == ["first", "second", "closer:handle"] and slot.resources == {}
    slot.close()
    assert closed == ["first", "second", "closer:handle"]


def test_timeouts_refuse_nonsense():
    with pytest.raises(ValueError, match="unknown stage"):
        StageTimeouts.of({"generation": 3})
    with pytest.raises(ValueError, match="generate timeout"):
        StageTimeouts(generate=0)
    with pytest.raises(ValueError, match="max_concurrent_trajectories"):
        AsyncBatchDispatcher(0)
