"""Scoring a search episode's answer: exact match and token F1 after Search-R1's normalisation.

:func:`normalize_answer` lowercases, removes punctuation, removes the articles *a*, *an* and *the* and
collapses whitespace (SQuAD's rule, which Search-R1 and SkyRL use). :func:`em_check` is 1 when the normalised
prediction equals any normalised target; :func:`f1_score` is the best token-level F1 over the targets.

:func:`compute_score` scores a whole text the way SkyRL's search environment does: the last
``<answer>...</answer>`` block is the prediction; no block scores 0; a wrong answer earns ``format_score``
(0.0 unless given: SkyRL gives no format score); a right one ``score``. :mod:`.utils` has SkyRL's names and
signatures for all of these.

The ground truth may be a string, a list of strings, or SkyRL's ``{"target": [...]}`` (lists read from
parquet arrive as numpy arrays; they are accepted too).
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Iterable
from typing import Any

__all__ = [
    "compute_score",
    "em_check",
    "extract_answer",
    "f1_score",
    "normalize_answer",
    "subem_check",
    "targets_of",
]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ANSWER_OPEN = "<answer>"
_ANSWER_CLOSE = "</answer>"


def normalize_answer(text: str) -> str:
    """Lowercase, drop ASCII punctuation, drop the articles a/an/the, collapse whitespace."""
    text = str(text).lower().translate(_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def targets_of(ground_truth: Any) -> list[str]:
    """The list of acceptable answers in ``ground_truth`` (a string, a list, or ``{"target": ...}``)."""
    if isinstance(ground_truth, dict):
        ground_truth = ground_truth.get("target", ground_truth.get("targets"))
    if ground_truth is None:
        return []
    if hasattr(ground_truth, "tolist"):  # numpy arrays and scalars from parquet rows
        ground_truth = ground_truth.tolist()
    if isinstance(ground_truth, (str, bytes, int, float)):
        ground_truth = [ground_truth]
    if not isinstance(ground_truth, Iterable):
        raise TypeError(
            f"ground_truth must be a string, a list of strings or {{'target': [...]}}, got {ground_truth!r:.100}"
        )
    targets = []
    for item in ground_truth:
        if isinstance(item, bytes):
            item = item.decode("utf-8", "replace")
        targets.append(str(item))
    return targets


def em_check(prediction: str, golden_answers: Any) -> int:
    """1 when the normalised ``prediction`` equals any normalised golden answer, else 0 (SkyRL's name)."""
    predicted = normalize_answer(prediction)
    return int(any(normalize_answer(gold) == predicted for gold in targets_of(golden_answers)))


def subem_check(prediction: str, golden_answers: Any) -> int:
    """1 when any normalised golden answer occurs inside the normalised ``prediction``, else 0."""
    predicted = normalize_answer(prediction)
    return int(any(normalize_answer(gold) in predicted for gold in targets_of(golden_answers)))


def _f1(predicted_tokens: list[str], gold_tokens: list[str]) -> float:
    if not predicted_tokens or not gold_tokens:
        # an empty side matches only an empty side (an answer made only of articles, say)
        return float(predicted_tokens == gold_tokens)
    common = collections.Counter(predicted_tokens) & collections.Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(predicted_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, golden_answers: Any) -> float:
    """The best token-level F1 (bag of normalised words) of ``prediction`` against any golden answer."""
    predicted = normalize_answer(prediction).split()
    return max(
        (_f1(predicted, normalize_answer(gold).split()) for gold in targets_of(golden_answers)), default=0.0
    )


def extract_answer(text: str) -> str | None:
    """The stripped content of the last ``<answer>...</answer>`` block, or ``None`` when there is none.

    Blocks are found as the regex ``<answer>(.*?)</answer>`` finds them (SkyRL's rule: each opening tag
    pairs with the next closing tag), in one linear scan.
    """
    last = None
    pos = 0
    while True:
        start = text.find(_ANSWER_OPEN, pos)
        if start < 0:
            break
        end = text.find(_ANSWER_CLOSE, start + len(_ANSWER_OPEN))
        if end < 0:
            break
        last = (start + len(_ANSWER_OPEN), end)
        pos = end + len(_ANSWER_CLOSE)
    return None if last is None else text[last[0] : last[1]].strip()


def compute_score(
    solution_str: str,
    ground_truth: Any,
    *,
    metric: str = "em",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """Score a text: ``score`` times the EM (or F1, with ``metric="f1"``) of its last answer.

    ``format_score`` is what an answer earns when it is wrong (0.0, as in SkyRL and Search-R1). No answer
    block scores 0.0.
    """
    if metric not in ("em", "f1"):
        raise ValueError(f"metric must be 'em' or 'f1', got {metric!r}")
    answer = extract_answer(solution_str)
    if answer is None:
        return 0.0
    targets = targets_of(ground_truth)
    value = float(em_check(answer, targets)) if metric == "em" else f1_score(answer, targets)
    if value <= 0.0:
        return float(format_score)
    return float(score * value)
