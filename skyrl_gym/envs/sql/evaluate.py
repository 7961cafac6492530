"""Score a predictions file against a text-to-SQL dataset: execution accuracy by level and by database.

    python -m skyrl_gym.envs.sql.evaluate --data test.jsonl --predictions preds.jsonl [--json]
    skyrl-gym sql-eval --data test.parquet --predictions preds.jsonl --db-root ~/data

The dataset is a file of SkyRL rows (JSONL, JSON or parquet): the gold SQL in
``reward_spec.ground_truth``, the database in ``db_path`` (or ``db_id`` + ``data`` under ``--db-root``, the
layout SkyRL uses), the level in ``extra_info.level``.

The predictions file is JSONL, one object a line, naming its row with ``index`` (the 0-based position of
the row in the dataset file) or ``id`` (matched against the rows' ``extra_info.id`` or ``id``, or against
``extra_info.index`` when the rows have no ids; an id must name exactly one row), and carrying either ``completion`` (the model's full text, held to the protocol's
format rule: a ``<think>`` block and one ``<solution>...</solution>``) or ``sql`` (a bare query, always
well-formed). A prediction is correct when its query's result matches the gold result (the environment's
scorer: rows as multisets, in order only when the gold query orders them, float tolerance).

Every dataset row counts: a row with no prediction is wrong (and counted as missing). A row whose gold query
or database fails is an error: reported, and left out of the accuracy, never scored as wrong.

Exit status: 0; 1 when some rows could not be scored (errors); 2 when a prediction names no row or two
predictions name the same row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from skyrl_gym.rows import read_rows

LEVEL_ORDER = ("easy", "medium", "hard", "extra")


@dataclass
class RowResult:
    """The outcome for one dataset row.

    ``status`` is ``correct``, ``wrong`` (valid format, different result or a failing query),
    ``invalid_format`` (a completion without a usable ``<solution>``), ``missing`` (no prediction) or
    ``error`` (the gold query or the database failed; ``detail`` says how).
    """

    index: int
    db_id: str
    level: str
    status: str
    detail: str = ""


@dataclass
class Tally:
    """Counts for one group of rows; accuracy leaves out errors."""

    total: int = 0
    correct: int = 0
    invalid_format: int = 0
    missing: int = 0
    errors: int = 0

    @property
    def scored(self) -> int:
        return self.total - self.errors

    @property
    def accuracy(self) -> float:
        return self.correct / self.scored if self.scored else 0.0

    def add(self, status: str) -> None:
        self.total += 1
        self.correct += status == "correct"
        self.invalid_format += status == "invalid_format"
        self.missing += status == "missing"
        self.errors += status == "error"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "scored": self.scored, "accuracy": self.accuracy}


@dataclass
class Report:
    """Accuracy overall, per level and per database, the valid-format rate, and every row's outcome."""

    overall: Tally = field(default_factory=Tally)
    by_level: dict[str, Tally] = field(default_factory=dict)
    by_database: dict[str, Tally] = field(default_factory=dict)
    completions: int = 0
    valid_format: int = 0
    rows: list[RowResult] = field(default_factory=list)

    @property
    def valid_format_rate(self) -> float:
        """Share of the predictions that were well-formed (bare ``sql`` predictions always are)."""
        return self.valid_format / self.completions if self.completions else 0.0

    def as_dict(self, *, with_rows: bool = False) -> dict[str, Any]:
        out = {
            "overall": self.overall.as_dict(),
            "by_level": {k: v.as_dict() for k, v in self.by_level.items()},
            "by_database": {k: v.as_dict() for k, v in self.by_database.items()},
            "predictions": self.completions,
            "valid_format": self.valid_format,
            "valid_format_rate": self.valid_format_rate,
        }
        if with_rows:
            out["rows"] = [asdict(r) for r in self.rows]
        return out


# -- matching predictions to rows -------------------------------------------------------------------------------
def _id_index(rows: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Row positions by id: ``extra_info.id`` or ``id`` when rows have them, else ``extra_info.index``."""
    by_id: dict[str, list[int]] = {}
    by_index: dict[str, list[int]] = {}
    for position, row in enumerate(rows):
        extra = row.get("extra_info") or {}
        for key in {extra.get("id"), row.get("id")} - {None}:
            by_id.setdefault(str(key), []).append(position)
        if extra.get("index") is not None:
            by_index.setdefault(str(extra["index"]), []).append(position)
    return by_id or by_index


def match_predictions(
    rows: list[dict[str, Any]], predictions: list[dict[str, Any]]
) -> dict[int, dict[str, Any]]:
    """Predictions by dataset row position; unknown, ambiguous or duplicate references raise ``ValueError``."""
    by_id = _id_index(rows)
    matched: dict[int, dict[str, Any]] = {}
    for n, pred in enumerate(predictions, 1):
        if "index" in pred:
            position = pred["index"]
            if not isinstance(position, int) or not 0 <= position < len(rows):
                raise ValueError(
                    f"prediction {n}: index {position!r} is outside the dataset (0..{len(rows) - 1})"
                )
        elif "id" in pred:
            positions = by_id.get(str(pred["id"]), [])
            if len(positions) != 1:
                what = "no dataset row" if not positions else f"rows {positions} (use 'index')"
                raise ValueError(f"prediction {n}: id {pred['id']!r} matches {what}")
            position = positions[0]
        else:
            raise ValueError(f"prediction {n}: has neither 'index' nor 'id'")
        if "completion" not in pred and "sql" not in pred:
            raise ValueError(f"prediction {n}: has neither 'completion' nor 'sql'")
        if position in matched:
            raise ValueError(f"prediction {n}: a second prediction for dataset row {position}")
        matched[position] = pred
    return matched


# -- scoring ---------------------------------------------------------------------------------------------------
def _database_path(row: dict[str, Any], db_root: str | os.PathLike | None) -> Path:
    """The row's database: its ``db_path``, else (moved files) its ``db_id`` + ``data`` under ``db_root``."""
    from skyrl_gym.runtime.sql.database import resolve_database

    try:
        return resolve_database(row, db_root).resolve()
    except FileNotFoundError:
        if not (row.get("db_path") and row.get("db_id") and db_root is not None):
            raise
        return resolve_database({k: v for k, v in row.items() if k != "db_path"}, db_root).resolve()


def evaluate(
    rows: list[dict[str, Any]],
    predictions: list[dict[str, Any]],
    *,
    db_root: str | os.PathLike | None = None,
    require_think: bool = True,
    timeout_s: float = 5.0,
    **tolerances: Any,
) -> Report:
    """Score ``predictions`` against dataset ``rows`` with the environment's scorer.

    ``tolerances`` (``float_tol``, ``ignore_column_order``) go to
    :func:`~skyrl_gym.envs.sql.scoring.execution_match`; ``require_think`` to the format rule.
    """
    from skyrl_gym.envs.sql.scoring import execution_match, extract_solution, gold_result, grade_completion
    from skyrl_gym.runtime.sql.database import QueryError, open_database

    matched = match_predictions(rows, predictions)
    report = Report()
    with ExitStack() as stack:
        databases: dict[Path, Any] = {}
        for position, row in enumerate(rows):
            extra = row.get("extra_info") or {}
            level = str(extra.get("level") or row.get("level") or "unknown")
            db_id = str(row.get("db_id") or "unknown")
            pred = matched.get(position)
            status, detail = "missing", ""
            if pred is not None:
                report.completions += 1
                if "completion" in pred:
                    text = str(pred["completion"] or "")
                    well_formed = extract_solution(text, require_think=require_think) is not None
                else:
                    well_formed = bool(str(pred["sql"] or "").strip())
                report.valid_format += well_formed
                status = "wrong" if well_formed else "invalid_format"
            gold = (row.get("reward_spec") or {}).get("ground_truth")
            try:
                if not gold:
                    raise ValueError("the row has no reward_spec.ground_truth")
                path = _database_path(row, db_root)
                if path not in databases:
                    databases[path] = stack.enter_context(open_database(path))
                db = databases[path]
                gold_result(db, gold)  # a failing gold query is an error, never a wrong answer
            except (QueryError, OSError, ValueError) as exc:
                status, detail = "error", f"{type(exc).__name__}: {exc}"
            if status == "wrong" and "completion" in pred:
                grade = grade_completion(
                    text, gold, db, require_think=require_think, timeout_s=timeout_s, **tolerances
                )
                status = "correct" if grade.correct else "wrong"
                detail = f"prediction failed: {grade.error}" if grade.error else ""
            elif status == "wrong":
                ok = execution_match(str(pred["sql"]).strip(), gold, db, timeout_s=timeout_s, **tolerances)
                status = "correct" if ok else "wrong"
            result = RowResult(position, db_id, level, status, detail)
            report.rows.append(result)
            report.overall.add(status)
            report.by_level.setdefault(level, Tally()).add(status)
            report.by_database.setdefault(db_id, Tally()).add(status)
    known = [lv for lv in LEVEL_ORDER if lv in report.by_level]
    report.by_level = {lv: report.by_level[lv] for lv in known + sorted(set(report.by_level) - set(known))}
    report.by_database = dict(sorted(report.by_database.items()))
    return report


def format_report(report: Report) -> str:
    """A plain-text table: accuracy per level, per database and overall, then the valid-format rate."""
    lines = [
        f"{'group':28} {'n':>6} {'correct':>8} {'accuracy':>9} {'bad fmt':>8} {'missing':>8} {'errors':>7}"
    ]

    def line(name: str, t: Tally) -> str:
        return (
            f"{name[:28]:28} {t.total:6d} {t.correct:8d} {100 * t.accuracy:8.1f}% "
            f"{t.invalid_format:8d} {t.missing:8d} {t.errors:7d}"
        )

    lines.append("-- by level")
    lines += [line(f"  {k}", v) for k, v in report.by_level.items()]
    lines.append("-- by database")
    lines += [line(f"  {k}", v) for k, v in report.by_database.items()]
    lines.append(line("overall", report.overall))
    lines.append(
        f"valid format: {report.valid_format}/{report.completions} predictions "
        f"({100 * report.valid_format_rate:.1f}%)"
    )
    errors = [r for r in report.rows if r.status == "error"]
    for r in errors[:5]:
        lines.append(f"error in row {r.index} ({r.db_id}): {r.detail}")
    if len(errors) > 5:
        lines.append(f"... and {len(errors) - 5} more errors (see --json)")
    return "\n".join(lines)


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    """Command-line entry point; returns the exit status (1 when some rows could not be scored)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="dataset file (JSONL, JSON or parquet) of SkyRL rows")
    parser.add_argument("--predictions", required=True, help="JSONL: {index|id, completion|sql} per line")
    parser.add_argument("--db-root", help="root for rows that name db_id + data instead of db_path")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--rows", action="store_true", help="with --json: include every row's outcome")
    parser.add_argument("--no-require-think", action="store_true", help="accept completions without <think>")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per query (default 5)")
    parser.add_argument("--float-tol", type=float, default=None, help="float tolerance for result matching")
    args = parser.parse_args(argv)

    rows = read_rows(args.data)
    predictions = read_rows(args.predictions)
    tolerances = {} if args.float_tol is None else {"float_tol": args.float_tol}
    try:
        report = evaluate(
            rows,
            predictions,
            db_root=args.db_root,
            require_think=not args.no_require_think,
            timeout_s=args.timeout,
            **tolerances,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.as_dict(with_rows=args.rows), indent=2))
    else:
        print(format_report(report))
    return 1 if report.overall.errors else 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m skyrl_gym.envs.sql.evaluate"))
