"""Scoring a text-to-SQL answer: SkyRL's format rule, then execution match against the gold query.

The format rule (:func:`extract_solution`), applied to all the assistant text of an episode:

- exactly one ``<solution>`` and one ``</solution>``, in that order;
- no ``<think>``, ``<sql>`` or ``<observation>`` tag (opening or closing) inside the solution;
- a complete ``<think>...</think>`` block somewhere (unless ``require_think=False``);
- a solution that is not empty (a Markdown code fence around it is removed).

A completion that breaks it scores ``format_penalty`` (-1.0, as in SkyRL). Otherwise the solution and the gold
query both run on the database and :func:`results_match` compares their results: rows as multisets, in
order only when the gold query's top-level ``ORDER BY`` orders them; numbers equal within ``float_tol``
(relative or absolute); ``NULL`` equals ``NULL``; columns matched by any permutation when
``ignore_column_order``. Right scores 1.0, wrong (or a solution that fails to run) 0.0.

Gold results are cached (least recently used, keyed by the database file, its modification time and size,
and the gold SQL). A gold query that fails raises :class:`~skyrl_gym.runtime.sql.database.QueryError`: that is
a broken dataset row, never a 0 for the model.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import math
import re
import threading
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any

from skyrl_gym.runtime.sql.database import DEFAULT_TIMEOUT_S, Database, QueryError, QueryResult

__all__ = [
    "DEFAULT_FLOAT_TOL",
    "SQLGrade",
    "clear_gold_cache",
    "execution_match",
    "extract_solution",
    "gold_result",
    "grade_completion",
    "is_ordered",
    "results_match",
    "score_completion",
]

DEFAULT_FLOAT_TOL = 1e-6
"""Numbers within this relative or absolute difference are equal."""
GOLD_TIMEOUT_S = 60.0
"""Seconds a gold query may take (it is trusted, but a broken one must not hang a run)."""
GOLD_CACHE_SIZE = 2048
MAX_PERMUTATIONS = 5000
"""Column permutations tried at most when matching with ``ignore_column_order``."""

_SOLUTION_OPEN = "<solution>"
_SOLUTION_CLOSE = "</solution>"
_TAG_IN_SOLUTION = re.compile(r"</?\s*(?:think|sql|observation)\b", re.IGNORECASE)
_CODE_FENCE = re.compile(r"\A```[A-Za-z0-9_+-]*[ \t]*\n?(.*?)\n?```\Z", re.DOTALL)


# -- the format rule ----------------------------------------------------------------------------------------
def extract_solution(text: Any, *, require_think: bool = True) -> str | None:
    """The SQL inside the one ``<solution>...</solution>`` of ``text``, or ``None`` if the format is broken.

    See the module docstring for the rule. Runs in time linear in the text and never raises.
    """
    if not isinstance(text, str):
        return None
    if text.count(_SOLUTION_OPEN) != 1 or text.count(_SOLUTION_CLOSE) != 1:
        return None
    start = text.find(_SOLUTION_OPEN) + len(_SOLUTION_OPEN)
    end = text.find(_SOLUTION_CLOSE)
    if end < start:
        return None
    body = text[start:end]
    if _TAG_IN_SOLUTION.search(body):
        return None
    if require_think:
        outside = text[: start - len(_SOLUTION_OPEN)] + text[end + len(_SOLUTION_CLOSE) :]
        opened = outside.find("<think>")
        if opened < 0 or outside.find("</think>", opened + len("<think>")) < 0:
            return None
    body = body.strip()
    fenced = _CODE_FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    return body or None


# -- comparing results --------------------------------------------------------------------------------------
def _normalise(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, Decimal):
        return float(value)
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _values_equal(a: Any, b: Any, tol: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a_number, b_number = _is_number(a), _is_number(b)
    if a_number or b_number:
        if not (a_number and b_number):
            return False
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        fa, fb = float(a), float(b)
        if math.isnan(fa) or math.isnan(fb):
            return math.isnan(fa) and math.isnan(fb)
        return fa == fb or math.isclose(fa, fb, rel_tol=tol, abs_tol=tol)
    return bool(a == b)


def _sort_key(value: Any) -> tuple[int, Any]:
    if value is None:
        return (0, 0)
    if _is_number(value):
        number = float(value)
        return (1, math.inf if math.isnan(number) else number)
    if isinstance(value, str):
        return (2, value)
    if isinstance(value, bytes):
        return (3, value)
    return (4, repr(value))


def _row_key(row: Sequence[Any]) -> tuple[tuple[int, Any], ...]:
    return tuple(_sort_key(v) for v in row)


def _row_equal(prow: tuple, grow: tuple, tol: float) -> bool:
    return all(_values_equal(p, g, tol) for p, g in zip(prow, grow, strict=True))


def _rows_equal(pred: list[tuple], gold: list[tuple], ordered: bool, tol: float, has_floats: bool) -> bool:
    if ordered:
        return all(_row_equal(prow, grow, tol) for prow, grow in zip(pred, gold, strict=True))
    try:
        pred_counts, gold_counts = collections.Counter(pred), collections.Counter(gold)
    except TypeError:  # unhashable values (lists, structs from DuckDB): match them all with tolerance
        return _tolerant_multiset_equal(pred, gold, tol)
    if pred_counts == gold_counts:
        return True
    if not has_floats:
        return False
    # Rows equal exactly are paired off; the rest must pair up within the float tolerance.
    common = pred_counts & gold_counts
    return _tolerant_multiset_equal(
        list((pred_counts - common).elements()), list((gold_counts - common).elements()), tol
    )


_MATCHING_LIMIT = 400
"""Up to this many unmatched rows are paired by bipartite matching; beyond it, by sorting."""


def _tolerant_multiset_equal(pred: list[tuple], gold: list[tuple], tol: float) -> bool:
    """Whether the rows pair up one to one, each pair equal within ``tol``."""
    if len(pred) != len(gold):
        return False
    if len(pred) > _MATCHING_LIMIT:  # sorting can misalign near-equal keys, but is linearithmic
        return all(
            _row_equal(p, g, tol)
            for p, g in zip(sorted(pred, key=_row_key), sorted(gold, key=_row_key), strict=True)
        )
    # Kuhn's augmenting paths: gold row j -> the predicted rows it may pair with.
    options = [[i for i, prow in enumerate(pred) if _row_equal(prow, grow, tol)] for grow in gold]
    if any(not row_options for row_options in options):
        return False
    owner: dict[int, int] = {}

    def place(j: int, seen: set[int]) -> bool:
        for i in options[j]:
            if i in seen:
                continue
            seen.add(i)
            if i not in owner or place(owner[i], seen):
                owner[i] = j
                return True
        return False

    return all(place(j, set()) for j in range(len(gold)))


def _column_permutations(pred: list[tuple], gold: list[tuple], ordered: bool, tol: float) -> Iterator[tuple]:
    """Permutations of the predicted columns whose every column, alone, matches the gold column it lands on."""
    width = len(gold[0])

    def column(rows: list[tuple], index: int) -> list[Any]:
        values = [row[index] for row in rows]
        return values if ordered else sorted(values, key=_sort_key)

    gold_columns = [column(gold, j) for j in range(width)]
    pred_columns = [column(pred, i) for i in range(width)]
    candidates = [
        [
            i
            for i in range(width)
            if all(_values_equal(p, g, tol) for p, g in zip(pred_columns[i], gold_columns[j], strict=True))
        ]
        for j in range(width)
    ]
    if any(not options for options in candidates):
        return
    chosen: list[int] = []
    used: set[int] = set()

    def assign(j: int) -> Iterator[tuple]:
        if j == width:
            yield tuple(chosen)
            return
        for i in candidates[j]:
            if i not in used:
                used.add(i)
                chosen.append(i)
                yield from assign(j + 1)
                chosen.pop()
                used.discard(i)

    yield from itertools.islice(assign(0), MAX_PERMUTATIONS)


def results_match(
    pred: QueryResult,
    gold: QueryResult,
    *,
    ordered: bool,
    float_tol: float = DEFAULT_FLOAT_TOL,
    ignore_column_order: bool = True,
) -> bool:
    """Whether ``pred`` returns the same data as ``gold`` (see the module docstring for what "same" means).

    Column names are ignored; the number of columns must agree. A truncated ``pred`` never matches.
    """
    if pred.truncated or gold.truncated:
        return False
    if len(pred.rows) != len(gold.rows):
        return False
    width = len(gold.columns) if gold.columns else (len(gold.rows[0]) if gold.rows else 0)
    pred_width = len(pred.columns) if pred.columns else (len(pred.rows[0]) if pred.rows else 0)
    if width != pred_width:
        return False
    if not gold.rows:
        return True
    pred_rows = [tuple(_normalise(v) for v in row) for row in pred.rows]
    gold_rows = [tuple(_normalise(v) for v in row) for row in gold.rows]
    has_floats = any(isinstance(v, float) for row in itertools.chain(pred_rows, gold_rows) for v in row)
    if _rows_equal(pred_rows, gold_rows, ordered, float_tol, has_floats):
        return True
    if not ignore_column_order or width < 2:
        return False
    identity = tuple(range(width))
    for permutation in _column_permutations(pred_rows, gold_rows, ordered, float_tol):
        if permutation == identity:
            continue
        permuted = [tuple(row[i] for i in permutation) for row in pred_rows]
        if _rows_equal(permuted, gold_rows, ordered, float_tol, has_floats):
            return True
    return False


@functools.lru_cache(maxsize=4096)
def is_ordered(gold_sql: str, dialect: str | None = None) -> bool:
    """Whether the top level of ``gold_sql`` has an ``ORDER BY`` (an ``ORDER BY`` in a subquery does not count)."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    for read in (dialect, None):
        try:
            parsed = [e for e in sqlglot.parse(gold_sql, read=read) if e is not None]
        except (SqlglotError, ValueError, RecursionError):
            continue
        if not parsed:
            return False
        root = parsed[-1]
        while isinstance(root, (exp.Subquery, exp.Paren)) and isinstance(root.this, exp.Expression):
            if root.args.get("order"):
                return True
            root = root.this
        return bool(root.args.get("order"))
    return _has_top_level_order_by(gold_sql)


def _has_top_level_order_by(sql: str) -> bool:
    """A fallback for SQL sqlglot cannot parse: ``ORDER BY`` outside all parentheses and quotes."""
    depth, quote = 0, ""
    outside = []
    for char in sql:
        if quote:
            if char == quote:
                quote = ""
            continue
        if char in "'\"`":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth = max(0, depth - 1)
        elif depth == 0:
            outside.append(char)
    return re.search(r"\border\s+by\b", "".join(outside), re.IGNORECASE) is not None


# -- running ------------------------------------------------------------------------------------------------
_gold_cache: collections.OrderedDict[tuple[Any, ...], QueryResult] = collections.OrderedDict()
_gold_lock = threading.Lock()


def gold_result(db: Database, gold_sql: str, *, timeout_s: float = GOLD_TIMEOUT_S) -> QueryResult:
    """The full result of the (trusted) gold query, from the cache when it was run before on this file."""
    key = (db.stamp, db.dialect, gold_sql)
    with _gold_lock:
        cached = _gold_cache.get(key)
        if cached is not None:
            _gold_cache.move_to_end(key)
            return cached
    try:
        result = db.execute(gold_sql, timeout_s=timeout_s, check=False)
    except QueryError as exc:
        raise QueryError(
            f"the gold query failed on {db.path}: {exc}\ngold SQL: {gold_sql}", kind=exc.kind
        ) from exc
    with _gold_lock:
        _gold_cache[key] = result
        while len(_gold_cache) > GOLD_CACHE_SIZE:
            _gold_cache.popitem(last=False)
    return result


def clear_gold_cache() -> None:
    """Forget every cached gold result."""
    with _gold_lock:
        _gold_cache.clear()


@dataclasses.dataclass(frozen=True)
class SQLGrade:
    """The verdict on one completion.

    Attributes:
        reward: ``format_penalty``, 0.0 or 1.0.
        format_valid: the completion follows the format rule.
        correct: the solution's result matches the gold result.
        solution: the SQL of the solution (``None`` when the format is broken).
        error: why the solution failed to run (``None`` when it ran).
        error_kind: the :class:`QueryError` kind of that failure.
        transpiled_from: the dialect the solution was rewritten from, if it was.
    """

    reward: float
    format_valid: bool
    correct: bool
    solution: str | None = None
    error: str | None = None
    error_kind: str | None = None
    transpiled_from: str | None = None


def _match(
    pred_sql: str,
    gold_sql: str,
    db: Database,
    *,
    float_tol: float,
    ignore_column_order: bool,
    timeout_s: float | None,
    transpile_from: str | None,
) -> tuple[bool, QueryResult | None, QueryError | None]:
    gold = gold_result(db, gold_sql)
    try:
        # More rows than the gold result is wrong already: never fetch more than one extra.
        pred = db.execute(
            pred_sql, timeout_s=timeout_s, max_rows=len(gold.rows), transpile_from=transpile_from
        )
    except QueryError as exc:
        return False, None, exc
    ordered = is_ordered(gold_sql, db.dialect)
    matched = results_match(
        pred, gold, ordered=ordered, float_tol=float_tol, ignore_column_order=ignore_column_order
    )
    return matched, pred, None


def execution_match(
    pred_sql: str,
    gold_sql: str,
    db: Database,
    *,
    float_tol: float = DEFAULT_FLOAT_TOL,
    ignore_column_order: bool = True,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    transpile_from: str | None = None,
) -> bool:
    """Whether ``pred_sql`` returns the gold query's result on ``db``.

    ``pred_sql`` goes through the read-only guard and the timeout; if it fails the answer is ``False``.
    ``transpile_from`` is passed to :meth:`Database.execute` for the prediction.
    """
    matched, _, _ = _match(
        pred_sql,
        gold_sql,
        db,
        float_tol=float_tol,
        ignore_column_order=ignore_column_order,
        timeout_s=timeout_s,
        transpile_from=transpile_from,
    )
    return matched


def grade_completion(
    text: str,
    gold_sql: str,
    db: Database,
    *,
    format_penalty: float = -1.0,
    require_think: bool = True,
    float_tol: float = DEFAULT_FLOAT_TOL,
    ignore_column_order: bool = True,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    transpile_from: str | None = None,
) -> SQLGrade:
    """Apply the format rule to ``text`` and, if it holds, the execution match; see :class:`SQLGrade`."""
    solution = extract_solution(text, require_think=require_think)
    if solution is None:
        return SQLGrade(reward=float(format_penalty), format_valid=False, correct=False)
    matched, pred, error = _match(
        solution,
        gold_sql,
        db,
        float_tol=float_tol,
        ignore_column_order=ignore_column_order,
        timeout_s=timeout_s,
        transpile_from=transpile_from,
    )
    return SQLGrade(
        reward=1.0 if matched else 0.0,
        format_valid=True,
        correct=matched,
        solution=solution,
        error=None if error is None else str(error),
        error_kind=None if error is None else error.kind,
        transpiled_from=None if pred is None else pred.transpiled_from,
    )


def score_completion(
    text: str,
    gold_sql: str,
    db: Database,
    *,
    format_penalty: float = -1.0,
    require_think: bool = True,
    float_tol: float = DEFAULT_FLOAT_TOL,
    ignore_column_order: bool = True,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    transpile_from: str | None = None,
) -> float:
    """The reward of ``text``: ``format_penalty`` for a broken format, 1.0 for a correct solution, else 0.0."""
    return grade_completion(
        text,
        gold_sql,
        db,
        format_penalty=format_penalty,
        require_think=require_think,
        float_tol=float_tol,
        ignore_column_order=ignore_column_order,
        timeout_s=timeout_s,
        transpile_from=transpile_from,
    ).reward
