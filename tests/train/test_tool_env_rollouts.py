"""The trainer's multi-turn generator on the sandboxed and search environments, with a scripted model.

One batch mixes rows of ``python`` (code runs in the real sandbox, its output comes back as the next user
turn), ``search`` (a real BM25 search over the bundled corpus) and ``code`` (a HumanEval answer judged in
the sandbox): every trajectory ends terminated with reward 1, the observations hold what the tools really
returned, and only the model's tokens are trained on.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from skyrl_gym.envs.code.tasks import humaneval_rows
from skyrl_gym.envs.python.tasks import build_rows as python_rows
from skyrl_gym.envs.search.tasks import load_split
from skyrl_train.inference.scripted import SamplingParams, ScriptedEngine
from skyrl_train.rollout import MultiTurnGenerator

pytest.importorskip("transformers")


def rows() -> list[dict[str, Any]]:
    python = python_rows(2, seed=3, split="test", tasks=["gcd", "basic_arithmetic"])
    search = [row for row in load_split("test") if row["extra_info"]["hops"] == 1][:2]
    code = humaneval_rows()[:2]
    return python + search + code


def question_of(row: dict[str, Any]) -> str:
    return row["prompt"][-1]["content"]


def script_for(batch: list[dict[str, Any]]):
    """A model that uses each environment's tool once, then gives the known answer."""
    by_question = {question_of(row): row for row in batch}

    def script(text: str) -> str:
        row = next(r for q, r in by_question.items() if q in text)
        turn = text.count("<|im_start|>assistant") - 1
        truth = row["reward_spec"]["ground_truth"]
        if row["env_class"] == "python":
            if turn == 0:
                return "Let me check with code.\n```python\nprint(6 * 7)\n```"
            return f"The answer is \\boxed{{{truth}}}."
        if row["env_class"] == "search":
            if turn == 0:
                return f"<search>{row['question']}</search>"
            return f"<answer>{truth['target'][0]}</answer>"
        solution = truth["canonical_solution"]
        return f"```python\n{truth['prompt']}{solution}```"

    return script


def test_a_mixed_batch_rolls_out_through_the_real_tools(tokenizer):
    batch = rows()
    engine = ScriptedEngine(tokenizer, script_for(batch))
    generator = MultiTurnGenerator(engine)
    output = asyncio.run(generator.generate(batch, 1, SamplingParams(max_tokens=512)))

    assert len(output.trajectories) == len(batch)
    for row, trajectory in zip(batch, output.trajectories, strict=True):
        assert trajectory.end == "terminated", (row["env_class"], trajectory.error)
        assert trajectory.reward == 1.0, row["env_class"]
        observations = [
            m["content"] for m in trajectory.messages[len(row["prompt"]) :] if m["role"] == "user"
        ]
        if row["env_class"] == "python":
            assert trajectory.num_turns == 2
            assert "```output\n42\n```" in observations[0]  # what the sandboxed interpreter printed
        elif row["env_class"] == "search":
            assert trajectory.num_turns == 2
            assert observations[0].startswith('\n<information>{"result": "Doc 1: ')
        else:
            assert trajectory.num_turns == 1 and observations == []
        # the loss mask covers the model's turns and nothing the environments wrote
        trained = sum(trajectory.loss_mask)
        assert trained == sum(end - start for start, end in trajectory.turn_spans)
        assert trained < len(trajectory.response_ids) or trajectory.num_turns == 1
    metrics = output.metrics
    assert metrics["generate/reward_mean"] == 1.0 and metrics["generate/error_count"] == 0.0
