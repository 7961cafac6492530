"""The facts on about 250 countries and territories of the ``countryinfo`` package, cleaned: names and
unambiguous aliases, capitals, regions, borders both sides agree on, currencies, languages, codes, divisions."""

from __future__ import annotations

import dataclasses
import functools
import json
import unicodedata
from collections import defaultdict
from pathlib import Path
from typing import Any

from skyrl_gym.envs.search.scoring import normalize_answer


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
