"""Question templates: each turns a populated database into one question, its gold SQL and checks.

A template is a function of a :class:`Context` (the domain, its rows, a random generator) that returns a
:class:`Candidate` or ``None`` when it does not apply. Templates are generic: they read the words for
tables, columns and foreign keys from the domain (:mod:`.schema`), pick concrete values from the rows
("from Lyon", "priced above $50", "in 2023"), and write the question in one of several wordings.

Levels follow Spider's hardness levels in spirit: ``easy`` (one table, select and filter), ``medium``
(aggregates, GROUP BY, ORDER BY / LIMIT, two conditions), ``hard`` (joins of two or three tables, HAVING,
nested subqueries), ``extra`` (set operations, nesting combined with joins or grouping).

Every candidate carries what makes its answer well defined (checked by :func:`check_candidate`):

- ``contrasts``: queries a careless reading would write (the filter dropped, ``>=`` for ``>``, the other
  half of an INTERSECT); the gold result must differ from each, or the question does not test what it says;
- ``equivalents``: queries another fair reading would write (``COUNT(*)`` for ``COUNT(DISTINCT ...)``,
  ``LEFT JOIN`` for ``JOIN``); the gold result must equal each, or the question is ambiguous;
- ``tie_sql``: for ordered answers, the sort keys in order; ties that would make another correct query
  return other rows or another order are rejected.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from skyrl_gym.datasets.sql.synth import vocab
from skyrl_gym.datasets.sql.synth.schema import (
    Bridge,
    Column,
    Domain,
    Link,
    Table,
    a_or_an,
    plural,
    predicate,
)

__all__ = [
    "GENERIC_TEMPLATES",
    "LEVELS",
    "Candidate",
    "Context",
    "Filter",
    "Template",
    "check_candidate",
    "literal",
    "show",
    "template",
]

LEVELS = ("easy", "medium", "hard", "extra")

MAX_ROWS = 40
"""A gold answer with more rows than this is a dump, not an answer; such candidates are dropped."""

MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip


# -- candidates and templates ------------------------------------------------------------------------------


@dataclasses.dataclass
class Candidate:
    """One generated question with its gold SQL, level and the checks that keep it well defined."""

    question: str
    sql: str
    level: str
    contrasts: list[str] = dataclasses.field(default_factory=list)
    equivalents: list[str] = dataclasses.field(default_factory=list)
    tie_sql: str | None = None
    """Returns the gold query's sort keys, in order, one more row than the gold LIMIT (or all rows)."""
    tie_limit: int | None = None
    """The gold query's LIMIT (``None``: every row is in the answer and keys must all differ)."""
    max_rows: int = MAX_ROWS
    template: str = ""


@dataclasses.dataclass(frozen=True)
class Template:
    """A named question template of one level."""

    name: str
    level: str
    make: Callable[[Context], Candidate | None]


GENERIC_TEMPLATES: list[Template] = []
"""The templates every domain uses (domain modules may add their own)."""


def template(level: str, registry: list[Template] | None = None) -> Callable[[Callable], Callable]:
    """Decorator: register ``make(ctx) -> Candidate | None`` as a template of ``level``."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")

    def register(make: Callable[[Context], Candidate | None]) -> Callable[[Context], Candidate | None]:
        (GENERIC_TEMPLATES if registry is None else registry).append(Template(make.__name__, level, make))
        return make

    return register


class Context:
    """What a template sees: the domain, the rows of one instance and the random generator."""

    def __init__(self, domain: Domain, data: dict[str, list[tuple[Any, ...]]], rng: random.Random):
        self.domain = domain
        self.data = data
        self.rng = rng
        self._values: dict[tuple[str, str], list[Any]] = {}

    def table(self, name: str) -> Table:
        return self.domain.table(name)

    def column_values(self, table: Table, column: str) -> list[Any]:
        """Every value of ``table.column``, NULLs included, in row order."""
        key = (table.name, column)
        if key not in self._values:
            i = table.index(column)
            self._values[key] = [row[i] for row in self.data[table.name]]
        return self._values[key]

    def values(self, table: Table, column: str) -> list[Any]:
        """The non-NULL values of ``table.column`` (with repeats: a random pick follows the frequencies)."""
        return [v for v in self.column_values(table, column) if v is not None]

    def choice(self, items: Sequence[Any]) -> Any:
        return self.rng.choice(items) if items else None

    def say(self, *wordings: str | None) -> str:
        """One of the wordings (``None`` entries are wordings that do not apply), capitalised."""
        text = self.rng.choice([w for w in wordings if w])
        return text[:1].upper() + text[1:]


# -- values in questions and in SQL -------------------------------------------------------------------------


def literal(value: Any) -> str:
    """``value`` as an SQL literal: quoted strings (with ``''`` escapes), ISO dates, plain numbers."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (datetime.date, datetime.datetime)):
        return f"'{value.isoformat()}'"
    if isinstance(value, (int, Decimal)):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def show(column: Column, value: Any) -> str:
    """``value`` as a question writes it: "$1,250", "$49.99", "2019", "12,000", "'The Silent River'"."""
    if isinstance(value, (float, Decimal)) or column.kind == "money":
        number = float(value)
        if column.kind == "money":
            return f"${number:,.0f}" if number.is_integer() else f"${number:,.2f}"
        return f"{number:,.0f}" if number.is_integer() else f"{number:g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value) if column.kind == "year" or abs(value) < 10000 else f"{value:,}"
    text = str(value)
    if text in vocab.NEEDS_THE and column.kind == "cat":
        return "the " + text
    return f"'{text}'" if column.quote else text


def nice(value: float) -> float:
    """``value`` rounded to two significant digits (a threshold a person would pick: 48.7 -> 49)."""
    if value <= 0:
        return 0.0
    step = 10 ** (math.floor(math.log10(value)) - 1)
    return round(round(value / step) * step, 6)


def _passive(by: str) -> bool:
    """Whether "were {by}" reads well: "were placed by", "were written by" (not "were working in")."""
    return by.split()[0].endswith(("ed", "en", "wn", "ght"))


# -- filters -----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Filter:
    """One condition on a column with its words.

    ``parts`` are ``(column, rest)`` pairs joined by AND (a date period has two); ``mod`` follows a plural
    noun ("from Lyon", "placed in 2023"); ``bare`` is the same without the verb where there is one
    ("in 2023"); ``pred`` is the predicate form or ``None``; ``test`` says whether a value satisfies it.
    """

    column: str
    parts: tuple[tuple[str, str], ...]
    mod: str
    bare: str
    pred: str | None
    test: Callable[[Any], bool]

    def sql(self, prefix: str = "") -> str:
        """The condition, its columns prefixed with ``prefix`` ("T1.")."""
        return " AND ".join(f"{prefix}{column} {rest}" for column, rest in self.parts)

    def sql_wrapped(self, prefix: str = "") -> str:
        """The condition in parentheses when it has several parts (for use under OR)."""
        text = self.sql(prefix)
        return f"({text})" if len(self.parts) > 1 else text


def _fill(phrase: str, **slots: str) -> str:
    for key, value in slots.items():
        phrase = phrase.replace("{" + key + "}", value)
    return phrase


def _phrases(column: Column, op: str) -> tuple[str, ...]:
    """The modifiers of ``column`` for ``op`` ("eq", "gt", "lt", "when", "missing"), generic if none."""
    own = getattr(column, op)
    if own:
        return own
    words = column.words
    if op == "eq":
        return (f"with {words} {{v}}", f"whose {words} is {{v}}")
    if op == "gt":
        if column.kind == "year":
            return (f"with {words} after {{v}}",)
        return (f"with {a_or_an(words)} above {{v}}", f"whose {words} is greater than {{v}}")
    if op == "lt":
        if column.kind == "year":
            return (f"with {words} before {{v}}",)
        return (f"with {a_or_an(words)} below {{v}}", f"whose {words} is less than {{v}}")
    if op == "when":
        return (f"with {a_or_an(words)} {{p}}",)
    return (f"with no {words} recorded", f"whose {words} is missing")


def _make_filter(ctx: Context, column: Column, op: str, phrase_slots: dict[str, str], parts, test) -> Filter:
    phrase = ctx.choice(_phrases(column, op))
    mod = _fill(phrase, **phrase_slots)
    bare = phrase_slots["p"] if op == "when" else mod
    return Filter(column.name, tuple(parts), mod, bare, predicate(mod, column.tense), test)


def threshold(ctx: Context, column: Column, values: Sequence[Any]) -> float | int:
    """A round threshold inside the bulk of ``values`` (between the 20th and 80th percentiles)."""
    ordered = sorted(float(v) for v in values)
    pick = ordered[int(ctx.rng.uniform(0.2, 0.8) * (len(ordered) - 1))]
    value = nice(pick)
    if column.kind in ("num", "year") and all(float(v).is_integer() for v in ordered[:50]):
        return max(2, int(round(value)))  # "more than 1 copies" reads badly
    return int(value) if float(value).is_integer() else value


def period(ctx: Context, dates: Sequence[datetime.date]) -> tuple[str, str | None, str | None]:
    """A period around one of ``dates``: (words, first day or None, day after the last or None)."""
    day = ctx.choice(dates)
    years = sorted({d.year for d in dates})
    kind = ctx.rng.choices(("year", "month", "before", "since"), weights=(45, 25, 15, 15))[0]
    if kind == "month":
        start = datetime.date(day.year, day.month, 1)
        end = datetime.date(day.year + (day.month == 12), day.month % 12 + 1, 1)
        return f"in {MONTHS[day.month - 1]} {day.year}", start.isoformat(), end.isoformat()
    if kind == "before" and day.year > years[0]:
        return f"before {day.year}", None, f"{day.year}-01-01"
    if kind == "since" and day.year > years[0]:
        return f"since {day.year}", f"{day.year}-01-01", None
    return f"in {day.year}", f"{day.year}-01-01", f"{day.year + 1}-01-01"


FILTER_KINDS = ("cat", "num", "money", "year", "date", "missing", "flag")


def filterable(
    table: Table, kinds: Sequence[str] = FILTER_KINDS, exclude: Sequence[str] = ()
) -> list[Column]:
    """The columns of ``table`` a filter may use."""
    out = []
    for column in table.columns:
        if column.name in exclude or column.references or column.name in table.primary_key:
            continue
        if column.kind == "flag" and not column.eq:
            continue
        if column.kind in kinds and column.kind not in ("id", "label", "text"):
            out.append(column)
        elif column.nullable and "missing" in kinds:
            out.append(column)
    return out


def pick_filter(
    ctx: Context, table: Table, *, kinds: Sequence[str] = FILTER_KINDS, exclude: Sequence[str] = ()
) -> Filter | None:
    """A filter on a random filterable column of ``table`` with a value drawn from its rows."""
    columns = filterable(table, kinds, exclude)
    if not columns:
        return None
    column = ctx.choice(columns)
    everything = ctx.column_values(table, column.name)
    values = [v for v in everything if v is not None]
    if not values:
        return None
    can_miss = column.nullable and "missing" in kinds and len(values) < len(everything)
    if can_miss and (column.kind not in kinds or ctx.rng.random() < 0.3):
        return _make_filter(ctx, column, "missing", {}, [(column.name, "IS NULL")], lambda v: v is None)
    if column.kind not in kinds:
        return None
    if column.kind == "flag":
        return _make_filter(ctx, column, "eq", {}, [(column.name, "= TRUE")], lambda v: v is True)
    if column.kind == "cat":
        value = ctx.choice(values)
        slots = {"v": show(column, value)}
        return _make_filter(
            ctx, column, "eq", slots, [(column.name, f"= {literal(value)}")], lambda v: v == value
        )
    if column.kind == "date":
        words, start, end = period(ctx, values)
        parts = []
        if start:
            parts.append((column.name, f">= {literal(start)}"))
        if end:
            parts.append((column.name, f"< {literal(end)}"))

        def in_period(v: Any, start: str | None = start, end: str | None = end) -> bool:
            return (
                v is not None
                and (start is None or v.isoformat() >= start)
                and (end is None or v.isoformat() < end)
            )

        return _make_filter(ctx, column, "when", {"p": words}, parts, in_period)
    if column.kind == "year" and ctx.rng.random() < 0.4:
        value = ctx.choice(values)
        return _make_filter(
            ctx, column, "eq", {"v": show(column, value)}, [(column.name, f"= {value}")], lambda v: v == value
        )
    cut = threshold(ctx, column, values)
    if ctx.rng.random() < 0.55:
        return _make_filter(
            ctx, column, "gt", {"v": show(column, cut)}, [(column.name, f"> {literal(cut)}")],
            lambda v: v is not None and float(v) > cut,
        )  # fmt: skip
    return _make_filter(
        ctx, column, "lt", {"v": show(column, cut)}, [(column.name, f"< {literal(cut)}")],
        lambda v: v is not None and float(v) < cut,
    )  # fmt: skip


def _relative(mod: str) -> bool:
    return mod.startswith(("who ", "that ", "whose "))


def both(first: Filter, second: Filter) -> str:
    """Two modifiers after one noun: "from Osaka who joined in 2022", "priced above $5 and in the Toys range"."""
    if _relative(first.mod) and not _relative(second.mod):
        first, second = second, first
    joiner = " " if _relative(second.mod) and not _relative(first.mod) else " and "
    return f"{first.mod}{joiner}{second.mod}"


def label_filter(ctx: Context, table: Table) -> tuple[Any, str] | None:
    """A row's label and its words: "Ana Silva", "'The Silent River'", "order 606" (a key needs its noun)."""
    if table.label is None:
        return None
    value = ctx.choice(ctx.values(table, table.label))
    if value is None:
        return None
    shown = show(table.label_column, value)
    return value, (f"{table.singular} {shown}" if table.label_column.kind == "id" else shown)


def formal(table: Table, mention: str) -> str:
    """A row's mention with its noun: "the product 'Solar Lamp'", "order 606" (already has one)."""
    return mention if table.label_column.kind == "id" else f"the {table.singular} {mention}"


# -- the pieces of a join ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Join:
    """A foreign key seen from both ends, with the SQL to join child (T1) to parent (T2)."""

    link: Link
    child: Table
    parent: Table

    @property
    def key(self) -> str:
        return self.child.column(self.link.column).references[1]

    @property
    def on(self) -> str:
        return (
            f"{self.child.name} AS T1 JOIN {self.parent.name} AS T2 ON T1.{self.link.column} = T2.{self.key}"
        )

    @property
    def child_one(self) -> str:
        return self.link.child_words[0] if self.link.child_words else self.child.singular

    @property
    def child_many(self) -> str:
        return self.link.child_words[1] if self.link.child_words else self.child.plural

    def words(self, f: Filter) -> str:
        """How a filter on the child reads after the link's verb: "placed orders in 2023" when the filter is on
        the date the verb is about, "offer courses at the advanced level" otherwise."""
        return f.bare if f.column == self.link.when else f.mod

    @property
    def group(self) -> str:
        """GROUP BY for one row per parent (its key, and its label when that is another column)."""
        label = self.parent.label
        return f"T2.{self.key}" if label in (None, self.key) else f"T2.{self.key}, T2.{label}"


def joins(ctx: Context, *, parent_label: bool = False, child_label: bool = False) -> list[Join]:
    out = []
    for link in ctx.domain.links:
        join = Join(link, ctx.table(link.child), ctx.table(link.parent))
        if parent_label and join.parent.label is None:
            continue
        if child_label and join.child.label is None:
            continue
        out.append(join)
    return out


def labelled(ctx: Context) -> list[Table]:
    return [t for t in ctx.domain.tables if t.label is not None]


def numeric_columns(
    table: Table, *, nullable: bool = True, kinds: Sequence[str] = ("num", "money")
) -> list[Column]:
    return [
        c
        for c in table.columns
        if c.kind in kinds
        and not c.references
        and (nullable or not c.nullable)
        and c.name not in table.primary_key
    ]


def category_columns(table: Table, *, nullable: bool = False) -> list[Column]:
    return [c for c in table.columns if c.kind == "cat" and (nullable or not c.nullable)]


def _highest(column: Column, high: bool) -> tuple[str, str]:
    """("most expensive", "with the highest price") style words for the top (or bottom) of ``column``."""
    adjective = column.top if high else column.bottom
    generic = f"with the {'highest' if high else 'lowest'} {column.words}"
    return adjective, generic


AGGREGATES = {
    "AVG": ("average",),
    "MAX": ("highest", "maximum"),
    "MIN": ("lowest", "minimum"),
    "SUM": ("total",),
}


def _aggregates(column: Column) -> list[str]:
    if column.kind == "year":
        return ["MIN", "MAX"]
    names = ["AVG", "MAX", "MIN"]
    return names + ["SUM"] if column.additive else names


def _agg_words(ctx: Context, agg: str, column: Column) -> str:
    if column.kind == "year":
        return ("earliest " if agg == "MIN" else "latest ") + column.words
    return f"{ctx.choice(AGGREGATES[agg])} {column.words}"


# -- easy ----------------------------------------------------------------------------------------------------


@template("easy")
def count_all(ctx: Context) -> Candidate | None:
    table = ctx.choice(ctx.domain.tables)
    question = ctx.say(
        f"How many {table.plural} are there?",
        f"What is the total number of {table.plural}?",
        f"Count the {table.plural} in the database.",
        f"How many {table.plural} does the database hold?",
    )
    return Candidate(question, f"SELECT COUNT(*) FROM {table.name}", "easy")


@template("easy")
def list_filtered(ctx: Context) -> Candidate | None:
    table = ctx.choice(labelled(ctx))
    f = pick_filter(ctx, table)
    if f is None:
        return None
    words, many = table.label_words, table.plural
    question = ctx.say(
        f"List the {words} of {many} {f.mod}.",
        f"Which {many} {f.pred}?" if f.pred else None,
        f"Show the {words} of all {many} {f.mod}.",
        f"Give me the {words} of all the {many} {f.mod}.",
        f"Find the {many} {f.mod} and list their {words}.",
    )
    sql = f"SELECT {table.label} FROM {table.name} WHERE {f.sql()}"
    return Candidate(question, sql, "easy", contrasts=[f"SELECT {table.label} FROM {table.name}"])


@template("easy")
def count_filtered(ctx: Context) -> Candidate | None:
    table = ctx.choice(ctx.domain.tables)
    f = pick_filter(ctx, table)
    if f is None:
        return None
    question = ctx.say(
        f"How many {table.plural} {f.pred}?" if f.pred else None,
        f"Count the {table.plural} {f.mod}.",
        f"What is the number of {table.plural} {f.mod}?",
        f"How many {table.plural} {f.mod} are there?",
    )
    sql = f"SELECT COUNT(*) FROM {table.name} WHERE {f.sql()}"
    return Candidate(question, sql, "easy", contrasts=[f"SELECT COUNT(*) FROM {table.name}"])


@template("easy")
def distinct_values(ctx: Context) -> Candidate | None:
    table = ctx.choice(ctx.domain.tables)
    column = ctx.choice(category_columns(table))
    if column is None:
        return None
    words = plural(column.words)
    question = ctx.say(
        f"What are the distinct {words} of the {table.plural}?",
        f"List the different {words} that appear among the {table.plural}.",
        f"Which {words} do the {table.plural} have? List each one once.",
        f"Show every {column.words} found in the {table.plural}, without repeats.",
    )
    sql = f"SELECT DISTINCT {column.name} FROM {table.name}"
    return Candidate(question, sql, "easy", contrasts=[f"SELECT {column.name} FROM {table.name}"])


@template("easy")
def attribute_of(ctx: Context) -> Candidate | None:
    table = ctx.choice(labelled(ctx))
    picked = label_filter(ctx, table)
    columns = [
        c
        for c in table.columns
        if c.name not in table.primary_key and c.name != table.label and not c.references and c.kind != "id"
    ]
    column = ctx.choice(columns)
    if picked is None or column is None:
        return None
    value, shown = picked
    question = ctx.say(
        f"What is the {column.words} of {shown if table.person else formal(table, shown)}?",
        f"Find the {column.words} of {shown if table.person else formal(table, shown)}.",
        f"What {column.words} is recorded for {formal(table, shown)}?",
    )
    sql = f"SELECT {column.name} FROM {table.name} WHERE {table.label} = {literal(value)}"
    return Candidate(question, sql, "easy")


@template("easy")
def two_columns_filtered(ctx: Context) -> Candidate | None:
    table = ctx.choice(labelled(ctx))
    f = pick_filter(ctx, table)
    if f is None:
        return None
    columns = [
        c
        for c in table.columns
        if c.name not in (table.label, f.column) and c.kind not in ("id",) and not c.references
    ]
    column = ctx.choice(columns)
    if column is None:
        return None
    question = ctx.say(
        f"List the {table.label_column.words} and {column.words} of all {table.plural} {f.mod}.",
        f"For the {table.plural} {f.mod}, show the {table.label_column.words} and {column.words} of each.",
        f"What are the {table.label_words} and {plural(column.words)} of {table.plural} {f.mod}?",
    )
    sql = f"SELECT {table.label}, {column.name} FROM {table.name} WHERE {f.sql()}"
    return Candidate(
        question, sql, "easy", contrasts=[f"SELECT {table.label}, {column.name} FROM {table.name}"]
    )


# -- medium ------------------------------------------------------------------------------------------------


@template("medium")
def aggregate_filtered(ctx: Context) -> Candidate | None:
    table = ctx.choice(ctx.domain.tables)
    column = ctx.choice(numeric_columns(table, kinds=("num", "money", "year")))
    if column is None:
        return None
    f = pick_filter(ctx, table, exclude=(column.name,))
    if f is None:
        return None
    agg = ctx.choice(_aggregates(column))
    words = _agg_words(ctx, agg, column)
    question = ctx.say(
        f"What is the {words} of {table.plural} {f.mod}?",
        f"Find the {words} among {table.plural} {f.mod}.",
        f"Among {table.plural} {f.mod}, what is the {words}?",
    )
    base = f"FROM {table.name} WHERE {f.sql()}"
    contrasts = [f"SELECT {agg}({column.name}) FROM {table.name}"]
    contrasts += [f"SELECT {other}({column.name}) {base}" for other in ("AVG", "MAX", "MIN") if other != agg]
    return Candidate(question, f"SELECT {agg}({column.name}) {base}", "medium", contrasts=contrasts)


@template("medium")
def min_and_max(ctx: Context) -> Candidate | None:
    table = ctx.choice(ctx.domain.tables)
    column = ctx.choice(numeric_columns(table, kinds=("num", "money", "year")))
    if column is None:
        return None
    question = ctx.say(
        f"What are the lowest and highest {column.words} among all {table.plural}?",
        f"Give the minimum and maximum {column.words} of the {table.plural}.",
        f"What is the range of {plural(column.words)} of the {table.plural}? Give the smallest and the largest.",
    )
    return Candidate(question, f"SELECT MIN({column.name}), MAX({column.name}) FROM {table.name}", "medium")


@template("medium")
def count_per_category(ctx: Context) -> Candidate | None:
    table = ctx.choice(ctx.domain.tables)
    column = ctx.choice(category_columns(table))
    if column is None:
        return None
    question = ctx.say(
        f"How many {table.plural} are there for each {column.words}?",
        f"For each {column.words}, how many {table.plural} are there?",
        f"Count the {table.plural} per {column.words}.",
        f"Show every {column.words} together with its number of {table.plural}.",
    )
    sql = f"SELECT {column.name}, COUNT(*) FROM {table.name} GROUP BY {column.name}"
    return Candidate(question, sql, "medium", max_rows=30)


@template("medium")
def aggregate_per_category(ctx: Context) -> Candidate | None:
    table = ctx.choice(ctx.domain.tables)
    group = ctx.choice(category_columns(table))
    column = ctx.choice(numeric_columns(table))
    if group is None or column is None:
        return None
    agg = ctx.choice([a for a in _aggregates(column) if a != "MIN"])
    words = _agg_words(ctx, agg, column)
    question = ctx.say(
        f"What is the {words} of {table.plural} for each {group.words}?",
        f"For each {group.words}, give the {words} of its {table.plural}.",
        f"Show each {group.words} with the {words} of the {table.plural} in it.",
    )
    sql = f"SELECT {group.name}, {agg}({column.name}) FROM {table.name} GROUP BY {group.name}"
    return Candidate(question, sql, "medium", max_rows=30)


@template("medium")
def top_k(ctx: Context) -> Candidate | None:
    table = ctx.choice(labelled(ctx))
    column = ctx.choice(numeric_columns(table, nullable=False, kinds=("num", "money", "year")))
    if column is None:
        return None
    high = ctx.rng.random() < 0.65
    k = ctx.rng.randint(2, 5)
    adjective, generic = _highest(column, high)
    order = "DESC" if high else "ASC"
    words = table.label_words
    question = ctx.say(
        f"List the {words} of the {k} {adjective} {table.plural}." if adjective else None,
        f"What are the {words} of the {k} {table.plural} {generic}?",
        f"Which {k} {table.plural} have the {'highest' if high else 'lowest'} {column.words}? "
        f"List them from the {'highest' if high else 'lowest'}.",
        f"Show the {k} {table.plural} {generic}, {'highest' if high else 'lowest'} first.",
    )
    sql = f"SELECT {table.label} FROM {table.name} ORDER BY {column.name} {order} LIMIT {k}"
    tie = f"SELECT {column.name} FROM {table.name} ORDER BY {column.name} {order} LIMIT {k + 1}"
    return Candidate(question, sql, "medium", tie_sql=tie, tie_limit=k)


@template("medium")
def arg_extreme(ctx: Context) -> Candidate | None:
    table = ctx.choice(labelled(ctx))
    column = ctx.choice(numeric_columns(table, nullable=False, kinds=("num", "money", "year")))
    if column is None:
        return None
    high = ctx.rng.random() < 0.6
    adjective, generic = _highest(column, high)
    order = "DESC" if high else "ASC"
    question = ctx.say(
        f"Which {table.singular} is the {adjective}?" if adjective else None,
        f"What is the {table.label_column.words} of the {table.singular} {generic}?",
        f"Which {table.singular} has the {'highest' if high else 'lowest'} {column.words}?",
        f"Name the {adjective} {table.singular}." if adjective else None,
    )
    sql = f"SELECT {table.label} FROM {table.name} ORDER BY {column.name} {order} LIMIT 1"
    tie = f"SELECT {column.name} FROM {table.name} ORDER BY {column.name} {order} LIMIT 2"
    return Candidate(question, sql, "medium", tie_sql=tie, tie_limit=1)


@template("medium")
def most_common_category(ctx: Context) -> Candidate | None:
    table = ctx.choice(ctx.domain.tables)
    column = ctx.choice(category_columns(table))
    if column is None:
        return None
    most = ctx.rng.random() < 0.7
    question = ctx.say(
        f"Which {column.words} has the {'most' if most else 'fewest'} {table.plural}?",
        f"What is the {'most' if most else 'least'} common {column.words} among {table.plural}?",
        f"Among the {table.plural}, which {column.words} appears {'most' if most else 'least'} often?",
    )
    order = "DESC" if most else "ASC"
    sql = f"SELECT {column.name} FROM {table.name} GROUP BY {column.name} ORDER BY COUNT(*) {order} LIMIT 1"
    tie = f"SELECT COUNT(*) FROM {table.name} GROUP BY {column.name} ORDER BY COUNT(*) {order} LIMIT 2"
    return Candidate(question, sql, "medium", tie_sql=tie, tie_limit=1)


@template("medium")
def two_conditions(ctx: Context) -> Candidate | None:
    table = ctx.choice(labelled(ctx))
    first = pick_filter(ctx, table)
    if first is None:
        return None
    second = pick_filter(ctx, table, exclude=(first.column,))
    if second is None:
        return None
    words, many = table.label_words, table.plural
    label = table.label
    if ctx.rng.random() < 0.7:
        question = ctx.say(
            f"List the {words} of {many} {both(first, second)}.",
            f"Which {many} {first.pred} and {second.pred}?" if first.pred and second.pred else None,
            f"Find the {many} that are both {first.mod} and {second.mod}; give their {words}."
            if first.pred and first.pred.startswith("are ") and second.pred and second.pred.startswith("are ")
            else None,
        )
        where = f"{first.sql()} AND {second.sql()}"
    else:
        question = ctx.say(
            f"List the {words} of {many} that are either {first.mod} or {second.mod}."
            if not first.mod.startswith(("with", "whose", "who"))
            and not second.mod.startswith(("with", "whose", "who"))
            else None,
            f"Which {many} {first.pred} or {second.pred}?" if first.pred and second.pred else None,
            f"Give the {words} of {many} {first.mod}, together with those {second.mod}.",
        )
        where = f"{first.sql_wrapped()} OR {second.sql_wrapped()}"
    sql = f"SELECT {label} FROM {table.name} WHERE {where}"
    contrasts = [
        f"SELECT {label} FROM {table.name} WHERE {first.sql()}",
        f"SELECT {label} FROM {table.name} WHERE {second.sql()}",
    ]
    return Candidate(question, sql, "medium", contrasts=contrasts)


@template("medium")
def count_two_conditions(ctx: Context) -> Candidate | None:
    table = ctx.choice(ctx.domain.tables)
    first = pick_filter(ctx, table)
    if first is None:
        return None
    second = pick_filter(ctx, table, exclude=(first.column,))
    if second is None:
        return None
    question = ctx.say(
        f"How many {table.plural} {first.mod} {second.pred}?"
        if second.pred and not _relative(first.mod)
        else None,
        f"Count the {table.plural} {both(first, second)}.",
        f"What is the number of {table.plural} {both(first, second)}?",
    )
    sql = f"SELECT COUNT(*) FROM {table.name} WHERE {first.sql()} AND {second.sql()}"
    contrasts = [
        f"SELECT COUNT(*) FROM {table.name} WHERE {first.sql()}",
        f"SELECT COUNT(*) FROM {table.name} WHERE {second.sql()}",
    ]
    return Candidate(question, sql, "medium", contrasts=contrasts)


@template("medium")
def between(ctx: Context) -> Candidate | None:
    table = ctx.choice(labelled(ctx))
    column = ctx.choice(numeric_columns(table, kinds=("num", "money", "year")))
    if column is None:
        return None
    values = ctx.values(table, column.name)
    if len(values) < 4:
        return None
    low, high = sorted((threshold(ctx, column, values), threshold(ctx, column, values)))
    if low == high:
        return None
    a, b = show(column, low), show(column, high)
    question = ctx.say(
        f"Which {table.plural} have {a_or_an(column.words)} between {a} and {b}?",
        f"List the {table.label_words} of {table.plural} whose {column.words} is between {a} and {b}, inclusive.",
        f"Find the {table.plural} with {a_or_an(column.words)} from {a} to {b} (both included).",
    )
    sql = f"SELECT {table.label} FROM {table.name} WHERE {column.name} BETWEEN {literal(low)} AND {literal(high)}"
    return Candidate(question, sql, "medium", contrasts=[f"SELECT {table.label} FROM {table.name}"])


@template("medium")
def name_pattern(ctx: Context) -> Candidate | None:
    table = ctx.choice(labelled(ctx))
    label = table.label_column
    if label.kind != "label" or label.type != "VARCHAR":
        return None
    value = ctx.choice(ctx.values(table, table.label))
    words = [w for w in str(value).replace("'", " ").split() if len(w) >= 4 and w.isalpha() and w.istitle()]
    if not words:
        return None
    word = ctx.choice(words)
    if ctx.rng.random() < 0.5 and str(value).startswith(word):
        question = ctx.say(
            f"Which {table.plural} have {a_or_an(label.words)} starting with '{word}'?",
            f"List the {table.plural} whose {label.words} begins with '{word}'.",
        )
        pattern = f"{word}%"
    else:
        question = ctx.say(
            f"Which {table.plural} have the word '{word}' in their {label.words}?",
            f"List the {table.label_words} of the {table.plural} whose {label.words} contains '{word}'.",
            f"Find every {table.singular} whose {label.words} contains '{word}'.",
        )
        pattern = f"%{word}%"
    sql = f"SELECT {table.label} FROM {table.name} WHERE {table.label} LIKE {literal(pattern)}"
    return Candidate(question, sql, "medium", contrasts=[f"SELECT {table.label} FROM {table.name}"])


@template("medium")
def count_distinct(ctx: Context) -> Candidate | None:
    table = ctx.choice(ctx.domain.tables)
    column = ctx.choice(category_columns(table, nullable=True))
    if column is None:
        return None
    words = plural(column.words)
    question = ctx.say(
        f"How many different {words} do the {table.plural} have?",
        f"How many distinct {words} appear among the {table.plural}?",
        f"Count the distinct {words} of {table.plural}.",
    )
    sql = f"SELECT COUNT(DISTINCT {column.name}) FROM {table.name}"
    return Candidate(question, sql, "medium", contrasts=[f"SELECT COUNT({column.name}) FROM {table.name}"])


@template("medium")
def sorted_filtered(ctx: Context) -> Candidate | None:
    table = ctx.choice(labelled(ctx))
    column = ctx.choice(numeric_columns(table, nullable=False, kinds=("num", "money", "year")))
    if column is None:
        return None
    f = pick_filter(ctx, table, exclude=(column.name,))
    if f is None:
        return None
    high = ctx.rng.random() < 0.5
    direction = "from highest to lowest" if high else "from lowest to highest"
    order = "DESC" if high else "ASC"
    question = ctx.say(
        f"List the {table.label_words} of {table.plural} {f.mod}, sorted by {column.words} {direction}.",
        f"Show the {table.plural} {f.mod} ordered by {column.words} {direction}.",
        f"Sort the {table.plural} {f.mod} by {column.words} in {'descending' if high else 'ascending'} order "
        f"and list their {table.label_words}.",
    )
    where = f"FROM {table.name} WHERE {f.sql()} ORDER BY {column.name} {order}"
    return Candidate(
        question,
        f"SELECT {table.label} {where}",
        "medium",
        tie_sql=f"SELECT {column.name} {where}",
        max_rows=20,
    )


# -- hard --------------------------------------------------------------------------------------------------


def _parent_condition(ctx: Context, join: Join) -> tuple[str, str] | None:
    """A condition on the parent (T2): (SQL, words after the child noun).

    Either the parent's label ("placed by Ana Silva") or a filter ("placed by customers from Lyon").
    """
    if join.parent.label is not None and ctx.rng.random() < 0.35:
        picked = label_filter(ctx, join.parent)
        if picked is None:
            return None
        value, shown = picked
        return f"T2.{join.parent.label} = {literal(value)}", f"{join.link.by} {shown}"
    f = pick_filter(ctx, join.parent)
    if f is None:
        return None
    return f.sql("T2."), f"{join.link.by} {join.parent.plural} {f.mod}"


@template("hard")
def join_list(ctx: Context) -> Candidate | None:
    join = ctx.choice(joins(ctx, child_label=True))
    if join is None:
        return None
    condition = _parent_condition(ctx, join)
    if condition is None:
        return None
    where, words = condition
    child = join.child
    question = ctx.say(
        f"List the {child.label_words} of {join.child_many} {words}.",
        f"Which {join.child_many} were {words}?" if _passive(join.link.by) else None,
        f"Show the {child.label_words} of all {join.child_many} {words}.",
        f"Give me the {child.label_words} of the {join.child_many} {words}.",
    )
    sql = f"SELECT T1.{child.label} FROM {join.on} WHERE {where}"
    return Candidate(question, sql, "hard", contrasts=[f"SELECT T1.{child.label} FROM {join.on}"])


@template("hard")
def join_count(ctx: Context) -> Candidate | None:
    join = ctx.choice(joins(ctx))
    if join is None:
        return None
    condition = _parent_condition(ctx, join)
    if condition is None:
        return None
    where, words = condition
    question = ctx.say(
        f"How many {join.child_many} were {words}?" if _passive(join.link.by) else None,
        f"Count the {join.child_many} {words}.",
        f"What is the number of {join.child_many} {words}?",
        f"How many {join.child_many} {words} are there?",
    )
    sql = f"SELECT COUNT(*) FROM {join.on} WHERE {where}"
    return Candidate(question, sql, "hard", contrasts=[f"SELECT COUNT(*) FROM {join.child.name}"])


@template("hard")
def parents_with_children(ctx: Context) -> Candidate | None:
    join = ctx.choice(joins(ctx, parent_label=True))
    if join is None:
        return None
    f = pick_filter(ctx, join.child, exclude=(join.link.column,))
    if f is None:
        return None
    parent = join.parent
    question = ctx.say(
        f"Which {parent.plural} {join.link.verb} {join.child_many} {join.words(f)}?",
        f"List the {parent.label_words} of {parent.plural} {parent.who} {join.link.verb} "
        f"at least one {join.child_one} {join.words(f)}.",
        f"Find the distinct {parent.plural} {parent.who} {join.link.verb} {join.child_many} {join.words(f)}.",
    )
    sql = f"SELECT DISTINCT T2.{parent.label} FROM {join.on} WHERE {f.sql('T1.')}"
    return Candidate(question, sql, "hard", contrasts=[f"SELECT DISTINCT T2.{parent.label} FROM {join.on}"])


def _count_threshold(ctx: Context, counts: Counter) -> int | None:
    """A child count ``n`` such that some parents have more than ``n`` children and some exactly ``n``."""
    present = sorted(set(counts.values()))
    usable = [n for n in present if n < present[-1] and n >= 2]
    return ctx.choice(usable[len(usable) // 3 :])  # the upper part: a short list of parents, not most of them


def _child_counts(ctx: Context, join: Join, child_filter: Filter | None = None) -> Counter:
    fk = ctx.column_values(join.child, join.link.column)
    if child_filter is None:
        return Counter(v for v in fk if v is not None)
    column = ctx.column_values(join.child, child_filter.column)
    return Counter(v for v, c in zip(fk, column, strict=True) if v is not None and child_filter.test(c))


@template("hard")
def having_count(ctx: Context) -> Candidate | None:
    join = ctx.choice(joins(ctx, parent_label=True))
    if join is None:
        return None
    counts = _child_counts(ctx, join)
    n = _count_threshold(ctx, counts)
    if n is None:
        return None
    parent, many = join.parent, join.child_many
    if ctx.rng.random() < 0.3 and n >= 2:  # someone has exactly n children: ">= n" and "> n" differ
        question = ctx.say(
            f"Which {parent.plural} {join.link.verb} at least {n} {many}?",
            f"List the {parent.label_words} of {parent.plural} with at least {n} {many}.",
        )
        having, wrong = f">= {n}", f"> {n}"
    else:
        question = ctx.say(
            f"Which {parent.plural} {join.link.verb} more than {n} {many}?",
            f"List the {parent.label_words} of {parent.plural} {parent.who} {join.link.verb} more than {n} {many}.",
            f"Find the {parent.plural} with more than {n} {many}.",
        )
        having, wrong = f"> {n}", f">= {n}"
    base = f"SELECT T2.{parent.label} FROM {join.on} GROUP BY {join.group} HAVING COUNT(*)"
    return Candidate(question, f"{base} {having}", "hard", contrasts=[f"{base} {wrong}"])


@template("hard")
def count_per_parent(ctx: Context) -> Candidate | None:
    join = ctx.choice(joins(ctx, parent_label=True))
    if join is None:
        return None
    f = pick_filter(ctx, join.parent)
    if f is None:
        return None
    parent = join.parent
    question = ctx.say(
        f"For the {parent.plural} {f.mod}, show the {parent.label_column.words} of each and the number of "
        f"{join.child_many} {join.link.by} them.",
        f"How many {join.child_many} does each of the {parent.plural} {f.mod} have? "
        f"Give the {parent.label_column.words} and the count.",
        f"List the {parent.plural} {f.mod} with the number of {join.child_many} of each.",
    )
    sql = f"SELECT T2.{parent.label}, COUNT(*) FROM {join.on} WHERE {f.sql('T2.')} GROUP BY {join.group}"
    left = (
        f"SELECT T2.{parent.label}, COUNT(T1.{join.link.column}) FROM {join.parent.name} AS T2 "
        f"LEFT JOIN {join.child.name} AS T1 ON T1.{join.link.column} = T2.{join.key} "
        f"WHERE {f.sql('T2.')} GROUP BY {join.group}"
    )
    everyone = f"SELECT T2.{parent.label}, COUNT(*) FROM {join.on} GROUP BY {join.group}"
    return Candidate(question, sql, "hard", contrasts=[everyone], equivalents=[left], max_rows=25)


@template("hard")
def above_average(ctx: Context) -> Candidate | None:
    table = ctx.choice(labelled(ctx))
    column = ctx.choice(numeric_columns(table))
    if column is None:
        return None
    above = ctx.rng.random() < 0.6
    side = "above" if above else "below"
    op = ">" if above else "<"
    f = pick_filter(ctx, table, exclude=(column.name,)) if len(ctx.data[table.name]) > 30 else None
    mod = f" {f.mod}" if f else ""
    question = ctx.say(
        f"Which {table.plural}{mod} have {a_or_an(column.words)} {side} the average {column.words} "
        f"of all {table.plural}?",
        f"List the {table.label_words} of {table.plural}{mod} whose {column.words} is "
        f"{'higher' if above else 'lower'} than the average over all {table.plural}.",
        f"Find the {table.plural}{mod} with {a_or_an(column.words)} {side} the overall average.",
    )
    nested = f"{column.name} {op} (SELECT AVG({column.name}) FROM {table.name})"
    where = f"{f.sql()} AND {nested}" if f else nested
    sql = f"SELECT {table.label} FROM {table.name} WHERE {where}"
    contrast = f"SELECT {table.label} FROM {table.name}" + (f" WHERE {f.sql()}" if f else "")
    return Candidate(question, sql, "hard", contrasts=[contrast])


@template("hard")
def without_children(ctx: Context) -> Candidate | None:
    join = ctx.choice(joins(ctx, parent_label=True))
    if join is None:
        return None
    parent, fk = join.parent, join.link.column
    not_null = f" WHERE {fk} IS NOT NULL" if join.child.column(fk).nullable else ""
    f = pick_filter(ctx, parent) if len(ctx.data[parent.name]) > 60 else None
    extra = f" AND {f.sql()}" if f else ""
    extra_t2 = f" AND {f.sql('T2.')}" if f else ""
    mod = f" {f.mod}" if f else ""
    question = ctx.say(
        f"Which {parent.plural}{mod} {join.link.never}?",
        f"List the {parent.label_words} of {parent.plural}{mod} {parent.who} {join.link.never}.",
        f"Find the {parent.plural}{mod} with no {join.child_many}.",
    )
    sql = (
        f"SELECT {parent.label} FROM {parent.name} WHERE {join.key} NOT IN "
        f"(SELECT {fk} FROM {join.child.name}{not_null}){extra}"
    )
    exists = (
        f"SELECT {parent.label} FROM {parent.name} AS T2 WHERE NOT EXISTS "
        f"(SELECT 1 FROM {join.child.name} AS T1 WHERE T1.{fk} = T2.{join.key}){extra_t2}"
    )
    return Candidate(question, sql, "hard", equivalents=[exists])


@template("hard")
def join_aggregate(ctx: Context) -> Candidate | None:
    join = ctx.choice(joins(ctx))
    if join is None:
        return None
    column = ctx.choice(numeric_columns(join.child))
    if column is None:
        return None
    condition = _parent_condition(ctx, join)
    if condition is None:
        return None
    where, words = condition
    agg = ctx.choice(_aggregates(column))
    agg_words = _agg_words(ctx, agg, column)
    question = ctx.say(
        f"What is the {agg_words} of {join.child_many} {words}?",
        f"Find the {agg_words} over all {join.child_many} {words}.",
        f"For the {join.child_many} {words}, what is the {agg_words}?",
    )
    sql = f"SELECT {agg}(T1.{column.name}) FROM {join.on} WHERE {where}"
    contrasts = [f"SELECT {agg}({column.name}) FROM {join.child.name}"]
    contrasts += [
        f"SELECT {o}(T1.{column.name}) FROM {join.on} WHERE {where}" for o in ("MAX", "MIN") if o != agg
    ]
    return Candidate(question, sql, "hard", contrasts=contrasts)


def _bridges(ctx: Context) -> list[tuple[Bridge, Table, Table, Table]]:
    out = []
    for bridge in ctx.domain.bridges:
        left, right = ctx.table(bridge.left), ctx.table(bridge.right)
        if left.label is not None:
            out.append((bridge, ctx.table(bridge.table), left, right))
    return out


def _bridge_from(bridge: Bridge, link_table: Table, left: Table, right: Table) -> str:
    left_key = link_table.column(bridge.left_column).references[1]
    right_key = link_table.column(bridge.right_column).references[1]
    return (
        f"{left.name} AS T1 JOIN {link_table.name} AS T2 ON T1.{left_key} = T2.{bridge.left_column} "
        f"JOIN {right.name} AS T3 ON T2.{bridge.right_column} = T3.{right_key}"
    )


@template("hard")
def bridge_list(ctx: Context) -> Candidate | None:
    picked = ctx.choice(_bridges(ctx))
    if picked is None:
        return None
    bridge, link_table, left, right = picked
    source = _bridge_from(bridge, link_table, left, right)
    named = label_filter(ctx, right) if right.label is not None and ctx.rng.random() < 0.4 else None
    if named is not None:
        value, shown = named
        where = f"T3.{right.label} = {literal(value)}"
        target = formal(right, shown)
    else:
        f = pick_filter(ctx, right)
        if f is None:
            return None
        where = f.sql("T3.")
        target = f"{right.plural} {f.mod}"
    question = ctx.say(
        f"Which {left.plural} {bridge.verb} {target}?",
        f"List the {left.label_words} of {left.plural} {left.who} {bridge.verb} {target}.",
        f"Find the distinct {left.plural} {left.who} {bridge.verb} {target}.",
    )
    sql = f"SELECT DISTINCT T1.{left.label} FROM {source} WHERE {where}"
    return Candidate(question, sql, "hard", contrasts=[f"SELECT DISTINCT T1.{left.label} FROM {source}"])


@template("hard")
def bridge_count(ctx: Context) -> Candidate | None:
    picked = ctx.choice(_bridges(ctx))
    if picked is None:
        return None
    bridge, link_table, left, right = picked
    named = label_filter(ctx, right)
    if named is None:
        return None
    value, shown = named
    source = _bridge_from(bridge, link_table, left, right)
    where = f"T3.{right.label} = {literal(value)}"
    question = ctx.say(
        f"How many {left.plural} {bridge.verb} {formal(right, shown)}?",
        f"Count the {left.plural} {left.who} {bridge.verb} {shown}.",
        f"What is the number of different {left.plural} {left.who} {bridge.verb} {shown}?",
    )
    left_key = link_table.column(bridge.left_column).references[1]
    sql = f"SELECT COUNT(DISTINCT T1.{left_key}) FROM {source} WHERE {where}"
    return Candidate(
        question,
        sql,
        "hard",
        equivalents=[f"SELECT COUNT(*) FROM {source} WHERE {where}"],
        contrasts=[f"SELECT COUNT(*) FROM {left.name}"],
    )


@template("hard")
def having_per_category(ctx: Context) -> Candidate | None:
    table = ctx.choice(ctx.domain.tables)
    column = ctx.choice(category_columns(table))
    if column is None:
        return None
    n = _count_threshold(ctx, Counter(ctx.values(table, column.name)))
    if n is None:
        return None
    words = plural(column.words)
    question = ctx.say(
        f"Which {words} have more than {n} {table.plural}?",
        f"List the {words} with more than {n} {table.plural}.",
        f"Find each {column.words} that counts more than {n} {table.plural}.",
    )
    base = f"SELECT {column.name} FROM {table.name} GROUP BY {column.name} HAVING COUNT(*)"
    return Candidate(question, f"{base} > {n}", "hard", contrasts=[f"{base} >= {n}"])


@template("hard")
def having_average(ctx: Context) -> Candidate | None:
    table = ctx.choice(ctx.domain.tables)
    group = ctx.choice(category_columns(table))
    column = ctx.choice(numeric_columns(table))
    if group is None or column is None:
        return None
    values = ctx.values(table, column.name)
    if not values:
        return None
    cut = threshold(ctx, column, values)
    above = ctx.rng.random() < 0.6
    words = plural(group.words)
    side = "above" if above else "below"
    question = ctx.say(
        f"Which {words} have an average {column.words} {side} {show(column, cut)} among their {table.plural}?",
        f"List the {words} whose {table.plural} have an average {column.words} {side} {show(column, cut)}.",
    )
    base = f"SELECT {group.name} FROM {table.name} GROUP BY {group.name}"
    sql = f"{base} HAVING AVG({column.name}) {'>' if above else '<'} {literal(cut)}"
    return Candidate(question, sql, "hard", contrasts=[base])


# -- extra -------------------------------------------------------------------------------------------------


@template("extra")
def categories_with_both(ctx: Context) -> Candidate | None:
    table = ctx.choice(ctx.domain.tables)
    group = ctx.choice(category_columns(table))
    column = ctx.choice(numeric_columns(table))
    if group is None or column is None:
        return None
    values = ctx.values(table, column.name)
    if len(values) < 10:
        return None
    ordered = sorted(float(v) for v in values)
    low = nice(ordered[int(ctx.rng.uniform(0.02, 0.12) * len(ordered))])
    high = nice(ordered[int(ctx.rng.uniform(0.88, 0.98) * len(ordered))])
    if low >= high:
        return None
    below = _fill(ctx.choice(_phrases(column, "lt")), v=show(column, low))
    above = _fill(ctx.choice(_phrases(column, "gt")), v=show(column, high))
    words = plural(group.words)
    question = ctx.say(
        f"Which {words} have both {table.plural} {below} and {table.plural} {above}?",
        f"List the {words} that include {table.plural} {below} as well as {table.plural} {above}.",
    )
    first = f"SELECT {group.name} FROM {table.name} WHERE {column.name} < {literal(low)}"
    second = f"SELECT {group.name} FROM {table.name} WHERE {column.name} > {literal(high)}"
    return Candidate(
        question,
        f"{first} INTERSECT {second}",
        "extra",
        contrasts=[
            first.replace("SELECT", "SELECT DISTINCT", 1),
            second.replace("SELECT", "SELECT DISTINCT", 1),
        ],
    )


@template("extra")
def categories_without(ctx: Context) -> Candidate | None:
    table = ctx.choice(ctx.domain.tables)
    group = ctx.choice(category_columns(table))
    if group is None:
        return None
    f = pick_filter(ctx, table, exclude=(group.name,), kinds=("cat", "num", "money", "year", "date"))
    if f is None:
        return None
    words = plural(group.words)
    question = ctx.say(
        f"Which {words} have no {table.plural} {f.mod}?",
        f"List the {words} that have no {table.plural} {f.mod}.",
        f"Find the {words} where none of the {table.plural} is {f.mod}."
        if f.pred and f.pred.startswith("are ")
        else None,
    )
    everything = f"SELECT {group.name} FROM {table.name}"
    sql = f"{everything} EXCEPT SELECT {group.name} FROM {table.name} WHERE {f.sql()}"
    return Candidate(question, sql, "extra", contrasts=[everything.replace("SELECT", "SELECT DISTINCT", 1)])


@template("extra")
def parents_in_both(ctx: Context) -> Candidate | None:
    join = ctx.choice(joins(ctx, parent_label=True))
    if join is None:
        return None
    first = pick_filter(ctx, join.child, exclude=(join.link.column,), kinds=("cat", "date", "year"))
    if first is None:
        return None
    second = pick_filter(ctx, join.child, exclude=(join.link.column,), kinds=("cat", "date", "year"))
    if second is None or second.sql() == first.sql():
        return None
    parent, many = join.parent, join.child_many
    question = ctx.say(
        f"Which {parent.plural} {join.link.verb} both {many} {join.words(first)} and {many} {join.words(second)}?",
        f"List the {parent.label_words} of {parent.plural} {parent.who} {join.link.verb} {many} {join.words(first)} "
        f"and also {many} {join.words(second)}.",
    )
    half = f"SELECT T2.{parent.label} FROM {join.on} WHERE"
    sql = f"{half} {first.sql('T1.')} INTERSECT {half} {second.sql('T1.')}"
    distinct = half.replace("SELECT", "SELECT DISTINCT", 1)
    return Candidate(
        question,
        sql,
        "extra",
        contrasts=[f"{distinct} {first.sql('T1.')}", f"{distinct} {second.sql('T1.')}"],
    )


@template("extra")
def parents_never(ctx: Context) -> Candidate | None:
    join = ctx.choice(joins(ctx, parent_label=True))
    if join is None:
        return None
    parent = join.parent
    own = pick_filter(ctx, parent)
    child = pick_filter(
        ctx, join.child, exclude=(join.link.column,), kinds=("cat", "date", "year", "num", "money")
    )
    if own is None or child is None:
        return None
    question = ctx.say(
        f"Which {parent.plural} {own.mod} {join.link.never} {join.words(child)}?",
        f"List the {parent.label_words} of {parent.plural} {own.mod} {parent.who} {join.link.never} {join.words(child)}.",
    )
    mine = f"SELECT {parent.label} FROM {parent.name} WHERE {own.sql()}"
    theirs = f"SELECT T2.{parent.label} FROM {join.on} WHERE {child.sql('T1.')}"
    return Candidate(
        question, f"{mine} EXCEPT {theirs}", "extra", contrasts=[mine.replace("SELECT", "SELECT DISTINCT", 1)]
    )


@template("extra")
def parents_either(ctx: Context) -> Candidate | None:
    join = ctx.choice(joins(ctx, parent_label=True))
    if join is None:
        return None
    parent = join.parent
    own = pick_filter(ctx, parent)
    child = pick_filter(ctx, join.child, exclude=(join.link.column,))
    if own is None or child is None or own.pred is None:
        return None
    question = ctx.say(
        f"List the {parent.label_words} of {parent.plural} {parent.who} {own.pred} or {parent.who} "
        f"{join.link.verb} {a_or_an(join.child_one)} {join.words(child)}.",
        f"Which {parent.plural} either {own.pred} or {join.link.verb} {a_or_an(join.child_one)} {join.words(child)}?",
    )
    mine = f"SELECT {parent.label} FROM {parent.name} WHERE {own.sql()}"
    theirs = f"SELECT T2.{parent.label} FROM {join.on} WHERE {child.sql('T1.')}"
    return Candidate(
        question,
        f"{mine} UNION {theirs}",
        "extra",
        contrasts=[
            mine.replace("SELECT", "SELECT DISTINCT", 1),
            theirs.replace("SELECT", "SELECT DISTINCT", 1),
        ],
    )


@template("extra")
def more_than_someone(ctx: Context) -> Candidate | None:
    join = ctx.choice(joins(ctx, parent_label=True))
    if join is None:
        return None
    parent = join.parent
    counts = _child_counts(ctx, join)
    if not counts:
        return None
    keys = ctx.column_values(parent, join.key)
    labels = ctx.column_values(parent, parent.label)
    by_key = dict(zip(keys, labels, strict=True))
    ranked = sorted((k for k in counts if counts[k] < max(counts.values())), key=lambda k: (-counts[k], k))
    reference = ctx.choice(ranked[: max(1, len(ranked) // 4)])  # a busy one, so that few beat it
    if reference is None:
        return None
    name = by_key[reference]
    shown = show(parent.label_column, name)
    if parent.label_column.kind == "id":
        shown = f"{parent.singular} {shown}"
    question = ctx.say(
        f"Which {parent.plural} {join.link.verb} more {join.child_many} than {shown}?",
        f"List the {parent.label_words} of {parent.plural} with more {join.child_many} than {shown}.",
    )
    inner = (
        f"(SELECT COUNT(*) FROM {join.child.name} AS T3 JOIN {parent.name} AS T4 "
        f"ON T3.{join.link.column} = T4.{join.key} WHERE T4.{parent.label} = {literal(name)})"
    )
    base = f"SELECT T2.{parent.label} FROM {join.on} GROUP BY {join.group} HAVING COUNT(*)"
    return Candidate(question, f"{base} > {inner}", "extra", contrasts=[f"{base} >= {inner}"])


@template("extra")
def top_parent(ctx: Context) -> Candidate | None:
    join = ctx.choice(joins(ctx, parent_label=True))
    if join is None:
        return None
    parent = join.parent
    columns = [c for c in numeric_columns(join.child, kinds=("num", "money")) if c.additive]
    column = ctx.choice(columns) if columns and ctx.rng.random() < 0.5 else None
    if column is None:
        measure, words = "COUNT(*)", f"the most {join.child_many}"
    else:
        measure, words = f"SUM(T1.{column.name})", f"the highest total {column.words} of {join.child_many}"
    k = 1 if ctx.rng.random() < 0.6 else ctx.rng.randint(3, 5)
    if k == 1:
        question = ctx.say(
            f"Which {parent.singular} has {words}?",
            f"What is the {parent.label_column.words} of the {parent.singular} with {words}?",
            f"Name the {parent.singular} with {words}.",
        )
    else:
        question = ctx.say(
            f"Which {k} {parent.plural} have {words}? List them from the highest.",
            f"List the {parent.label_words} of the top {k} {parent.plural} by "
            + (f"number of {join.child_many}" if column is None else f"total {column.words}")
            + ", in decreasing order.",
        )
    tail = f"FROM {join.on} GROUP BY {join.group} ORDER BY {measure} DESC"
    sql = f"SELECT T2.{parent.label} {tail} LIMIT {k}"
    return Candidate(question, sql, "extra", tie_sql=f"SELECT {measure} {tail} LIMIT {k + 1}", tie_limit=k)


@template("extra")
def having_count_filtered(ctx: Context) -> Candidate | None:
    join = ctx.choice(joins(ctx, parent_label=True))
    if join is None:
        return None
    parent = join.parent
    own = pick_filter(ctx, parent) if ctx.rng.random() < 0.75 else None
    child = pick_filter(
        ctx, join.child, exclude=(join.link.column,), kinds=("cat", "date", "year", "num", "money")
    )
    if child is None:
        return None
    counts = _child_counts(ctx, join, child)
    if own is not None:
        keys, values = ctx.column_values(parent, join.key), ctx.column_values(parent, own.column)
        allowed = {k for k, v in zip(keys, values, strict=True) if own.test(v)}
        counts = Counter({k: c for k, c in counts.items() if k in allowed})
    n = _count_threshold(ctx, counts)
    if n is None:
        return None
    mod = f" {own.mod}" if own else ""
    many, what = join.child_many, join.words(child)
    question = ctx.say(
        f"Which {parent.plural}{mod} {join.link.verb} more than {n} {many} {what}?",
        f"List the {parent.label_words} of {parent.plural}{mod} {parent.who} {join.link.verb} more than {n} "
        f"{many} {what}.",
        f"Find the {parent.plural}{mod} with more than {n} {many} {what}.",
    )
    where = child.sql("T1.") + (f" AND {own.sql('T2.')}" if own else "")
    base = f"SELECT T2.{parent.label} FROM {join.on} WHERE {where} GROUP BY {join.group} HAVING COUNT(*)"
    unfiltered = f"SELECT T2.{parent.label} FROM {join.on}" + (f" WHERE {own.sql('T2.')}" if own else "")
    unfiltered += f" GROUP BY {join.group} HAVING COUNT(*) > {n}"
    return Candidate(question, f"{base} > {n}", "extra", contrasts=[f"{base} >= {n}", unfiltered])


def _chains(ctx: Context) -> list[tuple[Bridge, Join]]:
    """Bridges whose left table is the child of a link: customers -> orders -> order lines -> products."""
    out = []
    for bridge in ctx.domain.bridges:
        for join in joins(ctx, parent_label=True):
            if join.child.name == bridge.left and join.link.column != bridge.left_column:
                out.append((bridge, join))
    return out


@template("extra")
def chain_list(ctx: Context) -> Candidate | None:
    picked = ctx.choice(_chains(ctx))
    if picked is None:
        return None
    bridge, join = picked
    link_table, left, right, top = ctx.table(bridge.table), join.child, ctx.table(bridge.right), join.parent
    f = pick_filter(ctx, right)
    own = pick_filter(ctx, top) if len(ctx.data[top.name]) > 40 or ctx.rng.random() < 0.3 else None
    if f is None:
        return None
    mod = f" {own.mod}" if own else ""
    question = ctx.say(
        f"Which {top.plural}{mod} {join.link.verb} {join.child_many} {left.who} {bridge.verb} {right.plural} {f.mod}?",
        f"List the {top.label_words} of {top.plural}{mod} {top.who} {join.link.verb} {join.child_many} {left.who} "
        f"{bridge.verb} {right.plural} {f.mod}.",
        f"Find the {top.plural}{mod} with {join.child_many} {left.who} {bridge.verb} {right.plural} {f.mod}.",
    )
    source = (
        f"{_bridge_from(bridge, link_table, left, right)} "
        f"JOIN {top.name} AS T4 ON T1.{join.link.column} = T4.{join.key}"
    )
    where = f.sql("T3.") + (f" AND {own.sql('T4.')}" if own else "")
    sql = f"SELECT DISTINCT T4.{top.label} FROM {source} WHERE {where}"
    unfiltered = f"SELECT DISTINCT T4.{top.label} FROM {source}" + (f" WHERE {own.sql('T4.')}" if own else "")
    return Candidate(question, sql, "extra", contrasts=[unfiltered])


@template("extra")
def children_above_average(ctx: Context) -> Candidate | None:
    join = ctx.choice(joins(ctx, child_label=True))
    if join is None:
        return None
    column = ctx.choice(numeric_columns(join.child))
    if column is None:
        return None
    condition = _parent_condition(ctx, join)
    if condition is None:
        return None
    where, words = condition
    child = join.child
    question = ctx.say(
        f"Which {join.child_many} {words} have {a_or_an(column.words)} above the average {column.words} of all "
        f"{join.child_many}?",
        f"List the {child.label_words} of {join.child_many} {words} whose {column.words} is higher than the "
        f"average over all {join.child_many}.",
    )
    nested = f"T1.{column.name} > (SELECT AVG({column.name}) FROM {child.name})"
    sql = f"SELECT T1.{child.label} FROM {join.on} WHERE {where} AND {nested}"
    return Candidate(
        question, sql, "extra", contrasts=[f"SELECT T1.{child.label} FROM {join.on} WHERE {where}"]
    )


# -- checks ------------------------------------------------------------------------------------------------


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
