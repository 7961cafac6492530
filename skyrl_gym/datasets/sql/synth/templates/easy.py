"""Templates of level ``easy``: one table, a select with at most one filter."""

from __future__ import annotations

from skyrl_gym.datasets.sql.synth.schema import (
    plural,
)
from skyrl_gym.datasets.sql.synth.templates.base import Candidate, Context, template
from skyrl_gym.datasets.sql.synth.templates.filters import formal, label_filter, literal, pick_filter
from skyrl_gym.datasets.sql.synth.templates.relations import category_columns, labelled


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
