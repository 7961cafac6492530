"""The terminal environment against the real engine: the task set's oracle and no-op, conformance, properties,
the protocol and the task format.

The oracle / no-op check runs one task per family by default (a fixed sample: every family, a few seconds
each); ``SKYRL_TERMINAL_ALL=1`` runs the whole set (``make test-terminal-tasks``).
"""

from __future__ import annotations

import os
from collections import Counter

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env as gymnasium_check_env
from hypothesis import HealthCheck, given, settings

import skyrl_gym
from skyrl_gym.envs.terminal.env import TerminalEnv
from skyrl_gym.envs.terminal.tasks import find_tasks, load_split, load_task
from skyrl_gym.testing import check_env, play_episode
from skyrl_gym.testing.strategies import episodes, tag_actions

TASKS = find_tasks()
SAMPLE = [t for t in TASKS if t.name.endswith("-0")]
CHECKED = TASKS if os.environ.get("SKYRL_TERMINAL_ALL") == "1" else SAMPLE
FAST = {"command_timeout_s": 5, "timings": False, "pool": 2}


def extras(name: str) -> dict:
    return {"reward_spec": {"method": "tests", "ground_truth": name}}


def test_task_set_shape():
    families = Counter(t.metadata["family"] for t in TASKS)
    assert len(TASKS) >= 40 and len(families) >= 8 and min(families.values()) >= 5
    train, test = load_split("train"), load_split("test")
    assert {t.name for t in train}.isdisjoint(t.name for t in test)
    assert len(train) + len(test) == len(TASKS)
    assert {t.metadata["family"] for t in test} == set(families)
    variants = [t.instruction for t in TASKS if t.metadata["family"] == "git-merge"]
    assert len(set(variants)) == len(variants), "seeds give distinct tasks"


@pytest.mark.parametrize("task", CHECKED, ids=lambda t: t.name)
def test_reference_solution_earns_one_and_doing_nothing_earns_zero(docker_engine, task):
    env = TerminalEnv({"command_timeout_s": 30}, extras(task.name))
    env.init(None)
    outputs = [env.step(action) for action in env.reference_action()]
    verification = outputs[-1]["metadata"]["verification"]
    assert outputs[-1]["reward"] == 1.0, verification
    assert outputs[-1]["metadata"]["end"] == "terminated" and "duration_s" in verification
    env.close()
    env = TerminalEnv({}, extras(task.name))
    env.init(None)
    final = env.step("<submit/>")
    assert final["done"] and final["reward"] == 0.0, final["metadata"]["verification"]
    env.close()


def test_terminal_env_conforms(docker_engine):
    task = TerminalEnv(FAST).sample_task(0)
    report = check_env(lambda: TerminalEnv({**FAST, "max_turns": 3}), tasks=[task], gymnasium_check=False)
    assert report.ok
    for rule in (
        "oracle-earns-full-reward",
        "deterministic",
        "no-shared-state",
        "model-failures-are-not-errors",
        "reuse",
    ):
        assert rule in report.passed, report.summary()


def test_terminal_env_in_gymnasium(docker_engine):
    env = gymnasium.make("skyrl_gym/terminal", env_config={**FAST, "max_turns": 3})
    gymnasium_check_env(env.unwrapped, skip_render_check=True)
    env.reset(seed=1)
    _, reward, terminated, truncated, _ = env.step("<bash>ls</bash>")
    assert reward == 0.0 and not terminated and not truncated
    env.close()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(episodes(tag_actions(["bash", "submit"]), max_turns=4))
def test_adversarial_episodes_never_end_in_error(docker_engine, actions):
    env = skyrl_gym.make("terminal", env_config={**FAST, "max_turns": 4})
    try:
        play_episode(env, actions, seed=2)
    finally:
        env.close()


def test_protocol_tool_calls_state_and_metadata(docker_engine):
    env = skyrl_gym.make("terminal", env_config={"command_timeout_s": 2}, extras=extras("log-errors-0"))
    output = env.step('<tool_call>{"name": "bash", "arguments": {"command": "cd logs && X=5"}}</tool_call>')
    assert "exit code 0" in output["observations"][0]["content"]  # step before init starts the episode
    output = env.step("<bash>echo $X; pwd</bash>\n<bash>false</bash>")
    text = output["observations"][0]["content"]
    assert "5\n/app/logs\n" in text and "exit code 1" in text and " s]" in text
    assert [c["exit_code"] for c in output["metadata"]["commands"]] == [0, 1]
    output = env.step("<bash>sleep 60</bash>")
    assert (
        output["metadata"]["commands"][0]["timed_out"]
        and "interrupted" in output["observations"][0]["content"]
    )
    output = env.step('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>')
    assert "unknown tool" in output["observations"][0]["content"]
    output = env.step('<tool_call>{"name": "submit", "arguments": {}}</tool_call>')
    assert output["done"] and output["metadata"]["submitted"]
    assert output["metadata"]["verification"]["reward"] == 0.0
    metrics = env.get_metrics()
    assert metrics["commands"] == 4 and metrics["command_timeouts"] == 1 and not metrics["solved"]
    env.close()


def test_max_turns_ends_with_verification(docker_engine):
    env = TerminalEnv({"max_turns": 2}, extras("permissions-0"))
    env.init(None)
    assert not env.step("<bash>true</bash>")["done"]
    last = env.step(env.reference_action()[0])
    assert last["done"] and last["metadata"]["truncated_by"] == "max_turns" and last["reward"] == 1.0
    env.close()


def test_harbor_task_format(tmp_path):
    folder = tmp_path / "hello"
    (folder / "tests").mkdir(parents=True)
    (folder / "instruction.md").write_text("Say hello.\n")
    (folder / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (folder / "task.toml").write_text(
        '[agent]\ntimeout_sec = 90.0\n[verifier]\ntimeout_sec = 30\n[environment]\nmemory = "2G"\n'
        'storage = "512M"\ncpus = 2\nallow_internet = true\ndocker_image = "local/terminal:latest"\n'
    )
    task = load_task(folder)
    assert (task.memory_mb, task.storage_mb, task.cpus, task.allow_internet) == (2048, 512, 2.0, True)
    assert (task.agent_timeout_s, task.verifier_timeout_s) == (90.0, 30.0)
    (folder / "instruction.md").unlink()
    with pytest.raises(ValueError, match="instruction.md"):
        load_task(folder)
    with pytest.raises(ValueError, match="ground_truth"):
        TerminalEnv({}, {"reward_spec": {"method": "tests"}})
