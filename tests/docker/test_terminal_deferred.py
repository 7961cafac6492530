"""The terminal environment's deferred verification against the real engine: the tests run in ``evaluate()``."""

from __future__ import annotations

from skyrl_gym.envs.terminal.env import TerminalEnv
from skyrl_gym.testing import check_env

FAST = {"command_timeout_s": 5, "timings": False, "pool": 2}


def extras(name: str) -> dict:
    return {"reward_spec": {"method": "tests", "ground_truth": name}}


def test_deferred_verification_runs_the_tests_in_evaluate(docker_engine):
    env = TerminalEnv(FAST, extras("permissions-0"))
    assert env.supports_deferred_verification
    env.defer_verification()
    env.init(None)
    outputs = [env.step(action) for action in env.reference_action()]
    last = outputs[-1]
    assert last["done"] and last["metadata"]["end"] == "terminated"
    assert last["reward"] == 0.0 and last["metadata"]["verification"] == "deferred"
    assert env.verification is None  # nothing verified yet
    verdict = env.evaluate()
    assert verdict["reward"] == 1.0 and verdict["exit_code"] == 0, verdict
    assert env.get_metrics()["solved"] is True
    assert env.evaluate() is None  # once
    env.close()


def test_a_deferred_no_op_episode_is_verified_as_a_failure(docker_engine):
    env = TerminalEnv(FAST, extras("permissions-0"))
    env.defer_verification()
    env.init(None)
    assert env.step("<submit/>")["reward"] == 0.0
    assert env.evaluate()["reward"] == 0.0
    env.close()


def test_check_env_finds_the_same_total_deferred(docker_engine):
    task = TerminalEnv(FAST).sample_task(0)
    report = check_env(lambda: TerminalEnv({**FAST, "max_turns": 3}), tasks=[task], gymnasium_check=False)
    assert report.ok and "deferred-verification" in report.passed, report.summary()


def test_an_episode_its_runner_stopped_is_verified_as_it_stands(docker_engine):
    """The runner's own budget ended the episode before <submit/>: evaluate() still runs the tests on the
    container's state (the work was done, so it earns 1), once."""
    env = TerminalEnv(FAST, extras("permissions-0"))
    env.defer_verification()
    assert env.evaluate() is None  # no episode yet
    env.init(None)
    work, _submit = env.reference_action()
    assert not env.step(work)["done"]
    verdict = env.evaluate()
    assert verdict is not None and verdict["reward"] == 1.0, verdict
    assert env.evaluate() is None
    env.close()
