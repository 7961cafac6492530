"""Statistics and behaviour measures of an evaluation: accuracy with its standard error, the paired change
between two evaluations of the same questions, and what the model did in its episodes.

Standard errors are those of a mean over questions: ``sd / sqrt(n)`` with the sample standard deviation
(``n - 1`` in its denominator). For 0/1 outcomes with accuracy ``p`` that is ``sqrt(p (1 - p) / (n - 1))``.
The change between two stages is measured on the same questions, so its standard error is that of the
per-question differences ``after_i - before_i``: ``sd(d) / sqrt(n)``, smaller than the two unpaired errors
combined whenever the outcomes of a question agree across stages (they usually do).

Behaviour of an episode (the turns after the prompt, in chat messages):

- it *queried before answering* when a model turn ran a ``<sql>`` query whose observation came back before
  the turn that gave the ``<solution>``;
- it *saw a surprise* when an observation before the answer reported an error or an empty result
  (``Error...``, SkyRL's ``Empty DataFrame``, the table style's ``(no rows)``); a correct answer after a
  surprise counts as a self-correction.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "SURPRISE",
    "behaviour_shares",
    "episode_behaviour",
    "mean_se",
    "paired_change",
]

SURPRISE = re.compile(r"<observation>\s*(?:Error\b|Empty DataFrame)|^\(no rows\)$", re.MULTILINE)
"""An observation that reports an error or an empty result: SkyRL's style starts with ``Error`` or ``Empty
DataFrame``; the table style starts with ``Error`` or shows its column line, then ``(no rows)``."""


def mean_se(values: Sequence[float]) -> dict[str, Any]:
    """``{"n", "mean", "se"}`` of ``values``; ``se`` is None below two values and ``mean`` None for none."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "se": None}
    mean = sum(values) / n
    if n < 2:
        return {"n": n, "mean": mean, "se": None}
    variance = sum((v - mean) ** 2 for v in values) / (n - 1)
    return {"n": n, "mean": mean, "se": math.sqrt(variance / n)}


def paired_change(before: Mapping[Any, float], after: Mapping[Any, float]) -> dict[str, Any]:
    """The mean change ``after - before`` over the questions both stages scored (keys in both), with the
    standard error of the per-question differences: ``{"n", "mean", "se"}``."""
    keys = [k for k in before if k in after]
    return mean_se([after[k] - before[k] for k in keys])


def _is_observation(message: Mapping[str, Any]) -> bool:
    return message.get("role") in ("user", "tool") and "<observation>" in str(message.get("content", ""))


def episode_behaviour(turns: Sequence[Mapping[str, Any]]) -> dict[str, bool]:
    """What one episode did, from its messages after the prompt: ``answered`` (the last model turn holds a
    ``<solution>``), ``queried_first`` (a ``<sql>`` turn's observation came back before that answer) and
    ``surprised`` (an observation before the answer reported an error or an empty result)."""
    last_model = max((i for i, m in enumerate(turns) if m.get("role") == "assistant"), default=None)
    answered = last_model is not None and "<solution>" in str(turns[last_model].get("content", ""))
    queried = surprised = False
    if answered:
        for i, message in enumerate(turns[:last_model]):
            if not _is_observation(message):
                continue
            previous = turns[i - 1] if i > 0 else {}
            if previous.get("role") == "assistant" and "<sql>" in str(previous.get("content", "")):
                queried = True
            if SURPRISE.search(str(message.get("content", ""))):
                surprised = True
    return {"answered": answered, "queried_first": queried, "surprised": surprised}


def behaviour_shares(episodes: Sequence[tuple[Sequence[Mapping[str, Any]], bool]]) -> dict[str, Any]:
    """Shares over ``(turns, correct)`` episodes: ``queried_first`` (of all episodes, with its standard
    error), ``self_corrected`` (of the correct ones: those that saw a surprise before answering, with its
    standard error), ``answered`` and the counts behind them."""
    flags = [episode_behaviour(turns) for turns, _ in episodes]
    correct = [f for f, (_, ok) in zip(flags, episodes, strict=True) if ok]
    queried = mean_se([float(f["queried_first"]) for f in flags])
    corrected = mean_se([float(f["surprised"]) for f in correct])
    return {
        "episodes": len(flags),
        "answered": mean_se([float(f["answered"]) for f in flags])["mean"],
        "queried_first": queried["mean"],
        "queried_first_se": queried["se"],
        "correct": len(correct),
        "self_corrected": corrected["mean"],
        "self_corrected_se": corrected["se"],
        "self_corrected_count": sum(f["surprised"] for f in correct),
    }
