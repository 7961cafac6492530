"""The source of the bundled stdin/stdout problems: statements, reference solutions and test inputs.

    python datasets/code/stdio_source.py            # rewrites skyrl_gym/envs/code/stdio_problems.json

Each problem has a statement (Markdown: the task, the input and output formats, the limits), a reference
solution, two public inputs (shown in the prompt as examples) and a generator of hidden inputs (edge cases,
random cases and, for problems where the naive algorithm is too slow, one large case). The expected outputs
are what the reference solution prints for each input; they are computed here, with this Python, and stored
in the JSON file next to the inputs. The same run always writes the same file (seeded generators).
"""

from __future__ import annotations

import json
import random
import string
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "skyrl_gym" / "envs" / "code" / "stdio_problems.json"
TIME_LIMIT_S = 2.0
REFERENCE_BUDGET_S = 0.6
"""A reference solution must answer every input in this time here, well inside the judge's limit."""

PROBLEMS: list[dict[str, Any]] = []


def problem(
    pid: str,
    title: str,
    difficulty: str,
    statement: str,
    reference: str,
    public: list[str],
    float_tol: float | None = None,
) -> Callable[[Callable[[random.Random], list[str]]], Callable[[random.Random], list[str]]]:
    """Register a problem; the decorated function makes its hidden inputs from a seeded ``random.Random``."""

    def register(hidden: Callable[[random.Random], list[str]]) -> Callable[[random.Random], list[str]]:
        PROBLEMS.append(
            {
                "id": pid,
                "title": title,
                "difficulty": difficulty,
                "statement": statement.strip() + "\n",
                "reference_solution": reference.strip() + "\n",
                "public": public,
                "hidden": hidden,
                "float_tol": float_tol,
            }
        )
        return hidden

    return register


def lines(*rows: Any) -> str:
    """Join rows (strings or lists of numbers) into input text ending with a newline."""
    out = []
    for row in rows:
        out.append(" ".join(map(str, row)) if isinstance(row, (list, tuple)) else str(row))
    return "\n".join(out) + "\n"


def array_input(values: list[int]) -> str:
    return lines(len(values), values)


def word(rng: random.Random, low: int = 1, high: int = 8, alphabet: str = string.ascii_lowercase) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(low, high)))


# -- easy ----------------------------------------------------------------------------------------------------


@problem(
    "sum-of-pairs",
    "Sum of pairs",
    "easy",
    """
Add two integers, many times.

**Input.** The first line holds an integer T. Each of the next T lines holds two integers a and b.

**Output.** For each pair print a + b on its own line.

**Limits.** 1 ≤ T ≤ 100; |a|, |b| ≤ 10^18.
""",
    """
import sys

data = sys.stdin.read().split()
t = int(data[0])
print("\\n".join(str(int(data[1 + 2 * i]) + int(data[2 + 2 * i])) for i in range(t)))
""",
    [lines(2, "1 2", "-5 5"), lines(3, "100 200", "7 -10", "0 0")],
)
def _(rng):
    big = 10**18
    cases = [lines(1, f"{big} {big}"), lines(1, f"{-big} {-big}"), lines(1, f"{big} {-big}")]
    for _ in range(3):
        t = rng.randint(5, 100)
        cases.append(lines(t, *[f"{rng.randint(-big, big)} {rng.randint(-big, big)}" for _ in range(t)]))
    return cases


@problem(
    "range-spread",
    "Range spread",
    "easy",
    """
Given a list of integers, print the difference between its largest and its smallest value.

**Input.** The first line holds n. The second line holds n integers.

**Output.** One integer: the largest value minus the smallest.

**Limits.** 1 ≤ n ≤ 10^5; every value is between -10^9 and 10^9.
""",
    """
n = int(input())
values = list(map(int, input().split()))
print(max(values) - min(values))
""",
    [array_input([3, 9, 1, 4]), array_input([-7, -7, -7])],
)
def _(rng):
    cases = [array_input([42]), array_input([-(10**9), 10**9])]
    for size in (5, 100, 2000):
        cases.append(array_input([rng.randint(-(10**9), 10**9) for _ in range(size)]))
    cases.append(array_input([rng.randint(-50, -1) for _ in range(20)]))
    return cases


@problem(
    "vowel-count",
    "Vowel count",
    "easy",
    """
Count the vowels in a line of text. The vowels are a, e, i, o and u, in lower or upper case; y is not a vowel.

**Input.** One line of printable ASCII text (it may contain spaces and punctuation).

**Output.** One integer: the number of vowels in the line.

**Limits.** The line holds between 1 and 1000 characters.
""",
    """
line = input()
print(sum(1 for ch in line.lower() if ch in "aeiou"))
""",
    ["Hello, World!\n", "Rhythm and BLUES\n"],
)
def _(rng):
    cases = ["xyz\n", "AEIOUaeiou\n", "y Y yy\n"]
    alphabet = string.ascii_letters + string.digits + " ,.;!?-'"
    for size in (30, 300, 1000):
        cases.append("".join(rng.choice(alphabet) for _ in range(size)).strip() + "x\n")
    return cases


@problem(
    "fizzbuzz",
    "FizzBuzz",
    "easy",
    """
Print the numbers from 1 to n, one per line, but print `Fizz` instead of numbers divisible by 3, `Buzz` instead
of numbers divisible by 5, and `FizzBuzz` instead of numbers divisible by both 3 and 5.

**Input.** One integer n.

**Output.** n lines as described.

**Limits.** 1 ≤ n ≤ 10^4.
""",
    """
n = int(input())
out = []
for i in range(1, n + 1):
    word = ("Fizz" if i % 3 == 0 else "") + ("Buzz" if i % 5 == 0 else "")
    out.append(word or str(i))
print("\\n".join(out))
""",
    ["5\n", "15\n"],
)
def _(rng):
    return ["1\n", "3\n", "30\n", f"{rng.randint(100, 999)}\n", "3000\n"]


@problem(
    "reverse-words",
    "Reverse the words",
    "easy",
    """
Reverse the order of the words on each line. Words are separated by single spaces.

**Input.** The first line holds T. Each of the next T lines holds one or more words of lowercase letters,
separated by single spaces.

**Output.** T lines: each input line with its words in reverse order, separated by single spaces.

**Limits.** 1 ≤ T ≤ 100; a line holds at most 100 words of at most 10 letters.
""",
    """
t = int(input())
for _ in range(t):
    print(" ".join(reversed(input().split())))
""",
    [lines(2, "hello world", "one two three"), lines(1, "single")],
)
def _(rng):
    cases = [lines(1, "a b"), lines(2, "same", "x y x")]
    for t in (5, 40, 60):
        rows = [" ".join(word(rng, 1, 10) for _ in range(rng.randint(1, 30))) for _ in range(t)]
        cases.append(lines(t, *rows))
    return cases


@problem(
    "parity-count",
    "Even and odd",
    "easy",
    """
Count the even and the odd numbers in a list.

**Input.** The first line holds n. The second line holds n integers.

**Output.** Two integers separated by a space: how many of the numbers are even, then how many are odd.

**Limits.** 1 ≤ n ≤ 10^5; every value is between -10^9 and 10^9. Zero is even; so is -4.
""",
    """
input()
values = list(map(int, input().split()))
even = sum(1 for v in values if v % 2 == 0)
print(even, len(values) - even)
""",
    [array_input([1, 2, 3, 4, 5]), array_input([0, -4, 10])],
)
def _(rng):
    cases = [array_input([7]), array_input([-3, -5, -7, 0])]
    for size in (10, 300, 2000):
        cases.append(array_input([rng.randint(-(10**9), 10**9) for _ in range(size)]))
    return cases


@problem(
    "palindromes",
    "Palindromes",
    "easy",
    """
Decide for each line whether it is a palindrome when only its letters and digits are kept and upper and lower
case are not told apart. A line without any letter or digit counts as a palindrome.

**Input.** The first line holds T. Each of the next T lines holds a string of printable ASCII characters.

**Output.** For each string print `YES` if it is a palindrome in this sense and `NO` otherwise.

**Limits.** 1 ≤ T ≤ 100; every string holds between 1 and 200 characters.
""",
    """
t = int(input())
for _ in range(t):
    kept = [ch.lower() for ch in input() if ch.isalnum()]
    print("YES" if kept == kept[::-1] else "NO")
""",
    [lines(3, "A man, a plan, a canal: Panama", "race a car", "!!"), lines(2, "Abba", "abc")],
)
def _(rng):
    rows = []
    for _ in range(60):
        half = word(rng, 1, 12, "abcAB1 ,.")
        if rng.random() < 0.5:
            text = half + rng.choice(["", "x", "!"]) + half[::-1]
        else:
            text = half + word(rng, 1, 5)
        rows.append(text.strip() or "x")
    cases = [lines(1, "1a1"), lines(1, "ab1"), lines(2, "Noon", "No lemon, no melon")]
    cases += [lines(20, *rows[:20]), lines(40, *rows[20:])]
    return cases


@problem(
    "second-largest",
    "Second largest",
    "easy",
    """
Print the second largest distinct value of a list of integers.

**Input.** The first line holds n. The second line holds n integers.

**Output.** The largest value that is strictly smaller than the maximum of the list, or `NONE` if every value
of the list is equal.

**Limits.** 1 ≤ n ≤ 10^5; every value is between -10^9 and 10^9.
""",
    """
input()
values = set(map(int, input().split()))
if len(values) < 2:
    print("NONE")
else:
    values.discard(max(values))
    print(max(values))
""",
    [array_input([4, 1, 4, 3]), array_input([5, 5])],
)
def _(rng):
    cases = [array_input([1]), array_input([-1, -2]), array_input([10**9, -(10**9), 10**9])]
    for size in (10, 500, 3000):
        cases.append(array_input([rng.randint(-1000, 1000) for _ in range(size)]))
    return cases


@problem(
    "mean-and-deviation",
    "Mean and deviation",
    "easy",
    """
Print the mean and the population standard deviation of a list of real numbers. The population standard
deviation is the square root of the mean of the squared differences from the mean.

**Input.** The first line holds n. The second line holds n real numbers.

**Output.** Two real numbers separated by a space: the mean and the standard deviation. Answers within 10^-6
(absolute or relative) of the exact values are accepted.

**Limits.** 1 ≤ n ≤ 10^4; every value is between -10^6 and 10^6 and has at most 3 digits after the point.
""",
    """
import math

n = int(input())
values = list(map(float, input().split()))
mean = sum(values) / n
deviation = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
print(f"{mean:.9f} {deviation:.9f}")
""",
    [lines(4, "2 4 4 6"), lines(3, "1.5 -1.5 3")],
    float_tol=1e-6,
)
def _(rng):
    cases = [lines(1, "7.25"), lines(2, "-1000000 1000000")]
    for size in (10, 500, 2000):
        cases.append(lines(size, [f"{rng.uniform(-(10**6), 10**6):.3f}" for _ in range(size)]))
    return cases


@problem(
    "digit-sums",
    "Digit sums",
    "easy",
    """
Print the sum of the decimal digits of each number.

**Input.** The first line holds T. Each of the next T lines holds a non-negative integer without leading
zeros (a single 0 is possible).

**Output.** For each number print the sum of its digits on its own line.

**Limits.** 1 ≤ T ≤ 100; every number has at most 200 digits.
""",
    """
t = int(input())
for _ in range(t):
    print(sum(int(d) for d in input().strip()))
""",
    [lines(2, "123", "9999"), lines(1, "0")],
)
def _(rng):
    def number(digits):
        return str(rng.randint(1, 9)) + "".join(rng.choice(string.digits) for _ in range(digits - 1))

    cases = [lines(1, "9" * 200), lines(3, "1", "10", "100")]
    for t in (5, 50, 100):
        cases.append(lines(t, *[number(rng.randint(1, 200)) for _ in range(t)]))
    return cases


@problem(
    "letter-grades",
    "Letter grades",
    "easy",
    """
Turn exam scores into letter grades: 90 to 100 is `A`, 80 to 89 is `B`, 70 to 79 is `C`, 60 to 69 is `D` and
anything below 60 is `F`.

**Input.** The first line holds n. The second line holds n integer scores.

**Output.** One line with the n grades in the order of the scores, separated by single spaces.

**Limits.** 1 ≤ n ≤ 1000; every score is between 0 and 100.
""",
    """
input()
grades = []
for score in map(int, input().split()):
    if score >= 90:
        grades.append("A")
    elif score >= 80:
        grades.append("B")
    elif score >= 70:
        grades.append("C")
    elif score >= 60:
        grades.append("D")
    else:
        grades.append("F")
print(" ".join(grades))
""",
    [array_input([95, 83, 70, 12]), array_input([60, 59])],
)
def _(rng):
    cases = [array_input([100, 90, 89, 80, 79, 70, 69, 60, 59, 0])]
    for size in (1, 20, 300, 1000):
        cases.append(array_input([rng.randint(0, 100) for _ in range(size)]))
    return cases


@problem(
    "prefix-sums",
    "Running totals",
    "easy",
    """
Print the running totals of a list: the i-th printed number is the sum of the first i values.

**Input.** The first line holds n. The second line holds n integers.

**Output.** One line with n integers separated by single spaces.

**Limits.** 1 ≤ n ≤ 10^5; every value is between -10^9 and 10^9.
""",
    """
from itertools import accumulate

input()
print(" ".join(map(str, accumulate(map(int, input().split())))))
""",
    [array_input([1, 2, 3, 4]), array_input([5, -5, 5])],
)
def _(rng):
    cases = [array_input([0]), array_input([10**9] * 10)]
    for size in (7, 500, 2000):
        cases.append(array_input([rng.randint(-(10**9), 10**9) for _ in range(size)]))
    return cases


@problem(
    "transpose",
    "Transpose",
    "easy",
    """
Print the transpose of a matrix: its rows become columns.

**Input.** The first line holds r and c. Each of the next r lines holds c integers: a row of the matrix.

**Output.** c lines of r integers separated by single spaces: the rows of the transposed matrix.

**Limits.** 1 ≤ r, c ≤ 100; every value is between -1000 and 1000.
""",
    """
r, c = map(int, input().split())
rows = [input().split() for _ in range(r)]
for j in range(c):
    print(" ".join(rows[i][j] for i in range(r)))
""",
    [lines("2 3", "1 2 3", "4 5 6"), lines("1 1", "-7")],
)
def _(rng):
    cases = []
    for r, c in ((1, 5), (5, 1), (3, 3), (40, 17), (60, 60)):
        cases.append(lines(f"{r} {c}", *[[rng.randint(-1000, 1000) for _ in range(c)] for _ in range(r)]))
    return cases


# -- medium --------------------------------------------------------------------------------------------------


@problem(
    "balanced-brackets",
    "Balanced brackets",
    "medium",
    """
Decide whether each string of brackets is balanced: every opening bracket is closed by a bracket of the same
kind, and pairs nest properly (`([])` is balanced, `([)]` is not).

**Input.** The first line holds T. Each of the next T lines holds a non-empty string made of the characters
`()[]{}`.

**Output.** For each string print `YES` if it is balanced and `NO` otherwise.

**Limits.** 1 ≤ T ≤ 100; every string holds at most 10^4 characters.
""",
    """
t = int(input())
pairs = {")": "(", "]": "[", "}": "{"}
for _ in range(t):
    stack = []
    ok = True
    for ch in input().strip():
        if ch in "([{":
            stack.append(ch)
        elif not stack or stack.pop() != pairs[ch]:
            ok = False
            break
    print("YES" if ok and not stack else "NO")
""",
    [lines(3, "([]{})", "([)]", "(("), lines(2, "{[()()]}", ")(")],
)
def _(rng):
    def balanced(size):
        out, stack = [], []
        while len(out) + len(stack) < size or stack:
            if stack and (rng.random() < 0.5 or len(out) + len(stack) >= size):
                out.append({"(": ")", "[": "]", "{": "}"}[stack.pop()])
            else:
                ch = rng.choice("([{")
                stack.append(ch)
                out.append(ch)
        return "".join(out)

    def broken(size):
        text = list(balanced(size))
        i = rng.randrange(len(text))
        text[i] = rng.choice([c for c in "()[]{}" if c != text[i]])
        return "".join(text)

    cases = [lines(1, "]"), lines(1, "(" * 5000 + ")" * 5000), lines(2, "()" * 10, "([)]" * 3)]
    for t in (10, 60):
        cases.append(
            lines(t, *[(balanced if rng.random() < 0.5 else broken)(rng.randint(1, 200)) for _ in range(t)])
        )
    cases.append(lines(2, balanced(10000)[:10000], broken(9000)))
    return cases


@problem(
    "top-words",
    "Most frequent words",
    "medium",
    """
Find the k most frequent words of a text. A word is a maximal run of letters a-z, compared without regard to
case (print it in lower case); every other character separates words.

**Input.** The first line holds k. The rest of the input (one or more lines) is the text.

**Output.** The k most frequent words, one per line, each followed by a space and its count: the most frequent
first, and words with equal counts in alphabetical order. If the text has fewer than k distinct words, print
all of them.

**Limits.** 1 ≤ k ≤ 100; the text holds at most 10^5 characters and at least one word.
""",
    """
import re
import sys
from collections import Counter

k = int(sys.stdin.readline())
counts = Counter(re.findall(r"[a-z]+", sys.stdin.read().lower()))
for word, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:k]:
    print(word, count)
""",
    [
        lines(2, "the cat and the hat.", "The END"),
        lines(5, "Don't stop -- don't STOP!"),
    ],
)
def _(rng):
    vocabulary = [word(rng, 1, 6) for _ in range(40)]

    def text(n_words):
        rows, row = [], []
        for _ in range(n_words):
            w = rng.choice(vocabulary)
            row.append(w.upper() if rng.random() < 0.2 else w)
            row.append(rng.choice([" ", " ", ", ", ". ", "-", " 42 "]))
            if rng.random() < 0.1:
                rows.append("".join(row))
                row = []
        rows.append("".join(row) + "end")
        return rows

    cases = [lines(1, "a b a"), lines(3, "x-y_z x")]
    for k, n in ((3, 50), (10, 500), (100, 300), (5, 5000)):
        cases.append(lines(k, *text(n)))
    return cases


@problem(
    "pair-sum-count",
    "Pairs with a given sum",
    "medium",
    """
Count the pairs of positions i < j with a_i + a_j = K.

**Input.** The first line holds n and K. The second line holds n integers a_1 ... a_n.

**Output.** One integer: the number of pairs.

**Limits.** 1 ≤ n ≤ 2·10^5; |K| ≤ 2·10^9; every value is between -10^9 and 10^9.
""",
    """
from collections import Counter

n, k = map(int, input().split())
seen = Counter()
pairs = 0
for value in map(int, input().split()):
    pairs += seen[k - value]
    seen[value] += 1
print(pairs)
""",
    [lines("5 6", "1 5 3 3 7"), lines("4 0", "0 0 0 0")],
)
def _(rng):
    cases = [lines("1 2", "1"), lines("3 -2", "-1 -1 -1")]
    for n, spread in ((20, 10), (500, 100), (1000, 10**9)):
        values = [rng.randint(-spread, spread) for _ in range(n)]
        k = rng.choice(values) + rng.choice(values)
        cases.append(lines(f"{n} {k}", values))
    values = [rng.randint(-500, 500) for _ in range(12000)]
    cases.append(lines(f"{len(values)} 0", values))
    return cases


@problem(
    "longest-rising-run",
    "Longest rising run",
    "medium",
    """
Find the length of the longest run of consecutive positions in which every value is strictly larger than the one
before it.

**Input.** The first line holds n. The second line holds n integers.

**Output.** One integer: the length of the longest strictly increasing contiguous run (at least 1).

**Limits.** 1 ≤ n ≤ 10^5; every value is between -10^9 and 10^9.
""",
    """
input()
values = list(map(int, input().split()))
best = run = 1
for previous, current in zip(values, values[1:]):
    run = run + 1 if current > previous else 1
    best = max(best, run)
print(best)
""",
    [array_input([1, 2, 2, 3, 4, 5, 1]), array_input([5, 4, 3])],
)
def _(rng):
    cases = [array_input([1]), array_input(list(range(1000))), array_input([3, 3, 3, 3])]
    for size in (30, 1000, 5000):
        cases.append(array_input([rng.randint(0, 30) for _ in range(size)]))
    return cases


@problem(
    "gcd-lcm",
    "GCD and LCM",
    "medium",
    """
Print the greatest common divisor and the least common multiple of each pair of positive integers.

**Input.** The first line holds T. Each of the next T lines holds two integers a and b.

**Output.** For each pair print gcd(a, b) and lcm(a, b), separated by a space, on its own line.

**Limits.** 1 ≤ T ≤ 1000; 1 ≤ a, b ≤ 10^12.
""",
    """
import math

t = int(input())
for _ in range(t):
    a, b = map(int, input().split())
    g = math.gcd(a, b)
    print(g, a // g * b)
""",
    [lines(2, "12 18", "7 5"), lines(1, "1 1")],
)
def _(rng):
    big = 10**12
    cases = [lines(1, f"{big} {big}"), lines(1, f"{big} {big - 1}")]
    for t in (10, 100, 300):
        rows = []
        for _ in range(t):
            g = rng.randint(1, 10**6)
            rows.append(f"{g * rng.randint(1, 10**6)} {g * rng.randint(1, 10**6)}")
        cases.append(lines(t, *rows))
    return cases


@problem(
    "count-primes",
    "Counting primes",
    "medium",
    """
For each query n, print how many prime numbers are less than or equal to n.

**Input.** The first line holds Q. Each of the next Q lines holds one integer n.

**Output.** Q lines: the number of primes p ≤ n for each query.

**Limits.** 1 ≤ Q ≤ 10^4; 1 ≤ n ≤ 10^6.
""",
    """
import sys

data = sys.stdin.read().split()
queries = list(map(int, data[1:]))
top = max(queries)
sieve = bytearray([1]) * (top + 1)
sieve[0:2] = b"\\x00\\x00"[: min(2, top + 1)]
for p in range(2, int(top**0.5) + 1):
    if sieve[p]:
        sieve[p * p :: p] = bytearray(len(range(p * p, top + 1, p)))
count = [0] * (top + 1)
running = 0
for i in range(top + 1):
    running += sieve[i]
    count[i] = running
print("\\n".join(str(count[n]) for n in queries))
""",
    [lines(3, 10, 2, 1), lines(2, 100, 30)],
)
def _(rng):
    cases = [lines(1, 1), lines(2, 2, 3), lines(1, 10**6)]
    for q in (10, 300):
        cases.append(lines(q, *[rng.randint(1, 10**6) for _ in range(q)]))
    cases.append(lines(3000, *[rng.randint(900_000, 10**6) for _ in range(3000)]))
    return cases


@problem(
    "merge-intervals",
    "Merge intervals",
    "medium",
    """
Merge closed integer intervals that share at least one point ([1, 3] and [3, 5] merge into [1, 5]; [1, 2] and
[3, 4] stay apart).

**Input.** The first line holds n. Each of the next n lines holds two integers l and r with l ≤ r.

**Output.** The number m of merged intervals on the first line, then the m intervals in increasing order, one per
line, as two integers separated by a space.

**Limits.** 1 ≤ n ≤ 10^5; -10^9 ≤ l ≤ r ≤ 10^9.
""",
    """
import sys

data = list(map(int, sys.stdin.read().split()))
n = data[0]
intervals = sorted(zip(data[1::2], data[2::2]))
merged = []
for left, right in intervals:
    if merged and left <= merged[-1][1]:
        merged[-1][1] = max(merged[-1][1], right)
    else:
        merged.append([left, right])
print(len(merged))
print("\\n".join(f"{a} {b}" for a, b in merged))
""",
    [lines(4, "1 3", "2 6", "8 10", "15 18"), lines(2, "1 4", "4 5")],
)
def _(rng):
    def intervals(n, span, width):
        rows = []
        for _ in range(n):
            left = rng.randint(-span, span)
            rows.append(f"{left} {left + rng.randint(0, width)}")
        return lines(n, *rows)

    cases = [lines(1, "5 5"), lines(2, "1 2", "3 4"), lines(3, "-10 10", "-5 -1", "0 0")]
    cases += [intervals(20, 100, 10), intervals(500, 10**6, 5000), intervals(3000, 10**5, 50)]
    return cases


@problem(
    "grid-paths",
    "Paths through a grid",
    "medium",
    """
A robot starts in the top-left cell of a grid and must reach the bottom-right cell, moving one cell right or one
cell down at a time. Some cells are blocked. Count the different paths, modulo 1 000 000 007.

**Input.** The first line holds r and c. Each of the next r lines holds c characters: `.` for a free cell, `#`
for a blocked one.

**Output.** One integer: the number of paths modulo 1 000 000 007 (0 if the start or the goal is blocked).

**Limits.** 1 ≤ r, c ≤ 200.
""",
    """
MOD = 10**9 + 7
r, c = map(int, input().split())
grid = [input().strip() for _ in range(r)]
ways = [0] * c
for i in range(r):
    for j in range(c):
        if grid[i][j] == "#":
            ways[j] = 0
        elif i == 0 and j == 0:
            ways[j] = 1
        elif j > 0:
            ways[j] = (ways[j] + ways[j - 1]) % MOD
print(ways[c - 1])
""",
    [lines("3 3", "...", ".#.", "..."), lines("2 2", ".#", "#.")],
)
def _(rng):
    def grid(r, c, blocked):
        return lines(
            f"{r} {c}", *["".join("#" if rng.random() < blocked else "." for _ in range(c)) for _ in range(r)]
        )

    cases = [lines("1 1", "."), lines("1 1", "#"), lines("1 5", "....."), lines("3 3", "#..", "...", "...")]
    cases += [grid(10, 12, 0.2), grid(120, 120, 0.0), grid(150, 100, 0.05)]
    return cases


@problem(
    "count-at-most",
    "Counting small values",
    "medium",
    """
For each query x, print how many values of the list are less than or equal to x.

**Input.** The first line holds n and q. The second line holds n integers (in no particular order). The third
line holds q integers: the queries.

**Output.** One line with q integers separated by single spaces: the answer to each query.

**Limits.** 1 ≤ n, q ≤ 10^5; every value and query is between -10^9 and 10^9.
""",
    """
import sys
from bisect import bisect_right

data = sys.stdin.read().split()
n, q = int(data[0]), int(data[1])
values = sorted(map(int, data[2 : 2 + n]))
queries = map(int, data[2 + n : 2 + n + q])
print(" ".join(str(bisect_right(values, x)) for x in queries))
""",
    [lines("5 3", "5 1 3 3 9", "3 0 10"), lines("1 2", "-4", "-4 -5")],
)
def _(rng):
    cases = [lines("1 1", "7", "7"), lines("3 3", "1 1 1", "0 1 2")]
    for n, q, spread in ((10, 10, 20), (300, 300, 10**9), (6000, 6000, 999)):
        cases.append(
            lines(
                f"{n} {q}",
                [rng.randint(-spread, spread) for _ in range(n)],
                [rng.randint(-spread, spread) for _ in range(q)],
            )
        )
    return cases


@problem(
    "run-length",
    "Run-length encoding",
    "medium",
    """
Encode a string by runs: every maximal run of one repeated letter becomes the letter followed by the length of the
run (`aaabcc` becomes `a3b1c2`).

**Input.** One line: a non-empty string of lowercase letters.

**Output.** One line: the encoded string.

**Limits.** The string holds at most 10^5 letters.
""",
    """
from itertools import groupby

text = input().strip()
print("".join(f"{letter}{len(list(run))}" for letter, run in groupby(text)))
""",
    ["aaabcc\n", "abc\n"],
)
def _(rng):
    def runs(n_runs, longest):
        out, last = [], ""
        for _ in range(n_runs):
            letter = rng.choice([c for c in "abcde" if c != last])
            out.append(letter * rng.randint(1, longest))
            last = letter
        return "".join(out) + "\n"

    return ["z\n", "q" * 30000 + "\n", runs(10, 3), runs(200, 20), runs(3000, 8)]


@problem(
    "anagram-groups",
    "Anagram groups",
    "medium",
    """
Two words are anagrams when one is a rearrangement of the letters of the other (`listen` and `silent`). Split a
list of words into groups of anagrams (a word with no anagram in the list forms a group of its own; equal words
belong to the same group).

**Input.** The first line holds n. The second line holds n words of lowercase letters, separated by single
spaces.

**Output.** Two integers separated by a space: the number of groups and the size of the largest group.

**Limits.** 1 ≤ n ≤ 10^5; every word holds between 1 and 10 letters.
""",
    """
from collections import Counter

input()
groups = Counter("".join(sorted(word)) for word in input().split())
print(len(groups), max(groups.values()))
""",
    [lines(5, "listen silent enlist google elgoog"), lines(3, "a b a")],
)
def _(rng):
    def words(n, letters, size):
        base = [word(rng, 1, size, letters) for _ in range(max(1, n // 4))]
        out = []
        for _ in range(n):
            w = list(rng.choice(base))
            rng.shuffle(w)
            out.append("".join(w))
        return lines(n, " ".join(out))

    return [
        lines(1, "abc"),
        lines(4, "ab ba ab ba"),
        words(20, "abc", 3),
        words(500, "abcdef", 6),
        words(3000, string.ascii_lowercase, 8),
    ]


@problem(
    "roman-numerals",
    "Roman numerals",
    "medium",
    """
Convert between decimal numbers and Roman numerals in both directions. Roman numerals use I=1, V=5, X=10,
L=50, C=100, D=500, M=1000 in standard subtractive form (4 is IV, 9 is IX, 40 is XL, 90 is XC, 400 is CD,
900 is CM).

**Input.** The first line holds T. Each of the next T lines holds either a decimal number between 1 and 3999 or
a Roman numeral in standard form for such a number.

**Output.** For each line print the other form: the Roman numeral of a decimal number, the decimal value of a
Roman numeral.

**Limits.** 1 ≤ T ≤ 1000.
""",
    """
VALUES = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"), (50, "L"), (40, "XL"),
          (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
DIGITS = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def to_roman(n):
    out = []
    for value, symbol in VALUES:
        while n >= value:
            out.append(symbol)
            n -= value
    return "".join(out)


def from_roman(text):
    total = 0
    for i, ch in enumerate(text):
        value = DIGITS[ch]
        if i + 1 < len(text) and DIGITS[text[i + 1]] > value:
            total -= value
        else:
            total += value
    return total


t = int(input())
for _ in range(t):
    line = input().strip()
    print(to_roman(int(line)) if line.isdigit() else from_roman(line))
""",
    [lines(3, "1994", "MMXXIV", "4"), lines(2, "IX", "3999")],
)
def _(rng):
    numerals = {
        1: "I", 4: "IV", 5: "V", 9: "IX", 10: "X", 40: "XL", 50: "L", 90: "XC",
        100: "C", 400: "CD", 500: "D", 900: "CM", 1000: "M",
    }  # fmt: skip

    def roman(n):
        out = []
        for value in sorted(numerals, reverse=True):
            while n >= value:
                out.append(numerals[value])
                n -= value
        return "".join(out)

    def mixed(t):
        return lines(
            t, *[str(n) if rng.random() < 0.5 else roman(n) for n in (rng.randint(1, 3999) for _ in range(t))]
        )

    return [lines(2, "1", "I"), lines(2, "3888", "MMMDCCCLXXXVIII"), mixed(10), mixed(200), mixed(1000)]


@problem(
    "stack-machine",
    "Stack machine",
    "medium",
    """
Run a program for a stack machine that starts with an empty stack. The commands are:

- `push x`: put the integer x on the stack;
- `pop`: remove the top value;
- `add`: remove the two top values and put their sum on the stack;
- `mul`: remove the two top values and put their product on the stack;
- `dup`: put a copy of the top value on the stack;
- `print`: print the top value (the stack does not change).

**Input.** The first line holds n, the number of commands. Each of the next n lines holds one command. Every
command is valid: the stack always holds enough values.

**Output.** One line for every `print` command, with the printed value.

**Limits.** 1 ≤ n ≤ 10^4; |x| ≤ 1000; no value ever has more than 100 digits.
""",
    """
import sys

commands = sys.stdin.read().split("\\n")
n = int(commands[0])
stack = []
out = []
for line in commands[1 : n + 1]:
    parts = line.split()
    op = parts[0]
    if op == "push":
        stack.append(int(parts[1]))
    elif op == "pop":
        stack.pop()
    elif op == "add":
        b, a = stack.pop(), stack.pop()
        stack.append(a + b)
    elif op == "mul":
        b, a = stack.pop(), stack.pop()
        stack.append(a * b)
    elif op == "dup":
        stack.append(stack[-1])
    elif op == "print":
        out.append(str(stack[-1]))
print("\\n".join(out))
""",
    [
        lines(6, "push 2", "push 3", "add", "print", "dup", "print"),
        lines(5, "push -4", "push 5", "mul", "print", "pop"),
    ],
)
def _(rng):
    def program(n):
        rows, depth, digits = [], 0, []
        while len(rows) < n:
            choices = ["push"] if depth == 0 else ["push", "dup", "print", "pop"]
            if depth >= 2:
                choices += ["add", "mul", "add"]
            op = rng.choice(choices)
            if op == "mul" and max(digits[-1], digits[-2]) > 40:
                op = "add"
            if op == "push":
                value = rng.randint(-1000, 1000)
                rows.append(f"push {value}")
                depth += 1
                digits.append(len(str(abs(value))))
            elif op in ("add", "mul"):
                rows.append(op)
                b, a = digits.pop(), digits.pop()
                digits.append(a + b + 1 if op == "mul" else max(a, b) + 1)
                depth -= 1
            elif op == "dup":
                rows.append(op)
                digits.append(digits[-1])
                depth += 1
            elif op == "pop":
                rows.append(op)
                digits.pop()
                depth -= 1
            else:
                rows.append(op)
        rows.append("push 1" if depth == 0 else "print")
        return lines(len(rows), *rows)

    return [lines(2, "push 0", "print"), program(10), program(100), program(500), program(3000)]


@problem(
    "polygon-area",
    "Polygon area",
    "medium",
    """
Compute the area of a simple polygon (its sides do not cross) given its vertices in order, clockwise or
counter-clockwise.

**Input.** The first line holds n. Each of the next n lines holds the integer coordinates x and y of a vertex.

**Output.** The area of the polygon as a real number. Answers within 10^-6 (absolute or relative) of the exact
value are accepted.

**Limits.** 3 ≤ n ≤ 10^4; |x|, |y| ≤ 10^6.
""",
    """
import sys

data = list(map(int, sys.stdin.read().split()))
n = data[0]
xs, ys = data[1 : 2 * n + 1 : 2], data[2 : 2 * n + 2 : 2]
twice = sum(xs[i] * ys[(i + 1) % n] - xs[(i + 1) % n] * ys[i] for i in range(n))
print(f"{abs(twice) / 2:.1f}")
""",
    [lines(4, "0 0", "4 0", "4 3", "0 3"), lines(3, "0 0", "1 0", "0 1")],
    float_tol=1e-6,
)
def _(rng):
    import math as _math

    def star(n, radius):
        # a polygon around the origin with vertices in angular order is simple
        angles = sorted(rng.uniform(0, 2 * _math.pi) for _ in range(n))
        rows = []
        for angle in angles:
            r = rng.uniform(radius / 3, radius)
            rows.append(f"{round(r * _math.cos(angle))} {round(r * _math.sin(angle))}")
        return lines(n, *rows)

    cases = [lines(3, "0 0", "1000000 0", "0 1000000"), lines(4, "0 0", "0 5", "5 5", "5 0")]
    cases += [star(10, 100), star(300, 10**5), star(2000, 10**6)]
    return cases


@problem(
    "clock-difference",
    "Clock difference",
    "medium",
    """
For each pair of times of day, print how many seconds pass from the first time to the next moment the clock shows
the second time. If both times are equal the answer is 0.

**Input.** The first line holds T. Each of the next T lines holds two times `HH:MM:SS` (24-hour clock)
separated by a space.

**Output.** T lines, each with one integer: the number of seconds.

**Limits.** 1 ≤ T ≤ 1000.
""",
    """
def seconds(text):
    h, m, s = map(int, text.split(":"))
    return 3600 * h + 60 * m + s


t = int(input())
for _ in range(t):
    first, second = input().split()
    print((seconds(second) - seconds(first)) % 86400)
""",
    [lines(2, "10:00:00 10:01:30", "23:59:59 00:00:00"), lines(1, "12:00:00 12:00:00")],
)
def _(rng):
    def clock():
        return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"

    cases = [lines(1, "00:00:00 23:59:59"), lines(1, "00:00:01 00:00:00")]
    for t in (10, 100, 500):
        cases.append(lines(t, *[f"{clock()} {clock()}" for _ in range(t)]))
    return cases


@problem(
    "max-subarray",
    "Best stretch",
    "medium",
    """
Find the largest sum of a non-empty contiguous stretch of a list of integers.

**Input.** The first line holds n. The second line holds n integers.

**Output.** One integer: the largest sum of a contiguous non-empty sublist.

**Limits.** 1 ≤ n ≤ 10^5; every value is between -10^4 and 10^4.
""",
    """
input()
best = None
running = 0
for value in map(int, input().split()):
    running = max(value, running + value)
    best = running if best is None else max(best, running)
print(best)
""",
    [array_input([-2, 1, -3, 4, -1, 2, 1, -5, 4]), array_input([-3, -1, -2])],
)
def _(rng):
    cases = [array_input([5]), array_input([-10000]), array_input([10000] * 50)]
    for size in (40, 1000, 8000):
        cases.append(array_input([rng.randint(-999, 900) for _ in range(size)]))
    return cases


@problem(
    "calculator",
    "Calculator",
    "medium",
    """
Evaluate arithmetic expressions made of non-negative integers, the operators `+`, `-` and `*`, and parentheses.
`*` binds more tightly than `+` and `-`; operators of the same kind are applied from left to right. There is no
unary minus, but results may be negative. Spaces may appear between tokens.

**Input.** The first line holds T. Each of the next T lines holds one expression.

**Output.** T lines: the value of each expression.

**Limits.** 1 ≤ T ≤ 100; every expression holds at most 1000 characters and its numbers at most 9 digits.
""",
    """
import re


def evaluate(text):
    tokens = re.findall(r"\\d+|[-+*()]", text)
    position = 0

    def peek():
        return tokens[position] if position < len(tokens) else None

    def take():
        nonlocal position
        position += 1
        return tokens[position - 1]

    def expression():
        value = term()
        while peek() in ("+", "-"):
            value = value + term() if take() == "+" else value - term()
        return value

    def term():
        value = factor()
        while peek() == "*":
            take()
            value *= factor()
        return value

    def factor():
        token = take()
        if token == "(":
            value = expression()
            take()
            return value
        return int(token)

    return expression()


t = int(input())
for _ in range(t):
    print(evaluate(input()))
""",
    [lines(3, "1 + 2 * 3", "(1 + 2) * 3", "2 - 3 - 4"), lines(1, "10*(2-5)")],
)
def _(rng):
    def expression(depth):
        if depth == 0 or rng.random() < 0.3:
            return str(rng.randint(0, 10 ** rng.randint(1, 3)))
        op = rng.choice([" + ", " - ", " * ", "+", "-", "*"])
        left, right = expression(depth - 1), expression(depth - 1)
        text = f"{left}{op}{right}"
        return f"({text})" if rng.random() < 0.4 else text

    cases = [lines(1, "0"), lines(2, "7 - (2 - 1)", "2*3*4 - 5*6")]
    for t, depth in ((5, 3), (30, 5), (100, 6)):
        cases.append(lines(t, *[expression(depth)[:1000] for _ in range(t)]))
    return [_balanced_only(c) for c in cases]


def _balanced_only(case: str) -> str:
    # cutting an expression at 1000 characters could leave it unbalanced; the generator's depths keep them shorter
    for row in case.splitlines()[1:]:
        assert row.count("(") == row.count(")") and not row.endswith(("+", "-", "*", " ")), row
    return case


# -- hard ------------------------------------------------------------------------------------------------------


@problem(
    "maze-steps",
    "Maze",
    "hard",
    """
Find the fewest steps from `S` to `E` in a maze. A step moves to one of the four neighbouring cells (up, down,
left, right) that is not a wall `#`; the maze has no exits beyond its border.

**Input.** The first line holds r and c. Each of the next r lines holds c characters: `.` (free), `#` (wall),
`S` (the start, exactly once) and `E` (the goal, exactly once).

**Output.** One integer: the fewest steps from S to E, or -1 if E cannot be reached.

**Limits.** 1 ≤ r, c ≤ 300.
""",
    """
import sys
from collections import deque

data = sys.stdin.read().split()
r, c = int(data[0]), int(data[1])
grid = data[2 : 2 + r]
cells = "".join(grid)
start, goal = cells.index("S"), cells.index("E")
distance = [-1] * (r * c)
distance[start] = 0
queue = deque([start])
while queue:
    here = queue.popleft()
    if here == goal:
        break
    row, col = divmod(here, c)
    for nr, nc in ((row - 1, col), (row + 1, col), (row, col - 1), (row, col + 1)):
        if 0 <= nr < r and 0 <= nc < c:
            there = nr * c + nc
            if distance[there] < 0 and cells[there] != "#":
                distance[there] = distance[here] + 1
                queue.append(there)
print(distance[goal])
""",
    [lines("3 4", "S..#", ".#..", "...E"), lines("2 3", "S#E", ".#.")],
)
def _(rng):
    def maze(r, c, walls):
        cells = [["#" if rng.random() < walls else "." for _ in range(c)] for _ in range(r)]
        positions = rng.sample(range(r * c), 2)
        for mark, position in zip("SE", positions, strict=True):
            cells[position // c][position % c] = mark
        return lines(f"{r} {c}", *["".join(row) for row in cells])

    cases = [lines("1 2", "SE"), lines("1 3", "S#E")]
    cases += [maze(8, 9, 0.25), maze(50, 60, 0.3), maze(150, 200, 0.2), maze(200, 150, 0.35)]
    return cases


@problem(
    "shortest-paths",
    "Shortest paths",
    "hard",
    """
An undirected graph has n nodes numbered 1 to n and m weighted edges. Print the length of the shortest path from
node 1 to every node.

**Input.** The first line holds n and m. Each of the next m lines holds three integers u, v and w: an edge
between u and v of length w. There may be several edges between two nodes, and loops.

**Output.** One line with n integers separated by single spaces: the shortest distance from node 1 to nodes 1,
2, ..., n, or -1 for a node that cannot be reached.

**Limits.** 1 ≤ n ≤ 10^4; 0 ≤ m ≤ 5·10^4; 1 ≤ w ≤ 10^6.
""",
    """
import heapq
import sys

data = list(map(int, sys.stdin.read().split()))
n, m = data[0], data[1]
graph = [[] for _ in range(n + 1)]
for i in range(m):
    u, v, w = data[2 + 3 * i : 5 + 3 * i]
    graph[u].append((v, w))
    graph[v].append((u, w))
distance = [-1] * (n + 1)
heap = [(0, 1)]
while heap:
    d, node = heapq.heappop(heap)
    if distance[node] >= 0:
        continue
    distance[node] = d
    for other, w in graph[node]:
        if distance[other] < 0:
            heapq.heappush(heap, (d + w, other))
print(" ".join(map(str, distance[1:])))
""",
    [lines("4 4", "1 2 5", "2 3 1", "1 3 10", "3 3 2"), lines("3 1", "2 3 7")],
)
def _(rng):
    def graph(n, m, heaviest):
        rows = [f"{rng.randint(1, n)} {rng.randint(1, n)} {rng.randint(1, heaviest)}" for _ in range(m)]
        return lines(f"{n} {m}", *rows)

    cases = [lines("1 0"), lines("2 2", "1 2 3", "1 2 1")]
    cases += [graph(10, 15, 20), graph(300, 1000, 1000), graph(3000, 5000, 999)]
    return cases


@problem(
    "knapsack",
    "Knapsack",
    "hard",
    """
Choose items of the largest total value whose total weight fits in a bag. Each item can be taken at most once.

**Input.** The first line holds n and W, the number of items and the bag's capacity. Each of the next n lines
holds the weight and the value of an item.

**Output.** One integer: the largest total value of a set of items whose total weight is at most W.

**Limits.** 1 ≤ n ≤ 60; 1 ≤ W ≤ 5000; 1 ≤ weight ≤ 5000; 0 ≤ value ≤ 10^6.
""",
    """
n, capacity = map(int, input().split())
best = [0] * (capacity + 1)
for _ in range(n):
    weight, value = map(int, input().split())
    for room in range(capacity, weight - 1, -1):
        candidate = best[room - weight] + value
        if candidate > best[room]:
            best[room] = candidate
print(best[capacity])
""",
    [lines("3 5", "2 3", "3 4", "4 5"), lines("2 1", "2 10", "3 20")],
)
def _(rng):
    def items(n, capacity, heaviest):
        rows = [f"{rng.randint(1, heaviest)} {rng.randint(0, 10**6)}" for _ in range(n)]
        return lines(f"{n} {capacity}", *rows)

    cases = [lines("1 5000", "5000 7"), lines("2 10", "5 5", "5 6")]
    cases += [items(10, 50, 20), items(40, 1000, 300), items(60, 5000, 800)]
    return cases


@problem(
    "longest-increasing-subsequence",
    "Longest increasing subsequence",
    "hard",
    """
Find the length of the longest strictly increasing subsequence of a list: values taken in their order in the
list, not necessarily next to each other, each larger than the one before.

**Input.** The first line holds n. The second line holds n integers.

**Output.** One integer: the length of the longest strictly increasing subsequence.

**Limits.** 1 ≤ n ≤ 10^5; every value is between -10^9 and 10^9.
""",
    """
from bisect import bisect_left

input()
tails = []
for value in map(int, input().split()):
    i = bisect_left(tails, value)
    if i == len(tails):
        tails.append(value)
    else:
        tails[i] = value
print(len(tails))
""",
    [array_input([10, 9, 2, 5, 3, 7, 101, 18]), array_input([7, 7, 7])],
)
def _(rng):
    cases = [array_input([1]), array_input(list(range(500, 0, -1))), array_input(list(range(1000)))]
    for size, spread in ((50, 10**9), (1000, 10**9), (10000, 10**5)):
        cases.append(array_input([rng.randint(-spread, spread) for _ in range(size)]))
    return cases


@problem(
    "edit-distance",
    "Edit distance",
    "hard",
    """
Compute the edit distance of two strings: the fewest single-character insertions, deletions and substitutions
that turn the first string into the second.

**Input.** Two lines, each holding a non-empty string of lowercase letters.

**Output.** One integer: the edit distance.

**Limits.** Each string holds at most 500 letters.
""",
    """
a = input().strip()
b = input().strip()
previous = list(range(len(b) + 1))
for i, ca in enumerate(a, 1):
    current = [i] + [0] * len(b)
    for j, cb in enumerate(b, 1):
        current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb))
    previous = current
print(previous[-1])
""",
    [lines("kitten", "sitting"), lines("abc", "abc")],
)
def _(rng):
    def mutated(text, changes):
        letters = list(text)
        for _ in range(changes):
            i = rng.randrange(len(letters) + 1)
            kind = rng.random()
            if kind < 0.3 and letters:
                letters.pop(min(i, len(letters) - 1))
            elif kind < 0.6:
                letters.insert(i, rng.choice("abcd"))
            elif letters:
                letters[min(i, len(letters) - 1)] = rng.choice("abcd")
        return "".join(letters) or "a"

    base = word(rng, 500, 500, "abcd")
    cases = [lines("a", "b"), lines("a", "aaaa"), lines("abcdef", "fedcba")]
    cases += [lines(word(rng, 10, 20, "ab"), word(rng, 10, 20, "ab")), lines(base, mutated(base, 60))]
    cases.append(lines(word(rng, 400, 500), word(rng, 400, 500)))
    return cases


@problem(
    "inversions",
    "Counting inversions",
    "hard",
    """
Count the inversions of a list: the pairs of positions i < j with a_i > a_j.

**Input.** The first line holds n. The second line holds n integers.

**Output.** One integer: the number of inversions.

**Limits.** 1 ≤ n ≤ 10^5; every value is between -10^9 and 10^9.
""",
    """
import sys


def count(values):
    if len(values) < 2:
        return values, 0
    middle = len(values) // 2
    left, a = count(values[:middle])
    right, b = count(values[middle:])
    merged, inversions, i, j = [], a + b, 0, 0
    while i < len(left) and j < len(right):
        if right[j] < left[i]:
            merged.append(right[j])
            inversions += len(left) - i
            j += 1
        else:
            merged.append(left[i])
            i += 1
    merged.extend(left[i:])
    merged.extend(right[j:])
    return merged, inversions


data = sys.stdin.read().split()
print(count(list(map(int, data[1:])))[1])
""",
    [array_input([3, 1, 2]), array_input([1, 2, 3, 3])],
)
def _(rng):
    cases = [array_input([5]), array_input(list(range(1000, 0, -1))), array_input([2, 2, 1, 1])]
    for size in (30, 1000, 12000):
        cases.append(array_input([rng.randint(-500, 500) for _ in range(size)]))
    return cases


@problem(
    "components",
    "Connected components",
    "hard",
    """
An undirected graph has n nodes numbered 1 to n. Count its connected components.

**Input.** The first line holds n and m. Each of the next m lines holds two integers u and v: an edge between u
and v (loops and repeated edges may occur).

**Output.** One integer: the number of connected components.

**Limits.** 1 ≤ n ≤ 10^5; 0 ≤ m ≤ 10^5.
""",
    """
import sys

data = list(map(int, sys.stdin.read().split()))
n, m = data[0], data[1]
parent = list(range(n + 1))


def find(x):
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


components = n
for i in range(m):
    a, b = find(data[2 + 2 * i]), find(data[3 + 2 * i])
    if a != b:
        parent[a] = b
        components -= 1
print(components)
""",
    [lines("5 3", "1 2", "2 3", "4 5"), lines("3 0")],
)
def _(rng):
    def graph(n, m):
        return lines(f"{n} {m}", *[f"{rng.randint(1, n)} {rng.randint(1, n)}" for _ in range(m)])

    chain = lines("1000 999", *[f"{i} {i + 1}" for i in range(1, 1000)])
    return [
        lines("1 1", "1 1"),
        lines("4 2", "1 2", "2 1"),
        graph(20, 10),
        chain,
        graph(1000, 600),
        graph(5000, 4000),
    ]


@problem(
    "coin-ways",
    "Ways to pay",
    "hard",
    """
Count the ways to pay an amount with coins of the given values, with as many coins of each value as needed.
Two ways differ when they use a different number of coins of some value (the order of the coins does not
matter). Print the count modulo 1 000 000 007.

**Input.** The first line holds n and the amount A. The second line holds n distinct coin values.

**Output.** One integer: the number of ways to pay exactly A, modulo 1 000 000 007.

**Limits.** 1 ≤ n ≤ 50; 0 ≤ A ≤ 10^4; 1 ≤ coin value ≤ 10^4.
""",
    """
MOD = 10**9 + 7
n, amount = map(int, input().split())
ways = [1] + [0] * amount
for coin in map(int, input().split()):
    for total in range(coin, amount + 1):
        ways[total] = (ways[total] + ways[total - coin]) % MOD
print(ways[amount])
""",
    [lines("3 5", "1 2 5"), lines("1 3", "2")],
)
def _(rng):
    def coins(n, amount, largest):
        return lines(f"{n} {amount}", rng.sample(range(1, largest + 1), n))

    cases = [lines("1 0", "7"), lines("2 10000", "1 2")]
    cases += [coins(4, 30, 10), coins(20, 1000, 200), coins(50, 10000, 500)]
    return cases


@problem(
    "topological-order",
    "Task order",
    "hard",
    """
Tasks numbered 1 to n must be done one at a time; a rule `u v` says that task u must be done before task v.
Print the order of the tasks that follows every rule and comes first alphabetically as a list of numbers (at
each position, the smallest task number possible), or `IMPOSSIBLE` if the rules contradict each other.

**Input.** The first line holds n and m. Each of the next m lines holds a rule: two different integers u and v.

**Output.** One line: n task numbers separated by single spaces, or `IMPOSSIBLE`.

**Limits.** 1 ≤ n ≤ 10^4; 0 ≤ m ≤ 5·10^4.
""",
    """
import heapq
import sys

data = list(map(int, sys.stdin.read().split()))
n, m = data[0], data[1]
after = [[] for _ in range(n + 1)]
waiting = [0] * (n + 1)
for i in range(m):
    u, v = data[2 + 2 * i], data[3 + 2 * i]
    after[u].append(v)
    waiting[v] += 1
ready = [task for task in range(1, n + 1) if waiting[task] == 0]
heapq.heapify(ready)
order = []
while ready:
    task = heapq.heappop(ready)
    order.append(task)
    for other in after[task]:
        waiting[other] -= 1
        if waiting[other] == 0:
            heapq.heappush(ready, other)
print(" ".join(map(str, order)) if len(order) == n else "IMPOSSIBLE")
""",
    [lines("4 3", "2 1", "3 1", "4 3"), lines("2 2", "1 2", "2 1")],
)
def _(rng):
    def acyclic(n, m):
        ranks = list(range(1, n + 1))
        rng.shuffle(ranks)
        rows = []
        for _ in range(m):
            a, b = rng.sample(range(n), 2)
            a, b = min(a, b), max(a, b)
            rows.append(f"{ranks[a]} {ranks[b]}")
        return rows

    cases = [lines("1 0"), lines("3 0")]
    cases.append(lines("50 60", *acyclic(50, 60)))
    cyclic = acyclic(200, 400)
    u, v = map(int, cyclic[0].split())
    cases.append(lines(f"200 {len(cyclic) + 1}", *cyclic, f"{v} {u}"))
    cases.append(lines("3000 4000", *acyclic(3000, 4000)))
    return cases


# -- building the bundle -------------------------------------------------------------------------------------


def run_reference(source: str, data: str) -> tuple[str, float]:
    """What the reference solution prints for ``data``, and how long it took."""
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", source], input=data, capture_output=True, text=True, timeout=30, check=False
    )
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"the reference solution failed: {result.stderr[-2000:]}\ninput: {data[:300]!r}")
    return result.stdout, elapsed


def build_bundle(seed: int = 0) -> dict[str, Any]:
    """Every problem with its public and hidden tests (expected outputs from the reference solution)."""
    problems = []
    ids = set()
    for spec in PROBLEMS:
        if spec["id"] in ids:
            raise ValueError(f"duplicate problem id {spec['id']}")
        ids.add(spec["id"])
        rng = random.Random(f"{seed}/{spec['id']}")
        hidden_inputs = spec["hidden"](rng)
        tests: dict[str, list[dict[str, str]]] = {"public_tests": [], "hidden_tests": []}
        seen = set()
        for kind, inputs in (("public_tests", spec["public"]), ("hidden_tests", hidden_inputs)):
            for data in inputs:
                if data in seen:
                    continue
                seen.add(data)
                output, elapsed = run_reference(spec["reference_solution"], data)
                if elapsed > REFERENCE_BUDGET_S:
                    raise RuntimeError(f"{spec['id']}: the reference took {elapsed:.2f} s on a test")
                if not output.strip():
                    raise RuntimeError(f"{spec['id']}: the reference printed nothing for {data[:100]!r}")
                tests[kind].append({"input": data, "output": output})
        problems.append(
            {
                "id": spec["id"],
                "title": spec["title"],
                "difficulty": spec["difficulty"],
                "statement": spec["statement"],
                **tests,
                "reference_solution": spec["reference_solution"],
                "float_tol": spec["float_tol"],
                "time_limit_s": TIME_LIMIT_S,
            }
        )
    return {"version": 1, "seed": seed, "problems": problems}


def main() -> int:
    bundle = build_bundle()
    text = json.dumps(bundle, indent=1, ensure_ascii=False) + "\n"
    BUNDLE.write_text(text, encoding="utf-8")
    counts: dict[str, int] = {}
    for entry in bundle["problems"]:
        counts[entry["difficulty"]] = counts.get(entry["difficulty"], 0) + 1
    tests = sum(len(p["public_tests"]) + len(p["hidden_tests"]) for p in bundle["problems"])
    print(f"{len(bundle['problems'])} problems {counts}, {tests} tests, {len(text) / 1e6:.2f} MB -> {BUNDLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
