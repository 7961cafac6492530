"""Templates of level ``medium``: one table with aggregates, GROUP BY, ORDER BY / LIMIT or two conditions."""

from __future__ import annotations

from skyrl_gym.datasets.sql.synth.schema import (
    a_or_an,
    plural,
)
from skyrl_gym.datasets.sql.synth.templates.base import Candidate, Context, template
from skyrl_gym.datasets.sql.synth.templates.filters import (
    both,
    is_relative_clause,
    literal,
    pick_filter,
    show,
    threshold,
)
from skyrl_gym.datasets.sql.synth.templates.relations import (
    aggregate_words,
    aggregates_for,
    category_columns,
    extreme_words,
    labelled,
    numeric_columns,
)


@template("medium")
def aggregate_filtered(ctx: Context) -> Candidate | None:
    table = ctx.choice(ctx.domain.tables)
    column = ctx.choice(numeric_columns(table, kinds=("num", "money", "year")))
    if column is None:
        return None
    f = pick_filter(ctx, table, exclude=(column.name,))
    if f is None:
        return None
    agg = ctx.choice(aggregates_for(column))
    words = aggregate_words(ctx, agg, column)
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
    agg = ctx.choice([a for a in aggregates_for(column) if a != "MIN"])
    words = aggregate_words(ctx, agg, column)
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
    adjective, generic = extreme_words(column, high)
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
    adjective, generic = extreme_words(column, high)
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
        if second.pred and not is_relative_clause(first.mod)
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
