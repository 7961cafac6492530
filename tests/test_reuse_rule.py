"""``Env.reuse`` through the guard and check_env's ``reuse`` rule: a reused environment plays as a fresh one."""

from __future__ import annotations

from typing import Any

from envs_for_tests import CountdownEnv

from skyrl_gym.guard import EpisodeGuard
from skyrl_gym.testing import RULES, check_env


class ReusableCountdownEnv(CountdownEnv):
    """Reuse resets the turn count and takes the new secret; ``reuses`` counts them."""

    supports_reuse = True
    reuses = 0

    def reuse(self, extras: dict[str, Any] | None) -> bool:
        type(self).reuses += 1
        fresh = CountdownEnv(self.env_config, extras)
        self.secret, self.max_turns, self.history, self.turns = fresh.secret, fresh.max_turns, [], 0
        return True


class LeakyCountdownEnv(ReusableCountdownEnv):
    """Reuse keeps the previous task's secret: the next task is judged against the old answer."""

    def reuse(self, extras: dict[str, Any] | None) -> bool:
        secret = self.secret
        super().reuse(extras)
        self.secret = secret
        return True


class DecliningCountdownEnv(ReusableCountdownEnv):
    """Supports reuse but never finds the kept resources fit."""

    def reuse(self, extras: dict[str, Any] | None) -> bool:
        return False


def test_the_rule_is_listed():
    assert "reuse" in RULES


def test_a_correct_reuse_passes_and_is_exercised():
    ReusableCountdownEnv.reuses = 0
    report = check_env(lambda: ReusableCountdownEnv(), seeds=(0, 3, 5))
    assert report.ok, report.summary()
    assert "reuse" in report.passed
    assert ReusableCountdownEnv.reuses == 3  # the same task again, then the next two


def test_a_reuse_that_leaks_turns_is_caught():
    # after reuse the old secret earns 1, which a fresh environment of the new task scores 0
    report = check_env(lambda: LeakyCountdownEnv(), seeds=(0, 3), oracle=False, raise_on_failure=False)
    assert [f.rule for f in report.failures] == ["reuse"], report.summary()


def test_declining_every_reuse_is_reported_as_skipped():
    report = check_env(lambda: DecliningCountdownEnv(), seeds=(0,))
    assert report.ok
    assert "reuse" in report.skipped and "reuse" not in report.passed


def test_an_environment_without_reuse_passes_the_rule_trivially():
    report = check_env(lambda: CountdownEnv(), seeds=(0,))
    assert "reuse" in report.passed


def test_the_guard_forwards_reuse_and_starts_a_new_episode():
    env = EpisodeGuard(ReusableCountdownEnv(extras=CountdownEnv().sample_task(1)["extras"]))
    assert env.supports_reuse
    env.init([{"role": "user", "content": "go"}])
    assert env.step("<answer>1</answer>")["done"]
    assert env.reuse(CountdownEnv().sample_task(4)["extras"])
    env.init([{"role": "user", "content": "again"}])
    out = env.step("<answer>4</answer>")
    assert out["done"] and out["reward"] == 1.0
    env.close()
