"""The default task set of ``lcb``: the ``code`` environment's bundled stdin/stdout problems, as LCB rows.

Each problem's public and hidden tests become SkyRL's LiveCodeBench ground truth, a JSON list of
``{"input", "output", "testtype": "stdin"}``; the prompt shows the statement and the public tests as
examples. Problems judged with a float tolerance in the ``code`` environment are left out: LiveCodeBench's
comparison is exact (up to equal decimal values), and their expected outputs would wrong correct programs.
"""

from __future__ import annotations

import functools
import json
import random
from typing import Any

from skyrl_gym.core import Task
from skyrl_gym.envs.code.tasks import StdioProblem, stdio_problems, stdio_split

__all__ = ["FORMAT_INSTRUCTION", "lcb_problems", "make_prompt", "row_for", "task_for_seed"]

DATA_SOURCE = "lcb_bundled"

FORMAT_INSTRUCTION = (
    "Write a Python 3 program that reads the input from standard input, solves the problem and writes the "
    "answer to standard output. Give the whole program in one code block:\n```python\n# your code\n```"
)
"""What every prompt asks for: a stdin/stdout program in a fenced block (the last block is the one run)."""


@functools.lru_cache(maxsize=1)
def lcb_problems() -> tuple[StdioProblem, ...]:
    """The bundled problems that LiveCodeBench's exact comparison judges fairly (no float tolerance)."""
    return tuple(p for p in stdio_problems() if p.float_tol is None)


def _fence(text: str) -> str:
    return "```\n" + (text if text.endswith("\n") else text + "\n") + "```"


def make_prompt(problem: StdioProblem) -> list[dict[str, str]]:
    """The chat prompt: one user message with the statement, the public tests as examples and the format."""
    parts = [f"# {problem.title}" if problem.title else "", problem.statement.strip()]
    for number, test in enumerate(problem.public_tests, 1):
        parts.append(f"Example {number}\n\nInput:\n{_fence(test.input)}\nOutput:\n{_fence(test.output)}")
    parts.append(FORMAT_INSTRUCTION)
    return [{"role": "user", "content": "\n\n".join(p for p in parts if p)}]


def ground_truth(problem: StdioProblem) -> str:
    """SkyRL's LCB ground truth for ``problem``: its public then hidden tests as a JSON string."""
    return json.dumps([{"input": t.input, "output": t.output, "testtype": "stdin"} for t in problem.tests])


def row_for(problem: StdioProblem, index: int = 0) -> dict[str, Any]:
    """A dataset row in SkyRL's format (``env_class`` ``lcb``) for ``problem``."""
    return {
        "data_source": DATA_SOURCE,
        "prompt": make_prompt(problem),
        "env_class": "lcb",
        "reward_spec": {"method": "rule", "ground_truth": ground_truth(problem)},
        "extra_info": {
            "problem_id": problem.id,
            "difficulty": problem.difficulty,
            "split": stdio_split(problem),
            "index": index,
            "reference_solution": problem.reference_solution,
        },
    }


def task_for_seed(seed: int | None = None) -> Task:
    """A bundled problem for ``seed``, the same one every time (a random one for ``None``)."""
    if seed is None:
        seed = random.randrange(2**31)
    problems = lcb_problems()
    row = row_for(problems[random.Random(f"{DATA_SOURCE}/{seed}").randrange(len(problems))])
    return Task(prompt=row.pop("prompt"), extras={k: v for k, v in row.items() if k != "env_class"})
