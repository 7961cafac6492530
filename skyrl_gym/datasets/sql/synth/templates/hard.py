"""Templates of level ``hard``: joins of two or three tables, HAVING, nested subqueries."""

from __future__ import annotations

from collections import Counter

from skyrl_gym.datasets.sql.synth.schema import (
    Bridge,
    Table,
    a_or_an,
    plural,
)
from skyrl_gym.datasets.sql.synth.templates.base import Candidate, Context, template
from skyrl_gym.datasets.sql.synth.templates.filters import (
    formal,
    label_filter,
    literal,
    pick_filter,
    reads_passive,
    show,
    threshold,
)
from skyrl_gym.datasets.sql.synth.templates.relations import (
    aggregate_words,
    aggregates_for,
    bridge_from,
    category_columns,
    child_counts,
    count_threshold,
    joins,
    labelled,
    numeric_columns,
    parent_condition,
)


@template("hard")
def join_list(ctx: Context) -> Candidate | None:
    join = ctx.choice(joins(ctx, child_label=True))
    if join is None:
        return None
    condition = parent_condition(ctx, join)
    if condition is None:
        return None
    where, words = condition
    child = join.child
    question = ctx.say(
        f"List the {child.label_words} of {join.child_many} {words}.",
        f"Which {join.child_many} were {words}?" if reads_passive(join.link.by) else None,
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
    condition = parent_condition(ctx, join)
    if condition is None:
        return None
    where, words = condition
    question = ctx.say(
        f"How many {join.child_many} were {words}?" if reads_passive(join.link.by) else None,
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


@template("hard")
def having_count(ctx: Context) -> Candidate | None:
    join = ctx.choice(joins(ctx, parent_label=True))
    if join is None:
        return None
    counts = child_counts(ctx, join)
    n = count_threshold(ctx, counts)
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
    condition = parent_condition(ctx, join)
    if condition is None:
        return None
    where, words = condition
    agg = ctx.choice(aggregates_for(column))
    agg_words = aggregate_words(ctx, agg, column)
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


@template("hard")
def bridge_list(ctx: Context) -> Candidate | None:
    picked = ctx.choice(_bridges(ctx))
    if picked is None:
        return None
    bridge, link_table, left, right = picked
    source = bridge_from(bridge, link_table, left, right)
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
    source = bridge_from(bridge, link_table, left, right)
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
    n = count_threshold(ctx, Counter(ctx.values(table, column.name)))
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
