"""The default task set of ``gsm8k`` and ``gsm8k_multi_turn``: grade-school word problems, offline.

The source is chosen by ``env_config.tasks``:

- ``"gsm_symbolic"``: reasoning-gym's ``gsm_symbolic`` generator, GSM8K's own problems with their numbers
  redrawn (needs the ``reasoning-gym`` package, in the ``code`` extra);
- ``"procedural"``: the ``math`` environment's word-problem generator (:mod:`skyrl_gym.envs.math.tasks`,
  standard library only);
- ``"auto"`` (the default): ``gsm_symbolic`` when reasoning-gym is installed, else ``procedural``.

A task is a row in SkyRL's GSM8K format: one user message (the question and how to write the answer) and
``reward_spec = {"method": "rule", "ground_truth": "<answer as text>"}``. The same seed gives the same task.
"""

from __future__ import annotations

import importlib.util
import random
from typing import Any

from skyrl_gym.core import Task

__all__ = ["INSTRUCTION", "TASK_SOURCES", "make_prompt", "resolve_source", "task_for_seed"]

TASK_SOURCES = ("auto", "gsm_symbolic", "procedural")

INSTRUCTION = 'Think it through step by step, then write the final answer, a number, after "#### ".'
"""Appended to every question: the strict rule reads the number right after ``"#### "``."""


def resolve_source(source: str) -> str:
    """The source ``source`` names (``"auto"`` resolved); a ``ValueError`` for an unknown one."""
    if source not in TASK_SOURCES:
        raise ValueError(f"the task source must be one of {', '.join(TASK_SOURCES)}, got {source!r}")
    if source == "auto":
        return "gsm_symbolic" if importlib.util.find_spec("reasoning_gym") is not None else "procedural"
    return source


def make_prompt(question: str) -> list[dict[str, str]]:
    """The chat prompt of a question: one user message, the question followed by :data:`INSTRUCTION`."""
    return [{"role": "user", "content": f"{question.strip()} {INSTRUCTION}"}]


def _gsm_symbolic(seed: int) -> tuple[str, str]:
    try:
        import reasoning_gym
    except ImportError:
        raise ImportError(
            "the gsm_symbolic tasks come from reasoning-gym: pip install 'skyrl[code]' (or reasoning-gym), "
            "or set env_config.tasks='procedural'"
        ) from None
    entry = reasoning_gym.create_dataset("gsm_symbolic", size=1, seed=seed)[0]
    return str(entry["question"]), str(entry["answer"]).strip()


def _procedural(seed: int) -> tuple[str, str]:
    from skyrl_gym.envs.math import tasks as math_tasks

    task = math_tasks.task_for_seed(seed)
    question = next(m["content"] for m in task["prompt"] if m["role"] == "user")
    return question, str(task["extras"]["reward_spec"]["ground_truth"])


def task_for_seed(seed: int | None = None, source: str = "auto") -> Task:
    """The task for ``seed`` from ``source`` (see the module docstring); a random one for ``None``."""
    source = resolve_source(source)
    if seed is None:
        seed = random.randrange(2**31)
    question, answer = _gsm_symbolic(seed) if source == "gsm_symbolic" else _procedural(seed)
    extras: dict[str, Any] = {
        "data_source": source,
        "reward_spec": {"method": "rule", "ground_truth": answer},
        "extra_info": {"source": source, "seed": seed},
    }
    return Task(prompt=make_prompt(question), extras=extras)
