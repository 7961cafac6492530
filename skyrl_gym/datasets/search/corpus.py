"""The passage corpus, in the format of Search-R1's wiki-18 (``{"id", "title", "text", "contents"}`` with
``contents`` = ``'"<title>"\\n<text>'``): five passages per country (overview, geography and borders, economy
and codes, languages and people, administrative divisions), one per WordNet synset (its words as the title;
its definition, examples, hypernyms, holonyms and antonyms as prose)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from skyrl_gym.datasets.search.countries import CURRENCY_NAMES, Country, load_countries
from skyrl_gym.datasets.search.wordnet import _POS_WORDS, Synset, load_wordnet


def _passage(pid: str, title: str, text: str) -> dict[str, str]:
    return {"id": pid, "title": title, "text": text, "contents": f'"{title}"\n{text}'}


def _listing(items: Iterable[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def country_passage_id(code: str, aspect: str) -> str:
    """The corpus id of one of a country's passages (aspects: overview, geography, economy, people, divisions)."""
    return f"country-{code}-{aspect}"


def synset_passage_id(key: str) -> str:
    """The corpus id of a synset's passage."""
    return f"wordnet-{key}"


_MAX_LISTED_DIVISIONS = 30


def country_passages(country: Country, names: dict[str, str]) -> list[dict[str, str]]:
    """The passages about one country; ``names`` maps country codes to names (for the neighbours)."""
    n, out = country.name, []
    where = f"{country.subregion}, a subregion of {country.region}" if country.subregion else country.region
    text = f"{n} lies in {where}. The capital of {n} is {country.capital}."
    if country.population:
        text += f" {n} has a population of about {country.population:,} people."
    if country.aliases:
        text += f" It is also known as {_listing(country.aliases)}."
    out.append(_passage(country_passage_id(country.code, "overview"), n, text))

    parts = []
    if country.area:
        parts.append(f"{n} covers an area of {country.area:,.0f} square kilometres.")
    if country.borders:
        neighbours = _listing(sorted(names[c] for c in country.borders))
        parts.append(f"{n} shares land borders with {neighbours}.")
    elif country.borders is not None:
        parts.append(f"{n} has no land borders with other countries.")
    if country.timezones:
        zones = _listing(country.timezones)
        parts.append(f"{n} uses the time zone{'s' if len(country.timezones) > 1 else ''} {zones}.")
    if parts:
        out.append(_passage(country_passage_id(country.code, "geography"), n, " ".join(parts)))

    parts = []
    if country.currencies:
        money = [f"the {CURRENCY_NAMES[c]} ({c})" for c in country.currencies]
        verb = "is" if len(money) == 1 else "are"
        parts.append(f"The currenc{'y' if len(money) == 1 else 'ies'} of {n} {verb} {_listing(money)}.")
    if country.calling_codes:
        codes = _listing(f"+{c}" for c in country.calling_codes)
        parts.append(f"The international calling code of {n} is {codes}.")
    if country.tlds:
        parts.append(
            f"Internet addresses in {n} use the country code top-level domain {_listing(country.tlds)}."
        )
    if parts:
        out.append(_passage(country_passage_id(country.code, "economy"), n, " ".join(parts)))

    parts = []
    if country.languages:
        many = len(country.languages) > 1
        parts.append(
            f"The official language{'s' if many else ''} of {n} {'are' if many else 'is'} "
            f"{_listing(country.languages)}."
        )
    if country.demonym:
        parts.append(f"People from {n} are called {_listing(country.demonym.split(','))}.")
    if parts:
        out.append(_passage(country_passage_id(country.code, "people"), n, " ".join(parts)))

    if country.divisions:
        listed = country.divisions[:_MAX_LISTED_DIVISIONS]
        more = " among others" if len(country.divisions) > len(listed) else ""
        text = f"The first-level administrative divisions of {n} include {_listing(listed)}{more}."
        out.append(_passage(country_passage_id(country.code, "divisions"), n, text))
    return out


def _name(synset: Synset) -> str:
    """How passages name a synset: its first word, with the others in parentheses."""
    first, *others = synset.lemmas
    return f"{first} (also called {', '.join(others)})" if others else first


def _capitalized(word: str) -> str:
    return word[:1].upper() + word[1:]


_MAX_LISTED_PARTS = 6


def synset_passage(synset: Synset, synsets: Mapping[str, Synset]) -> dict[str, str]:
    """The passage about one synset: title = its words; text = definition, examples and relations as prose."""
    word = synset.lemmas[0]
    pos = _POS_WORDS[synset.pos]
    if synset.pos == "v":
        sentences = [f"To {word} ({pos}) means to {synset.definition}."]
    else:
        sentences = [f"{_capitalized(word)} ({pos}) means {synset.definition}."]
    if len(synset.lemmas) > 1:
        sentences.append(f"Other words for it: {', '.join(synset.lemmas[1:])}.")
    if synset.examples:
        sentences.append("For example: " + "; ".join(f'"{e}"' for e in synset.examples) + ".")
    subject = f"To {word}" if synset.pos == "v" else _capitalized(word)
    if synset.hypernyms:
        kinds = [_name(synsets[k]) for k in synset.hypernyms]
        if synset.pos == "v":
            sentences.append(f"{subject} is a way to {' and a way to '.join(kinds)}.")
        else:
            sentences.append(f"{subject} is a kind of {' and a kind of '.join(kinds)}.")
    if synset.instance_of:
        sentences.append(
            f"{subject} is an instance of {_listing(_name(synsets[k]) for k in synset.instance_of)}."
        )
    if synset.part_of:
        sentences.append(f"{subject} is a part of {_listing(_name(synsets[k]) for k in synset.part_of)}.")
    if synset.member_of:
        sentences.append(f"{subject} is a member of {_listing(_name(synsets[k]) for k in synset.member_of)}.")
    if synset.parts:
        parts = [synsets[k].lemmas[0] for k in synset.parts[:_MAX_LISTED_PARTS]]
        sentences.append(f"Its parts include {_listing(parts)}.")
    if synset.members:
        members = [synsets[k].lemmas[0] for k in synset.members[:_MAX_LISTED_PARTS]]
        sentences.append(f"Its members include {_listing(members)}.")
    if synset.antonyms:
        sentences.append(f"Its opposite is {_listing(synsets[k].lemmas[0] for k in synset.antonyms)}.")
    if synset.similar_to and synset.pos == "a":
        sentences.append(
            f"It is similar in meaning to {_listing(synsets[k].lemmas[0] for k in synset.similar_to)}."
        )
    return _passage(synset_passage_id(synset.key), ", ".join(synset.lemmas), " ".join(sentences))


def corpus_synsets(synsets: Mapping[str, Synset], *, full_wordnet: bool = False) -> list[str]:
    """The keys of the synsets that get a passage, sorted.

    By default the frequent synsets (about 29,000: the senses tagged in WordNet's semantic concordance) and
    the synsets they name as hypernyms, wholes or opposites, with those synsets' own hypernyms, so that
    every chain a question follows is in the corpus; ``full_wordnet``: all of them (about 117,000).
    """
    if full_wordnet:
        return sorted(synsets)
    keep = {k for k, s in synsets.items() if s.frequent}
    linked = {t for k in keep for t in _chain_targets(synsets[k])}
    keep |= linked
    keep |= {h for k in linked for h in synsets[k].hypernyms}
    return sorted(keep)


def _chain_targets(synset: Synset) -> tuple[str, ...]:
    return synset.hypernyms + synset.instance_of + synset.part_of + synset.member_of + synset.antonyms


def build_corpus(*, full_wordnet: bool = False) -> list[dict[str, str]]:
    """Every passage: the countries' first, then WordNet's (see :func:`corpus_synsets`)."""
    countries = load_countries()
    names = {c.code: c.name for c in countries}
    passages = [p for country in countries for p in country_passages(country, names)]
    synsets = load_wordnet()
    passages += [
        synset_passage(synsets[k], synsets) for k in corpus_synsets(synsets, full_wordnet=full_wordnet)
    ]
    return passages
