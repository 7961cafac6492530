"""Terminal tasks in real containers through the stage pipeline and the fixed pool: set-up starts a container,
the episode runs the task's reference solution, verification runs its hidden tests in the evaluate stage."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from skyrl_gym.envs.terminal.env import TerminalEnv, instruction_prompt
from skyrl_train.rollout.dispatch.async_pipeline import AsyncPipelineDispatcher
from skyrl_train.rollout.dispatch.fixed_pool import FixedPoolDispatcher

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

TASKS = ("permissions-0", "log-errors-0", "csv-totals-0")
CONFIG = {"command_timeout_s": 10, "timings": False}


@pytest.fixture(scope="module")
def tokenizer():
    from skyrl_train.models import load_tokenizer

    return load_tokenizer("embedded:smollm2-135m")


def extras(name: str) -> dict[str, Any]:
    return {"reward_spec": {"method": "tests", "ground_truth": name}}


def row(name: str) -> dict[str, Any]:
    """A dataset row of the task (its prompt is built from the task folder; no container needed)."""
    return {
        "prompt": instruction_prompt(TerminalEnv(CONFIG, extras(name)).task),
        "env_class": "terminal",
        **extras(name),
    }


def solver(solve: bool):
    """The engine's script: each task's reference replies in order (or ``<submit/>`` at once)."""
    references = {}
    for name in TASKS:
        env = TerminalEnv(CONFIG, extras(name))
        references[env.task.instruction.strip()] = env.reference_action()

    def script(text: str) -> str:
        if not solve:
            return "<submit/>"
        (actions,) = [actions for instruction, actions in references.items() if instruction in text]
        # every reply but the last runs a command, whose output comes back as an observation
        return actions[min(text.count("<output>"), len(actions) - 1)]

    return script


@pytest.mark.parametrize(
    "make",
    [
        lambda: AsyncPipelineDispatcher(2, initialize_concurrency=2, evaluate_concurrency=2, max_ahead=2),
        lambda: FixedPoolDispatcher(2),
    ],
    ids=["async_pipeline", "fixed_pool"],
)
def test_terminal_tasks_run_through_the_stages_in_containers(docker_engine, tokenizer, make):
    from skyrl_train.inference.scripted import SamplingParams, ScriptedEngine
    from skyrl_train.rollout import AgentRunner

    dispatcher = make()
    for solve, reward in ((True, 1.0), (False, 0.0)):
        runner = AgentRunner(
            ScriptedEngine(tokenizer, solver(solve)),
            dispatcher=dispatcher,
            env_configs={"terminal": CONFIG},
        )
        output = asyncio.run(runner.run([row(name) for name in TASKS], 2, SamplingParams(max_tokens=512)))
        results = output.trajectories
        assert [t.error for t in results] == [None] * 6
        assert [t.reward for t in results] == [reward] * 6
        # verified in the evaluate stage, by the task's tests
        assert all(t.verification is not None and t.verification["reward"] == reward for t in results)
        assert output.metrics["dispatch/evaluate/runs"] == 6.0
