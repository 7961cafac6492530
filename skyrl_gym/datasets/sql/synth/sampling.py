"""Random values with realistic shapes for the domains' ``populate`` functions.

Real tables are skewed: a few customers place most orders, a few cities hold most customers, prices are
log-normal, some parents have no children at all. These helpers draw such values from a ``random.Random``
so that an instance is the same for the same seed.
"""

from __future__ import annotations

import datetime
import math
import random
from collections.abc import Sequence
from typing import Any, TypeVar

from skyrl_gym.datasets.sql.synth import vocab

T = TypeVar("T")

__all__ = [
    "cities",
    "date_between",
    "email_for",
    "maybe",
    "people",
    "price",
    "renumber",
    "skewed_choices",
    "skewed_weights",
    "unique_strings",
]


def skewed_weights(rng: random.Random, n: int, *, alpha: float = 1.3, idle: float = 0.0) -> list[float]:
    """``n`` Pareto-distributed weights; a share ``idle`` of them is 0 (those items are never chosen)."""
    weights = [rng.paretovariate(alpha) for _ in range(n)]
    for i in range(n):
        if rng.random() < idle:
            weights[i] = 0.0
    if not any(weights) and n:
        weights[0] = 1.0
    return weights


def skewed_choices(
    rng: random.Random, items: Sequence[T], k: int, *, alpha: float = 1.3, idle: float = 0.0
) -> list[T]:
    """``k`` draws from ``items`` with skewed weights (some items are frequent, ``idle`` share never)."""
    if not items:
        return []
    return rng.choices(list(items), weights=skewed_weights(rng, len(items), alpha=alpha, idle=idle), k=k)


def maybe(rng: random.Random, value: T, p_null: float) -> T | None:
    """``value``, or ``None`` with probability ``p_null``."""
    return None if rng.random() < p_null else value


def price(rng: random.Random, median: float, sigma: float = 0.6, *, cents: bool = True) -> float:
    """A log-normal price around ``median``, ending in .99, .49, .95 or .00 as shop prices do."""
    value = median * math.exp(rng.gauss(0.0, sigma))
    if not cents:
        step = 10 ** max(0, int(math.log10(max(value, 1.0))) - 1)
        return float(max(step, round(value / step) * step))
    whole = max(0, int(value))
    return round(whole + rng.choice((0.99, 0.99, 0.49, 0.95, 0.0, 0.5)), 2)


def renumber(rows: list[tuple[Any, ...]], key: int) -> tuple[list[tuple[Any, ...]], dict[Any, int]]:
    """``rows`` sorted by column ``key`` (a date: ids then grow with time, as real ids do), with new ids
    1..n in column 0; and the map from old to new ids, for the rows that reference them."""
    ordered = sorted(rows, key=lambda row: row[key])
    new_id = {row[0]: i for i, row in enumerate(ordered, start=1)}
    return [(new_id[row[0]], *row[1:]) for row in ordered], new_id


def date_between(rng: random.Random, start: datetime.date, end: datetime.date) -> datetime.date:
    """A uniformly drawn date in ``[start, end]``."""
    return start + datetime.timedelta(days=rng.randrange((end - start).days + 1))


def unique_strings(rng: random.Random, n: int, make: Any, *, tries: int = 50) -> list[str]:
    """``n`` distinct strings from ``make(rng)``; fewer when the space runs out."""
    seen: set[str] = set()
    out: list[str] = []
    misses = 0
    while len(out) < n and misses < tries * max(n, 1):
        value = make(rng)
        if value in seen:
            misses += 1
            continue
        seen.add(value)
        out.append(value)
    return out


def people(rng: random.Random, n: int) -> list[str]:
    """``n`` distinct full names ("Ana Silva")."""
    return unique_strings(rng, n, lambda r: f"{r.choice(vocab.FIRST_NAMES)} {r.choice(vocab.LAST_NAMES)}")


def email_for(rng: random.Random, name: str) -> str:
    """An e-mail address made from a person's name."""
    first, _, last = name.lower().partition(" ")
    last = "".join(ch for ch in last if ch.isalpha())
    style = rng.randrange(3)
    local = (
        f"{first}.{last}"
        if style == 0
        else f"{first[0]}{last}"
        if style == 1
        else f"{first}{rng.randint(1, 99)}"
    )
    return f"{local}@{rng.choice(vocab.EMAIL_DOMAINS)}"


def cities(rng: random.Random, n: int) -> list[tuple[str, str]]:
    """``n`` distinct (city, country) pairs, clustered: most come from a few countries, as real data does."""
    by_country: dict[str, list[tuple[str, str]]] = {}
    for city, country in vocab.CITIES:
        by_country.setdefault(country, []).append((city, country))
    countries = sorted(by_country)
    rng.shuffle(countries)
    home = countries[: max(2, n // 3)]
    pool = [pair for country in home for pair in by_country[country]]
    rest = [pair for pair in vocab.CITIES if pair not in pool]
    rng.shuffle(pool)
    rng.shuffle(rest)
    return (pool + rest)[:n]
