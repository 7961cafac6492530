"""The default task set of ``aime``: competition-style problems with integer answers from 0 to 999, generated.

Each family draws its numbers from a seeded generator, computes the answer in closed form (or with a
recurrence) and checks it against a brute-force count done a second, independent way; a problem whose two
answers disagree is never handed out (:class:`AnswerMismatch` would say which family is wrong). The
families: counting multiples with inclusion-exclusion, last digits of a power, divisor counts, digit sums,
the Chinese remainder theorem, sums of squares, ordered compositions, lattice rectangles and the equation
``1/x + 1/y = 1/n``.

A task is a SkyRL row: one user message (the problem and the ``Answer:`` line to end with) and
``reward_spec = {"method": "rule", "ground_truth": "<answer>"}``. The same seed gives the same problem.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from itertools import combinations, product
from typing import Any

from skyrl_gym.core import Task

__all__ = ["FAMILIES", "INSTRUCTION", "AnswerMismatch", "generate_problem", "make_prompt", "task_for_seed"]

DATA_SOURCE = "aime_procedural"
INSTRUCTION = (
    "Solve the following problem step by step. The answer is an integer from 0 to 999. "
    "The last line of your response must be of the form Answer: N, where N is that integer."
)
"""Appended to every problem; SkyRL's rule reads the text after the last ``Answer:``."""


class AnswerMismatch(AssertionError):
    """A family's closed-form answer and its brute-force check disagree: the generator is wrong."""


def _check(family: str, answer: int, brute: int) -> int:
    if answer != brute:
        raise AnswerMismatch(f"{family}: closed form gave {answer}, brute force {brute}")
    if not 0 <= answer <= 999:
        raise AnswerMismatch(f"{family}: the answer {answer} is not in 0..999")
    return answer


def _divisors_count(n: int) -> int:
    count, p = 1, 2
    while p * p <= n:
        exponent = 0
        while n % p == 0:
            n //= p
            exponent += 1
        count *= exponent + 1
        p += 1
    return count * (2 if n > 1 else 1)


# -- families: each returns (problem, answer), the answer verified -----------------------------------------------


def _multiples(rng: random.Random) -> tuple[str, int]:
    while True:
        a, b = rng.sample([2, 3, 4, 5, 6, 7, 9, 11, 13], 2)
        c = rng.choice([4, 6, 8, 10, 12, 14, 15, 21])
        n = rng.randrange(300, 2000)
        lcm_ab = math.lcm(a, b)
        either = n // a + n // b - n // lcm_ab
        also_by_c = n // math.lcm(a, c) + n // math.lcm(b, c) - n // math.lcm(lcm_ab, c)
        answer = either - also_by_c
        if 0 <= answer <= 999:
            break
    brute = sum(1 for k in range(1, n + 1) if (k % a == 0 or k % b == 0) and k % c != 0)
    question = (
        f"How many positive integers less than or equal to {n} are divisible by {a} or by {b}, "
        f"but not by {c}?"
    )
    return question, _check("multiples", answer, brute)


def _power_mod(rng: random.Random) -> tuple[str, int]:
    base, exponent = rng.randrange(2, 100), rng.randrange(50, 5000)
    answer = pow(base, exponent, 1000)
    brute = 1
    for _ in range(exponent):
        brute = brute * base % 1000
    return f"Find the remainder when {base}^{exponent} is divided by 1000.", _check(
        "power_mod", answer, brute
    )


def _divisor_count(rng: random.Random) -> tuple[str, int]:
    while True:
        primes = rng.sample([2, 3, 5, 7, 11, 13], rng.randint(2, 3))
        exponents = [rng.randint(1, 5) for _ in primes]
        n = math.prod(p**e for p, e in zip(primes, exponents, strict=True))
        if n <= 3_000_000:
            break
    answer = math.prod(e + 1 for e in exponents)
    brute = _divisors_count(n)
    return f"How many positive integers divide {n}?", _check("divisor_count", answer, brute)


def _digit_sum(rng: random.Random) -> tuple[str, int]:
    digits, target = 3, rng.randint(5, 22)

    # the number of strings of `digits` decimal digits (leading digit not zero) whose digits add to `target`
    ways = [1] + [0] * target
    for _ in range(digits - 1):
        ways = [sum(ways[s - d] for d in range(10) if s - d >= 0) for s in range(target + 1)]
    answer = sum(ways[target - d] for d in range(1, 10) if target - d >= 0)
    brute = sum(1 for k in range(100, 1000) if sum(map(int, str(k))) == target)
    question = f"How many three-digit positive integers have digits whose sum is {target}?"
    return question, _check("digit_sum", answer, brute)


def _crt(rng: random.Random) -> tuple[str, int]:
    while True:
        moduli = sorted(rng.sample([3, 4, 5, 7, 8, 9, 11, 13], 3))
        coprime = all(math.gcd(x, y) == 1 for x, y in combinations(moduli, 2))
        if coprime and math.prod(moduli) <= 999:
            break
    remainders = [rng.randrange(m) for m in moduli]
    total = math.prod(moduli)
    answer = 0
    for m, r in zip(moduli, remainders, strict=True):
        rest = total // m
        answer += r * rest * pow(rest, -1, m)
    answer %= total
    if answer == 0:
        answer = total  # the least *positive* integer
    brute = next(
        k for k in range(1, total + 1) if all(k % m == r for m, r in zip(moduli, remainders, strict=True))
    )
    conditions = [f"a remainder of {r} when divided by {m}" for m, r in zip(moduli, remainders, strict=True)]
    question = (
        f"Find the least positive integer that leaves {', '.join(conditions[:-1])}, and {conditions[-1]}."
    )
    return question, _check("crt", answer, brute)


def _square_sum(rng: random.Random) -> tuple[str, int]:
    n = rng.randrange(50, 3000)
    answer = n * (n + 1) * (2 * n + 1) // 6 % 1000
    brute = sum(k * k for k in range(1, n + 1)) % 1000
    question = f"Find the remainder when 1^2 + 2^2 + 3^2 + ... + {n}^2 is divided by 1000."
    return question, _check("square_sum", answer, brute)


def _compositions(rng: random.Random) -> tuple[str, int]:
    n, parts = rng.randint(8, 16), sorted(rng.sample([1, 2, 3, 4, 5], rng.randint(2, 3)))
    ways = [1] + [0] * n
    for total in range(1, n + 1):
        ways[total] = sum(ways[total - p] for p in parts if p <= total)
    answer = ways[n] % 1000

    def count(left: int) -> int:  # an explicit enumeration of the sequences, by their first part
        if left == 0:
            return 1
        return sum(count(left - p) for p in parts if p <= left)

    listed = ", ".join(str(p) for p in parts[:-1]) + f" or {parts[-1]}"
    question = (
        f"In how many ways can {n} be written as an ordered sum of terms, each equal to {listed}? "
        "(Sums with the same terms in a different order count as different.) Give the remainder of that "
        "number when divided by 1000."
    )
    return question, _check("compositions", answer, count(n) % 1000)


def _rectangles(rng: random.Random) -> tuple[str, int]:
    while True:
        rows, cols = rng.randint(2, 9), rng.randint(2, 9)
        answer = math.comb(rows + 1, 2) * math.comb(cols + 1, 2)
        if answer <= 999:
            break
    brute = sum(
        1
        for top, bottom, left, right in product(
            range(rows + 1), range(rows + 1), range(cols + 1), range(cols + 1)
        )
        if top < bottom and left < right
    )
    question = (
        f"A grid of {rows} rows and {cols} columns of unit squares is drawn. How many rectangles (of any size, "
        "with sides along the grid lines) does it contain?"
    )
    return question, _check("rectangles", answer, brute)


def _unit_fractions(rng: random.Random) -> tuple[str, int]:
    n = rng.randint(6, 60)
    # (x - n)(y - n) = n^2: one ordered solution per divisor of n^2
    answer = _divisors_count(n * n)
    brute = sum(1 for x in range(n + 1, n * n + n + 1) if (n * x) % (x - n) == 0)
    question = f"How many ordered pairs (x, y) of positive integers satisfy 1/x + 1/y = 1/{n}?"
    return question, _check("unit_fractions", answer, brute)


FAMILIES: dict[str, Callable[[random.Random], tuple[str, int]]] = {
    "multiples": _multiples,
    "power_mod": _power_mod,
    "divisor_count": _divisor_count,
    "digit_sum": _digit_sum,
    "crt": _crt,
    "square_sum": _square_sum,
    "compositions": _compositions,
    "rectangles": _rectangles,
    "unit_fractions": _unit_fractions,
}
"""The problem families, by name."""


def generate_problem(rng: random.Random) -> tuple[str, str, int]:
    """``(family, problem, answer)`` drawn from ``rng``, every family equally likely."""
    family = rng.choice(sorted(FAMILIES))
    question, answer = FAMILIES[family](rng)
    return family, question, answer


def make_prompt(question: str) -> list[dict[str, str]]:
    """The chat prompt of a problem: one user message, the problem followed by :data:`INSTRUCTION`."""
    return [{"role": "user", "content": f"{question}\n\n{INSTRUCTION}"}]


def task_for_seed(seed: int | None = None) -> Task:
    """The problem for ``seed``, the same one every time (a random one for ``None``)."""
    if seed is None:
        seed = random.randrange(2**31)
    family, question, answer = generate_problem(random.Random(f"{DATA_SOURCE}/{seed}"))
    extras: dict[str, Any] = {
        "data_source": DATA_SOURCE,
        "reward_spec": {"method": "rule", "ground_truth": str(answer)},
        "extra_info": {"family": family, "seed": seed},
    }
    return Task(prompt=make_prompt(question), extras=extras)
