"""The agent runner's real trajectories through ``fixed_pool`` and ``async_pipeline``: the same rollouts as
``async_batch``, every environment closed once, deferred verification in the evaluate stage."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from deferring_env import DeferredCountdownEnv

import skyrl_gym
from skyrl_train.inference.scripted import SamplingParams, ScriptedEngine
from skyrl_train.rollout import AgentRunner
from skyrl_train.rollout.dispatch import AsyncBatchDispatcher, StageTimeouts
from skyrl_train.rollout.dispatch.async_pipeline import AsyncPipelineDispatcher
from skyrl_train.rollout.dispatch.fixed_pool import FixedPoolDispatcher

pytest.importorskip("transformers")

made: list[Any] = []


class CountedDeferred(DeferredCountdownEnv):
    """Remembers every instance and counts its closes."""

    def __init__(self, env_config=None, extras=None):
        super().__init__(env_config, extras)
        self.closes = 0
        made.append(self)

    def close(self):
        self.closes += 1


@pytest.fixture(scope="module", autouse=True)
def env_id():
    skyrl_gym.register("dispatch_test_deferred", entry_point=CountedDeferred)
    yield "dispatch_test_deferred"
    skyrl_gym.deregister("dispatch_test_deferred")


def rows(count: int) -> list[dict[str, Any]]:
    return [
        {
            "prompt": [{"role": "user", "content": "Guess a digit in <answer></answer>."}],
            "env_class": "dispatch_test_deferred",
            "reward_spec": {"method": "rule", "ground_truth": str(i % 3)},
        }
        for i in range(count)
    ]


DISPATCHERS = {
    "async_batch": lambda: AsyncBatchDispatcher(3, timeouts=StageTimeouts(release=None)),
    "fixed_pool": lambda: FixedPoolDispatcher(3),
    "async_pipeline": lambda: AsyncPipelineDispatcher(2, initialize_concurrency=2, evaluate_concurrency=1),
}


@pytest.mark.parametrize("kind", sorted(DISPATCHERS))
def test_every_dispatcher_plays_the_same_rollouts(tokenizer, kind):
    made.clear()
    engine = ScriptedEngine(tokenizer, lambda text: "<answer>1</answer>")
    dispatcher = DISPATCHERS[kind]()
    runner = AgentRunner(engine, dispatcher=dispatcher)
    output = asyncio.run(runner.run(rows(5), 2, SamplingParams(max_tokens=16)))
    trajectories = output.trajectories
    assert [(t.group_id, t.sample_index) for t in trajectories] == [
        (g, k) for g in range(5) for k in range(2)
    ]
    # the secret of row i is i % 3; every sample answers 1, verified after the episode
    assert [t.reward for t in trajectories] == [
        1.0 if g % 3 == 1 else 0.0 for g in range(5) for _ in range(2)
    ]
    assert all(t.end == "terminated" and t.verification is not None for t in trajectories)
    assert len(made) == 10 and all(env.deferred and env.grader_runs == 1 and env.closes == 1 for env in made)
    metrics = output.metrics
    assert metrics["dispatch/jobs"] == 10.0 and metrics["dispatch/evaluate/runs"] == 10.0
    assert 0.0 < metrics["dispatch/generation_utilisation"] <= 1.0
