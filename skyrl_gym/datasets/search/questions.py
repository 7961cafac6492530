"""The candidate questions: every question kind's wording, the questions about countries and about words
that exactly one entity answers, and the checks that keep only those whose answer needs retrieval (never in
the question, held by the last supporting passage, and for a bridge question not by the first)."""

from __future__ import annotations

import dataclasses
import functools
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable

from skyrl_gym.datasets.search.corpus import (
    _MAX_LISTED_DIVISIONS,
    build_corpus,
    country_passage_id,
    synset_passage_id,
)
from skyrl_gym.datasets.search.countries import CURRENCY_NAMES, Country, load_countries
from skyrl_gym.datasets.search.wordnet import _POS_WORDS, Synset, load_wordnet
from skyrl_gym.envs.search.scoring import normalize_answer

TEMPLATES: dict[str, str] = {
    # countries, one passage
    "capital_of": "What is the capital of {country}?",
    "country_of_capital": "{capital} is the capital of which country?",
    "currency_of": "Which currency is used in {country}?",
    "country_of_currency_code": "Which country uses the currency with the ISO 4217 code {code}?",
    "calling_code_of": "What is the international calling code of {country}?",
    "country_of_calling_code": "Which country has the international calling code +{code}?",
    "tld_of": "What is the internet country code top-level domain of {country}?",
    "country_of_tld": "Which country has the internet domain {tld}?",
    "subregion_of": "In which subregion of the world does {country} lie?",
    "language_of": "What is the official language of {country}?",
    "demonym_of": "What are people from {country} called?",
    "country_of_division": "In which country is {division} a first-level administrative division?",
    "only_neighbour_of": "Which country is the only one that shares a land border with {country}?",
    # countries, two passages
    "currency_of_capital": "Which currency is used in the country whose capital is {capital}?",
    "language_of_capital": "What is the official language of the country whose capital is {capital}?",
    "calling_code_of_capital": "What is the international calling code of the country whose capital is {capital}?",
    "capital_of_calling_code": "What is the capital of the country whose international calling code is +{code}?",
    "subregion_of_calling_code": (
        "In which subregion of the world lies the country whose international calling code is +{code}?"
    ),
    "capital_of_tld": "What is the capital of the country whose internet domain is {tld}?",
    "capital_of_only_neighbour": "What is the capital of the only country that shares a land border with {country}?",
    "currency_of_only_neighbour": (
        "Which currency is used in the only country that shares a land border with {country}?"
    ),
    "common_neighbour": "Which country shares a land border with both {country} and {other}?",
    "capital_of_division_country": (
        "What is the capital of the country in which {division} is a first-level administrative division?"
    ),
    # WordNet, one passage
    "word_from_definition": 'Which {pos} means "{definition}"?',
    "hypernym_from_definition": 'What is the thing defined as "{definition}" a kind of?',
    "holonym_from_definition": 'What is the thing defined as "{definition}" a part of?',
    "antonym_from_definition": 'What is the opposite of the adjective that means "{definition}"?',
    # WordNet, two passages
    "grand_hypernym_from_definition": (
        'The thing defined as "{definition}" is a kind of something. What is that something in turn a kind of?'
    ),
    "holonym_hypernym_from_definition": (
        'The thing defined as "{definition}" is a part of a larger whole. What is that whole a kind of?'
    ),
}
"""Every question kind and its wording; ``extra_info["kind"]`` names one."""


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A question before it is drawn into a split."""

    data_source: str
    kind: str
    question: str
    target: tuple[str, ...]
    supporting_ids: tuple[str, ...]
    entities: frozenset[str]
    """The countries / synsets it is about (its clue, bridge and answer), for held-out test questions."""


def _target(*names: str) -> tuple[str, ...]:
    """The answer and its aliases, with accent-free spellings added (``"zloty"`` for ``"złoty"``)."""
    out: dict[str, None] = {}
    for name in names:
        name = name.strip()
        if not name:
            continue
        out[name] = None
        folded = _ascii(name)
        if folded and normalize_answer(folded) != normalize_answer(name):
            out[folded] = None
    return tuple(out)


# letters that Unicode does not decompose into a Latin letter and a mark
_PLAIN_LETTERS = str.maketrans({"đ": "d", "Đ": "D", "ı": "i", "ł": "l", "Ł": "L", "ø": "o", "Ø": "O", "ə": "e",
                                "Ə": "E", "ß": "ss", "æ": "ae", "Æ": "Ae", "œ": "oe", "ʻ": "", "ʼ": "", "ʿ": ""})  # fmt: skip


@functools.cache
def _ascii(name: str) -> str | None:
    """``name`` without accents (``"zloty"`` for ``"złoty"``), or ``None`` where a letter would be lost."""
    decomposed = unicodedata.normalize("NFKD", name.translate(_PLAIN_LETTERS))
    folded = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return folded.strip() if folded.isascii() else None


def _currency_target(code: str) -> tuple[str, ...]:
    name = CURRENCY_NAMES[code]
    unit = name.split()[-1]
    # "yen" alone names one currency; "dollar" or "franc" alone could be any of many
    shared = sum(1 for other in CURRENCY_NAMES.values() if other.split()[-1] == unit) > 1
    return _target(name, code, *(() if shared or unit == name else (unit,)))


def _country_target(country: Country) -> tuple[str, ...]:
    return _target(country.name, *country.aliases)


def _country_entity(country: Country) -> str:
    return f"country-{country.code}"


def country_questions() -> list[Candidate]:
    """Every candidate question about countries, one entity satisfying each (checked here)."""
    countries = load_countries()
    by_code = {c.code: c for c in countries}
    out: list[Candidate] = []

    def add(
        kind: str,
        target: tuple[str, ...],
        support: list[tuple[Country, str]],
        about: Iterable[Country],
        **slots,
    ):
        out.append(
            Candidate(
                data_source="countries",
                kind=kind,
                question=TEMPLATES[kind].format(**slots),
                target=target,
                supporting_ids=tuple(country_passage_id(c.code, aspect) for c, aspect in support),
                entities=frozenset(_country_entity(c) for c in about),
            )
        )

    def unique_owner(values: dict[str, list[Country]]) -> dict[str, Country]:
        return {v: owners[0] for v, owners in values.items() if len(owners) == 1}

    capitals: dict[str, list[Country]] = defaultdict(list)
    calling: dict[str, list[Country]] = defaultdict(list)
    tlds: dict[str, list[Country]] = defaultdict(list)
    currency_users: dict[str, list[Country]] = defaultdict(list)
    divisions: dict[str, list[Country]] = defaultdict(list)
    for c in countries:
        capitals[normalize_answer(c.capital)].append(c)
        for code in c.calling_codes:
            calling[code].append(c)
        for tld in c.tlds:
            tlds[tld.lower()].append(c)
        for code in c.currencies:
            currency_users[code].append(c)
        for division in c.divisions:
            divisions[normalize_answer(division)].append(c)
    # a division named like a country or a capital reads as that country or city
    taken = {normalize_answer(c.name) for c in countries} | set(capitals)
    divisions = {d: owners for d, owners in divisions.items() if d not in taken}
    capital_owner = unique_owner(capitals)
    calling_owner = unique_owner(calling)
    tld_owner = unique_owner(tlds)
    currency_owner = unique_owner(currency_users)
    division_owner = unique_owner(divisions)

    def only_neighbour(c: Country) -> Country | None:
        return by_code[c.borders[0]] if c.borders and len(c.borders) == 1 else None

    for c in countries:
        own = _country_target(c)
        add("capital_of", _target(c.capital), [(c, "overview")], [c], country=c.name)
        if capital_owner.get(normalize_answer(c.capital)) is c:
            add("country_of_capital", own, [(c, "overview")], [c], capital=c.capital)
            if len(c.currencies) == 1:
                add("currency_of_capital", _currency_target(c.currencies[0]), [(c, "overview"), (c, "economy")],
                    [c], capital=c.capital)  # fmt: skip
            if len(c.languages) == 1:
                add("language_of_capital", _target(c.languages[0]), [(c, "overview"), (c, "people")], [c],
                    capital=c.capital)  # fmt: skip
            if len(c.calling_codes) == 1:
                code = c.calling_codes[0]
                add("calling_code_of_capital", _target(f"+{code}", code), [(c, "overview"), (c, "economy")], [c],
                    capital=c.capital)  # fmt: skip
        if len(c.currencies) == 1:
            code = c.currencies[0]
            add("currency_of", _currency_target(code), [(c, "economy")], [c], country=c.name)
            if currency_owner.get(code) is c:
                add("country_of_currency_code", own, [(c, "economy")], [c], code=code)
        if len(c.calling_codes) == 1:
            code = c.calling_codes[0]
            add("calling_code_of", _target(f"+{code}", code), [(c, "economy")], [c], country=c.name)
            if calling_owner.get(code) is c:
                add("country_of_calling_code", own, [(c, "economy")], [c], code=code)
                add("capital_of_calling_code", _target(c.capital), [(c, "economy"), (c, "overview")], [c],
                    code=code)  # fmt: skip
                if c.subregion:
                    add("subregion_of_calling_code", _target(c.subregion), [(c, "economy"), (c, "overview")], [c],
                        code=code)  # fmt: skip
        if len(c.tlds) == 1:
            tld = c.tlds[0]
            add("tld_of", _target(tld), [(c, "economy")], [c], country=c.name)
            if tld_owner.get(tld.lower()) is c:
                add("country_of_tld", own, [(c, "economy")], [c], tld=tld)
                add("capital_of_tld", _target(c.capital), [(c, "economy"), (c, "overview")], [c], tld=tld)
        if c.subregion:
            add("subregion_of", _target(c.subregion), [(c, "overview")], [c], country=c.name)
        if len(c.languages) == 1:
            add("language_of", _target(c.languages[0]), [(c, "people")], [c], country=c.name)
        if c.demonym:
            add("demonym_of", _target(*c.demonym.split(",")), [(c, "people")], [c], country=c.name)
        for division in c.divisions[:_MAX_LISTED_DIVISIONS]:
            if division_owner.get(normalize_answer(division)) is c:
                add("country_of_division", own, [(c, "divisions")], [c], division=division)
                add("capital_of_division_country", _target(c.capital), [(c, "divisions"), (c, "overview")], [c],
                    division=division)  # fmt: skip
        neighbour = only_neighbour(c)
        if neighbour is not None:
            add(
                "only_neighbour_of",
                _country_target(neighbour),
                [(c, "geography")],
                [c, neighbour],
                country=c.name,
            )
            add("capital_of_only_neighbour", _target(neighbour.capital), [(c, "geography"), (neighbour, "overview")],
                [c, neighbour], country=c.name)  # fmt: skip
            if len(neighbour.currencies) == 1:
                add("currency_of_only_neighbour", _currency_target(neighbour.currencies[0]),
                    [(c, "geography"), (neighbour, "economy")], [c, neighbour], country=c.name)  # fmt: skip
    for a in countries:
        for b in countries:
            if a.code >= b.code or not a.borders or not b.borders:
                continue
            common = sorted(set(a.borders) & set(b.borders))
            if len(common) == 1:
                z = by_code[common[0]]
                add("common_neighbour", _country_target(z), [(a, "geography"), (b, "geography")], [a, b, z],
                    country=a.name, other=b.name)  # fmt: skip
    return out


_MIN_DEFINITION_WORDS = 4


def wordnet_questions() -> list[Candidate]:
    """Every candidate question about words, from the frequent synsets whose definition is theirs alone."""
    synsets = load_wordnet()
    definitions = Counter(normalize_answer(s.definition) for s in synsets.values())
    out: list[Candidate] = []

    def add(kind: str, answer: Synset, chain: list[Synset], **slots) -> None:
        out.append(
            Candidate(
                data_source="wordnet",
                kind=kind,
                question=TEMPLATES[kind].format(definition=chain[0].definition, **slots),
                target=_target(*answer.lemmas),
                supporting_ids=tuple(synset_passage_id(s.key) for s in chain),
                entities=frozenset(synset_passage_id(s.key) for s in [*chain, answer]),
            )
        )

    def only(keys: tuple[str, ...]) -> Synset | None:
        return synsets[keys[0]] if len(keys) == 1 else None

    for key in sorted(synsets):
        s = synsets[key]
        if not s.frequent or '"' in s.definition or len(s.definition.split()) < _MIN_DEFINITION_WORDS:
            continue
        if definitions[normalize_answer(s.definition)] != 1:
            continue  # another synset has the same definition: the question would have two answers
        add("word_from_definition", s, [s], pos=_POS_WORDS[s.pos])
        if s.pos == "n":
            kind_of = only(s.hypernyms) if not s.instance_of else None
            if kind_of is not None:
                add("hypernym_from_definition", kind_of, [s])
                grand = only(kind_of.hypernyms) if not kind_of.instance_of else None
                if grand is not None:
                    add("grand_hypernym_from_definition", grand, [s, kind_of])
            whole = only(s.part_of)
            if whole is not None:
                add("holonym_from_definition", whole, [s])
                whole_kind = only(whole.hypernyms) if not whole.instance_of else None
                if whole_kind is not None:
                    add("holonym_hypernym_from_definition", whole_kind, [s, whole])
        if s.pos == "a":
            opposite = only(s.antonyms)
            if opposite is not None:
                add("antonym_from_definition", opposite, [s])
    return out


def _words(text: str) -> list[str]:
    return normalize_answer(text).split()


def answer_in_question(question: str, target: Iterable[str]) -> bool:
    """Whether the question gives an answer away: an alias as whole words, or a word starting with its stem.

    The stem rule catches "the act of running" for "run" and "Andorran" for "Andorra": a question word that
    begins with the first ``len - 2`` letters (at least 4) of a word of an answer gives it away.
    """
    words = _words(question)
    padded = f" {' '.join(words)} "
    for alias in target:
        alias_words = _words(alias)
        if not alias_words:
            continue
        if f" {' '.join(alias_words)} " in padded:
            return True
        for word in alias_words:
            if len(word) >= 4:
                stem = word[: max(4, len(word) - 2)]
                if any(w.startswith(stem) for w in words):
                    return True
    return False


INTERSECTION_KINDS = frozenset({"common_neighbour"})
"""Two-hop kinds whose passages each hold the answer among others (the rest are bridges: the first passage
names the entity that the second one answers about, and never the answer itself)."""


@functools.lru_cache(maxsize=1)
def candidate_questions() -> tuple[Candidate, ...]:
    """Every question that may be drawn, checked against the default corpus.

    Kept only when no answer is given away by the question (nor, for two-hop questions, the bridge), every
    supporting passage is in the corpus, the last one holds the answer, the first one of a bridge question
    does not, and no other candidate asks the same question.
    """
    corpus = {p["id"]: p["text"] for p in build_corpus()}
    synsets = load_wordnet()

    @functools.cache
    def normalized(pid: str) -> str:
        return f" {normalize_answer(corpus[pid])} "

    def holds(pid: str, target: Iterable[str]) -> bool:
        return any(f" {normalize_answer(alias)} " in normalized(pid) for alias in target)

    kept = []
    for c in country_questions() + wordnet_questions():
        if answer_in_question(c.question, c.target):
            continue
        if any(pid not in corpus for pid in c.supporting_ids) or not holds(c.supporting_ids[-1], c.target):
            continue
        if len(c.supporting_ids) > 1 and c.kind not in INTERSECTION_KINDS:
            if holds(c.supporting_ids[0], c.target):
                continue  # the first passage answers already: not a two-hop question
            if c.data_source == "wordnet":
                # naming the bridge in the question would make the question single-hop
                bridge = synsets[c.supporting_ids[1].removeprefix("wordnet-")]
                if answer_in_question(c.question, bridge.lemmas):
                    continue
        kept.append(c)
    texts = Counter(normalize_answer(c.question) for c in kept)
    return tuple(c for c in kept if texts[normalize_answer(c.question)] == 1)
