"""Values as they appear in questions and in SQL, and the filters (WHERE conditions with their English
modifiers) that templates combine."""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from skyrl_gym.datasets.sql.synth import vocab
from skyrl_gym.datasets.sql.synth.schema import (
    Column,
    Table,
    a_or_an,
    predicate,
)
from skyrl_gym.datasets.sql.synth.templates.base import Context

MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip


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


def reads_passive(by: str) -> bool:
    """Whether "were {by}" reads well: "were placed by", "were written by" (not "were working in")."""
    return by.split()[0].endswith(("ed", "en", "wn", "ght"))


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


def fill_slots(phrase: str, **slots: str) -> str:
    for key, value in slots.items():
        phrase = phrase.replace("{" + key + "}", value)
    return phrase


def modifier_phrases(column: Column, op: str) -> tuple[str, ...]:
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
    phrase = ctx.choice(modifier_phrases(column, op))
    mod = fill_slots(phrase, **phrase_slots)
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


def is_relative_clause(mod: str) -> bool:
    return mod.startswith(("who ", "that ", "whose "))


def both(first: Filter, second: Filter) -> str:
    """Two modifiers after one noun: "from Osaka who joined in 2022", "priced above $5 and in the Toys range"."""
    if is_relative_clause(first.mod) and not is_relative_clause(second.mod):
        first, second = second, first
    joiner = " " if is_relative_clause(second.mod) and not is_relative_clause(first.mod) else " and "
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
