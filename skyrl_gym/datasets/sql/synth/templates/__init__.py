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

The templates are split by what they hold: :mod:`.base` (candidates, the registry, the context),
:mod:`.filters` and :mod:`.relations` (the pieces templates build questions from), one module per level
(:mod:`.easy`, :mod:`.medium`, :mod:`.hard`, :mod:`.extra`) and :mod:`.checks`. The level modules register
their templates in :data:`GENERIC_TEMPLATES` when imported, in the order below, which is the order the
builder draws them in: keep it.
"""

from __future__ import annotations

from skyrl_gym.datasets.sql.synth.templates.base import (
    GENERIC_TEMPLATES,
    LEVELS,
    MAX_ROWS,
    Candidate,
    Context,
    Template,
    template,
)
from skyrl_gym.datasets.sql.synth.templates.checks import check_candidate, degenerate, same_rows
from skyrl_gym.datasets.sql.synth.templates.filters import Filter, literal, show

# Imported for their registrations, easy to extra: the registry's order is part of what the dataset is.
# isort: off
from skyrl_gym.datasets.sql.synth.templates import easy  # noqa: F401
from skyrl_gym.datasets.sql.synth.templates import medium  # noqa: F401
from skyrl_gym.datasets.sql.synth.templates import hard  # noqa: F401
from skyrl_gym.datasets.sql.synth.templates import extra  # noqa: F401
# isort: on

__all__ = [
    "GENERIC_TEMPLATES",
    "LEVELS",
    "MAX_ROWS",
    "Candidate",
    "Context",
    "Filter",
    "Template",
    "check_candidate",
    "degenerate",
    "literal",
    "same_rows",
    "show",
    "template",
]
