"""Budgets, end states and episode order, enforced by the framework for every environment."""

from __future__ import annotations

import pytest
from envs_for_tests import CountdownEnv, CrashyEnv, SleepyEnv

import skyrl_gym
from skyrl_gym import EpisodeEndedError, EpisodeGuard
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.tools import ToolGroup, tool

PROMPT = [{"role": "user", "content": "go"}]


def guarded(env, **budget):
    guard = EpisodeGuard(env, budget)
    guard.init(PROMPT)
    return guard


def test_step_before_init_starts_the_episode_as_in_skyrl():
    env = EpisodeGuard(CountdownEnv(extras={"reward_spec": {"ground_truth": "2"}, "max_turns": 2}))
    assert not env.step("<answer>1</answer>")["done"]
    out = env.step("x")
    assert (out["metadata"]["end"], out["metadata"]["truncated_by"]) == ("truncated", "max_turns")
    assert env.end == "truncated"


def test_step_after_end_raises_and_reset_starts_again():
    env = guarded(CountdownEnv(extras={"reward_spec": {"ground_truth": "1"}}))
    assert env.step("<answer>1</answer>")["done"]
    with pytest.raises(EpisodeEndedError, match=r"after the episode ended \(terminated\)"):
        env.step("<answer>1</answer>")
    env.reset(seed=3)
    assert env.unwrapped.secret == "3"
    assert env.step("<answer>3</answer>")["reward"] == 1.0


def test_max_turns_budget_truncates_and_names_it():
    env = guarded(CountdownEnv(extras={"max_turns": 10}), max_turns=2)
    assert not env.step("a")["done"]
    out = env.step("b")
    assert (
        out["done"]
        and out["metadata"]["end"] == "truncated"
        and out["metadata"]["truncated_by"] == "max_turns"
    )
    assert env.end == "truncated"


def test_the_environment_learns_the_turns_a_max_turns_budget_leaves():
    class Telling(BaseTextEnv):
        def step(self, action):
            self.turns += 1
            done = self.turns >= self.max_turns
            told = {"role": "user", "content": f"{self.turns_left()} left"}
            return {"observations": [told], "reward": 0.0, "done": done, "metadata": {}}

    env = guarded(Telling(), max_turns=3)
    env.unwrapped.max_turns = 10
    told = [env.step("a")["observations"][0]["content"] for _ in range(2)]
    last = env.step("a")
    assert told + [last["observations"][0]["content"]] == ["2 left", "1 left", "0 left"]
    assert last["metadata"] == {"end": "truncated", "truncated_by": "max_turns"}
    own = guarded(Telling())
    own.unwrapped.max_turns = 3
    assert own.step("a")["observations"][0]["content"] == "2 left"
    assert own.unwrapped.turns_left_by_budget is None


def test_env_max_turns_attribute_counts_without_a_budget():
    class Forever(BaseTextEnv):
        def step(self, action):
            self.turns += 1
            return {"observations": [], "reward": 0.0, "done": False, "metadata": {}}

    env = guarded(Forever())  # BaseTextEnv.max_turns defaults to 1, as in SkyRL
    assert env.step("x")["metadata"] == {"end": "truncated", "truncated_by": "max_turns"}


def test_step_timeout_returns_in_time_and_names_it():
    class WatchedSleepyEnv(SleepyEnv):
        sleeping = False

        def step(self, action):
            self.sleeping = True
            try:
                return super().step(action)
            finally:
                self.sleeping = False

    inner = WatchedSleepyEnv()
    env = guarded(inner, step_timeout_s=0.2)
    out = env.step("3")
    assert inner.sleeping  # the guard answered at its deadline, while the 3 s step still sleeps
    assert out["done"] and out["metadata"]["truncated_by"] == "step_timeout"


def test_episode_timeout():
    env = guarded(SleepyEnv(), episode_timeout_s=0.3)
    assert not env.step("0.1")["done"]
    out = env.step("5")
    assert out["metadata"]["truncated_by"] == "episode_timeout"


def test_observation_length_is_capped_with_a_note():
    env = guarded(CountdownEnv(), max_observation_chars=5)
    content = env.step("<answer>123456789</answer>")["observations"][0]["content"]
    assert content == "12345\n[... 14 characters cut]"


def test_exception_becomes_an_error_end_not_a_score():
    env = guarded(CrashyEnv())
    assert env.step("fine")["metadata"] == {}
    out = env.step("boom")
    assert out["done"] and out["reward"] == 0.0
    assert out["metadata"]["end"] == "error"
    assert out["metadata"]["error"] == "RuntimeError: the database went away"


def test_errors_raise_mode_propagates():
    env = EpisodeGuard(CrashyEnv(), errors="raise")
    env.init(PROMPT)
    with pytest.raises(RuntimeError, match="went away"):
        env.step("boom")


@pytest.mark.parametrize(
    "bad_output, message",
    [
        ({"observations": [], "reward": float("nan"), "done": True}, "reward must be a finite float"),
        ({"observations": [], "reward": 1.0, "done": "yes"}, "done must be a bool"),
        ({"observations": ["text"], "reward": 1.0, "done": True}, "observations must be a list of"),
        ({"reward": 1.0, "done": True}, "lacks ['observations']"),
        ("not a dict", "must return a dict"),
    ],
)
def test_contract_violations_are_errors_naming_the_rule(bad_output, message):
    class Bad(BaseTextEnv):
        def step(self, action):
            return bad_output

    out = guarded(Bad()).step("x")
    assert out["metadata"]["end"] == "error"
    assert message in out["metadata"]["error"]


class _Calculator(ToolGroup):
    def __init__(self):
        super().__init__(name="calc")

    @tool
    def add(self, a: int, b: int) -> int:
        """Add two numbers."""
        return a + b


class _ToolEnv(BaseTextEnv):
    def __init__(self, env_config=None, extras=None):
        super().__init__()
        self.max_turns = 10
        self.init_tool_groups([_Calculator()])

    def step(self, action):
        self.turns += 1
        result = self._execute_tool("calc", "add", [1, 2])
        return {"observations": [{"role": "user", "content": str(result)}], "reward": 0.0, "done": False}


def test_tool_call_budget():
    env = guarded(_ToolEnv(), max_tool_calls=2)
    assert env.step("x")["observations"][0]["content"] == "3"
    assert env.step("x")["metadata"] == {}
    out = env.step("x")
    assert out["metadata"]["truncated_by"] == "max_tool_calls"
    env.reset(options={"prompt": PROMPT})  # the count starts again with the episode
    assert env.step("x")["observations"][0]["content"] == "3"


def test_close_is_idempotent_and_with_statement_closes():
    closed = []

    class Closing(CountdownEnv):
        def close(self):
            closed.append(1)

    with EpisodeGuard(Closing()) as env:
        env.init(PROMPT)
    env.close()
    assert closed == [1]


def test_reset_with_extras_rebuilds_the_environment():
    env = skyrl_gym.make("math")
    env.reset(
        options={"prompt": "What is 2+2?", "extras": {"reward_spec": {"method": "rule", "ground_truth": "4"}}}
    )
    assert env.step("#### 4")["reward"] == 1.0
    env.reset(
        options={"prompt": "What is 2+3?", "extras": {"reward_spec": {"method": "rule", "ground_truth": "5"}}}
    )
    assert env.step("#### 4")["reward"] == 0.0


def test_reset_without_a_task_set_says_what_to_pass():
    env = EpisodeGuard(CrashyEnv())
    with pytest.raises(ValueError, match="has no default task set"):
        env.reset()


def test_a_step_past_its_timeout_is_abandoned_and_the_env_told_to_stop():
    import threading

    class Stuck(BaseTextEnv):
        def __init__(self):
            super().__init__()
            self.max_turns = 5
            self.stop = threading.Event()
            self.abandoned = 0

        def step(self, action):
            self.stop.wait(30)  # a query that only an interrupt ends
            return {"observations": [], "reward": 0.0, "done": True, "metadata": {}}

        def abandon(self):
            self.abandoned += 1
            self.stop.set()

    env = Stuck()
    guard = guarded(env, step_timeout_s=0.2)
    out = guard.step("SELECT slow()")
    assert (out["metadata"]["end"], out["metadata"]["truncated_by"]) == ("truncated", "step_timeout")
    assert env.abandoned == 1 and env.stop.is_set()


def test_an_oversized_action_is_answered_without_reaching_the_env():
    env = CountdownEnv(extras={"reward_spec": {"ground_truth": "5"}, "max_turns": 3})
    guard = guarded(env)
    out = guard.step("<answer>" * 10_000_000)  # 80 MB
    assert out["done"] is False and out["reward"] == 0.0
    assert out["metadata"] == {"action_refused": "too_long", "action_chars": 80_000_000}
    assert "more than the 1000000" in out["observations"][0]["content"]
    assert env.history == [] and env.turns == 0  # step() never saw it
    small = guarded(CountdownEnv(extras={"max_turns": 2}), max_action_chars=10)
    assert small.step("x" * 11)["metadata"]["action_refused"] == "too_long"
    last = small.step("y" * 11)  # the refused turns still count against max_turns
    assert (last["done"], last["metadata"]["truncated_by"]) == (True, "max_turns")
    assert guarded(CountdownEnv(), max_action_chars=None).step("z" * 2_000_000)["metadata"]["guess"] is None
