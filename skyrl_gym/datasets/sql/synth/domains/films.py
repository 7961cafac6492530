"""A film database: directors, films, actors, casting and festival nominations."""

from __future__ import annotations

import datetime
import random
from typing import Any

from skyrl_gym.datasets.sql.synth import sampling, vocab
from skyrl_gym.datasets.sql.synth.schema import Bridge, Column, Domain, Link, Table, key, ref

GENRES = {  # genre -> (median running time, median budget in millions of dollars)
    "Drama": (118, 18.0), "Comedy": (100, 22.0), "Thriller": (112, 35.0), "Documentary": (95, 2.5),
    "Animation": (92, 60.0), "Science Fiction": (128, 90.0), "Horror": (98, 12.0), "Romance": (108, 15.0),
    "Western": (115, 25.0), "Musical": (122, 30.0),
}  # fmt: skip
FESTIVALS = ("Cannes", "Berlin", "Venice", "Toronto", "Sundance", "San Sebastian")
AWARDS = (
    "Best Film",
    "Best Director",
    "Best Actress",
    "Best Actor",
    "Best Screenplay",
    "Best Cinematography",
)
WORDS_A = ("Midnight", "Paper", "Velvet", "Iron", "Summer", "Neon", "Hollow", "Silver", "Burning", "Quiet",
           "Salt", "Electric", "Winter", "Broken", "Wild", "Glass", "Last", "Secret")  # fmt: skip
WORDS_B = ("Horizon", "Tide", "Garden", "Machine", "Echo", "Frontier", "Signal", "Harvest", "Parade", "Mirror",
           "Lantern", "Orbit", "Shadow", "Crossing", "Carnival", "Witness", "Room", "Road")  # fmt: skip

directors = Table(
    "directors", "director", "directors", person=True, label="name", primary_key=("director_id",),
    columns=(
        key("director_id"),
        Column("name", "VARCHAR", kind="label", noun="name"),
        Column("nationality", "VARCHAR", kind="cat", noun="nationality", eq=("from {v}",)),
        Column("birth_year", "INTEGER", kind="year", noun="birth year", eq=("born in {v}",),
               gt=("born after {v}",), lt=("born before {v}",), tense="were", top="youngest", bottom="oldest"),
    ),
)  # fmt: skip

films = Table(
    "films", "film", "films", label="title", primary_key=("film_id",),
    columns=(
        key("film_id"),
        Column("title", "VARCHAR", kind="label", noun="title", quote=True),
        ref("director_id", "directors", "director_id"),
        Column("release_date", "DATE", kind="date", noun="release date", when=("released {p}",), tense="were"),
        Column("genre", "VARCHAR", kind="cat", noun="genre", eq=("in the {v} genre",)),
        Column("runtime_minutes", "INTEGER", kind="num", noun="running time in minutes",
               gt=("longer than {v} minutes",), lt=("shorter than {v} minutes",), top="longest",
               bottom="shortest"),
        Column("budget_musd", "DECIMAL(6,1)", kind="num", noun="budget in millions of dollars", nullable=True,
               additive=True, gt=("with a budget above {v} million dollars",),
               lt=("with a budget below {v} million dollars",), missing=("with an undisclosed budget",)),
        Column("rating", "DECIMAL(3,1)", kind="num", noun="rating", gt=("rated above {v}",),
               lt=("rated below {v}",), top="highest-rated", bottom="lowest-rated"),
    ),
)  # fmt: skip

actors = Table(
    "actors", "actor", "actors", person=True, label="name", primary_key=("actor_id",),
    columns=(
        key("actor_id"),
        Column("name", "VARCHAR", kind="label", noun="name"),
        Column("nationality", "VARCHAR", kind="cat", noun="nationality", eq=("from {v}",)),
        Column("birth_year", "INTEGER", kind="year", noun="birth year", nullable=True, eq=("born in {v}",),
               gt=("born after {v}",), lt=("born before {v}",), tense="were",
               missing=("with an unknown birth year",)),
    ),
)  # fmt: skip

casting = Table(
    "casting", "role", "roles", primary_key=("film_id", "actor_id"),
    columns=(
        ref("film_id", "films", "film_id"),
        ref("actor_id", "actors", "actor_id"),
        Column("character_name", "VARCHAR", kind="text", noun="character name"),
        Column("billing_order", "INTEGER", kind="num", noun="billing position",
               lt=("billed above position {v}",), gt=("billed below position {v}",)),
    ),
)  # fmt: skip

nominations = Table(
    "nominations", "nomination", "nominations", label="nomination_id", primary_key=("nomination_id",),
    columns=(
        Column("nomination_id", "INTEGER", kind="id", noun="nomination ID"),
        ref("film_id", "films", "film_id"),
        Column("festival", "VARCHAR", kind="cat", noun="festival", eq=("at {v}", "from the {v} festival")),
        Column("award", "VARCHAR", kind="cat", noun="award", eq=("for {v}",)),
        Column("year", "INTEGER", kind="year", noun="year", eq=("in {v}",), gt=("after {v}",), lt=("before {v}",)),
        Column("won", "BOOLEAN", kind="flag", noun="won", eq=("that were won",)),
    ),
)  # fmt: skip


def _title(rng: random.Random) -> str:
    a, b = rng.choice(WORDS_A), rng.choice(WORDS_B)
    form = rng.randrange(4)
    if form == 0:
        return f"The {a} {b}"
    if form == 1:
        return f"{a} {b}"
    if form == 2:
        return f"{b} of the {rng.choice(WORDS_A)} {rng.choice(WORDS_B)}"
    return f"{a} {b} {rng.choice(('II', 'Returns', 'Rising'))}"


def populate(rng: random.Random, scale: float) -> dict[str, list[tuple[Any, ...]]]:
    nations = rng.sample(vocab.NATIONALITIES, rng.randint(6, 12))
    nation_weights = sampling.skewed_weights(rng, len(nations), alpha=1.1)
    people = sampling.people(rng, int(25 * scale) + int(120 * scale))
    n_directors = int(25 * scale)
    rows_directors = [
        (i, name, rng.choices(nations, weights=nation_weights)[0], rng.randint(1935, 1990))
        for i, name in enumerate(people[:n_directors], start=1)
    ]
    rows_actors = [
        (
            i,
            name,
            rng.choices(nations, weights=nation_weights)[0],
            sampling.maybe(rng, rng.randint(1940, 2004), 0.1),
        )
        for i, name in enumerate(people[n_directors:], start=1)
    ]

    genres = sorted(GENRES)
    genre_weights = sampling.skewed_weights(rng, len(genres), alpha=1.8)
    director_weights = sampling.skewed_weights(rng, len(rows_directors), alpha=1.3, idle=0.1)
    rows_films = []
    for i, title in enumerate(sampling.unique_strings(rng, int(110 * scale), _title), start=1):
        director = rng.choices(rows_directors, weights=director_weights)[0]
        genre = rng.choices(genres, weights=genre_weights)[0]
        minutes, budget = GENRES[genre]
        year = rng.randint(max(1970, director[3] + 25), 2024)
        released = sampling.date_between(rng, datetime.date(year, 1, 1), datetime.date(year, 12, 31))
        runtime = max(70, int(rng.gauss(minutes, 14)))
        spent = sampling.maybe(rng, round(budget * rng.lognormvariate(0, 0.7), 1), 0.2)
        rating = round(min(9.6, max(2.5, rng.gauss(6.6, 1.1))), 1)
        rows_films.append((i, title, director[0], released, genre, runtime, spent, rating))

    actor_weights = sampling.skewed_weights(rng, len(rows_actors), alpha=1.2, idle=0.1)
    rows_casting = []
    for film in rows_films:
        cast = {rng.choices(rows_actors, weights=actor_weights)[0][0] for _ in range(rng.randint(2, 8))}
        order = sorted(cast)
        rng.shuffle(order)
        for position, actor in enumerate(order, start=1):
            character = f"{rng.choice(vocab.FIRST_NAMES)} {rng.choice(vocab.LAST_NAMES)}"
            rows_casting.append((film[0], actor, character, position))

    rows_nominations = []
    film_weights = [max(0.0, float(film[7]) - 5.5) ** 2 for film in rows_films]
    for i in range(1, int(90 * scale) + 1):
        film = rng.choices(rows_films, weights=film_weights)[0]
        year = min(2024, film[3].year + rng.choice((0, 0, 1)))
        won = rng.random() < 0.3
        rows_nominations.append((i, film[0], rng.choice(FESTIVALS), rng.choice(AWARDS), year, won))

    return {
        "directors": rows_directors,
        "films": rows_films,
        "actors": rows_actors,
        "casting": rows_casting,
        "nominations": rows_nominations,
    }


DOMAIN = Domain(
    name="films",
    description="a film database: directors, films, actors, casting and festival nominations",
    tables=(directors, films, actors, casting, nominations),
    links=(
        Link("films", "director_id", "directors", verb="directed", by="directed by",
             never="have no films in the database"),
        Link("casting", "actor_id", "actors", verb="played", by="played by", never="have no roles"),
        Link("casting", "film_id", "films", verb="have", by="in", never="have no cast listed"),
        Link("nominations", "film_id", "films", verb="received", by="received by", never="have never been nominated",
             when="year"),
    ),
    bridges=(Bridge("casting", "actors", "actor_id", "films", "film_id", verb="appeared in", by="starring"),),
    populate=populate,
)  # fmt: skip
