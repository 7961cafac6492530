"""The bundled long-context tasks of the ``rlm`` environment: questions over a generated vault logbook.

Each task is a logbook of about a thousand lines (60,000-100,000 characters) that a model cannot read in one
look and is meant to search with code in the REPL: vaults sealed by inspectors with a code, inspections of
vaults that quote stale codes (distractors), routine entries, and a directory saying where each inspector is
stationed. Questions come in three kinds:

- ``code``: the code a named vault was sealed with (one needle; the distractors quote other codes);
- ``count``: how many vaults a named inspector sealed (needs every matching line);
- ``city``: where the inspector who sealed a named vault is stationed (two hops: the seal, then the
  directory).

Everything is drawn from ``random.Random(seed)``: the same seed gives the same task. The reference code for
each kind solves it from ``context`` with SkyRL's REPL builtins (no imports) and returns through
``FINAL_VAR``.
"""

from __future__ import annotations

import random
from typing import Any

__all__ = ["KINDS", "DEFAULT_MAX_TURNS", "default_task", "make_task"]

KINDS = ("code", "count", "city")
DEFAULT_MAX_TURNS = 10

_COLOURS = (
    "Amber", "Azure", "Beryl", "Cobalt", "Coral", "Crimson", "Ebony", "Emerald", "Garnet", "Indigo", "Ivory",
    "Jade", "Onyx", "Opal", "Pearl", "Quartz", "Ruby", "Saffron", "Slate", "Topaz", "Umber", "Violet",
)  # fmt: skip
_FIRST = (
    "Mara", "Tobias", "Ines", "Kofi", "Liesel", "Arjun", "Noor", "Pavel", "Selma", "Dario", "Yuki", "Oren",
    "Greta", "Malik", "Ilse", "Rafael", "Anouk", "Bram", "Chiara", "Emeka",
)  # fmt: skip
_LAST = (
    "Voss", "Halloran", "Okafor", "Lindqvist", "Marchetti", "Sato", "Dubois", "Novak", "Iyer", "Brandt",
    "Kowalski", "Moreau", "Achebe", "Castell", "Haugen", "Petrov",
)  # fmt: skip
_CITIES = (
    "Lisbon", "Tallinn", "Montevideo", "Hanoi", "Accra", "Reykjavik", "Valparaiso", "Tbilisi", "Kraków",
    "Nairobi", "Ljubljana", "Cusco", "Bergen", "Tangier", "Osaka", "Halifax",
)  # fmt: skip
_ROUTINE = (
    "routine sweep of corridor {n} found nothing unusual.",
    "humidity in storeroom {n} logged at {m} percent.",
    "badge reader at gate {n} restarted after a power dip.",
    "delivery of {m} archive boxes signed for at dock {n}.",
    "fire door {n} tested and closed again.",
    "night shift handed over to day shift with no incidents on floor {n}.",
    "lighting in aisle {n} replaced; {m} fixtures swapped.",
)


def _vault_names(rng: random.Random, count: int) -> list[str]:
    # two-digit numbers only, so that no vault's name is the start of another's
    pool = [f"{colour}-{number}" for colour in _COLOURS for number in range(10, 100)]
    return rng.sample(pool, count)


def make_task(seed: int, kind: str | None = None, *, max_turns: int = DEFAULT_MAX_TURNS) -> dict[str, Any]:
    """The task for ``seed`` (its kind cycles through :data:`KINDS` unless ``kind`` is given)."""
    rng = random.Random(seed)
    kind = kind or KINDS[seed % len(KINDS)]
    if kind not in KINDS:
        raise ValueError(f"unknown rlm task kind {kind!r}; known: {', '.join(KINDS)}")
    names = [f"{first} {last}" for first in _FIRST for last in _LAST]
    inspectors = rng.sample(names, 12)
    stations = dict(zip(inspectors, rng.sample(_CITIES, len(inspectors)), strict=True))
    vaults = _vault_names(rng, rng.randint(70, 110))
    sealed = {vault: (rng.choice(inspectors), f"{rng.randint(10000, 99999)}") for vault in vaults}

    entries: list[str] = []
    for vault, (inspector, code) in sealed.items():
        entries.append(f"inspector {inspector} sealed vault {vault} with code {code}.")
    for _ in range(rng.randint(40, 70)):  # stale codes quoted in inspections: what a careless search finds
        vault = rng.choice(vaults)
        stale = f"{rng.randint(10000, 99999)}"
        entries.append(
            f"inspector {rng.choice(inspectors)} inspected vault {vault}; old code {stale} is void."
        )
    for _ in range(rng.randint(750, 1150)):
        template = rng.choice(_ROUTINE)
        entries.append(template.format(n=rng.randint(1, 60), m=rng.randint(2, 95)))
    rng.shuffle(entries)
    lines = []
    for number, entry in enumerate(entries, start=1):
        day = 1 + number * 28 // len(entries)
        lines.append(f"[LOG {number:04d}] 2031-03-{min(day, 28):02d} {entry}")
    directory = [f"Inspector {name} is stationed in {city}." for name, city in stations.items()]
    rng.shuffle(directory)
    cut = rng.randint(len(lines) // 3, 2 * len(lines) // 3)
    document = "\n".join(
        ["VAULT REGISTRY LOGBOOK", *lines[:cut], "", "STAFF DIRECTORY", *directory, "", *lines[cut:]]
    )

    target_vault = rng.choice(vaults)
    sealer, code = sealed[target_vault]
    if kind == "code":
        question = f"What code was vault {target_vault} sealed with? Answer with the code only."
        answer = code
        reference = (
            f'line = [l for l in context.splitlines() if " sealed vault {target_vault} " in l][0]\n'
            'answer = line.split(" with code ")[1].rstrip(".")\n'
            'FINAL_VAR("answer")'
        )
    elif kind == "count":
        inspector = rng.choice(inspectors)
        question = f"How many vaults did inspector {inspector} seal? Answer with a number only."
        answer = str(sum(1 for who, _ in sealed.values() if who == inspector))
        reference = (
            f'answer = str(sum(1 for l in context.splitlines() if "inspector {inspector} sealed vault " in l))\n'
            'FINAL_VAR("answer")'
        )
    else:
        question = (
            f"In which city is the inspector who sealed vault {target_vault} stationed? "
            "Answer with the city only."
        )
        answer = stations[sealer]
        reference = (
            f'line = [l for l in context.splitlines() if " sealed vault {target_vault} " in l][0]\n'
            'who = line.split("inspector ", 1)[1].split(" sealed vault ")[0]\n'
            'entry = [l for l in context.splitlines() if l.startswith("Inspector " + who + " is stationed in ")][0]\n'
            'answer = entry.rsplit(" in ", 1)[1].rstrip(".")\n'
            'FINAL_VAR("answer")'
        )
    prompt = (
        "The context is the logbook of a vault registry: dated log entries and a staff directory. " + question
    )
    return {
        "prompt": [{"role": "user", "content": prompt}],
        "extras": {
            "reward_spec": {"method": "rule", "ground_truth": answer},
            "max_turns": max_turns,
            "extra_info": {"context_text": document, "task": kind, "reference_code": reference},
        },
    }


def default_task(seed: int | None = None, *, max_turns: int = DEFAULT_MAX_TURNS) -> dict[str, Any]:
    """A bundled task: the same one for the same seed, a random one for ``None``."""
    if seed is None:
        seed = random.randrange(2**31)
    return make_task(seed, max_turns=max_turns)
