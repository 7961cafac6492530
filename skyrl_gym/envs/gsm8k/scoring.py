"""GSM8K answer extraction and scoring with SkyRL's rules (SkyRL's ``skyrl_gym.envs.gsm8k.utils``, a name
:mod:`skyrl_gym.compat` keeps for this module).

Two ways to find the answer in a model's text:

- ``"strict"`` (the default): the characters ``-?[0-9.,]+`` right after the first ``"#### "``, commas
  dropped: ``"#### 1,234"`` reads ``"1234"``; a full stop right after the number stays part of it
  (``"#### 42."`` reads ``"42."``);
- ``"flexible"``: the last run of those characters anywhere in the text that is not just ``"."``.

The answer then matches when it equals the ground truth *as text*: ``"42.0"`` does not match ``"42"``, as in
SkyRL (the ``math`` environment compares numbers instead). A ground truth given as an int is compared as its
decimal text. Both functions take any input and never raise on it; only an unknown ``method`` is an error.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["METHODS", "compute_score", "extract_solution"]

METHODS = ("strict", "flexible")

_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_NUMBER_RUN = re.compile(r"(\-?[0-9\.\,]+)")
_NOT_ANSWERS = ("", ".")


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"method must be 'strict' or 'flexible', got {method!r}")


def extract_solution(solution_str: Any, method: str = "strict") -> str | None:
    """The answer written in ``solution_str`` under ``method`` (see the module docstring), ``None`` if none."""
    _check_method(method)
    if not isinstance(solution_str, str):
        return None
    if method == "strict":
        found = _STRICT.search(solution_str)
        if found is None:
            return None
        return found.group(1).replace(",", "").replace("$", "")
    runs = _NUMBER_RUN.findall(solution_str)
    if not runs:
        return None
    # the last run that is more than a lone dot; when every run is one, SkyRL's loop ends on the first
    return next((run for run in reversed(runs) if run not in _NOT_ANSWERS), runs[0])


def _as_text(ground_truth: Any) -> Any:
    if isinstance(ground_truth, int) and not isinstance(ground_truth, bool):
        return str(ground_truth)
    return ground_truth


def compute_score(
    solution_str: Any,
    ground_truth: Any,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """``score`` when the extracted answer equals ``ground_truth``, ``format_score`` when an answer was found
    but differs, ``0.0`` when none was found."""
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return 0.0
    return float(score) if answer == _as_text(ground_truth) else float(format_score)
