"""SkyRL's search scoring functions, under SkyRL's names and signatures (``skyrl_gym.envs.search.utils``).

Code written for SkyRL imports these from here; they are the rules of :mod:`.scoring` (Search-R1's
exact match after SQuAD normalisation):

- :func:`normalize_answer`: lowercase, no punctuation, no articles, single spaces;
- :func:`em_check` / :func:`subem_check`: 1 when the normalised prediction equals / contains a normalised
  golden answer (a string or a list of them), else 0;
- :func:`extract_solution`: the stripped text of the last ``<answer>...</answer>`` block, ``None`` if none;
- :func:`compute_score` / :func:`compute_score_subem`: ``score`` for a right answer, ``format_score`` for a
  wrong one (0.0 by default: no format score), 0 when there is no answer block.
"""

from __future__ import annotations

from typing import Any

from skyrl_gym.envs.search.scoring import em_check, extract_answer, normalize_answer, subem_check, targets_of

__all__ = [
    "compute_score",
    "compute_score_subem",
    "em_check",
    "extract_solution",
    "normalize_answer",
    "subem_check",
]

_METHODS = ("strict", "flexible")


def extract_solution(solution_str: str) -> str | None:
    """The stripped content of the last ``<answer>...</answer>`` block of ``solution_str``, or ``None``."""
    return extract_answer(solution_str)


def _score(check: Any, solution_str: str, ground_truth: Any, method: str, format_score: float, score: float):
    if method not in _METHODS:
        raise ValueError(f"method must be 'strict' or 'flexible', got {method!r}")
    answer = extract_solution(solution_str)
    if answer is None:
        return 0
    return score if check(answer, targets_of(ground_truth)) else format_score


def compute_score(
    solution_str: str,
    ground_truth: Any,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """Exact-match score of the last answer in ``solution_str`` against ``ground_truth["target"]``.

    ``ground_truth`` is SkyRL's ``{"target": [...]}`` (a bare answer or list of answers also works).
    ``method`` is SkyRL's parameter: ``"strict"`` and ``"flexible"`` extract the answer the same way, as
    there. Returns ``score``, ``format_score`` (wrong answer) or 0 (no answer block).
    """
    return _score(em_check, solution_str, ground_truth, method, format_score, score)


def compute_score_subem(
    solution_str: str,
    ground_truth: Any,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """As :func:`compute_score`, with a golden answer contained in the prediction counting as a match."""
    return _score(subem_check, solution_str, ground_truth, method, format_score, score)
