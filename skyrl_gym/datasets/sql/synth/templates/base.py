"""Candidates, templates and their registry, and the :class:`Context` a template draws from."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from typing import Any

from skyrl_gym.datasets.sql.synth.schema import (
    Domain,
    Table,
)

LEVELS = ("easy", "medium", "hard", "extra")
MAX_ROWS = 40
"""A gold answer with more rows than this is a dump, not an answer; such candidates are dropped."""


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
