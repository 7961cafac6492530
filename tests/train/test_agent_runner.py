"""The agent layer: the runner schedules staged trajectories, deferred verification is its own stage, agents
are chosen by name, and a failed trajectory is masked alone (its group trains on)."""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import Any

import pytest
from deferring_env import DeferredCountdownEnv
from envs_for_tests import CountdownEnv

import skyrl_gym
from skyrl_train.inference.scripted import SamplingParams, ScriptedEngine
from skyrl_train.rollout import (
    AGENTS,
    AgentRunner,
    ChatTemplate,
    MultiTurnGenerator,
    RolloutContext,
    Trajectory,
    register_agent,
)
from skyrl_train.rollout.dispatch import AsyncBatchDispatcher, StagedJob

pytest.importorskip("transformers")


def run(coro):
    return asyncio.run(coro)


def params(**kwargs: Any) -> SamplingParams:
    kwargs.setdefault("max_tokens", 32)
    return SamplingParams(**kwargs)


def row(env_class: str, secret: str = "4", **extras: Any) -> dict[str, Any]:
    return {
        "prompt": [{"role": "user", "content": "Guess a digit in <answer></answer>."}],
        "env_class": env_class,
        "reward_spec": {"method": "rule", "ground_truth": secret},
        **extras,
    }


made: list[Any] = []


class RecordedDeferred(DeferredCountdownEnv):
    """Remembers every instance, so a test can see what the runner did to it."""

    def __init__(self, env_config=None, extras=None):
        super().__init__(env_config, extras)
        self.closed = getattr(self, "closed", False)
        made.append(self)

    def close(self):
        self.closed = True


class BrokenVerifier(DeferredCountdownEnv):
    def evaluate(self):
        raise ConnectionError("the grader's container is gone")


class FailsSecondInit(CountdownEnv):
    """The second instance made fails in init: one sample of a group errors."""

    counter = itertools.count()

    def init(self, prompt):
        if next(self.counter) == 1:
            raise RuntimeError("the database is unavailable")
        return prompt, {}


@pytest.fixture(scope="module", autouse=True)
def envs():
    ids = {
        "agent_test_deferred": RecordedDeferred,
        "agent_test_broken_verifier": BrokenVerifier,
        "agent_test_fails_second": FailsSecondInit,
        "agent_test_countdown": CountdownEnv,
    }
    for name, cls in ids.items():
        skyrl_gym.register(name, entry_point=cls)
    yield
    for name in ids:
        skyrl_gym.deregister(name)


def answer(secret: str):
    return lambda text: f"<answer>{secret}</answer>"


def test_a_trajectory_is_a_staged_job_and_multi_turn_generator_is_the_runner(tokenizer):
    runner = AgentRunner(ScriptedEngine(tokenizer, answer("4")))
    job = runner.trajectory(row("agent_test_countdown"), params())
    assert isinstance(job, StagedJob) and isinstance(job, Trajectory)
    assert issubclass(MultiTurnGenerator, AgentRunner) and runner.agent == "multi_turn"


def test_a_trajectory_needs_only_its_context_not_a_runner(tokenizer):
    """A trajectory reads what it uses from a :class:`RolloutContext`: one built by hand, with no runner
    anywhere, plays an episode, its budgets and its environment factory taken from the context."""
    made_here: list[str] = []

    def make_env(env_class: str, extras: dict[str, Any]) -> Any:
        made_here.append(env_class)
        return skyrl_gym.make(env_class, extras=extras)

    engine = ScriptedEngine(tokenizer, answer("4"))
    context = RolloutContext(
        engine=engine, template=ChatTemplate(tokenizer), make_env=make_env, max_turns=1, stop=("</answer>",)
    )
    result = run(Trajectory(context, row("agent_test_countdown"), params(), group_id=2).run())
    assert made_here == ["agent_test_countdown"] and "agent_test_countdown" in context.env_types
    assert result.reward == 1.0 and result.end == "terminated" and result.group_id == 2
    assert result.num_turns == 1 and result.loss_mask and sum(result.loss_mask) > 0
    # the runner hands its trajectories a context of its current settings
    runner = AgentRunner(engine, max_turns=3)
    job = runner.trajectory(row("agent_test_countdown"), params())
    assert job.context.engine is engine and job.context.max_turns == 3
    assert not hasattr(job, "runner")


def test_deferred_verification_runs_in_the_evaluate_stage(tokenizer):
    made.clear()
    runner = AgentRunner(ScriptedEngine(tokenizer, answer("4")))
    output = run(runner.run([row("agent_test_deferred"), row("agent_test_deferred", "5")], 2, params()))
    rewards = [t.reward for t in output.trajectories]
    assert rewards == [1.0, 1.0, 0.0, 0.0]
    first = output.trajectories[0]
    assert first.end == "terminated" and first.turn_rewards == [1.0]
    assert first.verification == {"reward": 1.0, "graded": "4"}
    assert output.trajectories[2].verification == {"reward": 0.0, "graded": "4"}
    # each env was asked to defer before init, graded once (in evaluate, not in step), then closed
    assert len(made) == 4 and all(env.deferred and env.grader_runs == 1 and env.closed for env in made)
    metrics = output.metrics
    assert metrics["dispatch/jobs"] == 4.0 and metrics["dispatch/evaluate/runs"] == 4.0
    assert metrics["generate/reward_mean"] == 0.5


def test_an_env_that_does_not_defer_is_verified_in_step_as_before(tokenizer):
    runner = AgentRunner(ScriptedEngine(tokenizer, answer("4")))
    (trajectory,) = run(runner.run([row("agent_test_countdown")], 1, params())).trajectories
    assert trajectory.reward == 1.0 and trajectory.verification is None


def test_a_verifier_that_fails_is_an_error_not_a_score(tokenizer):
    runner = AgentRunner(ScriptedEngine(tokenizer, answer("4")))
    (trajectory,) = run(runner.run([row("agent_test_broken_verifier")], 1, params())).trajectories
    assert trajectory.end == "error"
    assert (
        trajectory.error == "environment evaluate() failed: ConnectionError: the grader's container is gone"
    )


class HangingEngine(ScriptedEngine):
    """Answers group 0 at once; group 1's generation never returns (until cancelled)."""

    async def generate(self, prompts, params):
        if "5" in self.tokenizer.decode(prompts[0]) and self.hang:
            await asyncio.Event().wait()
        return await super().generate(prompts, params)


def test_a_stage_past_the_dispatchers_deadline_fails_that_trajectory_alone(tokenizer):
    made.clear()
    engine = HangingEngine(tokenizer, answer("4"))
    engine.hang = True
    rows = [row("agent_test_deferred"), {**row("agent_test_deferred"), "prompt": "Guess 5."}]
    runner = AgentRunner(engine, dispatcher=AsyncBatchDispatcher(4, timeouts={"generate": 0.5}))
    output = run(runner.run(rows, 2, params()))
    ends = [(t.group_id, t.end, t.error) for t in output.trajectories]
    assert ends[:2] == [(0, "terminated", None)] * 2
    assert ends[2:] == [(1, "error", "generate did not finish within 0.5 s")] * 2
    assert all(env.closed for env in made) and len(made) == 4  # released, also the cancelled ones
    assert output.metrics["dispatch/generate/timeouts"] == 2.0


def test_a_failed_trajectory_is_masked_alone_and_its_group_still_trains(tokenizer):
    from skyrl_train.training.algorithms.advantages import grpo
    from skyrl_train.training.batch import TrainingBatch

    FailsSecondInit.counter = itertools.count()
    secret_by_turn = iter(["4", "1", "4", "1"] * 2)
    engine = ScriptedEngine(tokenizer, lambda text: f"<answer>{next(secret_by_turn)}</answer>")
    runner = AgentRunner(engine, dispatcher=AsyncBatchDispatcher(1))  # one at a time: the order is fixed
    output = run(runner.run([row("agent_test_fails_second", max_turns=1)], 4, params()))
    ends = [t.end for t in output.trajectories]
    assert ends.count("error") == 1 and ends[1] == "error"
    assert output.trajectories[1].error.endswith("RuntimeError: the database is unavailable")
    batch = TrainingBatch.from_trajectories(output.trajectories, pad_id=tokenizer.pad_token_id)
    assert batch.valid.tolist() == [True, False, True, True]
    assert batch.response_mask[1].sum() == 0
    advantages, _ = grpo(batch.token_level_rewards, batch.response_mask, batch.group_ids, valid=batch.valid)
    # the group's three valid samples (rewards 1, 1, 0 or similar) still get advantages; the error gets none
    assert (advantages[1] == 0).all()
    assert any(advantages[i].abs().sum() > 0 for i in (0, 2, 3))


def test_agents_are_chosen_by_name_and_wrap_env_changes_what_the_model_plays(tokenizer):
    class Shouting:
        """Wraps an environment: the answer in every action reaches it upper-cased (a stand-in for a tool loop)."""

        def __init__(self, env):
            self.env = env

        def __getattr__(self, name):
            return getattr(self.env, name)

        def step(self, action):
            return self.env.step(action.replace(">a<", ">A<"))

    @register_agent("agent_test_shouting")
    class ShoutingTrajectory(Trajectory):
        def wrap_env(self, env):
            return Shouting(env)

    try:
        secret_row = row("agent_test_countdown", "A")
        plain = AgentRunner(ScriptedEngine(tokenizer, answer("a")))
        shouting = AgentRunner(ScriptedEngine(tokenizer, answer("a")), agent="agent_test_shouting")
        assert shouting.trajectory_class is ShoutingTrajectory
        assert run(plain.run([secret_row], 1, params())).trajectories[0].reward == 0.0
        assert run(shouting.run([secret_row], 1, params())).trajectories[0].reward == 1.0
        with pytest.raises(ValueError, match="unknown agent 'multi_trun'.*did you mean 'multi_turn'"):
            AgentRunner(ScriptedEngine(tokenizer, answer("a")), agent="multi_trun")
    finally:
        AGENTS.unregister("agent_test_shouting")


def test_from_config_reads_generator_agent_in_either_argument_order(tokenizer):
    from skyrl_train.config import ConfigError, load_config

    @register_agent("agent_test_from_config")
    class FromConfig(Trajectory):
        pass

    try:
        config = load_config(None, ["generator.agent=agent_test_from_config", "generator.max_turns=3"])
        engine = ScriptedEngine(tokenizer, answer("4"))
        for runner in (
            AgentRunner.from_config(config, engine),
            MultiTurnGenerator.from_config(engine, config),
        ):
            assert runner.trajectory_class is FromConfig and runner.max_turns == 3
        with pytest.raises(ConfigError, match="unknown agent 'mutli_turn'"):
            load_config(None, ["generator.agent=mutli_turn"])
    finally:
        AGENTS.unregister("agent_test_from_config")


def test_rollout_plays_the_stages_without_a_dispatcher(tokenizer):
    made.clear()
    runner = AgentRunner(ScriptedEngine(tokenizer, answer("4")))
    result = run(runner.rollout(row("agent_test_deferred"), params(), group_id=3, sample_index=1))
    assert (result.reward, result.group_id, result.sample_index) == (1.0, 3, 1)
    assert made[0].closed and threading.active_count() >= 1


class SlowToMake(CountdownEnv):
    """Its constructor waits for ``gate`` (a container that takes long to start); counts makes and closes."""

    entered = threading.Event()
    gate = threading.Event()
    closed = threading.Event()
    makes = 0
    closes = 0

    def __init__(self, env_config=None, extras=None):
        SlowToMake.entered.set()
        SlowToMake.gate.wait(30)
        super().__init__(env_config, extras)
        SlowToMake.makes += 1

    def close(self):
        SlowToMake.closes += 1
        SlowToMake.closed.set()


def test_an_env_made_after_its_initialize_stage_was_cancelled_is_closed(tokenizer):
    for event in (SlowToMake.entered, SlowToMake.gate, SlowToMake.closed):
        event.clear()
    SlowToMake.makes = SlowToMake.closes = 0
    skyrl_gym.register("agent_test_slow_to_make", entry_point=SlowToMake)
    try:
        # the dispatcher's initialize deadline cancels the stage while the env is still being made on a thread
        runner = AgentRunner(
            ScriptedEngine(tokenizer, answer("4")),
            dispatcher=AsyncBatchDispatcher(2, timeouts={"initialize": 2.0}),
            env_timeout_s=60.0,
        )
        (trajectory,) = run(runner.run([row("agent_test_slow_to_make")], 1, params())).trajectories
        assert trajectory.end == "error" and trajectory.error == "initialize did not finish within 2 s"
        assert SlowToMake.entered.is_set() and SlowToMake.makes == 0  # cancelled while being made
        SlowToMake.gate.set()
        assert SlowToMake.closed.wait(30), "the env made after the cancellation was never closed"
        assert (SlowToMake.makes, SlowToMake.closes) == (1, 1)
    finally:
        SlowToMake.gate.set()
        skyrl_gym.deregister("agent_test_slow_to_make")
