"""The pieces of a join (a parent table and its children through a foreign key, bridges), the columns a
template can aggregate or group by, and the counts over children that HAVING questions need."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

from skyrl_gym.datasets.sql.synth.schema import (
    Bridge,
    Column,
    Link,
    Table,
)
from skyrl_gym.datasets.sql.synth.templates.base import Context
from skyrl_gym.datasets.sql.synth.templates.filters import Filter, label_filter, literal, pick_filter


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


def extreme_words(column: Column, high: bool) -> tuple[str, str]:
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


def aggregates_for(column: Column) -> list[str]:
    if column.kind == "year":
        return ["MIN", "MAX"]
    names = ["AVG", "MAX", "MIN"]
    return names + ["SUM"] if column.additive else names


def aggregate_words(ctx: Context, agg: str, column: Column) -> str:
    if column.kind == "year":
        return ("earliest " if agg == "MIN" else "latest ") + column.words
    return f"{ctx.choice(AGGREGATES[agg])} {column.words}"


def parent_condition(ctx: Context, join: Join) -> tuple[str, str] | None:
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


def count_threshold(ctx: Context, counts: Counter) -> int | None:
    """A child count ``n`` such that some parents have more than ``n`` children and some exactly ``n``."""
    present = sorted(set(counts.values()))
    usable = [n for n in present if n < present[-1] and n >= 2]
    return ctx.choice(usable[len(usable) // 3 :])  # the upper part: a short list of parents, not most of them


def child_counts(ctx: Context, join: Join, child_filter: Filter | None = None) -> Counter:
    fk = ctx.column_values(join.child, join.link.column)
    if child_filter is None:
        return Counter(v for v in fk if v is not None)
    column = ctx.column_values(join.child, child_filter.column)
    return Counter(v for v, c in zip(fk, column, strict=True) if v is not None and child_filter.test(c))


def bridge_from(bridge: Bridge, link_table: Table, left: Table, right: Table) -> str:
    left_key = link_table.column(bridge.left_column).references[1]
    right_key = link_table.column(bridge.right_column).references[1]
    return (
        f"{left.name} AS T1 JOIN {link_table.name} AS T2 ON T1.{left_key} = T2.{bridge.left_column} "
        f"JOIN {right.name} AS T3 ON T2.{bridge.right_column} = T3.{right_key}"
    )
