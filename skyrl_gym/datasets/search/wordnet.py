"""WordNet 3.0 read straight from its database files (``man 5 wndb``): Debian's ``wordnet-base``
(``/usr/share/wordnet``, or ``$WNSEARCHDIR``), one :class:`Synset` per line of the ``data.*`` files."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType


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
