"""``ReActEnv`` over the terminal environment in a real Docker container: conformance, the scripted oracle,
the no-op, the bash and editor tools in the container, and adversarial tool calls."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyrl_gym.envs.terminal.env import TerminalEnv
from skyrl_gym.testing import check_env, play_episode
from skyrl_gym.testing.strategies import adversarial_actions, episodes, tool_call_actions
from skyrl_gym.tools.react import ReActEnv, render_tool_call

pytestmark = pytest.mark.docker

FAST = {"command_timeout_s": 5, "timings": False, "pool": 2}


def terminal_react(max_turns: int = 4) -> ReActEnv:
    return ReActEnv(TerminalEnv({**FAST, "max_turns": 50}), {"max_turns": max_turns, "tool_timeout_s": 5})


@pytest.fixture(scope="module")
def task(docker_engine):
    return TerminalEnv(FAST).sample_task(0)


def test_react_over_terminal_conforms(task):
    report = check_env(lambda: terminal_react(3), tasks=[task], gymnasium_check=False)
    for rule in ("oracle-earns-full-reward", "noop-earns-nothing", "deterministic", "no-shared-state"):
        assert rule in report.passed, report.summary()


def test_scripted_tool_calls_solve_the_task_and_finishing_early_earns_nothing(task):
    env = terminal_react(6)
    messages, info = env.reset(options=task)
    assert info["tools"] == ["bash", "code_search", "editor", "python", "finish"]
    assert "<bash>" in messages[0]["content"] and "<tools>" in messages[0]["content"]
    episode = env.reference_episode()
    assert len(episode) == 2
    ran = env.step(episode[0])
    assert not ran["done"] and ran["observations"][0]["role"] == "tool"
    final = env.step(episode[1])
    assert final["done"] and final["reward"] == 1.0 and final["metadata"]["verification"]["reward"] == 1.0
    env.close()
    lazy = terminal_react(6)
    lazy.reset(options=task)
    early = lazy.step(render_tool_call("finish", {"answer": "done"}))
    assert early["done"] and early["reward"] == 0.0
    lazy.close()


def test_bash_and_editor_work_in_the_container(task):
    env = terminal_react(10)
    env.reset(options=task)
    steps = [
        ("bash", {"command": "cd /tmp && export GREETING=hello"}),
        ("bash", {"command": "pwd; echo $GREETING"}),  # the shell keeps its folder and variables
        ("editor", {"command": "create", "path": "/tmp/notes.txt", "file_text": "one\ntwo\n"}),
        (
            "editor",
            {"command": "str_replace", "path": "/tmp/notes.txt", "old_str": "two", "new_str": "three"},
        ),
        ("bash", {"command": "cat /tmp/notes.txt"}),
        ("editor", {"command": "view", "path": "/tmp/notes.txt", "view_range": [2, 2]}),
        ("bash", {"command": "sleep 30"}),
    ]
    outputs = [
        env.step(render_tool_call(name, arguments))["observations"][0]["content"] for name, arguments in steps
    ]
    assert outputs[1].startswith("/tmp\nhello\n")
    assert outputs[4].startswith("one\nthree\n") and "[exit code 0]" in outputs[4]
    assert outputs[5] == "     2\tthree"
    assert "timed out after 5 s" in outputs[6]
    assert env.step(render_tool_call("bash", {"command": "echo alive"}))["observations"][0][
        "content"
    ].startswith("alive")
    env.close()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_adversarial_tool_calls_never_end_in_error(task, data):
    env = terminal_react(3)
    env.reset(options=task)
    actions = data.draw(
        episodes(st.one_of(tool_call_actions(env), adversarial_actions(("tool_call",))), 1, 3)
    )
    env.close()
    play_episode(terminal_react(3), actions, task=task)
