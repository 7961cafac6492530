"""SkyRL's SQL tool group, ``SQLCodeExecutorToolGroup``, on this package's read-only database layer.

The tool ``sql(db_id, sql, turns_left, timeout=None)`` runs one query and answers with the whole observation
text, in one of two styles:

- ``"skyrl"`` (SkyRL-SQL's protocol, byte for byte): ``"\\n\\n<observation>{result}\\n<reminder>You have N
  turns left to complete the task.</reminder></observation>\\n\\n"``. The result is the set of distinct rows laid
  out as pandas' ``DataFrame(rows).to_string(index=False)`` lays them out (:func:`render_table`: integer column
  labels, right-aligned columns, pandas' float format, ``Empty DataFrame`` for no rows), or ``Error executing
  SQL: {message}, db file: {path}``, or ``SQL Timeout:\\n{sql}``. A result longer than ``max_chars`` (9000, as
  SkyRL) shows its first ``max_rows`` (50) rows after ``Truncated to 50 lines since returned response too
  long: ``. ``sql=None`` (the action held no ``<sql>...</sql>``) answers SkyRL's :data:`INVALID_ACTION`.
- ``"table"``: ``"<observation>\\n{result}\\n</observation>\\n{turns left}"`` with the result as a ``|``-separated
  table with column names, ``NULL`` for null, and a line saying how many rows there were and what was cut
  (:func:`format_result`).

Two differences from SkyRL, both deliberate: rows keep the order the database returned them in (SkyRL's
come from a ``frozenset`` and their order changes from one process to the next), and a result is never
longer than ``max_chars`` (SkyRL's cut to 50 rows can still hold rows of any length). Every query goes
through the database layer's read-only guard, timeout and row cap.

Only the standard library is imported here; the database layer is imported when a database is opened.
"""

from __future__ import annotations

import datetime
import math
import os
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from skyrl_gym.tools.core import ToolGroup, tool

if TYPE_CHECKING:
    from skyrl_gym.runtime.sql.database import Database, QueryResult

__all__ = [
    "INVALID_ACTION",
    "SKYRL_MAX_CHARS",
    "SKYRL_MAX_ROWS",
    "SQLCodeExecutorToolGroup",
    "STYLES",
    "distinct_rows",
    "format_result",
    "render_table",
    "reminder",
    "row_key",
    "skyrl_result",
    "wrap_observation",
]

GROUP_NAME = "SQLCodeExecutorToolGroup"
"""The tool group's name (SkyRL's), as ``BaseTextEnv._execute_tool`` looks it up."""

STYLES = ("skyrl", "table")
"""The observation styles: SkyRL-SQL's text, or this package's table with column names."""

INVALID_ACTION = (
    "Your previous action is invalid. Follow the format of outputting thinking process and sql tool, "
    "and try again."
)
"""SkyRL's observation for a turn that holds no ``<sql>...</sql>`` (and no solution)."""

SKYRL_MAX_CHARS = 9000
"""A SkyRL result longer than this is cut to its first :data:`SKYRL_MAX_ROWS` rows."""
SKYRL_MAX_ROWS = 50
TABLE_MAX_CHARS = 4000
"""The ``"table"`` style's default cap on a result's characters."""

_EMPTY_TABLE = "Empty DataFrame\nColumns: []\nIndex: []"
_TRUNCATED = "Truncated to {rows} lines since returned response too long: "
_CELL_CHARS = 200
_METADATA_SQL_CHARS = 2000

_MIN_RESULT_BYTES = 1 << 20
"""The least a query's rows may take on the way back from its worker (bytes)."""


# -- SkyRL's observation -------------------------------------------------------------------------------------
def reminder(turns_left: int) -> str:
    """SkyRL's reminder, ``<reminder>You have N turns left to complete the task.</reminder>`` (also for N=1)."""
    return f"<reminder>You have {turns_left} turns left to complete the task.</reminder>"


def wrap_observation(body: str, turns_left: int, style: str = "skyrl") -> str:
    """The observation message's text around ``body`` in ``style`` (see the module docstring)."""
    if style == "skyrl":
        return f"\n\n<observation>{body}\n{reminder(turns_left)}</observation>\n\n"
    if style == "table":
        return f"<observation>\n{body}\n</observation>\n{_turns_left_line(turns_left)}"
    raise ValueError(f"unknown observation style {style!r}; use one of {', '.join(STYLES)}")


def _turns_left_line(left: int) -> str:
    if left == 1:
        return "You have 1 turn left: give your final answer now as <solution>...</solution>."
    return f"You have {left} turns left to complete the task."


# -- pandas' layout of a result ------------------------------------------------------------------------------
_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1
_ESCAPES = str.maketrans({"\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _hashable(value: Any) -> Any:
    """``value`` itself, or a hashable stand-in for a list or dict (DuckDB's LIST and STRUCT values)."""
    try:
        hash(value)
    except TypeError:
        if isinstance(value, dict):
            return ("dict", tuple((k, _hashable(v)) for k, v in value.items()))
        if isinstance(value, (list, tuple)):
            return ("list", tuple(_hashable(v) for v in value))
        return ("repr", repr(value))
    return value


def row_key(row: Sequence[Any]) -> tuple:
    """A hashable key for ``row``: equal rows (by Python's ``==``, as in a set) get equal keys."""
    return tuple(_hashable(v) for v in row)


def distinct_rows(rows: Iterable[Sequence[Any]]) -> list[tuple]:
    """The distinct rows, each the first time it comes (SkyRL keeps a ``frozenset`` of the rows).

    Equality is Python's, as in a set: ``1 == 1.0 == True``, ``None == None``.
    """
    seen: set[Any] = set()
    out: list[tuple] = []
    for row in rows:
        row = tuple(row)
        key = row_key(row)
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out


def _column_kind(values: list[Any]) -> str:
    """The dtype pandas infers for a column of Python values: int, float, bool or object.

    pandas scans the values in order; an integer out of the int64/uint64 range makes the column ``object``
    only when no null came before it (after a null every number becomes a float anyway).
    """
    null = boolean = integer = floating = unsigned = signed = False
    for value in values:
        if value is None:
            null = True
        elif isinstance(value, bool):
            boolean = True
        elif isinstance(value, int):
            integer = True
            if not null:
                unsigned = unsigned or value > _INT64_MAX
                signed = signed or value < 0
                if (unsigned and signed) or value > _UINT64_MAX or value < _INT64_MIN:
                    return "object"
        elif isinstance(value, float):
            floating = True
        else:
            return "object"
    if boolean:
        return "bool" if not (null or integer or floating) else "object"
    if not (integer or floating):
        return "object"  # every value is null
    return "float" if (null or floating) else "int"


def _trim_zeros(texts: list[str]) -> list[str]:
    """Drop trailing zeros from every plain decimal number equally, keeping one digit after the point."""

    def plain(text: str) -> bool:
        body = text.lstrip()
        body = body[1:] if body[:1] in "+-" else body
        whole, point, fraction = body.partition(".")
        return bool(point) and whole.isdigit() and whole.isascii() and (fraction == "" or fraction.isdigit())

    numbers = [i for i, text in enumerate(texts) if plain(text)]
    if not numbers:
        return texts
    out = list(texts)
    while all(out[i].endswith("0") for i in numbers):
        for i in numbers:
            out[i] = out[i][:-1]
    for i in numbers:
        if out[i].endswith("."):
            out[i] += "0"
    return out


def _float_column(values: list[Any]) -> list[str]:
    numbers = [math.nan if v is None else float(v) for v in values]

    def formatted(spec: str) -> list[str]:
        return _trim_zeros(["NaN" if math.isnan(x) else format(x, spec) for x in numbers])

    texts = formatted(".6f")
    too_long = max(len(t) for t in texts) > 12
    large = any(abs(x) > 1e6 for x in numbers if not math.isnan(x))
    small = any(0 < abs(x) < 1e-6 for x in numbers if not math.isnan(x))
    if small or (too_long and large):
        texts = formatted(".6e")
    return texts


def _object_cell(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        text = format(value, " .6f").rstrip("0")
        return text + "0" if text.endswith(".") else text
    return str(value).translate(_ESCAPES)


def _column_texts(values: list[Any]) -> tuple[list[str], bool]:
    """The column's cells as pandas writes them, and whether pandas counts the column as numeric."""
    kind = _column_kind(values)
    if kind == "int":
        return [str(v) for v in values], True
    if kind == "float":
        return _float_column(values), True
    if kind == "bool":
        return [str(v) for v in values], True
    return [_object_cell(v) for v in values], False


def render_table(rows: Sequence[Sequence[Any]]) -> str:
    """``rows`` laid out as pandas' ``DataFrame(rows).to_string(index=False)`` lays them out.

    Columns are labelled ``0``, ``1``...; every column is right-aligned to its widest cell and one space
    separates columns; a numeric column's label gets a leading space. Cells follow pandas' rules for the
    values a database returns: integers as written; a column of numbers with a null or a float is a float
    column (six decimals, trailing zeros trimmed alike, ``NaN`` for null, scientific notation for tiny or huge
    values); anything else is written with ``str`` (``None`` for null, tabs and line breaks escaped). No rows
    is ``Empty DataFrame``.
    """
    rows = [tuple(row) for row in rows]
    if not rows or not rows[0]:
        return _EMPTY_TABLE
    width = len(rows[0])
    columns = []
    for index in range(width):
        cells, numeric = _column_texts([row[index] if index < len(row) else None for row in rows])
        label = (" " if numeric else "") + str(index)
        size = max(len(label), *(len(c) for c in cells))
        columns.append([label.rjust(size)] + [c.rjust(size) for c in cells])
    return "\n".join(" ".join(parts) for parts in zip(*columns, strict=True))


def skyrl_result(
    rows: Sequence[Sequence[Any]],
    *,
    complete: bool = True,
    max_rows: int = SKYRL_MAX_ROWS,
    max_chars: int = SKYRL_MAX_CHARS,
) -> str:
    """A query's rows as SkyRL shows them: the table of the distinct rows, or its first ``max_rows`` rows after
    SkyRL's ``Truncated to ...`` line when it is longer than ``max_chars``.

    ``complete=False`` says more rows exist than ``rows`` holds: the result then counts as too long. The text
    is cut at ``max_chars`` characters (plus the ``Truncated`` line) with a note saying how much was cut.
    """
    distinct = distinct_rows(rows)
    # A cell longer than the cap makes the table too long anyway: cut it before laying the table out.
    distinct = [tuple(_short(v, max_chars + 1) for v in row) for row in distinct]
    if complete:
        text = render_table(distinct)
        if len(text) <= max_chars:
            return text
    head = render_table(distinct[:max_rows])
    return _TRUNCATED.format(rows=max_rows) + _cap(head, max_chars)


def _short(value: Any, limit: int) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return value[:limit]
    if isinstance(value, (bytes, bytearray, memoryview)) and len(value) > limit:
        return bytes(value[:limit])
    return value


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} characters cut]"


# -- the table style -----------------------------------------------------------------------------------------
def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        text = f"{value:.10g}"
    elif isinstance(value, (datetime.datetime, datetime.date, datetime.time, Decimal)):
        text = str(value)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        text = "0x" + raw[: _CELL_CHARS // 2].hex()
    else:
        text = str(value)
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= _CELL_CHARS else text[: _CELL_CHARS - 3] + "..."


def format_result(result: QueryResult, *, max_chars: int = TABLE_MAX_CHARS) -> str:
    """The result as a ``|``-separated table, cut at ``max_chars`` characters, saying what was cut."""
    lines = [" | ".join(_cell(c) for c in result.columns)] if result.columns else []
    used = len(lines[0]) + 1 if lines else 0
    shown = 0
    cut_by_chars = False
    for row in result.rows:
        line = " | ".join(_cell(v) for v in row)
        if used + len(line) + 1 > max_chars and shown > 0:
            cut_by_chars = True
            break
        if used + len(line) + 1 > max_chars:  # one huge first row: show its beginning
            line = line[: max(0, max_chars - used - 3)] + "..."
        lines.append(line)
        used += len(line) + 1
        shown += 1
    total = result.total_rows
    if not result.rows:
        lines.append("(no rows)")
    elif cut_by_chars or result.truncated:
        of = f"{total}" if total is not None else f"more than {len(result.rows)}"
        why = (
            f"output cut at {max_chars} characters"
            if cut_by_chars
            else f"at most {len(result.rows)} rows are shown"
        )
        lines.append(f"[{shown} of {of} rows shown; {why}]")
    else:
        lines.append(f"({shown} row{'s' if shown != 1 else ''})")
    return "\n".join(lines)


# -- the tool group ------------------------------------------------------------------------------------------
class SQLCodeExecutorToolGroup(ToolGroup):
    """SkyRL's SQL tool group: ``sql(db_id, sql, turns_left)`` runs one read-only query and answers with the
    observation text (see the module docstring for the two styles).

    ``SQLCodeExecutorToolGroup(db_file_path=root)`` finds database ``db_id`` at SkyRL's
    ``{root}/{db_id}/{db_id}.sqlite`` (``.duckdb`` too) and opens it on first use. ``database=`` binds an open
    :class:`~skyrl_gym.runtime.sql.database.Database` to ``db_id`` (then ``db_file`` is the path errors name); the
    group closes only the databases it opened itself. Queries go through the database layer: the read-only
    guard, ``timeout_s`` (SkyRL's 5 s), ``transpile_from`` and a cap on the rows fetched.

    ``last`` holds JSON-serialisable facts about the last query (``sql``, ``rows``, ``rows_shown``,
    ``truncated``, ``error_kind``, ``transpiled_from``), ``{}`` after a call without a query.
    """

    def __init__(
        self,
        db_file_path: str | os.PathLike[str] | None = None,
        *,
        database: Database | None = None,
        db_id: str | None = None,
        db_file: str | os.PathLike[str] | None = None,
        style: str = "skyrl",
        timeout_s: float = 5.0,
        max_rows: int = SKYRL_MAX_ROWS,
        max_chars: int | None = None,
        transpile_from: str | None = None,
        engine: str = "auto",
        sqlite_temp_store: str = "memory",
    ):
        super().__init__(name=GROUP_NAME)
        if style not in STYLES:
            raise ValueError(f"unknown observation style {style!r}; use one of {', '.join(STYLES)}")
        if database is None and db_file_path is None:
            raise ValueError(
                "SQLCodeExecutorToolGroup needs db_file_path (a folder of databases) or database="
            )
        self.db_path = None if db_file_path is None else os.fspath(db_file_path)
        """The folder holding ``{db_id}/{db_id}.sqlite`` (SkyRL's attribute name)."""
        self.style = style
        self.timeout_s = float(timeout_s)
        self.max_rows = int(max_rows)
        self.max_chars = int(max_chars if max_chars is not None else _default_chars(style))
        self.transpile_from = transpile_from
        self.engine = engine
        self.sqlite_temp_store = sqlite_temp_store
        self.last: dict[str, Any] = {}
        self._bound = None if database is None else str(db_id if db_id is not None else database.path.stem)
        self._databases: dict[str, tuple[Database, str, bool]] = {}
        if database is not None:
            file = os.fspath(db_file) if db_file is not None else str(database.path)
            self._databases[self._bound] = (database, file, False)

    @tool
    def sql(self, db_id: str, sql: str | None, turns_left: int, timeout: float | None = None) -> str:
        """Run one read-only SQL query on database ``db_id`` and return the observation with the turns left.

        Args:
            db_id: the database's name.
            sql: the query; ``None`` when the action held no query.
            turns_left: the turns the model has left, for the reminder.
            timeout: seconds before the query is stopped (default: the group's ``timeout_s``).
        """
        return wrap_observation(self.run(db_id, sql, timeout), int(turns_left), self.style)

    def run(self, db_id: str, sql: str | None, timeout: float | None = None) -> str:
        """The observation's body for ``sql`` on ``db_id``: the result, the error, or the no-query message."""
        self.last = {}
        if sql is None:
            return INVALID_ACTION if self.style == "skyrl" else "No query found."
        if self.style == "skyrl" and not sql.strip():
            # SQLite runs an empty statement and returns no rows; so does SkyRL's tool.
            self.last = {"sql": "", "error_kind": None, "rows": 0, "rows_shown": 0, "truncated": False}
            return _EMPTY_TABLE
        from skyrl_gym.runtime.sql.database import QueryError, QueryTimeout

        info: dict[str, Any] = {"sql": sql[:_METADATA_SQL_CHARS]}
        self.last = info
        try:
            database, db_file = self.database_for(db_id)
        except (FileNotFoundError, ValueError) as exc:
            info.update(error_kind="execution", rows=None)
            return self._error_text(str(exc), self.db_file_for(db_id))
        # To tell whether SkyRL's table would pass max_chars, fetch as many rows as could fit in it
        # (each line takes two characters at least).
        fetch = self.max_rows if self.style == "table" else max(self.max_rows, self.max_chars // 2 + 1)
        try:
            result = database.execute(
                sql,
                timeout_s=self.timeout_s if timeout is None else float(timeout),
                max_rows=fetch,
                transpile_from=self.transpile_from,
                # a value longer than the observation could show is cut in the query worker, and the rows
                # that cross back are bounded: what a query costs the caller follows the observation's cap
                max_value_chars=self.max_chars + 1,
                max_bytes=max(_MIN_RESULT_BYTES, 200 * self.max_chars),
            )
        except QueryTimeout as exc:
            info.update(error_kind=exc.kind, rows=None)
            if self.style == "skyrl":
                return _cap(f"SQL Timeout:\n{sql}", self.max_chars)
            return _cap(f"Error: {exc}", self.max_chars)
        except QueryError as exc:
            info.update(error_kind=exc.kind, rows=None)
            return self._error_text(str(exc), db_file)
        info.update(
            error_kind=None,
            rows=result.total_rows,
            rows_shown=len(result.rows),
            truncated=result.truncated,
            transpiled_from=result.transpiled_from,
        )
        if self.style == "table":
            return format_result(result, max_chars=self.max_chars)
        return skyrl_result(
            result.rows, complete=not result.truncated, max_rows=self.max_rows, max_chars=self.max_chars
        )

    def _error_text(self, message: str, db_file: str) -> str:
        if self.style == "skyrl":
            # SkyRL's text, with the file's name only: no host path reaches the model
            name = os.path.basename(db_file) if db_file else db_file
            return _cap(f"Error executing SQL: {message}, db file: {name}", self.max_chars)
        return _cap(f"Error: {message}", self.max_chars)

    # -- databases -----------------------------------------------------------------------------------------
    def db_file_for(self, db_id: str) -> str:
        """The file that holds ``db_id``: the bound database's, or SkyRL's ``{db_path}/{db_id}/{db_id}.sqlite``."""
        opened = self._databases.get(str(db_id))
        if opened is not None:
            return opened[1]
        base = os.path.join(self.db_path or "", str(db_id), str(db_id))
        duckdb_file = base + ".duckdb"
        return duckdb_file if os.path.isfile(duckdb_file) else base + ".sqlite"

    def database_for(self, db_id: str) -> tuple[Database, str]:
        """The open database ``db_id`` and its file, opening it on first use (read-only)."""
        key = str(db_id)
        opened = self._databases.get(key)
        if opened is not None:
            return opened[0], opened[1]
        if self.db_path is None:
            raise ValueError(f"no database {key!r}: this group serves only {self._bound!r}")
        if not key or any(sep in key for sep in ("/", "\\")) or key in (".", ".."):
            raise ValueError(f"db_id must be a plain name, got {key!r}")
        from skyrl_gym.runtime.sql.database import open_database

        file = self.db_file_for(key)
        database = open_database(file, engine=self.engine, sqlite_temp_store=self.sqlite_temp_store)
        self._databases[key] = (database, file, True)
        return database, file

    def close(self) -> None:
        """Close the databases the group opened itself (a bound one belongs to its owner)."""
        for key, (database, _, owned) in list(self._databases.items()):
            if owned:
                database.close()
                del self._databases[key]


def _default_chars(style: str) -> int:
    return SKYRL_MAX_CHARS if style == "skyrl" else TABLE_MAX_CHARS
