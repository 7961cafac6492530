"""The offline question-answering data of the ``search`` environment: a passage corpus and QA splits.

Everything is built offline from two sources that install as ordinary packages:

- WordNet 3.0 (Debian's ``wordnet-base``: ``/usr/share/wordnet``, or ``$WNSEARCHDIR``), read straight from
  its database files (``man 5 wndb``): one passage per synset, with its words as the title and its
  definition, examples, hypernyms ("a kind of"), holonyms ("a part of") and antonyms written as prose;
- the ``countryinfo`` package's facts on about 250 countries and territories, written as five passages per
  country (overview, geography and borders, economy and codes, languages and people, administrative
  divisions).

The corpus rows look like Search-R1's wiki-18: ``{"id", "title", "text", "contents"}`` with ``contents``
= ``'"<title>"\\n<text>'``. The question rows are in SkyRL's format (see :func:`build`) and every answer
needs retrieval: the question never contains an answer, exactly one entity satisfies it, and its
``extra_info["supporting_ids"]`` name the passages that hold the answer chain (one for single-hop
questions, two for multi-hop ones). No passage contains a question.

:func:`ensure_dataset` builds the default dataset on first use (a few seconds) into
``cache_root()/search/<name>-v<version>-seed<seed>/``; the version carries a hash of this file, so a change
to the generator builds a new dataset instead of reusing a stale one. :func:`load_corpus`,
:func:`load_split` and :func:`default_task` read it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import random
import re
import time
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from skyrl_gym.core import Task
from skyrl_gym.envs.cache import build_once, cache_root
from skyrl_gym.envs.search.scoring import normalize_answer

__all__ = [
    "DATASET_NAME",
    "DEFAULT_SIZES",
    "ENV_CLASS",
    "INSTRUCTION",
    "MAX_TURNS",
    "SPLITS",
    "TEMPLATES",
    "Country",
    "Synset",
    "build",
    "corpus_path",
    "dataset_dir",
    "default_task",
    "ensure_dataset",
    "load_corpus",
    "load_countries",
    "load_split",
    "load_wordnet",
    "make_prompt",
]

GENERATOR_VERSION = "1"
DATASET_NAME = "offline-qa"
"""The folder name's prefix under ``cache_root()/search``."""

SPLITS = ("train", "test")
DEFAULT_SEED = 0
DEFAULT_SIZES = {"train": 2000, "test": 400}
ENV_CLASS = "search"
MAX_TURNS = 4

HOLDOUT_SHARE = 0.5
"""The share of the test split asked about entities (countries, synsets) that no training question uses."""

INSTRUCTION = (
    "Answer the question below. Reason step by step inside <think> and </think> whenever you need to. "
    "You do not know everything: to look something up, write a search query as <search> query </search> "
    "and the top results will come back between <information> and </information>. Search as often as you "
    "need; one question may take several searches, each building on what the last one found. When you are "
    "sure, give only the final answer, a few words at most and without explanation, between <answer> and "
    "</answer>, for example <answer> Ada Lovelace </answer>."
)
"""The instruction of every prompt (Search-R1's protocol: think, search, read the information, answer)."""


def make_prompt(question: str) -> list[dict[str, str]]:
    """The chat prompt for ``question``: one user message with :data:`INSTRUCTION` and the question."""
    return [{"role": "user", "content": f"{INSTRUCTION}\n\nQuestion: {question.strip()}"}]


# -- sources -----------------------------------------------------------------------------------------------
def wordnet_dir() -> Path:
    """The folder of WordNet's database files: ``$WNSEARCHDIR`` (WordNet's own variable), else Debian's."""
    folder = Path(os.environ.get("WNSEARCHDIR") or "/usr/share/wordnet")
    missing = [name for name in _WORDNET_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"WordNet's database files ({', '.join(missing)}) are not in {folder}: install them with "
            "`apt-get install wordnet-base`, or set WNSEARCHDIR to the folder that holds them"
        )
    return folder


_WORDNET_FILES = tuple(
    f"{kind}.{pos}" for kind in ("data", "index") for pos in ("noun", "verb", "adj", "adv")
)


def countryinfo_dir() -> Path:
    """The folder of the ``countryinfo`` package's JSON files (one per country)."""
    try:
        import countryinfo
    except ImportError as error:
        raise ImportError(
            "the search dataset needs the countryinfo package: pip install 'skyrl[search]'"
        ) from error
    folder = Path(countryinfo.__file__).parent / "data"
    if not any(folder.glob("*.json")):
        raise FileNotFoundError(f"no country files in {folder}: reinstall with pip install countryinfo")
    return folder


@dataclasses.dataclass(frozen=True)
class Country:
    """One country or territory's facts, cleaned from ``countryinfo``."""

    code: str
    """ISO 3166 alpha-3 code, e.g. ``"FRA"``."""
    name: str
    aliases: tuple[str, ...]
    """Other names that identify this country alone (``"French Republic"``), without codes."""
    capital: str
    region: str
    subregion: str
    population: int | None
    area: float | None
    borders: tuple[str, ...] | None
    """Codes of the neighbours that list this country too (``None``: the source says nothing)."""
    currencies: tuple[str, ...]
    """ISO 4217 codes of the currencies in use, without fund codes."""
    languages: tuple[str, ...]
    """Names of the official languages."""
    calling_codes: tuple[str, ...]
    """Without the ``+``."""
    tlds: tuple[str, ...]
    demonym: str
    timezones: tuple[str, ...]
    divisions: tuple[str, ...]
    """First-level administrative divisions (provinces, states, regions...)."""


# Records of states that no longer exist; their capitals and codes belong to today's states.
_DEFUNCT = frozenset({"ANT", "SCG"})

# ISO 4217 fund and accounting codes: units of account, not the money people pay with.
_FUND_CODES = frozenset({"BOV", "CHE", "CHW", "CLF", "USN", "USS", "UYI"})

CURRENCY_NAMES = {
    "AED": "UAE dirham", "AFN": "Afghan afghani", "ALL": "Albanian lek", "AMD": "Armenian dram",
    "AOA": "Angolan kwanza", "ARS": "Argentine peso", "AUD": "Australian dollar", "AWG": "Aruban florin",
    "AZN": "Azerbaijani manat", "BAM": "Bosnia and Herzegovina convertible mark", "BBD": "Barbados dollar",
    "BDT": "Bangladeshi taka", "BGN": "Bulgarian lev", "BHD": "Bahraini dinar", "BIF": "Burundian franc",
    "BMD": "Bermudian dollar", "BND": "Brunei dollar", "BOB": "Bolivian boliviano", "BRL": "Brazilian real",
    "BSD": "Bahamian dollar", "BTN": "Bhutanese ngultrum", "BWP": "Botswana pula", "BYR": "Belarusian ruble",
    "BZD": "Belize dollar", "CAD": "Canadian dollar", "CDF": "Congolese franc", "CHF": "Swiss franc",
    "CLP": "Chilean peso", "CNY": "renminbi", "COP": "Colombian peso", "CRC": "Costa Rican colón",
    "CSD": "Serbian dinar", "CUC": "Cuban convertible peso", "CUP": "Cuban peso",
    "CVE": "Cape Verdean escudo", "CZK": "Czech koruna", "DJF": "Djiboutian franc", "DKK": "Danish krone",
    "DOP": "Dominican peso", "DZD": "Algerian dinar", "EGP": "Egyptian pound", "ERN": "Eritrean nakfa",
    "ETB": "Ethiopian birr", "EUR": "euro", "FJD": "Fiji dollar", "FKP": "Falkland Islands pound",
    "GBP": "pound sterling", "GEL": "Georgian lari", "GHS": "Ghanaian cedi", "GIP": "Gibraltar pound",
    "GMD": "Gambian dalasi", "GNF": "Guinean franc", "GTQ": "Guatemalan quetzal", "GYD": "Guyanese dollar",
    "HKD": "Hong Kong dollar", "HNL": "Honduran lempira", "HRK": "Croatian kuna", "HTG": "Haitian gourde",
    "HUF": "Hungarian forint", "IDR": "Indonesian rupiah", "ILS": "Israeli new shekel", "INR": "Indian rupee",
    "IQD": "Iraqi dinar", "IRR": "Iranian rial", "ISK": "Icelandic króna", "JMD": "Jamaican dollar",
    "JOD": "Jordanian dinar", "JPY": "Japanese yen", "KES": "Kenyan shilling", "KGS": "Kyrgyzstani som",
    "KHR": "Cambodian riel", "KMF": "Comorian franc", "KPW": "North Korean won", "KRW": "South Korean won",
    "KWD": "Kuwaiti dinar", "KYD": "Cayman Islands dollar", "KZT": "Kazakhstani tenge", "LAK": "Lao kip",
    "LBP": "Lebanese pound", "LKR": "Sri Lankan rupee", "LRD": "Liberian dollar", "LSL": "Lesotho loti",
    "LYD": "Libyan dinar", "MAD": "Moroccan dirham", "MDL": "Moldovan leu", "MGA": "Malagasy ariary",
    "MKD": "Macedonian denar", "MMK": "Myanmar kyat", "MNT": "Mongolian tögrög", "MOP": "Macanese pataca",
    "MRO": "Mauritanian ouguiya", "MUR": "Mauritian rupee", "MVR": "Maldivian rufiyaa",
    "MWK": "Malawian kwacha", "MXN": "Mexican peso", "MYR": "Malaysian ringgit", "MZN": "Mozambican metical",
    "NAD": "Namibian dollar", "NGN": "Nigerian naira", "NIO": "Nicaraguan córdoba", "NOK": "Norwegian krone",
    "NPR": "Nepalese rupee", "NZD": "New Zealand dollar", "OMR": "Omani rial", "PAB": "Panamanian balboa",
    "PEN": "Peruvian sol", "PGK": "Papua New Guinean kina", "PHP": "Philippine peso", "PKR": "Pakistani rupee",
    "PLN": "Polish złoty", "PYG": "Paraguayan guaraní", "QAR": "Qatari riyal", "RON": "Romanian leu",
    "RSD": "Serbian dinar", "RUB": "Russian ruble", "RWF": "Rwandan franc", "SAR": "Saudi riyal",
    "SBD": "Solomon Islands dollar", "SCR": "Seychellois rupee", "SDG": "Sudanese pound",
    "SEK": "Swedish krona", "SGD": "Singapore dollar", "SHP": "Saint Helena pound",
    "SLL": "Sierra Leonean leone", "SOS": "Somali shilling", "SRD": "Surinamese dollar",
    "SSP": "South Sudanese pound", "STD": "São Tomé and Príncipe dobra", "SVC": "Salvadoran colón",
    "SYP": "Syrian pound", "SZL": "Swazi lilangeni", "THB": "Thai baht", "TJS": "Tajikistani somoni",
    "TMT": "Turkmenistan manat", "TND": "Tunisian dinar", "TOP": "Tongan paʻanga", "TRY": "Turkish lira",
    "TTD": "Trinidad and Tobago dollar", "TWD": "New Taiwan dollar", "TZS": "Tanzanian shilling",
    "UAH": "Ukrainian hryvnia", "UGX": "Ugandan shilling", "USD": "United States dollar",
    "UYU": "Uruguayan peso", "UZS": "Uzbekistani som", "VEF": "Venezuelan bolívar", "VND": "Vietnamese đồng",
    "VUV": "Vanuatu vatu", "WST": "Samoan tālā", "XAF": "Central African CFA franc",
    "XCD": "East Caribbean dollar", "XOF": "West African CFA franc", "XPF": "CFP franc", "YER": "Yemeni rial",
    "ZAR": "South African rand", "ZMK": "Zambian kwacha",
}  # fmt: skip
"""English names of the ISO 4217 codes the country facts use."""

LANGUAGE_NAMES = {
    "af": "Afrikaans", "am": "Amharic", "ar": "Arabic", "ay": "Aymara", "az": "Azerbaijani",
    "be": "Belarusian", "bg": "Bulgarian", "bi": "Bislama", "bn": "Bengali", "bs": "Bosnian", "ca": "Catalan",
    "ch": "Chamorro", "cnr": "Montenegrin", "cs": "Czech", "da": "Danish", "de": "German", "dv": "Dhivehi",
    "dz": "Dzongkha", "el": "Greek", "en": "English", "es": "Spanish", "et": "Estonian", "fa": "Persian",
    "ff": "Fula", "fi": "Finnish", "fj": "Fijian", "fo": "Faroese", "fr": "French", "ga": "Irish",
    "gn": "Guaraní", "gv": "Manx", "he": "Hebrew", "hi": "Hindi", "hr": "Croatian", "ht": "Haitian Creole",
    "hu": "Hungarian", "hy": "Armenian", "id": "Indonesian", "is": "Icelandic", "it": "Italian",
    "ja": "Japanese", "ka": "Georgian", "kg": "Kongo", "kk": "Kazakh", "kl": "Greenlandic", "km": "Khmer",
    "ko": "Korean", "ku": "Kurdish", "ky": "Kyrgyz", "la": "Latin", "lb": "Luxembourgish", "ln": "Lingala",
    "lo": "Lao", "lt": "Lithuanian", "lu": "Luba-Katanga", "lv": "Latvian", "mg": "Malagasy",
    "mh": "Marshallese", "mi": "Māori", "mk": "Macedonian", "mn": "Mongolian", "ms": "Malay", "mt": "Maltese",
    "my": "Burmese", "na": "Nauruan", "nb": "Norwegian Bokmål", "nd": "Northern Ndebele", "ne": "Nepali",
    "nl": "Dutch", "nn": "Norwegian Nynorsk", "no": "Norwegian", "nr": "Southern Ndebele", "ny": "Chichewa",
    "oc": "Occitan", "pa": "Punjabi", "pl": "Polish", "ps": "Pashto", "pt": "Portuguese", "qu": "Quechua",
    "rn": "Kirundi", "ro": "Romanian", "rs": "Serbian", "ru": "Russian", "rw": "Kinyarwanda", "sg": "Sango",
    "si": "Sinhala", "sk": "Slovak", "sl": "Slovene", "sm": "Samoan", "sn": "Shona", "so": "Somali",
    "sq": "Albanian", "sr": "Serbian", "ss": "Swazi", "st": "Southern Sotho", "sv": "Swedish", "sw": "Swahili",
    "ta": "Tamil", "tg": "Tajik", "th": "Thai", "ti": "Tigrinya", "tk": "Turkmen", "tn": "Tswana",
    "to": "Tongan", "tr": "Turkish", "ts": "Tsonga", "uk": "Ukrainian", "ur": "Urdu", "uz": "Uzbek",
    "ve": "Venda", "vi": "Vietnamese", "xh": "Xhosa", "zh": "Chinese", "zu": "Zulu",
}  # fmt: skip
"""English names of the language codes the country facts use (``rs`` is the source's code for Serbian)."""


@functools.lru_cache(maxsize=1)
def load_countries() -> tuple[Country, ...]:
    """The countries and territories of ``countryinfo``, cleaned, sorted by code.

    Duplicate records of one ISO code keep the fullest; records of states that no longer exist are dropped;
    a land border is kept only when both neighbours list it; aliases shared by two countries are dropped.
    """
    records: dict[str, dict[str, Any]] = {}
    for path in sorted(countryinfo_dir().glob("*.json")):
        with path.open(encoding="utf-8") as handle:
            record = json.load(handle)
        code = (record.get("ISO") or {}).get("alpha3")
        if not code or code in _DEFUNCT or not record.get("region"):
            continue
        capital = record.get("capital")
        capital = capital[0] if isinstance(capital, list) and capital else capital
        if not isinstance(capital, str) or not capital.strip():
            continue
        record["capital"] = capital.strip()
        if code not in records or len(record) > len(records[code]):
            records[code] = record
    alpha3 = {r["ISO"]["alpha2"]: code for code, r in records.items() if r["ISO"].get("alpha2")}

    def neighbours(record: dict[str, Any]) -> set[str]:
        codes = {alpha3.get(c, c) if len(c) == 2 else c for c in record.get("borders") or ()}
        return {c for c in codes if c in records}

    listed = {code: neighbours(record) for code, record in records.items()}
    alias_owners: dict[str, set[str]] = defaultdict(set)
    for code, record in records.items():
        for alias in _alias_candidates(record):
            alias_owners[normalize_answer(alias)].add(code)
    names = {normalize_answer(r["name"]) for r in records.values()}
    countries = []
    for code in sorted(records):
        record = records[code]
        aliases = []
        for alias in _alias_candidates(record):
            key = normalize_answer(alias)
            if alias_owners[key] == {code} and key not in names and key != normalize_answer(record["name"]):
                aliases.append(alias)
        borders = None
        if "borders" in record:
            borders = tuple(sorted(c for c in listed[code] if code in listed[c]))
        currencies = tuple(c for c in record.get("currencies") or () if c not in _FUND_CODES)
        countries.append(
            Country(
                code=code,
                name=record["name"].strip(),
                aliases=tuple(dict.fromkeys(aliases)),
                capital=record["capital"],
                region=record["region"],
                subregion=record.get("subregion") or "",
                population=record.get("population") or None,
                area=record.get("area") or None,
                borders=borders,
                currencies=tuple(c for c in currencies if c in CURRENCY_NAMES),
                languages=tuple(
                    dict.fromkeys(
                        LANGUAGE_NAMES[c] for c in record.get("languages") or () if c in LANGUAGE_NAMES
                    )
                ),
                calling_codes=tuple(c for c in record.get("callingCodes") or () if c),
                tlds=tuple(t for t in record.get("tld") or () if t),
                demonym=(record.get("demonym") or "").strip(),
                timezones=tuple(record.get("timezones") or ()),
                divisions=tuple(dict.fromkeys(p.strip() for p in record.get("provinces") or () if p.strip())),
            )
        )
    return tuple(countries)


def _alias_candidates(record: dict[str, Any]) -> list[str]:
    """Alternative spellings worth accepting as answers: Latin script, not a code, not a fragment."""
    out = []
    for alias in record.get("altSpellings") or ():
        alias = alias.strip()
        if len(alias) <= 3 or alias.isupper() or not _latin(alias):
            continue
        out.append(alias)
    name = record["name"].strip()
    if name.lower().startswith("the "):
        out.append(name[4:])
    return out


def _latin(text: str) -> bool:
    return all(not ch.isalpha() or "LATIN" in unicodedata.name(ch, "") for ch in text)


@dataclasses.dataclass(frozen=True)
class Synset:
    """One WordNet synset: its words, definition, examples and the relations the passages mention."""

    key: str
    """``<pos><offset>``, e.g. ``"n02084071"`` (pos: n, v, a, r; satellites count as a)."""
    pos: str
    lemmas: tuple[str, ...]
    definition: str
    examples: tuple[str, ...]
    hypernyms: tuple[str, ...] = ()
    instance_of: tuple[str, ...] = ()
    part_of: tuple[str, ...] = ()
    member_of: tuple[str, ...] = ()
    parts: tuple[str, ...] = ()
    members: tuple[str, ...] = ()
    antonyms: tuple[str, ...] = ()
    similar_to: tuple[str, ...] = ()
    frequent: bool = False
    """Whether a word of it is among the senses tagged in WordNet's semantic concordance (common usage)."""


_POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
_POS_WORDS = {"n": "noun", "v": "verb", "a": "adjective", "r": "adverb"}
_RELATIONS = {
    "@": "hypernyms",
    "@i": "instance_of",
    "#p": "part_of",
    "#m": "member_of",
    "%p": "parts",
    "%m": "members",
    "!": "antonyms",
    "&": "similar_to",
}


@functools.lru_cache(maxsize=1)
def load_wordnet() -> Mapping[str, Synset]:
    """Every synset of WordNet's database files, by key (117,659; parsed in about two seconds, then cached)."""
    folder = wordnet_dir()
    frequent: set[str] = set()
    for pos, name in _POS_FILES.items():
        with (folder / f"index.{name}").open(encoding="utf-8") as handle:
            for line in handle:
                if line.startswith(" "):
                    continue  # the licence header
                fields = line.split()
                pointer_count = int(fields[3])
                tagged = int(fields[5 + pointer_count])
                frequent.update(
                    pos + offset for offset in fields[6 + pointer_count : 6 + pointer_count + tagged]
                )
    synsets: dict[str, Synset] = {}
    for pos, name in _POS_FILES.items():
        with (folder / f"data.{name}").open(encoding="utf-8") as handle:
            for line in handle:
                if line.startswith(" "):
                    continue
                synset = _parse_synset(pos, line, frequent)
                synsets[synset.key] = synset
    return MappingProxyType(synsets)


def _parse_synset(pos: str, line: str, frequent: set[str]) -> Synset:
    head, _, gloss = line.partition(" | ")
    fields = head.split()
    key = pos + fields[0]
    word_count = int(fields[3], 16)
    lemmas = []
    for i in range(word_count):
        word = re.sub(r"\((a|p|ip)\)$", "", fields[4 + 2 * i]).replace("_", " ")
        if word.lower() not in (w.lower() for w in lemmas):
            lemmas.append(word)
    at = 4 + 2 * word_count
    relations: dict[str, list[str]] = defaultdict(list)
    for _ in range(int(fields[at])):
        symbol, offset, target_pos = fields[at + 1], fields[at + 2], fields[at + 3]
        at += 4
        if symbol in _RELATIONS:
            relations[_RELATIONS[symbol]].append(("a" if target_pos == "s" else target_pos) + offset)
    definition, examples = _split_gloss(gloss.strip())
    return Synset(
        key=key,
        pos=pos,
        lemmas=tuple(lemmas),
        definition=definition,
        examples=examples,
        frequent=key in frequent,
        **{field: tuple(dict.fromkeys(keys)) for field, keys in relations.items()},
    )


def _split_gloss(gloss: str) -> tuple[str, tuple[str, ...]]:
    """A gloss is ``definition; "example"; "example"``: split it (a few glosses have no definition)."""
    start = gloss.find('"')
    definition = (gloss if start < 0 else gloss[:start]).strip().rstrip(";").strip()
    examples = tuple(e.strip() for e in re.findall(r'"([^"]+)"', gloss[start:] if start >= 0 else ""))
    return definition, examples


# -- the corpus --------------------------------------------------------------------------------------------
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


# -- the questions -----------------------------------------------------------------------------------------
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


_MAX_PER_ANSWER = 2
"""At most this many questions of one kind share an answer ("Sub-Saharan Africa", "person"...)."""


def select_splits(
    candidates: Iterable[Candidate], *, seed: int, n_train: int, n_test: int
) -> dict[str, list[tuple[Candidate, bool]]]:
    """Draw the train and test questions: ``{split: [(candidate, held_out), ...]}``.

    Half of the test split (:data:`HOLDOUT_SHARE`) is about held-out entities only: a random eighth of the
    countries and a random tenth of the synsets are set aside, and no training question touches them. Each
    split takes its questions in turn from each data source and, within a source, from each kind, so that
    kinds are balanced as far as their candidates allow.
    """
    rng = random.Random(f"skyrl_search/splits/{seed}")
    shuffled = list(candidates)
    rng.shuffle(shuffled)
    per_answer: Counter[tuple[str, str]] = Counter()
    capped = []
    for c in shuffled:
        answer = (c.kind, normalize_answer(c.target[0]))
        if per_answer[answer] < _MAX_PER_ANSWER:
            per_answer[answer] += 1
            capped.append(c)
    entities = sorted({e for c in capped for e in c.entities})
    held = {e for e in entities if rng.random() < (0.125 if e.startswith("country-") else 0.1)}
    held_pool = [c for c in capped if c.entities <= held]
    open_pool = [c for c in capped if not c.entities <= held]
    n_held = min(round(n_test * HOLDOUT_SHARE), len(held_pool))
    test = [(c, True) for c in _balanced(held_pool, n_held)]
    test += [(c, False) for c in _balanced(open_pool, n_test - n_held)]
    chosen = {id(c) for c, _ in test}
    train_pool = [c for c in open_pool if id(c) not in chosen and not c.entities & held]
    train = [(c, False) for c in _balanced(train_pool, n_train)]
    if len(train) < n_train or len(test) < n_test:
        raise ValueError(
            f"asked for {n_train} train and {n_test} test questions, but only {len(train)} and {len(test)} "
            f"could be drawn from {len(capped)} candidates: ask for fewer"
        )
    return {"train": train, "test": test}


def _balanced(pool: list[Candidate], n: int) -> list[Candidate]:
    """``n`` candidates of ``pool`` (already shuffled), taken in turn from each source, then each kind."""
    by_source: dict[str, dict[str, list[Candidate]]] = defaultdict(lambda: defaultdict(list))
    for c in pool:
        by_source[c.data_source][c.kind].append(c)
    queues = {source: _round_robin(kinds) for source, kinds in sorted(by_source.items())}
    picked: list[Candidate] = []
    while len(picked) < n and queues:
        for source in list(queues):
            if len(picked) >= n:
                break
            try:
                picked.append(next(queues[source]))
            except StopIteration:
                del queues[source]
    return picked


def _round_robin(kinds: dict[str, list[Candidate]]):
    lists = [list(kinds[k]) for k in sorted(kinds)]
    position = 0
    while lists:
        lists = [items for items in lists if len(items) > position]
        for items in lists:
            yield items[position]
        position += 1


def make_row(candidate: Candidate, split: str, index: int, *, held_out: bool = False) -> dict[str, Any]:
    """The SkyRL dataset row of a question."""
    return {
        "data_source": candidate.data_source,
        "prompt": make_prompt(candidate.question),
        "env_class": ENV_CLASS,
        "reward_spec": {"method": "rule", "ground_truth": {"target": list(candidate.target)}},
        "extra_info": {
            "split": split,
            "index": index,
            "hops": len(candidate.supporting_ids),
            "kind": candidate.kind,
            "question": candidate.question,
            "supporting_ids": list(candidate.supporting_ids),
            "held_out": held_out,
        },
        "question": candidate.question,
        "max_turns": MAX_TURNS,
    }


def _write_jsonl(rows: list[dict[str, Any]], path: Path) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def _write_parquet(rows: list[dict[str, Any]], path: Path) -> bool:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return False
    pq.write_table(pa.Table.from_pylist(rows), path)
    return True


def _counts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    info = [r["extra_info"] for r in rows]
    return {
        "total": len(rows),
        "data_source": dict(sorted(Counter(r["data_source"] for r in rows).items())),
        "hops": {str(k): v for k, v in sorted(Counter(i["hops"] for i in info).items())},
        "held_out": sum(1 for i in info if i["held_out"]),
        "kind": dict(sorted(Counter(i["kind"] for i in info).items())),
    }


def build(
    out_dir: str | Path,
    *,
    seed: int = DEFAULT_SEED,
    n_train: int | None = None,
    n_test: int | None = None,
    full_wordnet: bool = False,
) -> dict[str, Any]:
    """Write the corpus and the QA splits into ``out_dir``; return the counts (also in ``stats.json``).

    Files: ``corpus.jsonl``, ``train.jsonl``, ``test.jsonl`` (and ``train.parquet``/``test.parquet`` when
    pyarrow is installed), ``stats.json``. Sizes default to :data:`DEFAULT_SIZES`; the same ``seed`` and
    sizes always give the same files. Question rows have the columns ``data_source`` (``"countries"`` or
    ``"wordnet"``), ``prompt``, ``env_class`` (``"search"``), ``reward_spec`` (``{"method": "rule",
    "ground_truth": {"target": [answer, aliases...]}}``), ``extra_info`` (``split``, ``index``, ``hops``,
    ``kind``, ``question``, ``supporting_ids``, ``held_out``), ``question`` and ``max_turns``.
    ``full_wordnet`` puts every synset in the corpus (about 117,000 passages) instead of the frequent ones.
    """
    started = time.perf_counter()
    n_train = DEFAULT_SIZES["train"] if n_train is None else int(n_train)
    n_test = DEFAULT_SIZES["test"] if n_test is None else int(n_test)
    if n_train < 0 or n_test < 0:
        raise ValueError(f"split sizes must be at least 0, not train={n_train} test={n_test}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    corpus = build_corpus(full_wordnet=full_wordnet)
    _write_jsonl(corpus, out / "corpus.jsonl")
    candidates = candidate_questions()
    drawn = select_splits(candidates, seed=int(seed), n_train=n_train, n_test=n_test)
    summary: dict[str, Any] = {
        "seed": int(seed),
        "version": _version(),
        "corpus": {
            "total": len(corpus),
            "countries": sum(1 for p in corpus if p["id"].startswith("country-")),
            "wordnet": sum(1 for p in corpus if p["id"].startswith("wordnet-")),
        },
        "candidates": len(candidates),
    }
    for split in SPLITS:
        rows = [make_row(c, split, i, held_out=held) for i, (c, held) in enumerate(drawn[split])]
        _write_jsonl(rows, out / f"{split}.jsonl")
        _write_parquet(rows, out / f"{split}.parquet")
        summary[split] = _counts(rows)
    summary["build_seconds"] = round(time.perf_counter() - started, 2)
    (out / "stats.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


# -- the bundled dataset (built on first use) --------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _version() -> str:
    source = Path(__file__).read_bytes()
    return f"{GENERATOR_VERSION}.{hashlib.sha256(source).hexdigest()[:10]}"


def dataset_dir(seed: int = DEFAULT_SEED) -> Path:
    """The folder of the bundled dataset for ``seed`` (it may not be built yet)."""
    return cache_root() / "search" / f"{DATASET_NAME}-v{_version()}-seed{int(seed)}"


def ensure_dataset(seed: int = DEFAULT_SEED) -> Path:
    """Build the bundled dataset for ``seed`` unless it is in the cache already; return its folder.

    The build goes into a temporary folder next to the final one and is renamed into place, so other
    threads and processes building at the same time never see half a dataset: the first rename wins.
    """
    return build_once(dataset_dir(seed), lambda staging: build(staging, seed=seed), done="stats.json")


def corpus_path(seed: int = DEFAULT_SEED) -> Path:
    """The bundled corpus file (``corpus.jsonl``), built first if needed."""
    return ensure_dataset(seed) / "corpus.jsonl"


def load_corpus(path: str | Path | None = None) -> list[dict[str, str]]:
    """The passages of a corpus file (or of a dataset folder's ``corpus.jsonl``); the bundled one by default."""
    path = corpus_path() if path is None else Path(path)
    if path.is_dir():
        path = path / "corpus.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"no corpus at {path}: build one with datasets/search/build.py --out DIR")
    return [json.loads(line) for line in _read_lines(str(path))]


@functools.lru_cache(maxsize=8)
def _read_lines(path: str) -> tuple[str, ...]:
    with open(path, encoding="utf-8") as handle:
        return tuple(line for line in handle if line.strip())


def load_split(split: str, seed: int = DEFAULT_SEED) -> list[dict[str, Any]]:
    """The rows of ``split`` (``"train"`` or ``"test"``) of the bundled dataset, built first if needed.

    Each call returns fresh dictionaries, which the caller may change.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; the search dataset has {', '.join(SPLITS)}")
    folder = ensure_dataset(seed)
    return [json.loads(line) for line in _read_lines(str(folder / f"{split}.jsonl"))]


def default_task(seed: int | None = None) -> Task:
    """One row of the bundled test split as a task, the same row for the same ``seed`` (any row for ``None``).

    ``prompt`` is the row's chat prompt; ``extras`` holds every other column but ``env_class``:
    ``data_source``, ``reward_spec``, ``extra_info``, ``question`` and ``max_turns``.
    """
    folder = ensure_dataset(DEFAULT_SEED)
    lines = _read_lines(str(folder / "test.jsonl"))
    pick = random.Random(f"skyrl_search/default_task/{seed}") if seed is not None else random.Random()
    row = json.loads(lines[pick.randrange(len(lines))])
    prompt = row.pop("prompt")
    row.pop("env_class", None)
    return Task(prompt=prompt, extras=row)
