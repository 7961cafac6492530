"""SkyRL-SQL's reward: its format rule (:func:`verify_format_and_extract`) and its result match (sets of rows).

The format rule, applied to the whole episode as SkyRL joins it (the model's turns and the observations, in
order, with nothing between them):

- exactly one ``<solution>``, and exactly one ``</solution>`` after it;
- no ``<think``, ``</think``, ``<sql``, ``</sql``, ``<observation`` or ``</observation`` (any case) inside the
  solution;
- at least one complete ``<think>...</think>`` block;
- after every ``</observation>`` before the solution, the next non-space text starts with ``<think>`` (any
  case): a turn that follows an observation begins by thinking.

The solution may be empty (``<solution></solution>`` is well formed; it scores 0, not the format penalty).
A well-formed episode scores 1.0 when its solution returns the gold query's rows, 0.0 otherwise; a broken
one scores the format penalty (-1.0). "Returns the gold query's rows" is SkyRL's rule by default: the two
results as *sets* of rows are equal (row order and duplicates do not count; column order and exact values
do). ``match="execution"`` uses :func:`skyrl_gym.envs.sql.scoring.results_match` instead.

Every check here runs in time linear in the text, whatever the text holds.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from skyrl_gym.tools.sql import row_key

if TYPE_CHECKING:
    from skyrl_gym.envs.sql.scoring import SQLGrade
    from skyrl_gym.runtime.sql.database import Database

__all__ = [
    "MATCHES",
    "OBS_END",
    "OBS_START",
    "SET_MATCH_MAX_ROWS",
    "SOLUTION_END",
    "SOLUTION_START",
    "SQL_END",
    "SQL_START",
    "THINK_END",
    "THINK_START",
    "calculate_reward_single",
    "compute_score_single",
    "grade_episode",
    "rows_match_as_sets",
    "verify_format_and_extract",
]

THINK_START, THINK_END = "<think>", "</think>"
SQL_START, SQL_END = "<sql>", "</sql>"
SOLUTION_START, SOLUTION_END = "<solution>", "</solution>"
OBS_START, OBS_END = "<observation>", "</observation>"

MATCHES = ("set", "execution")
"""How a solution's result is compared with the gold result: SkyRL's sets of rows, or this package's rule."""
SET_MATCH_MAX_ROWS = 100_000
"""Rows of a solution fetched at most for the set match; a solution returning more never matches."""

_TAG_IN_SOLUTION = re.compile(r"</?(think|sql|observation)\b", re.IGNORECASE)
_OBSERVATION_CLOSE = re.compile(re.escape(OBS_END), re.IGNORECASE)
_SPACE = re.compile(r"\s*")
_INVALID: tuple[bool, None, None, None] = (False, None, None, None)


def _think_blocks(text: str) -> list[str]:
    """The bodies of the ``<think>...</think>`` blocks, leftmost first, each ending at its first ``</think>``."""
    blocks = []
    position = 0
    while True:
        start = text.find(THINK_START, position)
        if start < 0:
            return blocks
        end = text.find(THINK_END, start + len(THINK_START))
        if end < 0:  # no later <think> can be closed either
            return blocks
        blocks.append(text[start + len(THINK_START) : end])
        position = end + len(THINK_END)


def _thinks_after_every_observation(text: str) -> bool:
    for closing in _OBSERVATION_CLOSE.finditer(text):
        after = _SPACE.match(text, closing.end()).end()
        # Lower-casing only the next few characters is enough: none of the characters whose lower case is
        # longer than one character can start a match.
        if not text[after : after + len(THINK_START)].lower().startswith(THINK_START):
            return False
    return True


def verify_format_and_extract(
    output: Any, *, require_think: bool = True
) -> tuple[bool, list[str] | None, str | None, None]:
    """SkyRL's format rule on ``output`` (see the module docstring): ``(is_valid, thoughts, solution, None)``.

    Valid: ``(True, [think bodies...], solution text stripped of surrounding space, None)``; otherwise
    ``(False, None, None, None)``. Never raises (a non-string is invalid). ``require_think=False`` drops the
    two rules about ``<think>`` (``thoughts`` may then be empty).
    """
    if not isinstance(output, str) or output.count(SOLUTION_START) != 1:
        return _INVALID
    before, tail = output.split(SOLUTION_START, 1)
    if tail.count(SOLUTION_END) != 1:
        return _INVALID
    solution = tail.split(SOLUTION_END, 1)[0]
    if _TAG_IN_SOLUTION.search(solution):
        return _INVALID
    thoughts = _think_blocks(output)
    if require_think and (not thoughts or not _thinks_after_every_observation(before)):
        return _INVALID
    return True, thoughts, solution.strip(), None


# -- comparing results ---------------------------------------------------------------------------------------
def rows_match_as_sets(pred_rows: Any, gold_rows: Any) -> bool:
    """Whether the two results hold the same set of rows (SkyRL's ``frozenset(rows) == frozenset(rows)``).

    Values compare with Python's ``==`` (so ``1 == 1.0``); lists and dicts (DuckDB) compare by content.
    """
    return {row_key(row) for row in pred_rows} == {row_key(row) for row in gold_rows}


def grade_episode(
    text: str,
    gold_sql: str,
    db: Database,
    *,
    rule: str = "skyrl",
    format_penalty: float = -1.0,
    require_think: bool = True,
    match: str = "set",
    float_tol: float = 1e-6,
    ignore_column_order: bool = True,
    timeout_s: float | None = 5.0,
    transpile_from: str | None = None,
) -> SQLGrade:
    """Grade a whole episode ``text`` (see the module docstring), with the details.

    ``rule="skyrl"`` applies :func:`verify_format_and_extract`; ``rule="strict"`` applies
    :func:`skyrl_gym.envs.sql.scoring.extract_solution` (a non-empty solution, a Markdown fence around it
    removed). ``match="execution"`` compares results with :func:`~skyrl_gym.envs.sql.scoring.results_match`
    (with ``float_tol`` and ``ignore_column_order``) instead of as sets. The solution runs through the
    read-only guard with ``timeout_s`` and ``transpile_from``; one that fails scores 0.0. A gold query that
    fails raises :class:`~skyrl_gym.runtime.sql.database.QueryError` (a broken task, never a 0 for the model).
    """
    from skyrl_gym.envs.sql.scoring import SQLGrade, extract_solution, gold_result, is_ordered, results_match
    from skyrl_gym.runtime.sql.database import QueryError

    if match not in MATCHES:
        raise ValueError(f"match must be one of {', '.join(MATCHES)}, got {match!r}")
    if rule == "skyrl":
        valid, _, solution, _ = verify_format_and_extract(text, require_think=require_think)
    elif rule == "strict":
        solution = extract_solution(text, require_think=require_think)
        valid = solution is not None
    else:
        raise ValueError(f"rule must be 'skyrl' or 'strict', got {rule!r}")
    if not valid or solution is None:
        return SQLGrade(reward=float(format_penalty), format_valid=False, correct=False)
    if not solution:
        # SkyRL runs the empty statement; an answer with no query is never right.
        return SQLGrade(
            reward=0.0, format_valid=True, correct=False, solution="", error="the solution is empty"
        )
    gold = gold_result(db, gold_sql)
    limit = SET_MATCH_MAX_ROWS if match == "set" else len(gold.rows)
    try:
        pred = db.execute(solution, timeout_s=timeout_s, max_rows=limit, transpile_from=transpile_from)
    except QueryError as exc:
        return SQLGrade(
            reward=0.0,
            format_valid=True,
            correct=False,
            solution=solution,
            error=str(exc),
            error_kind=exc.kind,
        )
    if match == "set":
        correct = not pred.truncated and rows_match_as_sets(pred.rows, gold.rows)
    else:
        correct = results_match(
            pred,
            gold,
            ordered=is_ordered(gold_sql, db.dialect),
            float_tol=float_tol,
            ignore_column_order=ignore_column_order,
        )
    return SQLGrade(
        reward=1.0 if correct else 0.0,
        format_valid=True,
        correct=correct,
        solution=solution,
        transpiled_from=pred.transpiled_from,
    )


def calculate_reward_single(
    completion: str, reference: str, db_file: str | os.PathLike[str], timeout: float = 30
) -> float:
    """SkyRL's reward of ``completion`` against the gold query ``reference`` on the database file ``db_file``:
    -1.0 for a broken format, 1.0 when the solution's rows equal the gold rows as sets, else 0.0.

    The file is opened read-only (DuckDB or SQLite). A missing file or a failing gold query raises, where
    SkyRL would score 0.
    """
    from skyrl_gym.runtime.sql.database import open_database

    with open_database(db_file) as db:
        return grade_episode(completion, reference, db, timeout_s=float(timeout)).reward


def compute_score_single(completion: str, reference: str, db_file: str | os.PathLike[str]) -> float:
    """:func:`calculate_reward_single` with SkyRL's name and 30 s timeout."""
    return calculate_reward_single(completion, reference, db_file)
