"""The test kit: check_env passes well-behaved environments and names the rule a broken one breaks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from envs_for_tests import CountdownEnv
from hypothesis import given
from hypothesis import strategies as st

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.testing import RULES, ConformanceError, check_env, conformance_test, play_episode
from skyrl_gym.testing.strategies import (
    adversarial_actions,
    episodes,
    tag_actions,
    text_actions,
    tool_call_actions,
)
from skyrl_gym.tools import ToolGroup, parse_tool_calls, tool


def countdown():
    return skyrl_gym.EpisodeGuard(CountdownEnv())


def rules_broken(factory, **kwargs) -> set[str]:
    with pytest.raises(ConformanceError) as info:
        check_env(factory, **kwargs)
    for failure in info.value.failures:  # every message names its rule
        assert f"[{failure.rule}]" in str(info.value)
    return {f.rule for f in info.value.failures}


def test_well_behaved_environment_passes_every_rule():
    report = check_env(countdown)
    assert report.ok and report.failures == []
    assert "oracle-earns-full-reward" in report.passed and "survives-adversarial-actions" in report.passed
    assert set(report.passed) | set(report.skipped) <= set(RULES)


def test_a_registered_id_is_checked_like_its_factory():
    by_id = check_env("gsm8k", gymnasium_check=False)
    by_factory = check_env(lambda: skyrl_gym.make("gsm8k"), gymnasium_check=False)
    assert by_id.ok and by_id.passed == by_factory.passed
    with pytest.raises(skyrl_gym.UnknownEnvironmentError, match="did you mean"):
        check_env("gsm8kk")


class NoReference(CountdownEnv):
    def reference_action(self):
        return None


def test_an_oracle_that_never_ran_fails_unless_left_out_on_purpose():
    with pytest.raises(ConformanceError, match="oracle=False") as info:
        check_env(lambda: skyrl_gym.EpisodeGuard(NoReference()))
    assert [f.rule for f in info.value.failures] == ["oracle-earns-full-reward"]
    report = check_env(lambda: skyrl_gym.EpisodeGuard(NoReference()), oracle=False)
    assert report.ok and report.skipped["oracle-earns-full-reward"] == "check_env(..., oracle=False)"


def test_rules_are_documented():
    assert len(RULES) >= 15 and all(isinstance(text, str) and text for text in RULES.values())


class NanReward(CountdownEnv):
    def step(self, action):
        out = super().step(action)
        out["reward"] = float("nan")
        return out


class IntDone(CountdownEnv):
    def step(self, action):
        out = super().step(action)
        out["done"] = int(out["done"])
        return out


class SetMetadata(CountdownEnv):
    def step(self, action):
        out = super().step(action)
        out["metadata"] = {"seen": {1, 2}}
        return out


class EmojiCrash(CountdownEnv):
    def step(self, action):
        if "🙂" in action:
            raise UnicodeError("cannot encode")
        return super().step(action)


class SharedState(CountdownEnv):
    guesses: list[str] = []  # class-level: shared by every instance

    def step(self, action):
        self.guesses.append(action)
        out = super().step(action)
        out["metadata"]["n"] = len(self.guesses)
        return out


class WrongOracle(CountdownEnv):
    def reference_action(self):
        return "<answer>not it</answer>"


class PaysForNothing(CountdownEnv):
    def step(self, action):
        out = super().step(action)
        out["reward"] = 0.5
        return out


class Nondeterministic(CountdownEnv):
    counter = iter(range(10**9))

    def step(self, action):
        out = super().step(action)
        out["metadata"]["call"] = next(self.counter)
        return out


class RandomPrompt(CountdownEnv):
    def sample_task(self, seed=None):
        import random

        task = super().sample_task(seed)
        task["prompt"] = [{"role": "user", "content": f"Guess {random.random()}"}]
        return task


class NoOpNeverEnds(BaseTextEnv):
    def __init__(self, env_config=None, extras=None):
        super().__init__()
        self.max_turns = 10**6

    def sample_task(self, seed=None):
        return {"prompt": [{"role": "user", "content": "hi"}]}

    def step(self, action):
        return {"observations": [], "reward": 0.0, "done": False, "metadata": {}}


class ErrorsOnItsOwnAttack(CountdownEnv):
    """Reports its own machinery failing when the model sends the attack it declares."""

    hostile_actions = ("kill -9 $PPID",)

    def step(self, action):
        if action == "kill -9 $PPID":
            return {
                "observations": [],
                "reward": 0.0,
                "done": True,
                "metadata": {"end": "error", "error": "died"},
            }
        return super().step(action)


class EndsInErrorOnEmoji(CountdownEnv):
    def step(self, action):
        if "🙂" in action:
            return {
                "observations": [],
                "reward": 0.0,
                "done": True,
                "metadata": {"end": "error", "error": "x"},
            }
        return super().step(action)


def test_hostile_actions_that_end_in_error_break_their_rule():
    assert "model-failures-are-not-errors" in rules_broken(
        lambda: skyrl_gym.EpisodeGuard(ErrorsOnItsOwnAttack())
    )
    report = check_env(lambda: skyrl_gym.EpisodeGuard(CountdownEnv()), raise_on_failure=False)
    assert "model-failures-are-not-errors" in report.skipped

    class Survives(CountdownEnv):
        hostile_actions = ("kill -9 $PPID",)

    report = check_env(lambda: skyrl_gym.EpisodeGuard(Survives()), raise_on_failure=False)
    assert report.ok and "model-failures-are-not-errors" in report.passed


@pytest.mark.parametrize(
    "env_class, rule",
    [
        (EndsInErrorOnEmoji, "survives-adversarial-actions"),
        (NanReward, "reward-is-finite-float"),
        (IntDone, "done-is-bool"),
        (SetMetadata, "metadata-is-json"),
        (EmojiCrash, "survives-adversarial-actions"),
        (SharedState, "no-shared-state"),
        (WrongOracle, "oracle-earns-full-reward"),
        (PaysForNothing, "noop-earns-nothing"),
        (Nondeterministic, "deterministic"),
        (RandomPrompt, "deterministic"),
        (NoOpNeverEnds, "step-after-done-raises"),
    ],
)
def test_broken_environment_fails_with_the_right_rule(env_class, rule):
    assert rule in rules_broken(lambda: skyrl_gym.EpisodeGuard(env_class()))


def test_nan_reward_message_is_readable():
    with pytest.raises(
        ConformanceError,
        match=r"\[reward-is-finite-float\] step\(''\): step\(\) reward must be a finite float, got nan",
    ):
        check_env(lambda: skyrl_gym.EpisodeGuard(NanReward()))


def test_factory_must_return_an_env():
    assert rules_broken(lambda: object()) == {"make-returns-env"}


def test_report_without_raising():
    report = check_env(lambda: skyrl_gym.EpisodeGuard(NanReward()), raise_on_failure=False)
    assert not report.ok and "reward-is-finite-float" in report.summary()


def test_tasks_instead_of_seeds():
    tasks = [
        {"prompt": [{"role": "user", "content": "guess"}], "extras": {"reward_spec": {"ground_truth": "8"}}}
    ]
    assert check_env(countdown, tasks=tasks).ok


test_countdown_conforms = conformance_test(countdown)


def test_pytest_fixture(skyrl_check_env):
    assert skyrl_check_env(countdown).ok


@given(episodes(tag_actions(["answer"]), max_turns=4), st.integers(0, 9))
def test_countdown_property_tag_protocol(actions, seed):
    outputs = play_episode(countdown(), actions, seed=seed)
    assert all(o["reward"] in (0.0, 1.0) for o in outputs)


@given(episodes(text_actions(), max_turns=3))
def test_countdown_property_free_text(actions):
    play_episode(countdown(), actions, seed=0)


@given(adversarial_actions(["answer"]))
def test_countdown_property_adversarial(action):
    play_episode(countdown(), [action], seed=1)


def test_play_episode_reports_an_error_end():
    with pytest.raises(ConformanceError, match=r"\[survives-adversarial-actions\].*ended in error"):
        play_episode(skyrl_gym.EpisodeGuard(EmojiCrash()), ["🙂"], seed=0)


class _Kv(ToolGroup):
    def __init__(self):
        super().__init__(name="kv")
        self.data: dict[str, Any] = {}

    @tool
    def put(self, key: str, value: int) -> str:
        """Store a value.

        Args:
            key: the key.
            value: the value.
        """
        self.data[key] = value
        return "ok"


@given(tool_call_actions(_Kv()))
def test_tool_call_actions_are_tool_calls_or_deliberately_broken(action):
    assert action.startswith("<tool_call>") or action == "<tool_call>"
    calls = parse_tool_calls(action)
    assert len(calls) <= 1


@given(tool_call_actions(_Kv(), well_formed_only=True))
def test_well_formed_tool_calls_match_the_schema(action):
    payload = json.loads(action[len("<tool_call>") : -len("</tool_call>")])
    assert payload["name"] == "put"
    assert isinstance(payload["arguments"]["key"], str) and isinstance(payload["arguments"]["value"], int)
