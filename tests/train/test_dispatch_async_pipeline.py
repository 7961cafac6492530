"""``async_pipeline``: per-stage caps, the bounded queues between stages, and its counters.

Fake staged jobs (dispatch_fakes.py) count how many jobs are in each stage at once and how many wait between
stages; the assertions are on those counts, never on a clock.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from skyrl_train.rollout.dispatch import STAGES
from skyrl_train.rollout.dispatch.async_pipeline import AsyncPipelineDispatcher

from .dispatch_fakes import FakeJob, Tracker


def mixed_jobs(tracker: Tracker, count: int, seed: int = 3, **kwargs) -> list[FakeJob]:
    rng = random.Random(seed)
    return [
        FakeJob(
            i,
            tracker,
            initialize_s=rng.choice([0.0, 0.002, 0.008]),
            generate_s=rng.choice([0.002, 0.006]),
            evaluate_s=rng.choice([0.0, 0.003, 0.01]),
            **kwargs,
        )
        for i in range(count)
    ]


def test_no_stage_ever_runs_more_jobs_than_its_cap():
    tracker = Tracker()
    jobs = mixed_jobs(tracker, 24)
    dispatcher = AsyncPipelineDispatcher(2, initialize_concurrency=3, evaluate_concurrency=1, max_ahead=5)
    results = asyncio.run(dispatcher.run(jobs))
    assert results == [("ok", i) for i in range(24)]
    caps = {"initialize": 3, "generate": 2, "evaluate": 1}
    for stage in STAGES:
        assert tracker.peak[stage] <= caps[stage], (stage, tracker.peak)
        assert tracker.entered[stage] == 24
    # the caps were reached: the counts are not vacuous
    assert tracker.peak["initialize"] == 3 and tracker.peak["generate"] == 2
    assert {stage: stats.capacity for stage, stats in dispatcher.stats.stages.items()} == caps


def test_set_up_never_runs_more_than_max_ahead_jobs_ahead_of_generation():
    tracker = Tracker()
    # set-up is instant and generation slow: unbounded, every job would be set up at once
    jobs = [FakeJob(i, tracker, generate_s=0.003) for i in range(20)]
    dispatcher = AsyncPipelineDispatcher(1, initialize_concurrency=8, max_ahead=2)
    assert asyncio.run(dispatcher.run(jobs)) == [("ok", i) for i in range(20)]
    # jobs in set-up or set up and not yet generating: never more than max_ahead, and the bound was met
    assert tracker.peak_set_up_or_waiting == 2
    assert tracker.peak_waiting_for_generation == 2
    assert dispatcher.max_ready <= 2
    # set-up concurrency is bounded by max_ahead too
    assert tracker.peak["initialize"] <= 2
    assert dispatcher.stats.stages["initialize"].capacity == 2
    # the containers made are bounded as well: at most max_ahead + the one generating + verifying at once
    assert dispatcher.stats.max_in_flight <= 2 + 1 + 1


def test_generated_jobs_waiting_for_verification_are_bounded_by_max_behind():
    tracker = Tracker()
    jobs = [FakeJob(i, tracker, generate_s=0.001, evaluate_s=0.006) for i in range(16)]
    dispatcher = AsyncPipelineDispatcher(4, evaluate_concurrency=1, max_behind=2)
    assert asyncio.run(dispatcher.run(jobs)) == [("ok", i) for i in range(16)]
    # generated, not yet verifying: at most max_behind queued plus the workers holding a finished job
    assert dispatcher.max_waiting_verification == 2
    assert tracker.peak_waiting_for_evaluation <= 2 + 4
    assert tracker.peak["evaluate"] == 1


def test_a_slow_set_up_does_not_hold_the_jobs_behind_it():
    tracker = Tracker()
    jobs = [FakeJob(0, tracker, initialize_s=0.15)]
    jobs += [FakeJob(i, tracker, generate_s=0.002) for i in range(1, 8)]
    dispatcher = AsyncPipelineDispatcher(2, initialize_concurrency=3, max_ahead=3)
    assert asyncio.run(dispatcher.run(jobs)) == [("ok", i) for i in range(8)]
    # job 0 is set up first but generates last: the others went through the free slots meanwhile
    assert tracker.generation_order[-1] == 0
    assert sorted(tracker.generation_order) == list(range(8))


def test_stats_count_busy_and_idle_time_per_stage_and_the_generation_utilisation():
    tracker = Tracker()
    jobs = mixed_jobs(tracker, 12, raise_in=None)
    jobs[3].raise_in = "evaluate"
    dispatcher = AsyncPipelineDispatcher(2, initialize_concurrency=2, evaluate_concurrency=2)
    results = asyncio.run(dispatcher.run(jobs))
    assert results[3][:2] == ("error", "evaluate")
    stats = dispatcher.stats
    assert stats.jobs == 12
    for stage in STAGES:
        counters = stats.stages[stage]
        assert counters.runs == 12
        assert counters.busy_s >= 0.0 and counters.idle_s >= 0.0
        # busy + idle is the stage's capacity over the run
        assert abs(counters.busy_s + counters.idle_s - counters.capacity * stats.wall_s) < 1e-6
    assert stats.stages["evaluate"].failures == 1
    expected = stats.stages["generate"].busy_s / (2 * stats.wall_s)
    assert abs(stats.generation_utilisation - expected) < 1e-9
    metrics = stats.as_metrics()
    assert metrics["dispatch/jobs"] == 12.0
    assert metrics["dispatch/evaluate/failures"] == 1.0
    assert {
        "dispatch/generate/busy_s",
        "dispatch/initialize/idle_s",
        "dispatch/generation_utilisation",
    } <= set(metrics)


def test_caps_not_given_start_from_the_slots_and_adapt_to_the_stage_times():
    dispatcher = AsyncPipelineDispatcher(6, evaluate_concurrency=2)
    assert (dispatcher.initialize_concurrency, dispatcher.evaluate_concurrency) == (6, 2)
    assert (dispatcher.max_ahead, dispatcher.max_behind) == (12, 2)
    assert dispatcher.adapting == {"initialize_concurrency", "max_ahead"}
    assert AsyncPipelineDispatcher().generate_concurrency == 64
    # set-up takes two generations: 6 slots x 2 x headroom 1.5 = 18 set-ups; the given cap stays
    dispatcher.resize({"initialize": 2.0, "generate": 1.0, "evaluate": 5.0})
    assert (dispatcher.initialize_concurrency, dispatcher.evaluate_concurrency) == (18, 2)
    assert dispatcher.max_ahead == 18 + 6
    # never more than ADAPT_LIMIT x slots workers a stage; nothing measured: nothing changes
    dispatcher.resize({"initialize": 100.0, "generate": 1.0})
    assert dispatcher.initialize_concurrency == 4 * 6
    dispatcher.resize({"initialize": 1.0, "generate": 0.0})
    assert dispatcher.initialize_concurrency == 4 * 6


def test_each_run_resizes_the_adapting_caps_from_what_it_measured():
    tracker = Tracker()
    dispatcher = AsyncPipelineDispatcher(2, evaluate_concurrency=1)
    jobs = [FakeJob(i, tracker, initialize_s=0.004, generate_s=0.002, evaluate_s=0.001) for i in range(6)]
    asyncio.run(dispatcher.run(jobs))
    assert set(dispatcher.stage_s) == set(STAGES) and all(value > 0 for value in dispatcher.stage_s.values())
    expected = AsyncPipelineDispatcher.sized_for(2, dispatcher.stage_s)
    assert dispatcher.initialize_concurrency == min(expected.initialize_concurrency, 8)
    assert dispatcher.max_ahead == dispatcher.initialize_concurrency + 2
    assert dispatcher.evaluate_concurrency == 1


def test_sized_for_keeps_the_generation_slots_fed_by_littles_law():
    # set-up takes twice a generation, verification half: 8 slots need 16 set-ups and 4 verifications in
    # flight, times the headroom
    pipeline = AsyncPipelineDispatcher.sized_for(8, {"initialize": 2.0, "generate": 1.0, "evaluate": 0.5})
    assert pipeline.generate_concurrency == 8
    assert (pipeline.initialize_concurrency, pipeline.evaluate_concurrency) == (24, 6)
    assert pipeline.max_ahead == 24 + 8
    lean = AsyncPipelineDispatcher.sized_for(4, {"initialize": 0.0, "generate": 3.0}, headroom=1.0)
    assert (lean.initialize_concurrency, lean.evaluate_concurrency, lean.max_ahead) == (1, 1, 5)
    with pytest.raises(ValueError, match="mean generation time must be positive"):
        AsyncPipelineDispatcher.sized_for(4, {"generate": 0.0})


def test_the_stage_means_of_a_run_size_the_next_one():
    tracker = Tracker()
    dispatcher = AsyncPipelineDispatcher(2)
    jobs = [FakeJob(i, tracker, initialize_s=0.004, generate_s=0.002, evaluate_s=0.001) for i in range(6)]
    jobs[0].raise_in = "initialize"  # a failed job skips its later stages: means are over the jobs that ran
    asyncio.run(dispatcher.run(jobs))
    means = AsyncPipelineDispatcher.mean_stage_s(dispatcher.stats)
    assert set(means) == set(STAGES) and all(value > 0 for value in means.values())
    stats = dispatcher.stats.stages
    assert means["generate"] == stats["generate"].busy_s / 5
    assert means["initialize"] == stats["initialize"].busy_s / 6
    assert AsyncPipelineDispatcher.sized_for(2, means).generate_concurrency == 2
