"""Statistics and behaviour measures of an evaluation: accuracy with its standard error, the paired change
between two evaluations of the same questions, and what the model did in its episodes.

Standard errors are those of a mean over questions: ``sd / sqrt(n)`` with the sample standard deviation
(``n - 1`` in its denominator). For 0/1 outcomes with accuracy ``p`` that is ``sqrt(p (1 - p) / (n - 1))``.
The change between two stages is measured on the same questions, so its standard error is that of the
per-question differences ``after_i - before_i``: ``sd(d) / sqrt(n)``, smaller than the two unpaired errors
combined whenever the outcomes of a question agree across stages (they usually do).

Behaviour of an episode comes from what its environment reports (``get_metrics()``, a trajectory's
``env_metrics``), so that the trainer knows no protocol: environments that run tools count ``queries`` (tool
calls that ran), ``query_errors`` (those that failed) and ``empty_results`` (those that returned nothing).
An episode *answered* when it ended on its own (``terminated``, not cut by a budget); it *queried before
answering* when it answered after at least one query ran; it *saw a surprise* when one of its queries failed
or returned nothing. A correct answer after a surprise counts as a self-correction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "behaviour_shares",
    "episode_behaviour",
    "mean_se",
    "paired_change",
]


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


def episode_behaviour(env_metrics: Mapping[str, Any] | None, end: str) -> dict[str, bool]:
    """What one episode did, from its environment's metrics and how it ended: ``answered`` (it ended on its
    own: ``end == "terminated"``), ``queried_first`` (answered after a query ran) and ``surprised`` (answered
    after a query failed or returned no rows)."""
    metrics = env_metrics or {}
    answered = end == "terminated"
    queried = answered and (metrics.get("queries") or 0) > 0
    surprises = (metrics.get("query_errors") or 0) + (metrics.get("empty_results") or 0)
    return {"answered": answered, "queried_first": queried, "surprised": answered and surprises > 0}


def behaviour_shares(episodes: Sequence[tuple[Mapping[str, Any] | None, str, bool]]) -> dict[str, Any]:
    """Shares over ``(env_metrics, end, correct)`` episodes: ``queried_first`` (of all episodes, with its standard
    error), ``self_corrected`` (of the correct ones: those that saw a surprise before answering, with its
    standard error), ``answered`` and the counts behind them."""
    flags = [episode_behaviour(metrics, end) for metrics, end, _ in episodes]
    correct = [f for f, (_, _, ok) in zip(flags, episodes, strict=True) if ok]
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
