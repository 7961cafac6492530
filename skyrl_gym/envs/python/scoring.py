"""Scoring a final answer against a task's ``reward_spec``.

Two methods, named by ``reward_spec["method"]``:

- ``"reasoning_gym"``: the scorer of the reasoning-gym dataset that generated the task. The row carries the
  generator's ``task`` name, its ``config`` (the settings that differ from the generator's defaults; some
  scorers read them) and the generated ``entry`` (``question``, ``answer``, ``metadata``), so
  ``dataset.score_answer(answer, entry)`` is rebuilt exactly. Scores are the generator's own: 1.0 for a
  correct answer, and for some generators partial credit (a close number, a correct product of
  non-prime factors, a well-formed but wrong answer).
- ``"rule"`` (also when ``method`` is missing): the number (or text) in ``ground_truth`` compared with the
  answer, as in the ``math`` environment (:func:`skyrl_gym.envs.math.scoring.grade`): 1.0 or 0.0.

``entry`` and ``config`` may be dicts or JSON text (parquet files store them as text, since their fields
differ from one generator to the next). reasoning-gym is imported on first use only.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["METHODS", "check_reward_spec", "import_reasoning_gym", "plain_answer", "score_answer"]

METHODS = ("reasoning_gym", "rule")
"""The scoring methods a ``reward_spec`` may name."""

MAX_ANSWER_CHARS = 500
"""Longer answers are not scored (some scorers parse their input in ways that grow with its length)."""

_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_TEXT = re.compile(r"\\(?:text|textrm|mathrm|mathbf|textbf|operatorname|mbox)\s*\{([^{}]*)\}")
_SPACING = re.compile(r"\\[,;:! ]|\\(?:left|right|displaystyle)\b")
_ASSIGNMENT = re.compile(r"^[A-Za-z]\s*=\s*(?=\S)")


def plain_answer(answer: str) -> str:
    """``answer`` with common LaTeX spelled plainly: ``\\frac{3}{4}`` -> ``3/4``, ``2 \\times 3`` ->
    ``2 × 3``, ``\\text{Friday}`` -> ``Friday``, ``$5$`` -> ``5``, ``x = 13`` -> ``13``.

    reasoning-gym's scorers expect plain text (the question says how to write the answer); models often
    write LaTeX inside ``\\boxed{}`` anyway, so the plain spelling is scored too and the better score counts.
    """
    text = answer.strip().strip("$").strip()
    text = _TEXT.sub(r"\1", text)
    text = _FRAC.sub(r"\1/\2", text)
    text = text.replace("\\times", "×").replace("\\cdot", "×").replace("{,}", ",")
    text = _SPACING.sub("", text).strip().strip("$").strip()
    return _ASSIGNMENT.sub("", text)


def import_reasoning_gym() -> Any:
    """The ``reasoning_gym`` module, or an ``ImportError`` that says how to install it."""
    try:
        import reasoning_gym
    except ImportError as exc:
        raise ImportError(
            "reasoning-gym tasks need the reasoning-gym package: pip install 'skyrl[code]' "
            "(or pip install reasoning-gym)"
        ) from exc
    return reasoning_gym


def _json_field(value: Any, name: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ValueError(f"reward_spec[{name!r}] is text but not JSON: {exc}") from None
    return value


def _method(reward_spec: Mapping[str, Any]) -> str:
    method = reward_spec.get("method") or "rule"
    if method not in METHODS:
        raise ValueError(f"unknown reward_spec method {method!r}; use one of {', '.join(METHODS)}")
    return str(method)


def check_reward_spec(reward_spec: Mapping[str, Any]) -> None:
    """Raise a ``ValueError`` saying what to fix when ``reward_spec`` cannot be scored."""
    if "ground_truth" not in reward_spec:
        raise ValueError("reward_spec needs a 'ground_truth' (the answer as a string)")
    if _method(reward_spec) == "rule":
        return
    task, entry = reward_spec.get("task"), _json_field(reward_spec.get("entry"), "entry")
    if not isinstance(task, str) or not task:
        raise ValueError("a reasoning_gym reward_spec needs 'task': the generator's name, e.g. 'gcd'")
    if not isinstance(entry, dict) or "answer" not in entry:
        raise ValueError(
            "a reasoning_gym reward_spec needs 'entry': the generated entry (question, answer, metadata) "
            "as a dict or JSON text"
        )
    config = _json_field(reward_spec.get("config"), "config")
    if config is not None and not isinstance(config, dict):
        raise ValueError(f"reward_spec['config'] must be a dict of generator settings, got {config!r:.100}")


@functools.lru_cache(maxsize=64)
def _dataset(task: str, config_json: str) -> Any:
    """The reasoning-gym dataset whose ``score_answer`` scores ``task`` (one per task and config)."""
    reasoning_gym = import_reasoning_gym()
    config = {k: v for k, v in json.loads(config_json).items() if v is not None}
    return reasoning_gym.create_dataset(task, seed=0, size=1, **config)


def _reasoning_gym_score(answer: str, reward_spec: Mapping[str, Any]) -> float:
    entry = _json_field(reward_spec["entry"], "entry")
    config = _json_field(reward_spec.get("config"), "config") or {}
    dataset = _dataset(str(reward_spec["task"]), json.dumps(config, sort_keys=True))
    best = 0.0
    for candidate in dict.fromkeys((answer, plain_answer(answer))):
        try:
            value = float(dataset.score_answer(candidate, entry))
        except Exception:  # a scorer that cannot read the answer gives it nothing
            continue
        if math.isfinite(value):
            best = max(best, value)
    return min(1.0, max(0.0, best))


def score_answer(answer: str | None, reward_spec: Mapping[str, Any]) -> float:
    """The score in [0, 1] of the final ``answer`` (the text inside ``\\boxed{}``) for ``reward_spec``.

    ``None`` (no answer) and answers longer than :data:`MAX_ANSWER_CHARS` score 0.0. A malformed
    ``reward_spec`` or a missing reasoning-gym raises (that is the environment's fault, not the model's).
    """
    check_reward_spec(reward_spec)
    if answer is None or len(answer) > MAX_ANSWER_CHARS:
        return 0.0
    if _method(reward_spec) == "rule":
        from skyrl_gym.envs.math.scoring import grade

        truth = reward_spec["ground_truth"]
        return max(grade("\\boxed{" + c + "}", truth).reward for c in (answer, plain_answer(answer)))
    return _reasoning_gym_score(answer, reward_spec)
