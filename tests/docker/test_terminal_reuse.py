"""A fixed_pool worker keeps its terminal container between trajectories of the same image: the next task's
set-up skips the container start, the container is brought back to the image's state (nothing leaks), and
every result equals the one of a run that starts a container per trajectory."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import skyrl_gym
from skyrl_gym.envs.terminal.env import TerminalEnv, instruction_prompt
from skyrl_train.rollout.dispatch.fixed_pool import FixedPoolDispatcher

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

TASK = "permissions-0"
CONFIG = {"command_timeout_s": 10, "timings": False}
PROBE = (
    "<bash>cat leak_marker /tmp/leak_marker ~/leak_marker 2>&1; "
    "echo leftover=$(for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done 2>/dev/null | grep -cx 'sleep 4242 '); "
    "echo from-an-earlier-task > leak_marker; echo x > /tmp/leak_marker; echo x > ~/leak_marker; "
    "(sleep 4242 &)</bash>"
)
"""The first reply of every trajectory: shows what an earlier task left, then leaves files and a process."""


class CountedTerminal(TerminalEnv):
    """The terminal environment, recording the id of the container each episode runs in."""

    containers: list[str] = []

    def init(self, prompt=None):
        observations, info = super().init(prompt)
        CountedTerminal.containers.append(self.container.id)
        return observations, info


@pytest.fixture(scope="module", autouse=True)
def counted_env():
    skyrl_gym.register("terminal_reuse_test", entry_point=CountedTerminal)
    yield
    skyrl_gym.deregister("terminal_reuse_test")


@pytest.fixture(scope="module")
def tokenizer():
    from skyrl_train.models import load_tokenizer

    return load_tokenizer("embedded:smollm2-135m")


def _extras() -> dict[str, Any]:
    return {"reward_spec": {"method": "tests", "ground_truth": TASK}}


def _script(text: str) -> str:
    actions = [PROBE, *TerminalEnv(CONFIG, _extras()).reference_action()]
    return actions[min(text.count("<output>"), len(actions) - 1)]


def _run(tokenizer, reuse: bool) -> tuple[Any, list[str]]:
    from skyrl_train.inference.scripted import SamplingParams, ScriptedEngine
    from skyrl_train.rollout import AgentRunner

    CountedTerminal.containers = []
    runner = AgentRunner(
        ScriptedEngine(tokenizer, _script),
        dispatcher=FixedPoolDispatcher(2),
        env_configs={"terminal_reuse_test": CONFIG},
        reuse_envs=reuse,
    )
    row = {
        "prompt": instruction_prompt(TerminalEnv(CONFIG, _extras()).task),
        "env_class": "terminal_reuse_test",
        **_extras(),
    }
    output = asyncio.run(runner.run([row], 6, SamplingParams(max_tokens=512)))
    return output, list(CountedTerminal.containers)


def test_a_worker_reuses_its_container_and_nothing_leaks(docker_engine, tokenizer):
    plain, plain_containers = _run(tokenizer, reuse=False)
    reused, reused_containers = _run(tokenizer, reuse=True)

    assert len(set(plain_containers)) == 6  # one container started per trajectory
    assert len(reused_containers) == 6 and len(set(reused_containers)) <= 2  # one per worker at most
    assert reused.metrics["generate/env_reuses"] == 6 - len(set(reused_containers)) == 4
    assert plain.metrics["generate/env_reuses"] == 0

    # the same results as without reuse
    assert [t.error for t in reused.trajectories] == [None] * 6
    assert [t.reward for t in reused.trajectories] == [t.reward for t in plain.trajectories] == [1.0] * 6
    assert [t.env_metrics["reused"] for t in reused.trajectories].count(True) == 4

    # no state from one task reaches the next: the files and the process the probe left are gone
    for trajectory in reused.trajectories:
        first_observation = next(
            m["content"]
            for m in trajectory.messages
            if m["role"] != "assistant" and "<output>" in m["content"]
        )
        assert "from-an-earlier-task" not in first_observation
        assert first_observation.count("No such file or directory") == 3
        assert "leftover=0\n" in first_observation
