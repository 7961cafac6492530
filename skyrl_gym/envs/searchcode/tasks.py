"""The default task set of ``searchcode``: questions that need a lookup and a calculation, offline.

Each question combines two facts from the ``search`` environment's bundled corpus (the country passages
built from the ``countryinfo`` package; the facts are read from the same dataset's ``countries.jsonl``) with
arithmetic: the sum of two international calling codes, the difference of two populations, the combined area
of two countries, or a population density. The facts are the numbers exactly as the corpus writes them, so a model that
searches and computes gets the answer; the answer is a whole number, given as ``<solution>#### N</solution>``.

A task is a SkyRL row: one user message and ``reward_spec = {"method": "rule", "ground_truth": "<N>"}``, with
``max_turns`` 5 (two searches, a calculation, the answer and one turn to spare). The same seed gives the same
question.
"""

from __future__ import annotations

import functools
import random
from typing import Any, NamedTuple

from skyrl_gym.core import Task

__all__ = ["KINDS", "MAX_TURNS", "instruction", "make_prompt", "task_for_seed"]

DATA_SOURCE = "searchcode_countries"
MAX_TURNS = 5
KINDS = ("calling_codes", "population_gap", "total_area", "density")


def instruction(max_turns: int) -> str:
    """How to use the tools and how to answer, for an episode of ``max_turns`` turns."""
    return (
        "Answer the question below. Each turn you may call one tool:\n"
        "- <tool><search>query</search></tool> searches a reference corpus and shows the best passages;\n"
        "- <tool><python>code</python></tool> runs Python code and shows what it prints.\n"
        "When you know the answer, a whole number without units, write it as <solution>#### N</solution>. "
        f"You have at most {max_turns} turns."
    )


def make_prompt(question: str, max_turns: int = MAX_TURNS) -> list[dict[str, str]]:
    """The chat prompt: one user message with the tools, the answer format and the question."""
    return [{"role": "user", "content": f"{instruction(max_turns)}\n\nQuestion: {question}"}]


def _shown_area(area: float) -> int:
    return int(f"{area:.0f}")  # the corpus writes areas rounded to whole square kilometres


class _Country(NamedTuple):
    """The facts of one country that the questions use (a record of the search dataset's ``countries.jsonl``)."""

    code: str
    name: str
    calling_codes: tuple[str, ...]
    population: int | None
    area: float | None


@functools.lru_cache(maxsize=1)
def _countries() -> dict[str, tuple[Any, ...]]:
    from skyrl_gym.envs.search.tasks import load_countries

    countries = [
        _Country(c["code"], c["name"], tuple(c["calling_codes"]), c["population"], c["area"])
        for c in load_countries()
    ]
    return {
        "calling_codes": tuple(
            c for c in countries if len(c.calling_codes) == 1 and c.calling_codes[0].isdigit()
        ),
        "population": tuple(c for c in countries if c.population),
        "area": tuple(c for c in countries if c.area and _shown_area(c.area) >= 1),
        "density": tuple(c for c in countries if c.population and c.area and _shown_area(c.area) >= 1),
    }


def _question(kind: str, rng: random.Random) -> tuple[str, int, list[str]]:
    pools = _countries()
    if kind == "calling_codes":
        a, b = rng.sample(pools["calling_codes"], 2)
        question = f"What is the sum of the international calling codes of {a.name} and {b.name}?"
        return question, int(a.calling_codes[0]) + int(b.calling_codes[0]), [a.code, b.code]
    if kind == "population_gap":
        while True:
            a, b = rng.sample(pools["population"], 2)
            if a.population != b.population:
                break
        a, b = (a, b) if a.population > b.population else (b, a)
        question = f"How many more people live in {a.name} than in {b.name}?"
        return question, a.population - b.population, [a.code, b.code]
    if kind == "total_area":
        a, b = rng.sample(pools["area"], 2)
        question = f"What is the combined area of {a.name} and {b.name}, in square kilometres?"
        return question, _shown_area(a.area) + _shown_area(b.area), [a.code, b.code]
    country = rng.choice(pools["density"])
    question = (
        f"How many people live in {country.name} per square kilometre of its area, rounded down to a whole "
        "number?"
    )
    return question, country.population // _shown_area(country.area), [country.code]


def task_for_seed(seed: int | None = None) -> Task:
    """The question for ``seed``, the same one every time (a random one for ``None``)."""
    if seed is None:
        seed = random.randrange(2**31)
    rng = random.Random(f"{DATA_SOURCE}/{seed}")
    kind = rng.choice(KINDS)
    question, answer, codes = _question(kind, rng)
    extras: dict[str, Any] = {
        "data_source": DATA_SOURCE,
        "reward_spec": {"method": "rule", "ground_truth": str(answer)},
        "max_turns": MAX_TURNS,
        "extra_info": {"kind": kind, "countries": codes, "seed": seed},
    }
    return Task(prompt=make_prompt(question), extras=extras)
