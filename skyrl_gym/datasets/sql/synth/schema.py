"""The generator's domain model: tables and columns together with the English words for them.

A :class:`Domain` is a database design (its :class:`Table` s, the foreign keys between them) plus what the
question templates need to talk about it: nouns for tables and columns, modifier phrases for filters
("from {v}", "priced above {v}"), verbs for the foreign keys (customers *placed* orders, orders *placed by*
customers) and for many-to-many bridges (students *are enrolled in* courses), and a ``populate`` function
that fills one instance of the design with values for a seed.

Phrases are written as *modifiers* that follow a plural noun ("customers from Lyon", "products priced above
$50"); :func:`predicate` turns one into the predicate of a question ("Which customers are from Lyon?").
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "Bridge",
    "Column",
    "Domain",
    "Link",
    "Table",
    "a_or_an",
    "create_table_sql",
    "key",
    "plural",
    "predicate",
    "ref",
]

COLUMN_KINDS = ("id", "label", "cat", "num", "money", "year", "date", "text", "flag")
"""What a column holds, for the templates: ``id`` keys, the ``label`` that names a row (unique), ``cat``
egories, ``num`` bers, ``money``, ``year`` s (integers), ``date`` s, free ``text`` and boolean ``flag`` s."""


@dataclasses.dataclass(frozen=True)
class Column:
    """One column: its SQL name and type, what it holds (``kind``) and the words for it.

    The phrase tuples hold modifiers with a ``{v}`` slot (``{p}`` for a period of a date column) that
    follow the table's plural noun; several entries are paraphrases. Empty tuples fall back on generic
    wordings built from ``noun`` ("with a price above {v}").
    """

    name: str
    type: str
    kind: str = "text"
    noun: str = ""
    nullable: bool = False
    references: tuple[str, str] | None = None
    eq: tuple[str, ...] = ()
    """Modifiers for ``column = v``: ``("from {v}", "based in {v}")``."""
    gt: tuple[str, ...] = ()
    """Modifiers for ``column > v``: ``("priced above {v}",)``."""
    lt: tuple[str, ...] = ()
    """Modifiers for ``column < v``."""
    when: tuple[str, ...] = ()
    """Modifiers for a date in a period ``{p}`` ("in 2023", "before 2021"): ``("placed {p}",)``."""
    missing: tuple[str, ...] = ()
    """Modifiers for ``column IS NULL``: ``("with no loyalty tier",)``."""
    top: str = ""
    """Superlative for the highest value ("most expensive"); empty: "with the highest {noun}"."""
    bottom: str = ""
    """Superlative for the lowest value ("cheapest")."""
    additive: bool = False
    """Whether a SUM of the column means something (quantities, amounts; not prices or ratings)."""
    quote: bool = False
    """Whether a value is quoted in questions ('The Silent River'), as titles are; names and cities are not."""
    tense: str = "are"
    """The verb that turns a modifier into a predicate: "are priced above", "were published after"."""

    def __post_init__(self) -> None:
        if self.kind not in COLUMN_KINDS:
            raise ValueError(f"column {self.name!r}: kind must be one of {COLUMN_KINDS}, got {self.kind!r}")

    @property
    def words(self) -> str:
        """The noun for the column ("unit price"), or its name with spaces."""
        return self.noun or self.name.replace("_", " ")

    @property
    def numeric(self) -> bool:
        return self.kind in ("num", "money", "year")


@dataclasses.dataclass(frozen=True)
class Table:
    """A table: its columns, primary key, the column that names a row and the nouns for a row."""

    name: str
    singular: str
    plural: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    label: str | None = None
    """The column that names a row in answers (unique, never NULL); ``None`` for link tables."""
    person: bool = False
    """Rows are people ("customers who ..."), not things ("departments that ...")."""

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(f"table {self.name!r} has no column {name!r}")

    def index(self, name: str) -> int:
        """The position of column ``name`` in the table's rows."""
        for i, column in enumerate(self.columns):
            if column.name == name:
                return i
        raise KeyError(f"table {self.name!r} has no column {name!r}")

    @property
    def label_column(self) -> Column | None:
        return None if self.label is None else self.column(self.label)

    @property
    def label_words(self) -> str:
        """The plural noun of the label ("names", "titles", "IDs")."""
        column = self.label_column
        if column is None:
            return ""
        return plural(column.words)

    @property
    def who(self) -> str:
        """The relative pronoun for a row: "who" for people, "that" for things."""
        return "who" if self.person else "that"


@dataclasses.dataclass(frozen=True)
class Link:
    """A foreign key ``child.column -> parent`` (the parent's primary key) and the verbs for it.

    With customers and orders: ``verb="placed"`` ("customers who placed more than 3 orders"),
    ``by="placed by"`` ("orders placed by customers from Lyon"), ``never="have never placed an order"``.
    """

    child: str
    column: str
    parent: str
    verb: str
    by: str
    never: str
    child_words: tuple[str, str] | None = None
    """(singular, plural) for the child in these phrases when they differ from the table's nouns."""
    when: str | None = None
    """The child's date column that the verb is about (orders are *placed* on ``order_date``): a period on
    it reads without the column's own verb ("customers who placed orders in 2023")."""


@dataclasses.dataclass(frozen=True)
class Bridge:
    """A many-to-many relation through ``table``: rows of ``left`` relate to rows of ``right``.

    ``verb`` reads left to right ("students *are enrolled in* courses ..."), ``by`` right to left
    ("courses *taken by* students from Lyon").
    """

    table: str
    left: str
    left_column: str
    right: str
    right_column: str
    verb: str
    by: str


@dataclasses.dataclass(frozen=True)
class Domain:
    """A database design, the words for it, and how to fill an instance of it.

    ``populate(rng, scale)`` returns the rows of every table (tuples in column order, Python values:
    ``int``, ``float``, ``str``, ``datetime.date``, ``bool`` or ``None``); ``scale`` multiplies the usual
    sizes. ``templates`` are question templates of this domain only, on top of the generic ones.
    """

    name: str
    description: str
    tables: tuple[Table, ...]
    links: tuple[Link, ...]
    bridges: tuple[Bridge, ...]
    populate: Callable[[random.Random, float], dict[str, list[tuple[Any, ...]]]]
    templates: tuple[Any, ...] = ()

    def table(self, name: str) -> Table:
        for table in self.tables:
            if table.name == name:
                return table
        raise KeyError(f"domain {self.name!r} has no table {name!r}")

    def check(self) -> None:
        """Raise ``ValueError`` when the design is inconsistent (unknown tables or columns in keys)."""
        names = {t.name for t in self.tables}
        if len(self.tables) < 3:
            raise ValueError(f"domain {self.name!r} needs at least 3 tables")
        for table in self.tables:
            for key in table.primary_key:
                table.column(key)
            if table.label is not None:
                table.column(table.label)
            for column in table.columns:
                if column.references and column.references[0] not in names:
                    raise ValueError(f"{table.name}.{column.name} references unknown {column.references[0]}")
        for link in self.links:
            column = self.table(link.child).column(link.column)
            if column.references is None or column.references[0] != link.parent:
                raise ValueError(f"link {link.child}.{link.column} is not a foreign key to {link.parent}")
        for bridge in self.bridges:
            self.table(bridge.table).column(bridge.left_column)
            self.table(bridge.table).column(bridge.right_column)


def key(name: str, type: str = "INTEGER") -> Column:
    """A primary-key column."""
    return Column(name, type, kind="id")


def ref(name: str, parent: str, parent_key: str, *, nullable: bool = False, type: str = "INTEGER") -> Column:
    """A foreign-key column to ``parent.parent_key``."""
    return Column(name, type, kind="id", references=(parent, parent_key), nullable=nullable)


def create_table_sql(table: Table) -> str:
    """``CREATE TABLE`` for ``table`` with types, NOT NULL, the primary key and the foreign keys."""
    lines = []
    for column in table.columns:
        not_null = "" if column.nullable or column.name in table.primary_key else " NOT NULL"
        lines.append(f"    {column.name} {column.type}{not_null}")
    lines.append(f"    PRIMARY KEY ({', '.join(table.primary_key)})")
    for column in table.columns:
        if column.references:
            parent, key = column.references
            lines.append(f"    FOREIGN KEY ({column.name}) REFERENCES {parent} ({key})")
    return f"CREATE TABLE {table.name} (\n" + ",\n".join(lines) + "\n)"


def plural(words: str) -> str:
    """The plural of an English noun phrase, enough for column nouns: city -> cities, status -> statuses."""
    cuts = [words.find(sep) for sep in (" of ", " in ") if sep in words]
    if cuts:  # "number of pages" -> "numbers of pages", "duration in minutes" -> "durations in minutes"
        cut = min(cuts)
        return plural(words[:cut]) + words[cut:]
    if words.endswith(("ss", "us", "x", "ch", "sh")):
        return words + "es"
    if words.endswith("s"):  # already plural: "years", "credits"
        return words
    if words.endswith("y") and words[-2:-1] not in ("a", "e", "i", "o", "u"):
        return words[:-1] + "ies"
    return words + "s"


def a_or_an(words: str) -> str:
    """``words`` with its indefinite article: "an order", "a price"."""
    lower = words.lower()
    vowel = lower[:1] in "aeiou" and not lower.startswith(("uni", "use", "usu", "eu", "one"))
    return ("an " if vowel or lower.startswith("hour") else "a ") + words


def predicate(modifier: str, tense: str = "are") -> str | None:
    """Turn a modifier that follows a noun into a predicate for "Which customers ...?".

    "with a salary above $5,000" -> "have a salary above $5,000"; "who signed up in 2022" -> "signed up in
    2022"; "from Lyon" -> "are from Lyon"; "whose ..." has no predicate form (``None``).
    """
    if modifier.startswith("with "):
        return "have " + modifier[len("with ") :]
    if modifier.startswith("without "):
        return "have no " + modifier[len("without ") :].removeprefix("a ").removeprefix("an ")
    if modifier.startswith(("who ", "that ")):
        return modifier.split(" ", 1)[1]
    if modifier.startswith("whose "):
        return None
    return f"{tense} {modifier}"


def check_domains(domains: Sequence[Domain]) -> None:
    """Check every domain (see :meth:`Domain.check`) and that names are unique."""
    seen: set[str] = set()
    for domain in domains:
        if domain.name in seen:
            raise ValueError(f"two domains are named {domain.name!r}")
        seen.add(domain.name)
        domain.check()
