"""Verification after the episode: ``Env.evaluate()``, ``defer_verification()``, the guard and check_env's rule."""

from __future__ import annotations

from typing import Any

import pytest
from deferring_env import DeferredCountdownEnv
from envs_for_tests import CountdownEnv

import skyrl_gym
from skyrl_gym.testing import RULES, ConformanceError, check_env

TASK = {"prompt": [{"role": "user", "content": "Guess."}], "extras": {"reward_spec": {"ground_truth": "4"}}}


def test_the_default_env_has_nothing_to_verify_and_refuses_deferral():
    env = CountdownEnv()
    assert env.supports_deferred_verification is False and env.evaluate() is None
    with pytest.raises(NotImplementedError, match="does not support deferred verification"):
        env.defer_verification()


def test_deferred_and_in_step_verification_give_the_same_total():
    in_step = DeferredCountdownEnv(extras=TASK["extras"])
    in_step.init(TASK["prompt"])
    assert in_step.step("<answer>4</answer>")["reward"] == 1.0 and in_step.evaluate() is None

    deferred = DeferredCountdownEnv(extras=TASK["extras"])
    deferred.defer_verification()
    deferred.init(TASK["prompt"])
    last = deferred.step("<answer>4</answer>")
    assert last["done"] and last["reward"] == 0.0 and deferred.grader_runs == 0
    assert deferred.evaluate() == {"reward": 1.0, "graded": "4"} and deferred.grader_runs == 1


@pytest.mark.parametrize("guarded", ["installed", "wrapping"])
def test_the_guard_lets_evaluate_run_after_the_end(guarded):
    name = "deferred_countdown_for_test"
    skyrl_gym.register(name, entry_point=DeferredCountdownEnv)
    try:
        env = skyrl_gym.make(name, extras=TASK["extras"])
        if guarded == "wrapping":
            env = skyrl_gym.EpisodeGuard(env)
        assert env.supports_deferred_verification is True
        env.defer_verification()
        env.init(TASK["prompt"])
        assert env.step("<answer>3</answer>")["done"]
        assert env.evaluate() == {"reward": 0.0, "graded": "3"}
        env.close()
        if guarded == "wrapping":
            with pytest.raises(skyrl_gym.errors.Error, match="is closed"):
                env.evaluate()
    finally:
        skyrl_gym.deregister(name)


def test_check_env_compares_deferred_with_in_step_verification():
    assert "deferred-verification" in RULES
    report = check_env(lambda: DeferredCountdownEnv(), seeds=(0, 3))
    assert report.ok and "deferred-verification" in report.passed
    # an environment that does not defer: evaluate() after the end must be None
    report = check_env(lambda: CountdownEnv(), seeds=(0,))
    assert "deferred-verification" in report.passed


class DeferralLosesReward(DeferredCountdownEnv):
    """Deferred, its grader is off by half: the totals differ."""

    def evaluate(self) -> dict[str, Any] | None:
        verdict = super().evaluate()
        return None if verdict is None else {**verdict, "reward": verdict["reward"] / 2}


class EvaluatesWithoutDeferral(CountdownEnv):
    """Returns a verification although nothing was deferred (it would be counted twice)."""

    def evaluate(self) -> dict[str, Any] | None:
        return {"reward": 1.0}


class EvaluateReturnsJunk(DeferredCountdownEnv):
    def evaluate(self) -> Any:
        super().evaluate()
        return 1.0


@pytest.mark.parametrize("broken", [DeferralLosesReward, EvaluatesWithoutDeferral, EvaluateReturnsJunk])
def test_check_env_names_the_rule_a_broken_deferral_breaks(broken):
    with pytest.raises(ConformanceError) as info:
        check_env(lambda: broken(), seeds=(0,))
    assert {f.rule for f in info.value.failures} == {"deferred-verification"}, info.value
