"""A procedural generator of arithmetic word problems with whole-number answers.

Each problem comes from a template family (``kind``): shopping totals and change, rates and time, sharing
with remainders, multi-step counting, percentages, ages and unit conversions, each written in a few
paraphrases with its own names, items and numbers. Numbers are drawn so that every answer is a whole number
(prices divide evenly by the discount, the pieces fit the rope...).

Everything is deterministic for a seed. Train and test never share a question: every question belongs to
exactly one split, decided by a hash of its text (:func:`split_of`), and the generator for a split keeps
only the questions of that split.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Callable
from typing import Any

from skyrl_gym.core import Task

__all__ = [
    "DATA_SOURCE",
    "KINDS",
    "MathProblem",
    "build_rows",
    "generate_problem",
    "make_prompt",
    "split_of",
    "system_prompt",
    "task_for_seed",
]

DATA_SOURCE = "skyrl_math"
"""The ``data_source`` column of every row (trainers group their metrics by it)."""

SPLITS = ("train", "test")
TEST_SHARE = 5
"""One question in ``TEST_SHARE`` (by hash) belongs to the test split, the others to train."""


@dataclasses.dataclass(frozen=True)
class MathProblem:
    """One word problem: its ``question`` text, its whole-number ``answer`` and its template ``kind``."""

    question: str
    answer: int
    kind: str


@dataclasses.dataclass(frozen=True)
class _Person:
    name: str
    subject: str  # he / she / they
    possessive: str  # his / her / their
    plural: bool = False  # conjugation: "they have" / "she has"

    def verb(self, singular: str, plural: str) -> str:
        return plural if self.plural else singular

    @property
    def does(self) -> str:
        return self.verb("does", "do")


_PEOPLE = [
    _Person("Ana", "she", "her"),
    _Person("Ben", "he", "his"),
    _Person("Chloe", "she", "her"),
    _Person("Dmitri", "he", "his"),
    _Person("Esi", "she", "her"),
    _Person("Farid", "he", "his"),
    _Person("Grace", "she", "her"),
    _Person("Hiro", "he", "his"),
    _Person("Ines", "she", "her"),
    _Person("Jonas", "he", "his"),
    _Person("Kavya", "she", "her"),
    _Person("Liam", "he", "his"),
    _Person("Mei", "she", "her"),
    _Person("Nikolai", "he", "his"),
    _Person("Olu", "they", "their", plural=True),
    _Person("Priya", "she", "her"),
    _Person("Quinn", "they", "their", plural=True),
    _Person("Rosa", "she", "her"),
    _Person("Sami", "he", "his"),
    _Person("Tomasz", "he", "his"),
    _Person("Uma", "she", "her"),
    _Person("Vera", "she", "her"),
    _Person("Wen", "he", "his"),
    _Person("Yara", "she", "her"),
    _Person("Zane", "he", "his"),
]

# (singular, plural, lowest price, highest price) in whole dollars
_GOODS = [
    ("notebook", "notebooks", 2, 9),
    ("pencil", "pencils", 1, 3),
    ("book", "books", 6, 25),
    ("mug", "mugs", 4, 15),
    ("sandwich", "sandwiches", 3, 12),
    ("ticket", "tickets", 5, 40),
    ("plant", "plants", 3, 30),
    ("shirt", "shirts", 8, 45),
    ("bag of apples", "bags of apples", 2, 8),
    ("puzzle", "puzzles", 7, 30),
    ("lamp", "lamps", 12, 60),
    ("jar of honey", "jars of honey", 4, 14),
]

_COUNTABLES = [
    ("marble", "marbles"),
    ("sticker", "stickers"),
    ("cookie", "cookies"),
    ("card", "cards"),
    ("stamp", "stamps"),
    ("shell", "shells"),
    ("apple", "apples"),
    ("coin", "coins"),
    ("balloon", "balloons"),
    ("crayon", "crayons"),
]

_SHARES = [  # a group and what a percentage of it does
    ("students in a school", "take the bus"),
    ("runners in a race", "finish in under an hour"),
    ("seats in a hall", "are taken"),
    ("trees in a park", "are oaks"),
    ("emails in an inbox", "are unread"),
]

_MACHINES = [
    ("printer", "pages"),
    ("bakery oven", "loaves"),
    ("factory line", "bottles"),
    ("loom", "scarves"),
    ("3D printer", "toy parts"),
]


def _person(rng: random.Random, *, exclude: tuple[_Person, ...] = ()) -> _Person:
    return rng.choice([p for p in _PEOPLE if p not in exclude])


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


# -- template families -----------------------------------------------------------------------------------
# Each takes the random generator and returns (question, answer). Answers are whole numbers by construction.


def _shopping(rng: random.Random) -> tuple[str, int]:
    who = _person(rng)
    (item, items, lo, hi), (item2, items2, lo2, hi2) = rng.sample(_GOODS, 2)
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    p, q = rng.randint(lo, hi), rng.randint(lo2, hi2)
    total = a * p + b * q
    variant = rng.randrange(3)
    if variant == 0:
        question = (
            f"{who.name} buys {a} {items} at ${p} each and {b} {items2} at ${q} each. "
            f"How many dollars {who.does} {who.subject} spend in total?"
        )
        return question, total
    if variant == 1:
        question = (
            f"At the market, one {item} costs ${p} and one {item2} costs ${q}. "
            f"What is the total cost, in dollars, of {a} {items} and {b} {items2}?"
        )
        return question, total
    bill = next((x for x in (20, 50, 100, 200, 500) if x > total), 100 * (total // 100 + 1))
    question = (
        f"{who.name} pays for {a} {items} (${p} each) and {b} {items2} (${q} each) with a ${bill} bill. "
        f"How much change, in dollars, should {who.subject} get back?"
    )
    return question, bill - total


def _rate(rng: random.Random) -> tuple[str, int]:
    variant = rng.randrange(3)
    if variant == 0:
        machine, output = rng.choice(_MACHINES)
        per_hour, hours = rng.randint(12, 240), rng.randint(2, 12)
        question = (
            f"A {machine} produces {per_hour} {output} per hour. "
            f"How many {output} does it produce in {hours} hours of running without a break?"
        )
        return question, per_hour * hours
    if variant == 1:
        who = _person(rng)
        speed, hours = rng.randint(4, 110), rng.randint(2, 9)
        vehicle = rng.choice(["drives", "cycles", "rides a train", "travels"])
        question = (
            f"{who.name} {vehicle} at a steady {speed} kilometers per hour for {hours} hours. "
            f"How many kilometers {who.does} {who.subject} cover?"
        )
        return question, speed * hours
    per_minute, minutes = rng.randint(3, 40), rng.randint(4, 60)
    question = (
        f"A pipe pours {per_minute} liters of water per minute into an empty tank that holds "
        f"{per_minute * minutes} liters. How many minutes does it take to fill the tank?"
    )
    return question, minutes


def _sharing(rng: random.Random) -> tuple[str, int]:
    who = _person(rng)
    thing, things = rng.choice(_COUNTABLES)
    friends = rng.randint(3, 12)
    total = rng.randint(friends + 1, 20 * friends)
    variant = rng.randrange(4)
    if variant == 0:
        question = (
            f"{who.name} has {total} {things} and shares them equally among {friends} friends, "
            f"giving each friend as many as possible. How many {things} does each friend get?"
        )
        return question, total // friends
    if variant == 1:
        question = (
            f"{who.name} splits {total} {things} into groups of {friends}, making as many full groups "
            f"as possible. How many {things} are left over?"
        )
        return question, total % friends
    if variant == 2:
        question = (
            f"{total} {things} must be packed into boxes that hold {friends} {things} each. "
            f"What is the smallest number of boxes needed?"
        )
        return question, -(-total // friends)
    question = (
        f"A teacher hands out {total} {things} to {friends} students, the same number to each and as many "
        f"as possible, and keeps the rest. How many {things} does the teacher keep?"
    )
    return question, total % friends


def _multi_step(rng: random.Random) -> tuple[str, int]:
    who = _person(rng)
    thing, things = rng.choice(_COUNTABLES)
    start, packs, per_pack = rng.randint(5, 80), rng.randint(2, 8), rng.randint(3, 24)
    have = start + packs * per_pack
    given = rng.randint(1, have - 1)
    variant = rng.randrange(3)
    if variant == 0:
        question = (
            f"{who.name} has {start} {things}. {_cap(who.subject)} {who.verb('buys', 'buy')} {packs} packs "
            f"of {per_pack} {things} each, then {who.verb('gives', 'give')} {given} {things} to a friend. "
            f"How many {things} does {who.name} have now?"
        )
        return question, have - given
    if variant == 1:
        other = _person(rng, exclude=(who,))
        question = (
            f"{who.name} collects {per_pack} {things} every day for {packs} days, on top of the {start} "
            f"{things} {who.subject} already {who.verb('has', 'have')}. {_cap(who.subject)} then "
            f"{who.verb('trades', 'trade')} {given} of them to {other.name}. How many {things} are left?"
        )
        return question, have - given
    price, days = rng.randint(2, 15), rng.randint(2, 7)
    cups = rng.randint(10, 60)
    cost = rng.randint(5, max(6, price * cups * days // 2))
    question = (
        f"{who.name} sells lemonade for ${price} a cup and sells {cups} cups a day for {days} days. "
        f"Supplies cost ${cost} in total. What is {who.possessive} profit in dollars?"
    )
    return question, price * cups * days - cost


def _percent(rng: random.Random) -> tuple[str, int]:
    pct = rng.choice([5, 10, 15, 20, 25, 30, 40, 50, 60, 75])
    step = 100 // _gcd(pct, 100)  # the base must be a multiple of this for a whole-number result
    base = step * rng.randint(max(1, 10 // step), max(2, 600 // step))
    variant = rng.randrange(3)
    if variant == 0:
        item, _, _, _ = rng.choice(_GOODS)
        question = f"A {item} normally costs ${base}. It is on sale for {pct}% off. What is the sale price in dollars?"
        return question, base - base * pct // 100
    if variant == 1:
        group, which = rng.choice(_SHARES)
        question = f"There are {base} {group}, and exactly {pct}% of them {which}. How many is that?"
        return question, base * pct // 100
    who = _person(rng)
    question = (
        f"{who.name} earns ${base} a week and gets a raise of {pct}%. "
        f"How many dollars a week {who.does} {who.subject} earn after the raise?"
    )
    return question, base + base * pct // 100


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def _ages(rng: random.Random) -> tuple[str, int]:
    older = _person(rng)
    younger = _person(rng, exclude=(older,))
    variant = rng.randrange(3)
    if variant == 0:
        factor, young_age, years = rng.randint(2, 5), rng.randint(3, 15), rng.randint(2, 20)
        question = (
            f"{older.name} is {factor} times as old as {younger.name}. {younger.name} is {young_age} years old. "
            f"How old will {older.name} be in {years} years?"
        )
        return question, factor * young_age + years
    if variant == 1:
        gap, young_age = rng.randint(1, 30), rng.randint(2, 40)
        total = 2 * young_age + gap
        question = (
            f"The ages of {older.name} and {younger.name} add up to {total} years, and {older.name} is "
            f"{gap} years older than {younger.name}. How old is {older.name}?"
        )
        return question, young_age + gap
    age_then, years_ago = rng.randint(3, 50), rng.randint(2, 15)
    question = (
        f"{years_ago} years ago, {older.name} was {age_then} years old. "
        f"How old will {older.subject} be {years_ago} years from now?"
    )
    return question, age_then + 2 * years_ago


def _units(rng: random.Random) -> tuple[str, int]:
    variant = rng.randrange(3)
    if variant == 0:
        piece = rng.choice([5, 10, 20, 25, 50])
        meters = rng.randint(2, 40)
        question = (
            f"A rope {meters} meters long is cut into pieces of {piece} centimeters each. "
            f"How many pieces are there?"
        )
        return question, meters * 100 // piece
    if variant == 1:
        hours, minutes = rng.randint(1, 9), rng.randint(1, 59)
        question = f"A film lasts {hours} hours and {minutes} minutes. How long is it in minutes?"
        return question, 60 * hours + minutes
    who = _person(rng)
    per_week = rng.randint(5, 60)
    goal = per_week * rng.randint(3, 30) - rng.randint(0, per_week - 1)
    question = (
        f"{who.name} saves ${per_week} every week. How many weeks does it take {who.name} to save "
        f"at least ${goal}?"
    )
    return question, -(-goal // per_week)


KINDS: dict[str, Callable[[random.Random], tuple[str, int]]] = {
    "shopping": _shopping,
    "rate": _rate,
    "sharing": _sharing,
    "multi_step": _multi_step,
    "percent": _percent,
    "ages": _ages,
    "units": _units,
}
"""The template families, by ``kind``."""


def generate_problem(rng: random.Random) -> MathProblem:
    """Draw one problem from ``rng`` (any template family, equally likely)."""
    kind = rng.choice(sorted(KINDS))
    question, answer = KINDS[kind](rng)
    return MathProblem(question=question, answer=int(answer), kind=kind)


def split_of(question: str) -> str:
    """The split (``"train"`` or ``"test"``) a question belongs to, fixed by a hash of its text."""
    digest = hashlib.sha256(question.encode("utf-8")).digest()
    return "test" if int.from_bytes(digest[:8], "big") % TEST_SHARE == 0 else "train"


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")


def _problem_in_split(rng: random.Random, split: str) -> MathProblem:
    while True:  # about 1.25 draws for train, 5 for test
        problem = generate_problem(rng)
        if split_of(problem.question) == split:
            return problem


def system_prompt(multi_turn: bool = False) -> str:
    """The system message: how to write the final answer (and, with ``multi_turn``, that retries exist)."""
    text = (
        "Solve the arithmetic word problem. Think step by step, then give the final answer, a whole "
        "number, on the last line in the form '#### N' (for example '#### 42'). \\boxed{N} is accepted too."
    )
    if multi_turn:
        text += " If your answer is wrong you will be told so and may try again."
    return text


def make_prompt(problem: MathProblem, multi_turn: bool = False) -> list[dict[str, str]]:
    """The chat prompt for ``problem``: a system message with the answer format and the question."""
    return [
        {"role": "system", "content": system_prompt(multi_turn)},
        {"role": "user", "content": problem.question},
    ]


def _extras(problem: MathProblem, split: str, index: int, seed: int | None) -> dict[str, Any]:
    return {
        "data_source": DATA_SOURCE,
        "reward_spec": {"method": "rule", "ground_truth": str(problem.answer)},
        "extra_info": {"split": split, "index": index, "kind": problem.kind, "seed": seed},
    }


def task_for_seed(seed: int | None = None, split: str = "train", multi_turn: bool = False) -> Task:
    """The task for ``seed``: the same prompt and ground truth every time (a random one for ``None``)."""
    _check_split(split)
    if seed is None:
        seed = random.randrange(2**31)
    problem = _problem_in_split(random.Random(f"{DATA_SOURCE}/{split}/seed/{seed}"), split)
    return Task(prompt=make_prompt(problem, multi_turn), extras=_extras(problem, split, 0, seed))


def build_rows(
    n: int,
    seed: int = 0,
    split: str = "train",
    env_class: str = "math",
    max_turns: int | None = None,
) -> list[dict[str, Any]]:
    """``n`` rows of a dataset in SkyRL's format, with ``n`` different questions.

    Columns: ``data_source``, ``prompt`` (chat messages), ``env_class``, ``reward_spec``
    (``{"method": "rule", "ground_truth": "<answer>"}``), ``extra_info`` (``split``, ``index``, ``kind``,
    ``seed``) and, when ``max_turns`` is given, ``max_turns``. Columns other than ``prompt`` and
    ``env_class`` reach the environment as its ``extras``.
    """
    _check_split(split)
    if n < 0:
        raise ValueError(f"n must be at least 0, got {n}")
    multi_turn = env_class != "math"
    rng = random.Random(f"{DATA_SOURCE}/{split}/rows/{seed}")
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    attempts = 0
    while len(rows) < n:
        attempts += 1
        if attempts > 100 * n + 1000:
            raise ValueError(f"only {len(rows)} distinct {split} questions found, {n} were asked for")
        problem = _problem_in_split(rng, split)
        if problem.question in seen:
            continue
        seen.add(problem.question)
        extras = _extras(problem, split, len(rows), seed)
        row = {
            "data_source": extras.pop("data_source"),
            "prompt": make_prompt(problem, multi_turn),
            "env_class": env_class,
            **extras,
        }
        if max_turns is not None:
            row["max_turns"] = int(max_turns)
        rows.append(row)
    return rows
