"""An airline: airports, aircraft, flights between airports, passengers and their bookings."""

from __future__ import annotations

import datetime
import math
import random
from typing import Any

from skyrl_gym.datasets.sql.synth import sampling, vocab
from skyrl_gym.datasets.sql.synth.schema import Bridge, Column, Domain, Link, Table, key, ref

MODELS = (  # (model, manufacturer, seats, range in km)
    ("A220-300", "Airbus", 140, 6200), ("A320neo", "Airbus", 180, 6300), ("A321neo", "Airbus", 210, 7400),
    ("A330-900", "Airbus", 290, 13300), ("A350-900", "Airbus", 320, 15000), ("737-800", "Boeing", 176, 5400),
    ("737 MAX 8", "Boeing", 178, 6500), ("787-9", "Boeing", 296, 14000), ("777-300ER", "Boeing", 370, 13600),
    ("E195-E2", "Embraer", 132, 4800), ("ATR 72-600", "ATR", 72, 1500),
)  # fmt: skip
STATUSES = ("on time", "delayed", "cancelled", "diverted")
CLASSES = ("economy", "premium economy", "business", "first")
TIERS = ("Silver", "Gold", "Platinum")
SUFFIXES = ("International Airport", "Airport", "City Airport")

airports = Table(
    "airports", "airport", "airports", label="name", primary_key=("airport_code",),
    columns=(
        Column("airport_code", "VARCHAR", kind="id", noun="code"),
        Column("name", "VARCHAR", kind="label", noun="name"),
        Column("city", "VARCHAR", kind="cat", noun="city", eq=("in {v}", "serving {v}")),
        Column("country", "VARCHAR", kind="cat", noun="country", eq=("in {v}",)),
        Column("runways", "INTEGER", kind="num", noun="number of runways",
               gt=("with more than {v} runways",), lt=("with fewer than {v} runways",)),
    ),
)  # fmt: skip

aircraft = Table(
    "aircraft", "aircraft", "aircraft", label="registration", primary_key=("aircraft_id",),
    columns=(
        key("aircraft_id"),
        Column("registration", "VARCHAR", kind="label", noun="registration"),
        Column("model", "VARCHAR", kind="cat", noun="model", eq=("of model {v}",)),
        Column("manufacturer", "VARCHAR", kind="cat", noun="manufacturer", eq=("built by {v}",), tense="were"),
        Column("seats", "INTEGER", kind="num", noun="number of seats", additive=True,
               gt=("with more than {v} seats",), lt=("with fewer than {v} seats",), top="largest",
               bottom="smallest"),
        Column("year_built", "INTEGER", kind="year", noun="year of construction", eq=("built in {v}",),
               gt=("built after {v}",), lt=("built before {v}",), tense="were", top="newest", bottom="oldest"),
    ),
)  # fmt: skip

flights = Table(
    "flights", "flight", "flights", label="flight_id", primary_key=("flight_id",),
    columns=(
        Column("flight_id", "INTEGER", kind="id", noun="flight ID"),
        Column("flight_number", "VARCHAR", kind="text", noun="flight number"),
        ref("origin", "airports", "airport_code", type="VARCHAR"),
        ref("destination", "airports", "airport_code", type="VARCHAR"),
        ref("aircraft_id", "aircraft", "aircraft_id"),
        Column("departure_date", "DATE", kind="date", noun="departure date", when=("departing {p}",)),
        Column("distance_km", "INTEGER", kind="num", noun="distance in km", additive=True,
               gt=("longer than {v} km",), lt=("shorter than {v} km",), top="longest", bottom="shortest"),
        Column("base_fare", "DECIMAL(8,2)", kind="money", noun="base fare",
               gt=("with a base fare above {v}",), lt=("with a base fare below {v}",)),
        Column("status", "VARCHAR", kind="cat", noun="status", eq=("with status '{v}'",)),
    ),
)  # fmt: skip

passengers = Table(
    "passengers", "passenger", "passengers", person=True, label="name", primary_key=("passenger_id",),
    columns=(
        key("passenger_id"),
        Column("name", "VARCHAR", kind="label", noun="name"),
        Column("nationality", "VARCHAR", kind="cat", noun="nationality", eq=("from {v}",)),
        Column("birth_year", "INTEGER", kind="year", noun="birth year", eq=("born in {v}",),
               gt=("born after {v}",), lt=("born before {v}",), tense="were"),
        Column("frequent_flyer_tier", "VARCHAR", kind="cat", noun="frequent-flyer tier", nullable=True,
               eq=("with {v} frequent-flyer status",), missing=("with no frequent-flyer status",)),
    ),
)  # fmt: skip

bookings = Table(
    "bookings", "booking", "bookings", label="booking_id", primary_key=("booking_id",),
    columns=(
        Column("booking_id", "INTEGER", kind="id", noun="booking ID"),
        ref("flight_id", "flights", "flight_id"),
        ref("passenger_id", "passengers", "passenger_id"),
        Column("seat_class", "VARCHAR", kind="cat", noun="seat class", eq=("in {v} class",)),
        Column("price", "DECIMAL(8,2)", kind="money", noun="price", additive=True,
               gt=("priced above {v}",), lt=("priced below {v}",), top="most expensive",
               bottom="cheapest"),
        Column("booking_date", "DATE", kind="date", noun="booking date", when=("made {p}",), tense="were"),
    ),
)  # fmt: skip


def _code(rng: random.Random, city: str, taken: set[str]) -> str:
    letters = "".join(ch for ch in city.upper() if "A" <= ch <= "Z")
    for candidate in (letters[:3], letters[0] + letters[-2:], letters[0] + letters[2:4]):
        if len(candidate) == 3 and candidate not in taken:
            return candidate
    while True:
        candidate = letters[0] + "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(2))
        if candidate not in taken:
            return candidate


def populate(rng: random.Random, scale: float) -> dict[str, list[tuple[Any, ...]]]:
    places = sampling.cities(rng, rng.randint(10, 18))
    position = {city: (rng.uniform(-60, 60), rng.uniform(-120, 120)) for city, _ in places}
    rows_airports, taken = [], set()
    for city, country in places:
        code = _code(rng, city, taken)
        taken.add(code)
        runways = rng.choices((1, 2, 3, 4, 5), weights=(30, 35, 18, 10, 7))[0]
        rows_airports.append((code, f"{city} {rng.choice(SUFFIXES)}", city, country, runways))

    models = rng.sample(MODELS, rng.randint(5, len(MODELS)))
    prefix = rng.choice(("F-", "D-", "G-", "EC-", "PH-", "N", "JA", "VH-"))
    registrations = sampling.unique_strings(
        rng,
        int(24 * scale),
        lambda r: prefix + "".join(r.choice("ABCDEFGHJKLMNPRSTUVWXYZ") for _ in range(4)),
    )
    rows_aircraft = []
    for i, registration in enumerate(registrations, start=1):
        model, maker, seats, _ = rng.choice(models)
        seats = int(seats * rng.uniform(0.9, 1.05))
        rows_aircraft.append((i, registration, model, maker, seats, rng.randint(1998, 2023)))

    carrier = rng.choice(("SK", "AZ", "LX", "TP", "QF", "AC", "IB", "KL", "OS", "EI"))
    routes = []
    hub = rows_airports[0]
    for airport in rows_airports[1:]:
        routes += [(hub, airport), (airport, hub)]
    routes += [tuple(rng.sample(rows_airports, 2)) for _ in range(len(rows_airports))]
    route_weights = sampling.skewed_weights(rng, len(routes), alpha=1.3)
    start = datetime.date(rng.randint(2019, 2022), 1, 1)
    rows_flights = []
    numbers = [f"{carrier} {n}" for n in rng.sample(range(100, 3000), len(routes))]  # one per route
    for i in range(1, int(260 * scale) + 1):
        route = rng.choices(range(len(routes)), weights=route_weights)[0]
        origin, destination = routes[route]
        (a, b), (c, d) = position[origin[2]], position[destination[2]]
        distance = int(111 * math.hypot(a - c, (b - d) * 0.7)) + 150
        plane = rng.choice(rows_aircraft)
        day = sampling.date_between(rng, start, datetime.date(start.year + 2, 12, 31))
        fare = round(40 + distance * rng.uniform(0.05, 0.11), 2)
        status = rng.choices(STATUSES, weights=(76, 17, 5, 2))[0]
        rows_flights.append(
            (i, numbers[route], origin[0], destination[0], plane[0], day, distance, fare, status)
        )

    rows_flights, _ = sampling.renumber(rows_flights, 5)
    nations = rng.sample(vocab.NATIONALITIES, rng.randint(6, 12))
    nation_weights = sampling.skewed_weights(rng, len(nations), alpha=1.0)
    rows_passengers = []
    for i, name in enumerate(sampling.people(rng, int(180 * scale)), start=1):
        tier = sampling.maybe(rng, rng.choices(TIERS, weights=(60, 30, 10))[0], 0.6)
        rows_passengers.append(
            (i, name, rng.choices(nations, weights=nation_weights)[0], rng.randint(1945, 2008), tier)
        )

    flight_weights = sampling.skewed_weights(rng, len(rows_flights), alpha=1.6, idle=0.05)
    passenger_weights = sampling.skewed_weights(rng, len(rows_passengers), alpha=1.2, idle=0.1)
    multiplier = {"economy": 1.0, "premium economy": 1.6, "business": 3.2, "first": 6.0}
    rows_bookings = []
    for i in range(1, int(700 * scale) + 1):
        flight = rng.choices(rows_flights, weights=flight_weights)[0]
        passenger = rng.choices(rows_passengers, weights=passenger_weights)[0]
        seat_class = rng.choices(CLASSES, weights=(75, 12, 10, 3))[0]
        price = round(float(flight[7]) * multiplier[seat_class] * rng.uniform(0.8, 1.4), 2)
        booked = flight[5] - datetime.timedelta(days=rng.randint(1, 180))
        rows_bookings.append((i, flight[0], passenger[0], seat_class, price, booked))

    rows_bookings, _ = sampling.renumber(rows_bookings, 5)
    return {
        "airports": rows_airports,
        "aircraft": rows_aircraft,
        "flights": rows_flights,
        "passengers": rows_passengers,
        "bookings": rows_bookings,
    }


DOMAIN = Domain(
    name="airline",
    description="an airline: airports, aircraft, flights, passengers and bookings",
    tables=(airports, aircraft, flights, passengers, bookings),
    links=(
        Link("flights", "origin", "airports", verb="have", by="from", never="have no departures", when="departure_date",
             child_words=("departing flight", "departing flights")),
        Link("flights", "destination", "airports", verb="have", by="to", never="have no arrivals", when="departure_date",
             child_words=("arriving flight", "arriving flights")),
        Link("flights", "aircraft_id", "aircraft", verb="operated", by="operated by", never="have never flown",
             when="departure_date"),
        Link("bookings", "flight_id", "flights", verb="have", by="on", never="have no bookings", when="booking_date"),
        Link("bookings", "passenger_id", "passengers", verb="made", by="made by", never="have never booked a flight",
             when="booking_date"),
    ),
    bridges=(
        Bridge("bookings", "passengers", "passenger_id", "flights", "flight_id", verb="booked", by="booked by"),
    ),
    populate=populate,
)  # fmt: skip
