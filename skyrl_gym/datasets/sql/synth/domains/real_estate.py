"""A real-estate agency network: agents, properties, clients, viewings and sales."""

from __future__ import annotations

import datetime
import random
from typing import Any

from skyrl_gym.datasets.sql.synth import sampling, vocab
from skyrl_gym.datasets.sql.synth.schema import Bridge, Column, Domain, Link, Table, key, ref

AGENCIES = ("Keystone Realty", "Harbourview Homes", "Oakridge Estates", "Brick & Beam", "Urban Nest",
            "Crescent Property", "Lantern Real Estate", "Meadowgate Agents")  # fmt: skip
TYPES = {"apartment": (2, 75), "house": (4, 160), "townhouse": (3, 120), "studio": (1, 35), "loft": (2, 95)}
"""property type -> (typical bedrooms, typical floor area in square metres)"""

agents = Table(
    "agents", "agent", "agents", person=True, label="name", primary_key=("agent_id",),
    columns=(
        key("agent_id"),
        Column("name", "VARCHAR", kind="label", noun="name"),
        Column("agency", "VARCHAR", kind="cat", noun="agency", eq=("working for {v}",)),
        Column("license_year", "INTEGER", kind="year", noun="licence year", eq=("licensed in {v}",),
               gt=("licensed after {v}",), lt=("licensed before {v}",), tense="were"),
        Column("commission_rate", "DECIMAL(3,1)", kind="num", noun="commission rate",
               gt=("with a commission rate above {v} percent",), lt=("with a commission rate below {v} percent",)),
    ),
)  # fmt: skip

properties = Table(
    "properties", "property", "properties", label="address", primary_key=("property_id",),
    columns=(
        key("property_id"),
        Column("address", "VARCHAR", kind="label", noun="address"),
        Column("city", "VARCHAR", kind="cat", noun="city", eq=("in {v}",)),
        Column("property_type", "VARCHAR", kind="cat", noun="property type", eq=("of type '{v}'",)),
        Column("bedrooms", "INTEGER", kind="num", noun="number of bedrooms",
               gt=("with more than {v} bedrooms",), lt=("with fewer than {v} bedrooms",)),
        Column("area_sqm", "INTEGER", kind="num", noun="floor area in square metres",
               gt=("larger than {v} square metres",), lt=("smaller than {v} square metres",),
               top="largest", bottom="smallest"),
        Column("asking_price", "DECIMAL(12,2)", kind="money", noun="asking price",
               gt=("listed above {v}",), lt=("listed below {v}",), top="most expensive", bottom="cheapest"),
        Column("year_built", "INTEGER", kind="year", noun="year of construction", nullable=True,
               eq=("built in {v}",), gt=("built after {v}",), lt=("built before {v}",), tense="were",
               missing=("with an unknown construction year",)),
        Column("listed_date", "DATE", kind="date", noun="listing date", when=("listed {p}",), tense="were"),
        ref("agent_id", "agents", "agent_id"),
    ),
)  # fmt: skip

clients = Table(
    "clients", "client", "clients", person=True, label="name", primary_key=("client_id",),
    columns=(
        key("client_id"),
        Column("name", "VARCHAR", kind="label", noun="name"),
        Column("city", "VARCHAR", kind="cat", noun="home city", eq=("from {v}",)),
        Column("max_budget", "DECIMAL(12,2)", kind="money", noun="budget", nullable=True,
               gt=("with a budget above {v}",), lt=("with a budget below {v}",), missing=("with no stated budget",)),
    ),
)  # fmt: skip

viewings = Table(
    "viewings", "viewing", "viewings", label="viewing_id", primary_key=("viewing_id",),
    columns=(
        Column("viewing_id", "INTEGER", kind="id", noun="viewing ID"),
        ref("property_id", "properties", "property_id"),
        ref("client_id", "clients", "client_id"),
        Column("viewing_date", "DATE", kind="date", noun="date", when=("held {p}",), tense="were"),
        Column("rating", "INTEGER", kind="num", noun="rating", nullable=True,
               gt=("rated above {v}",), lt=("rated below {v}",), missing=("with no rating",)),
    ),
)  # fmt: skip

sales = Table(
    "sales", "sale", "sales", label="sale_id", primary_key=("sale_id",),
    columns=(
        Column("sale_id", "INTEGER", kind="id", noun="sale ID"),
        ref("property_id", "properties", "property_id"),
        ref("client_id", "clients", "client_id"),
        ref("agent_id", "agents", "agent_id"),
        Column("sale_date", "DATE", kind="date", noun="sale date", when=("closed {p}",), tense="were"),
        Column("sale_price", "DECIMAL(12,2)", kind="money", noun="sale price", additive=True,
               gt=("above {v}",), lt=("below {v}",), top="largest", bottom="smallest"),
    ),
)  # fmt: skip


def populate(rng: random.Random, scale: float) -> dict[str, list[tuple[Any, ...]]]:
    agencies = rng.sample(AGENCIES, rng.randint(3, 6))
    rows_agents = []
    for i, name in enumerate(sampling.people(rng, int(22 * scale)), start=1):
        rate = round(rng.uniform(1.5, 4.0) * 2) / 2
        rows_agents.append((i, name, rng.choice(agencies), rng.randint(1995, 2022), rate))

    places = [c for c, _ in sampling.cities(rng, rng.randint(3, 7))]
    city_weights = sampling.skewed_weights(rng, len(places), alpha=1.0)
    city_price = {city: rng.uniform(2500, 9000) for city in places}  # per square metre
    start = datetime.date(rng.randint(2018, 2021), 1, 1)
    end = datetime.date(start.year + 3, 12, 31)
    agent_weights = sampling.skewed_weights(rng, len(rows_agents), alpha=1.3, idle=0.1)
    types = sorted(TYPES)
    addresses = sampling.unique_strings(
        rng, int(150 * scale), lambda r: f"{r.randint(1, 240)} {r.choice(vocab.STREETS)}, {r.choice(places)}"
    )
    rows_properties = []
    for i, address in enumerate(addresses, start=1):
        city = address.rsplit(", ", 1)[1]
        kind = rng.choices(types, weights=(40, 25, 15, 12, 8))[0]
        beds, area = TYPES[kind]
        bedrooms = max(0 if kind == "studio" else 1, beds + rng.choice((-1, 0, 0, 1)))
        area = int(area * rng.uniform(0.7, 1.5))
        price = round(area * city_price[city] * rng.uniform(0.85, 1.2), -3)
        built = sampling.maybe(rng, rng.randint(1890, 2023), 0.12)
        listed = sampling.date_between(rng, start, end)
        agent = rng.choices(rows_agents, weights=agent_weights)[0][0]
        rows_properties.append((i, address, city, kind, bedrooms, area, price, built, listed, agent))

    rows_clients = []
    for i, name in enumerate(sampling.people(rng, int(110 * scale)), start=1):
        budget = sampling.maybe(rng, round(sampling.price(rng, 450_000, 0.5, cents=False), -3), 0.2)
        rows_clients.append((i, name, rng.choices(places, weights=city_weights)[0], budget))

    property_weights = sampling.skewed_weights(rng, len(rows_properties), alpha=1.3, idle=0.15)
    client_weights = sampling.skewed_weights(rng, len(rows_clients), alpha=1.3, idle=0.15)
    rows_viewings = []
    for i in range(1, int(380 * scale) + 1):
        home = rng.choices(rows_properties, weights=property_weights)[0]
        client = rng.choices(rows_clients, weights=client_weights)[0]
        day = home[8] + datetime.timedelta(days=rng.randint(1, 120))
        rating = sampling.maybe(rng, rng.choices((1, 2, 3, 4, 5), weights=(8, 15, 30, 30, 17))[0], 0.2)
        rows_viewings.append((i, home[0], client[0], day, rating))

    rows_sales = []
    buyers = sampling.skewed_choices(rng, rows_clients, len(rows_properties), alpha=1.5, idle=0.4)
    for home, buyer in zip(rows_properties, buyers, strict=True):
        if rng.random() < 0.45:
            continue
        price = round(float(home[6]) * rng.uniform(0.9, 1.08), -2)
        closed = home[8] + datetime.timedelta(days=rng.randint(20, 240))
        agent = home[9] if rng.random() < 0.85 else rng.choice(rows_agents)[0]
        rows_sales.append((len(rows_sales) + 1, home[0], buyer[0], agent, closed, price))

    rows_viewings, _ = sampling.renumber(rows_viewings, 3)
    rows_sales, _ = sampling.renumber(rows_sales, 4)
    return {
        "agents": rows_agents,
        "properties": rows_properties,
        "clients": rows_clients,
        "viewings": rows_viewings,
        "sales": rows_sales,
    }


DOMAIN = Domain(
    name="real_estate",
    description="a real-estate agency network: agents, properties, clients, viewings and sales",
    tables=(agents, properties, clients, viewings, sales),
    links=(
        Link("properties", "agent_id", "agents", verb="list", by="listed by", never="have no listings"),
        Link("sales", "agent_id", "agents", verb="closed", by="closed by", never="have never closed a sale",
             when="sale_date"),
        Link("sales", "client_id", "clients", verb="made", by="made by", never="have never bought a property", when="sale_date",
             child_words=("purchase", "purchases")),
        Link("viewings", "property_id", "properties", verb="had", by="of", never="have never been viewed",
             when="viewing_date"),
        Link("viewings", "client_id", "clients", verb="attended", by="attended by",
             never="have never attended a viewing", when="viewing_date"),
    ),
    bridges=(
        Bridge("viewings", "clients", "client_id", "properties", "property_id", verb="viewed", by="viewed by"),
    ),
    populate=populate,
)  # fmt: skip
