"""The checks that keep a candidate's gold answer non-empty, small and well defined."""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from skyrl_gym.datasets.sql.synth.templates.base import MAX_ROWS, Candidate


def _normal(value: Any) -> Any:
    if isinstance(value, (float, Decimal)):
        return round(float(value), 6)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, bool):
        return int(value)
    return value


def same_rows(a: Sequence[tuple[Any, ...]], b: Sequence[tuple[Any, ...]]) -> bool:
    """Whether two results hold the same rows as multisets (floats compared to 6 decimals)."""
    return Counter(tuple(_normal(v) for v in row) for row in a) == Counter(
        tuple(_normal(v) for v in row) for row in b
    )


def degenerate(rows: Sequence[tuple[Any, ...]], max_rows: int = MAX_ROWS) -> str | None:
    """Why a gold result is no good as an answer, or ``None`` when it is fine.

    Degenerate: no rows; more than ``max_rows`` rows; a column that is NULL in every row; a single value
    that is 0, NULL or empty (a COUNT that found nothing, an aggregate of no rows).
    """
    if not rows:
        return "empty"
    if len(rows) > max_rows:
        return f"{len(rows)} rows"
    for j in range(len(rows[0])):
        if all(row[j] is None for row in rows):
            return f"column {j} is all NULL"
    if len(rows) == 1 and len(rows[0]) == 1 and rows[0][0] in (0, "", None):
        return "a single zero"
    return None


def check_candidate(candidate: Candidate, run: Callable[[str], Sequence[tuple[Any, ...]]]) -> str | None:
    """Run the gold query and the candidate's checks; return why it fails, or ``None`` if it passes.

    ``run(sql)`` returns the rows of a query (it raises on an error, which counts as a failure).
    """
    try:
        gold = run(candidate.sql)
    except Exception as exc:  # a template wrote SQL the engine rejects: a bug, but never a dataset row
        return f"gold query failed: {exc}"
    reason = degenerate(gold, candidate.max_rows)
    if reason:
        return reason
    for contrast in candidate.contrasts:
        if same_rows(run(contrast), gold):
            return f"same result as {contrast!r}"
    for equivalent in candidate.equivalents:
        if not same_rows(run(equivalent), gold):
            return f"another reading gives another result: {equivalent!r}"
    if candidate.tie_sql:
        keys = [_normal(row[0]) for row in run(candidate.tie_sql)]
        k = candidate.tie_limit
        shown = keys if k is None else keys[:k]
        if len(set(shown)) < len(shown):
            return "ties inside an ordered answer"
        if k is not None and len(keys) > k and keys[k - 1] == keys[k]:
            return "a tie at the LIMIT"
    return None
