"""The text-to-SQL prompt: the protocol in a system message, the database and the question in a user message.

:data:`SYSTEM_PROMPT` describes the protocol as :class:`~skyrl_gym.envs.sql.env.Text2SQLEnv` plays it under
either of its protocols (every turn starts with ``<think>``, as SkyRL's format rule asks).
:func:`build_prompt` writes the user message from a real database (its schema as ``CREATE TABLE``
statements, a few rows of every table) and the question; :func:`build_row` makes one dataset row in SkyRL's
format around it.
"""

from __future__ import annotations

import collections
import datetime
import threading
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyrl_gym.runtime.sql.database import Database

__all__ = [
    "COMPACT_SYSTEM_PROMPT",
    "DATA_SOURCE",
    "ENV_CLASS",
    "SYSTEM_PROMPT",
    "build_compact_prompt",
    "build_prompt",
    "build_row",
    "compact_schema",
    "describe_database",
]

ENV_CLASS = "text2sql"
"""The ``env_class`` column of every row: the registered environment that plays it."""

DATA_SOURCE = "skyrl_sql_synthetic"
"""The ``data_source`` of the bundled synthetic rows (trainers group their metrics by it)."""

DIALECT_NAMES = {"duckdb": "DuckDB", "sqlite": "SQLite"}

SYSTEM_PROMPT = """\
You are a data analyst. You answer a question about a database by writing one SQL query, and you may \
run queries against the real database first to check your work.

Work in turns. Begin every turn by reasoning step by step inside <think>...</think>, then do exactly one of \
these:
- Run a query: write one SQL query inside <sql>...</sql>. The database runs it and replies with the result \
rows, or the error message, inside <observation>...</observation>, with a reminder of the number of turns \
you have left. Use this to look at the data and to test your query.
- Answer: write your final SQL query inside <solution>...</solution>. This ends the task. Answer before your \
turns run out: a task that ends without a solution counts as a failure.

Rules:
- The final answer is exactly one SQL query, not the values it returns.
- Write SQL for the database engine named at the top of the database description (DuckDB or SQLite), and \
use only the tables and columns of its schema.
- Only read-only queries run (SELECT or WITH, one statement at a time). Statements that change or create \
anything, PRAGMA, ATTACH and functions that read files are refused.
- Start every turn with <think>, also the turn after an observation.
- Use <solution> only once, for your final query, with nothing but SQL inside it.
- Your answer is right when its query returns the same rows as the reference query: select exactly the \
columns the question asks for, in the order it names them, and sort only when the question asks for an order.

A turn that runs a query looks like this:
<think>I should check which values the status column holds.</think>
<sql>SELECT DISTINCT status FROM orders</sql>

The final turn looks like this:
<think>The query returns the orders I need.</think>
<solution>SELECT order_id FROM orders WHERE status = 'shipped'</solution>"""
"""The system message: the protocol of the ``text2sql`` environment (think, sql, observation, solution)."""

_CELL_CHARS = 40
_CACHE_SIZE = 256
_descriptions: collections.OrderedDict[tuple[Any, int], str] = collections.OrderedDict()
_descriptions_lock = threading.Lock()


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:g}" if abs(value) < 1e15 else repr(value)
    if isinstance(value, (Decimal, datetime.date, datetime.datetime, datetime.time)):
        return str(value)
    text = str(value).replace("\n", " ")
    return text if len(text) <= _CELL_CHARS else text[: _CELL_CHARS - 3] + "..."


def describe_database(db: Database, *, n_sample_rows: int = 3) -> str:
    """The engine, the schema as ``CREATE TABLE`` statements and ``n_sample_rows`` rows of every table.

    Cached per database file (path, modification time and size), since every question on a database
    shares it.
    """
    key = (db.stamp, n_sample_rows)
    with _descriptions_lock:
        cached = _descriptions.get(key)
        if cached is not None:
            _descriptions.move_to_end(key)
            return cached
    parts = [f"Database engine: {DIALECT_NAMES.get(db.dialect, db.dialect)}", "", "Schema:", db.schema_ddl()]
    if n_sample_rows > 0:
        parts += ["", f"Sample rows (the first {n_sample_rows} of each table):"]
        for table in db.tables():
            sample = db.sample_rows(table, n_sample_rows)
            parts.append(f"{table}:")
            parts.append(" | ".join(sample.columns))
            parts.extend(" | ".join(_cell(v) for v in row) for row in sample.rows)
            if not sample.rows:
                parts.append("(no rows)")
    text = "\n".join(parts)
    with _descriptions_lock:
        _descriptions[key] = text
        while len(_descriptions) > _CACHE_SIZE:
            _descriptions.popitem(last=False)
    return text


def build_prompt(db: Database, question: str, *, n_sample_rows: int = 3) -> list[dict[str, str]]:
    """The chat prompt for ``question`` on ``db``: the system message, then a user message with the engine,
    the schema as DDL, ``n_sample_rows`` sample rows per table and the question."""
    user = f"{describe_database(db, n_sample_rows=n_sample_rows)}\n\nQuestion: {question.strip()}"
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def build_row(
    db: Database,
    question: str,
    gold_sql: str,
    *,
    db_id: str,
    split: str,
    index: int,
    level: str,
    data: str = "synthetic",
    data_source: str = DATA_SOURCE,
    db_path: str | None = None,
    n_sample_rows: int = 3,
    max_turns: int | None = None,
    extra_info: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One dataset row in SkyRL's format for ``question`` on ``db`` with the gold query ``gold_sql``.

    Columns: ``data_source``, ``prompt`` (:func:`build_prompt`), ``env_class`` (``"text2sql"``),
    ``reward_spec`` (``{"method": "rule", "ground_truth": gold_sql}``), ``db_id``, ``db_path`` (absolute;
    ``db.path`` unless given), ``data`` (where the database comes from), ``extra_info`` (``split``,
    ``index``, ``level``, ``question`` and anything in ``extra_info``) and ``max_turns`` when given.
    Every column but ``prompt`` and ``env_class`` reaches the environment as ``extras``.
    """
    info: dict[str, Any] = {"split": split, "index": int(index), "level": level, "question": question.strip()}
    info.update(extra_info or {})
    row: dict[str, Any] = {
        "data_source": data_source,
        "prompt": build_prompt(db, question, n_sample_rows=n_sample_rows),
        "env_class": ENV_CLASS,
        "reward_spec": {"method": "rule", "ground_truth": gold_sql.strip()},
        "db_id": db_id,
        "db_path": str(db_path if db_path is not None else db.path),
        "data": data,
        "extra_info": info,
    }
    if max_turns is not None:
        row["max_turns"] = int(max_turns)
    return row


COMPACT_SYSTEM_PROMPT = """\
Answer the question about the database with one SQL query. Start every turn with a brief thought \
inside <think>...</think>. \
To check something you may run a query inside <sql>...</sql> and read the result in \
<observation>...</observation>. Give the final query inside <solution>...</solution>."""
"""A short system message for small models and short contexts (same protocol as :data:`SYSTEM_PROMPT`)."""

_COMPACT_EXAMPLE = [
    {
        "role": "user",
        "content": "Tables:\nbooks(book_id, title, author, year)\n\nQuestion: Which books came out after 2000?",
    },
    {
        "role": "assistant",
        "content": "<think>Filter books by year.</think>\n<solution>SELECT title FROM books WHERE year > 2000</solution>",
    },
]


def compact_schema(db: Database) -> str:
    """One line per table: ``name(column, column, ...)``, in creation order."""
    lines = []
    for table in db.tables():
        columns = db.sample_rows(table, 0).columns
        lines.append(f"{table}({', '.join(columns)})")
    return "\n".join(lines)


def build_compact_prompt(db: Database, question: str, *, example: bool = True) -> list[dict[str, str]]:
    """A short chat prompt: :data:`COMPACT_SYSTEM_PROMPT`, an optional one-shot example exchange, then the
    engine, one line per table and the question. About a fifth of :func:`build_prompt`'s length."""
    engine = DIALECT_NAMES.get(db.dialect, db.dialect)
    user = f"Engine: {engine}\nTables:\n{compact_schema(db)}\n\nQuestion: {question.strip()}"
    messages = [{"role": "system", "content": COMPACT_SYSTEM_PROMPT}]
    if example:
        messages += [dict(m) for m in _COMPACT_EXAMPLE]
    return [*messages, {"role": "user", "content": user}]
