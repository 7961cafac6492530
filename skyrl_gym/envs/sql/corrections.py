"""Near-miss queries: plausible first attempts that the database's answer shows to be wrong.

A correction episode (see :meth:`Text2SQLEnv.reference_episode`) runs one of these first, reads what came back
and answers with the gold query. Each near miss is derived from the gold query and the schema the prompt
shows, the kind of slip a model makes:

- ``table``: a table named in the singular or plural (``doctor`` for ``doctors``): a schema error;
- ``column``: a column called by a shorter or longer name (``fee`` for ``consultation_fee``): a schema error;
- ``filter``: an equality filter on the wrong text column (``name = 'Boston'`` for ``city = 'Boston'``):
  an empty result;
- ``clause``: the ``WHERE`` or the ``LIMIT`` left out: more rows than the question asks for.

Every candidate is checked against the real database with ``run`` before it is offered, so the observation
the episode shows is the one the fix line speaks of (an error for the first two kinds, no rows for a filter,
more rows than the gold query for a missing clause).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

__all__ = ["KINDS", "NearMiss", "RunResult", "misnamed", "near_misses"]

KINDS = ("column", "table", "filter", "clause")
"""The kinds of near miss, in the order :func:`near_misses` tries them by default."""


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What running a query gave: an error kind (``None`` when it ran) and the number of rows."""

    error_kind: str | None
    rows: int | None


@dataclasses.dataclass(frozen=True)
class NearMiss:
    """A wrong first query and the one line of reasoning that reads its observation and names the fix."""

    query: str
    kind: str
    fix: str


def near_misses(
    gold_sql: str,
    schema: Mapping[str, Sequence[str]],
    dialect: str,
    run: Callable[[str], RunResult],
    *,
    kinds: Sequence[str] = KINDS,
    limit: int = 1,
) -> list[NearMiss]:
    """Up to ``limit`` near misses of ``gold_sql``, trying ``kinds`` in order; ``schema`` maps each table to its
    columns and ``run`` runs a query on the task's database. Empty when the gold query does not parse or no
    candidate behaves as its kind says."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(gold_sql, read=dialect)
    except Exception:  # a gold query sqlglot cannot read has no derived near miss
        return []
    if not isinstance(tree, exp.Select):
        return []
    gold = run(gold_sql)
    if gold.error_kind is not None or not gold.rows:
        return []  # a near miss is told apart by its result: the gold result must be a real one
    makers = {
        "table": _table_misses,
        "column": _column_misses,
        "filter": _filter_misses,
        "clause": _clause_misses,
    }
    found: list[NearMiss] = []
    for kind in kinds:
        for miss in makers[kind](tree, schema, dialect):
            result = run(miss.query)
            if _behaves(miss.kind, result, gold):
                found.append(miss)
                break
        if len(found) >= limit:
            break
    return found


def _behaves(kind: str, result: RunResult, gold: RunResult) -> bool:
    if kind in ("table", "column"):
        return result.error_kind == "schema"
    if kind == "filter":
        return result.error_kind is None and result.rows == 0
    return result.error_kind is None and result.rows is not None and result.rows > (gold.rows or 0)


def _other_number(name: str) -> str:
    """``doctors`` -> ``doctor``, ``category`` -> ``categories``, ``country`` <-> ``countries``."""
    if name.endswith("ies"):
        return name[:-3] + "y"
    if name.endswith("ses") or name.endswith("xes"):
        return name[:-2]
    if name.endswith("s"):
        return name[:-1]
    if name.endswith("y") and len(name) > 1 and name[-2] not in "aeiou":
        return name[:-1] + "ies"
    return name + "s"


def _table_misses(tree, schema, dialect):
    from sqlglot import exp

    known = {t.lower() for t in schema}
    for name in dict.fromkeys(t.name for t in tree.find_all(exp.Table)):
        wrong = _other_number(name)
        if wrong.lower() in known or wrong == name:
            continue
        copy = tree.copy()
        for table in copy.find_all(exp.Table):
            if table.name == name:
                table.set("this", exp.to_identifier(wrong))
        yield NearMiss(copy.sql(dialect=dialect), "table", f"There is no table {wrong}; the table is {name}.")


def _gold_columns(tree, schema) -> dict[str, str]:
    """Column name -> its table, for the columns the gold query names that belong to one of its tables."""
    from sqlglot import exp

    tables = [t.name for t in tree.find_all(exp.Table)]
    owner: dict[str, str] = {}
    for column in tree.find_all(exp.Column):
        for table in tables:
            if column.name in schema.get(table, ()):
                owner.setdefault(column.name, table)
                break
    return owner


def _column_names(name: str, table: str) -> list[str]:
    """Plausible wrong names for column ``name`` of ``table``: a part of it, another number, the table's
    singular as a prefix."""
    parts = name.split("_")
    names = []
    if len(parts) > 1:
        names += [parts[-1], parts[0], "".join(parts)]
    names.append(_other_number(name))
    singular = _other_number(table) if table.endswith("s") else table
    if not name.startswith(singular):
        names.append(f"{singular}_{name}")
    return [n for n in dict.fromkeys(names) if n and n != name]


def _column_misses(tree, schema, dialect):
    from sqlglot import exp

    every_column = {c for columns in schema.values() for c in columns}
    for name, table in _gold_columns(tree, schema).items():
        for wrong in _column_names(name, table):
            if wrong in every_column:
                continue  # a real column would not be an error
            copy = tree.copy()
            for column in copy.find_all(exp.Column):
                if column.name == name:
                    column.set("this", exp.to_identifier(wrong))
            yield NearMiss(
                copy.sql(dialect=dialect), "column", f"There is no column {wrong}; the column is {name}."
            )
            break


def _filter_misses(tree, schema, dialect):
    from sqlglot import exp

    owner = _gold_columns(tree, schema)
    for eq in tree.find_all(exp.EQ):
        column, literal = eq.left, eq.right
        if isinstance(literal, exp.Column):
            column, literal = literal, column
        if not (isinstance(column, exp.Column) and isinstance(literal, exp.Literal) and literal.is_string):
            continue
        table = owner.get(column.name)
        if table is None:
            continue
        for other in schema[table]:
            if other == column.name or other.endswith("_id") or other == "id":
                continue
            copy = tree.copy()
            for node in copy.find_all(exp.EQ):
                if node.left == column and node.right == literal:
                    node.set("this", exp.column(other, table=column.table or None))
                elif node.right == column and node.left == literal:
                    node.set("expression", exp.column(other, table=column.table or None))
            yield NearMiss(
                copy.sql(dialect=dialect),
                "filter",
                f"No rows came back: '{literal.this}' is a {column.name}, not a {other}.",
            )


def _clause_misses(tree, schema, dialect):
    where = tree.args.get("where")
    if where is not None:
        copy = tree.copy()
        copy.set("where", None)
        condition = where.this.sql(dialect=dialect)
        fix = f"That returned rows the question leaves out: it needs WHERE {condition}."
        yield NearMiss(copy.sql(dialect=dialect), "clause", fix)
    limit = tree.args.get("limit")
    if limit is not None:
        copy = tree.copy()
        copy.set("limit", None)
        count = limit.expression.sql(dialect=dialect) if limit.expression is not None else ""
        fix = f"That lists them all: the question asks for {count} only, so LIMIT {count}."
        yield NearMiss(copy.sql(dialect=dialect), "clause", fix)


def misnamed(query: str, gold_sql: str, schema: Mapping[str, Sequence[str]], dialect: str) -> str | None:
    """The line that reads a schema error of ``query`` as a near miss's fix line does: the first table, then
    the first column, it names that ``schema`` does not have, and the name it meant: a close one (difflib's
    ratio at least 0.6) of the gold query's own names, else of the schema's. ``None`` when either query does
    not parse, ``query`` names nothing unknown (its error is not a misnamed table or column), or no name is
    close to the unknown one (the line would guess).

    Names the query defines itself (a ``WITH`` table, a table or column alias) are not unknown.
    """
    import difflib

    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(query, read=dialect)
        gold = sqlglot.parse_one(gold_sql, read=dialect)
    except Exception:  # a query the parser cannot read has a syntax error, not a misnamed one
        return None
    if tree is None or gold is None:
        return None
    defined = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    defined |= {a.alias.lower() for a in tree.find_all(exp.Alias, exp.TableAlias) if a.alias}
    tables = {t.lower() for t in schema}
    columns = {c.lower() for names in schema.values() for c in names}
    gold_tables = list(dict.fromkeys(t.name for t in gold.find_all(exp.Table)))
    gold_columns = list(dict.fromkeys(c.name for c in gold.find_all(exp.Column) if c.name.lower() in columns))

    def closest(name: str, preferred: Sequence[str], every: Sequence[str]) -> str | None:
        for pool in (preferred, every):
            match = difflib.get_close_matches(name.lower(), [p.lower() for p in pool], n=1)
            if match:
                return next(p for p in pool if p.lower() == match[0])
        return None

    for table in dict.fromkeys(t.name for t in tree.find_all(exp.Table)):
        if table and table.lower() not in tables and table.lower() not in defined:
            fix = closest(table, gold_tables, list(schema))
            return None if fix is None else f"There is no table {table}; the table is {fix}."
    for column in dict.fromkeys(c.name for c in tree.find_all(exp.Column)):
        if column and column.lower() not in columns and column.lower() not in defined:
            every = [c for names in schema.values() for c in names]
            fix = closest(column, gold_columns, every)
            return None if fix is None else f"There is no column {column}; the column is {fix}."
    return None
