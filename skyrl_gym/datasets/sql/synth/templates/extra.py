"""Templates of level ``extra``: set operations, and nesting combined with joins or grouping."""

from __future__ import annotations

from collections import Counter

from skyrl_gym.datasets.sql.synth.schema import (
    Bridge,
    a_or_an,
    plural,
)
from skyrl_gym.datasets.sql.synth.templates.base import Candidate, Context, template
from skyrl_gym.datasets.sql.synth.templates.filters import (
    fill_slots,
    literal,
    modifier_phrases,
    nice,
    pick_filter,
    show,
)
from skyrl_gym.datasets.sql.synth.templates.relations import (
    Join,
    bridge_from,
    category_columns,
    child_counts,
    count_threshold,
    joins,
    numeric_columns,
    parent_condition,
)


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
    below = fill_slots(ctx.choice(modifier_phrases(column, "lt")), v=show(column, low))
    above = fill_slots(ctx.choice(modifier_phrases(column, "gt")), v=show(column, high))
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
    counts = child_counts(ctx, join)
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
    counts = child_counts(ctx, join, child)
    if own is not None:
        keys, values = ctx.column_values(parent, join.key), ctx.column_values(parent, own.column)
        allowed = {k for k, v in zip(keys, values, strict=True) if own.test(v)}
        counts = Counter({k: c for k, c in counts.items() if k in allowed})
    n = count_threshold(ctx, counts)
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
        f"{bridge_from(bridge, link_table, left, right)} "
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
    condition = parent_condition(ctx, join)
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
