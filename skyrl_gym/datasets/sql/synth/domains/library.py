"""A public library: authors, books, members and loans."""

from __future__ import annotations

import datetime
import random
from typing import Any

from skyrl_gym.datasets.sql.synth import sampling, vocab
from skyrl_gym.datasets.sql.synth.schema import Bridge, Column, Domain, Link, Table, key, ref

GENRES = ("Mystery", "Science Fiction", "Fantasy", "Romance", "History", "Biography", "Poetry", "Thriller",
          "Travel", "Cookery", "Children")  # fmt: skip
TITLE_ADJECTIVES = ("Silent", "Last", "Hidden", "Broken", "Golden", "Distant", "Forgotten", "Burning", "Quiet",
                    "Endless", "Secret", "Wild", "Crimson", "Northern", "Lost", "Glass")  # fmt: skip
TITLE_NOUNS = ("River", "Garden", "Empire", "Lighthouse", "Orchard", "Winter", "Harbour", "Voyage", "Letter",
               "Kingdom", "Island", "Clockmaker", "Forest", "Station", "Mirror", "Promise", "Atlas", "Storm")  # fmt: skip
PLACES = ("Lisbon", "Kyoto", "the North", "Paris", "the Andes", "Venice", "the Sahara", "Oslo", "Havana")
MEMBERSHIPS = ("standard", "student", "senior", "family")

authors = Table(
    "authors", "author", "authors", person=True, label="name", primary_key=("author_id",),
    columns=(
        key("author_id"),
        Column("name", "VARCHAR", kind="label", noun="name"),
        Column("nationality", "VARCHAR", kind="cat", noun="nationality", eq=("from {v}",)),
        Column("birth_year", "INTEGER", kind="year", noun="birth year", nullable=True, eq=("born in {v}",),
               gt=("born after {v}",), lt=("born before {v}",), tense="were",
               missing=("with an unknown birth year",), top="youngest", bottom="oldest"),
    ),
)  # fmt: skip

books = Table(
    "books", "book", "books", label="title", primary_key=("book_id",),
    columns=(
        key("book_id"),
        Column("title", "VARCHAR", kind="label", noun="title", quote=True),
        ref("author_id", "authors", "author_id"),
        Column("genre", "VARCHAR", kind="cat", noun="genre", eq=("in the {v} genre", "classified as {v}")),
        Column("publication_year", "INTEGER", kind="year", noun="publication year", eq=("published in {v}",),
               gt=("published after {v}",), lt=("published before {v}",), tense="were",
               top="most recent", bottom="oldest"),
        Column("pages", "INTEGER", kind="num", noun="number of pages",
               gt=("with more than {v} pages", "longer than {v} pages"),
               lt=("with fewer than {v} pages", "shorter than {v} pages"), top="longest", bottom="shortest"),
        Column("copies", "INTEGER", kind="num", noun="number of copies", additive=True,
               gt=("with more than {v} copies",), lt=("with fewer than {v} copies",)),
    ),
)  # fmt: skip

members = Table(
    "members", "member", "members", person=True, label="name", primary_key=("member_id",),
    columns=(
        key("member_id"),
        Column("name", "VARCHAR", kind="label", noun="name"),
        Column("city", "VARCHAR", kind="cat", noun="city", eq=("from {v}", "living in {v}")),
        Column("join_date", "DATE", kind="date", noun="joining date", when=("who joined {p}",)),
        Column("membership", "VARCHAR", kind="cat", noun="membership type", eq=("with a {v} membership",)),
    ),
)  # fmt: skip

loans = Table(
    "loans", "loan", "loans", label="loan_id", primary_key=("loan_id",),
    columns=(
        Column("loan_id", "INTEGER", kind="id", noun="loan ID"),
        ref("book_id", "books", "book_id"),
        ref("member_id", "members", "member_id"),
        Column("loan_date", "DATE", kind="date", noun="loan date", when=("made {p}",), tense="were"),
        Column("due_date", "DATE", kind="date", noun="due date", when=("due {p}",)),
        Column("return_date", "DATE", kind="date", noun="return date", nullable=True, when=("returned {p}",),
               tense="were", missing=("not yet returned", "still out on loan")),
    ),
)  # fmt: skip


def _title(rng: random.Random) -> str:
    form = rng.randrange(5)
    adjective, noun = rng.choice(TITLE_ADJECTIVES), rng.choice(TITLE_NOUNS)
    if form == 0:
        return f"The {adjective} {noun}"
    if form == 1:
        return f"The {noun} of {rng.choice(PLACES)}"
    if form == 2:
        return f"{adjective} {noun}s"
    if form == 3:
        return f"A {noun} in {rng.choice(PLACES)}"
    return f"The {noun}'s {rng.choice(TITLE_NOUNS)}"


def populate(rng: random.Random, scale: float) -> dict[str, list[tuple[Any, ...]]]:
    nations = rng.sample(vocab.NATIONALITIES, rng.randint(6, 12))
    nation_weights = sampling.skewed_weights(rng, len(nations), alpha=1.2)
    rows_authors = []
    for i, name in enumerate(sampling.people(rng, int(40 * scale)), start=1):
        born = sampling.maybe(rng, rng.randint(1890, 1995), 0.1)
        rows_authors.append((i, name, rng.choices(nations, weights=nation_weights)[0], born))

    genres = rng.sample(GENRES, rng.randint(6, len(GENRES)))
    genre_weights = sampling.skewed_weights(rng, len(genres), alpha=1.6)
    author_weights = sampling.skewed_weights(rng, len(rows_authors), alpha=1.3, idle=0.1)
    rows_books = []
    for i, title in enumerate(sampling.unique_strings(rng, int(130 * scale), _title), start=1):
        author = rng.choices(rows_authors, weights=author_weights)[0]
        earliest = (author[3] or 1900) + 22
        year = rng.randint(min(earliest, 2022), 2023)
        pages = max(48, int(rng.gauss(320, 110)))
        copies = rng.choices((1, 2, 3, 4, 5, 8), weights=(40, 25, 15, 10, 6, 4))[0]
        rows_books.append(
            (i, title, author[0], rng.choices(genres, weights=genre_weights)[0], year, pages, copies)
        )

    today = datetime.date(rng.randint(2022, 2024), rng.randint(1, 12), 1)
    cities = [c for c, _ in sampling.cities(rng, rng.randint(4, 9))]
    city_weights = sampling.skewed_weights(rng, len(cities), alpha=1.0)
    rows_members = []
    for i, name in enumerate(sampling.people(rng, int(120 * scale)), start=1):
        joined = sampling.date_between(
            rng, datetime.date(today.year - 6, 1, 1), today - datetime.timedelta(days=90)
        )
        kind = rng.choices(MEMBERSHIPS, weights=(50, 20, 18, 12))[0]
        rows_members.append((i, name, rng.choices(cities, weights=city_weights)[0], joined, kind))

    book_weights = sampling.skewed_weights(rng, len(rows_books), alpha=1.1, idle=0.12)
    member_weights = sampling.skewed_weights(rng, len(rows_members), alpha=1.2, idle=0.15)
    rows_loans = []
    for i in range(1, int(450 * scale) + 1):
        member = rng.choices(rows_members, weights=member_weights)[0]
        book = rng.choices(rows_books, weights=book_weights)[0]
        lent = sampling.date_between(rng, member[3], today)
        due = lent + datetime.timedelta(days=21)
        back = lent + datetime.timedelta(days=rng.randint(3, 40))
        returned = None if back > today or rng.random() < 0.04 else back
        rows_loans.append((i, book[0], member[0], lent, due, returned))
    rows_loans, _ = sampling.renumber(rows_loans, 3)

    return {"authors": rows_authors, "books": rows_books, "members": rows_members, "loans": rows_loans}


DOMAIN = Domain(
    name="library",
    description="a public library: authors, books, members and their loans",
    tables=(authors, books, members, loans),
    links=(
        Link("books", "author_id", "authors", verb="wrote", by="written by", never="have no books in the library"),
        Link("loans", "book_id", "books", verb="had", by="of", never="have never been borrowed", when="loan_date"),
        Link("loans", "member_id", "members", verb="made", by="made by", never="have never borrowed a book",
             when="loan_date"),
    ),
    bridges=(Bridge("loans", "members", "member_id", "books", "book_id", verb="borrowed", by="borrowed by"),),
    populate=populate,
)  # fmt: skip
