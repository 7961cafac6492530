"""Reading the final answer out of a model's text, and scoring it against the ground truth.

The final answer is the one written last, in either of two markers:

- ``#### N`` (the GSM8K convention): the rest of that line after the last ``####``;
- ``\\boxed{N}`` (the MATH convention): the contents of the last ``\\boxed{...}``, braces nested inside it
  included (``\\boxed{\\text{42}}``, ``\\boxed{1{,}234}``).

Numbers may carry a sign, thousands separators (``1,234``), a currency or math-mode ``$`` and a decimal
part that is zero (``42.0``). Everything here runs in time linear in the text's length (model output can be
a megabyte of anything) and never raises: text that cannot be read simply scores 0.
"""

from __future__ import annotations

import dataclasses
import re
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = ["Grade", "extract_answer", "grade", "parse_number", "score"]

MAX_ANSWER_CHARS = 200
"""The longest final answer considered; a longer one is not a number anyway."""

_BOXED = "\\boxed{"
_HASHES = "####"

# A number: optional sign, digits with optional thousands groups, optional decimal part.
_NUMBER = re.compile(r"([-+]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?")
# Words after a number are tolerated (units: "#### 42 apples"), as is closing punctuation.
_TRAILER = re.compile(r"(?:\s+[^\W\d_]+)*\s*[.!]?")
# LaTeX that may wrap or space a number inside \boxed{}.
_LATEX_NOISE = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox|displaystyle)\b|\\[,;:! ]|\\left|\\right")
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2013": "-", "\u2012": "-"})


@dataclasses.dataclass(frozen=True)
class Grade:
    """The verdict on one answer.

    Attributes:
        answer: the final answer as written (``None`` when no marker was found).
        value: that answer as a number (an ``int`` when integral, a string of the decimal otherwise),
            ``None`` when it is not a number.
        format_valid: a marker was found and it held a number.
        correct: the number equals the ground truth.
    """

    answer: str | None
    value: int | str | None
    format_valid: bool
    correct: bool

    @property
    def reward(self) -> float:
        return 1.0 if self.correct else 0.0


def _last_hashes_answer(text: str) -> tuple[int, str] | None:
    """Position and text of the last ``#### ...`` answer (the rest of its line), if any."""
    at = text.rfind(_HASHES)
    if at < 0:
        return None
    start = at + len(_HASHES)
    end = text.find("\n", start, start + MAX_ANSWER_CHARS + 1)
    if end < 0:
        end = min(len(text), start + MAX_ANSWER_CHARS + 1)
    return at, text[start:end]


def _last_boxed_answer(text: str) -> tuple[int, str] | None:
    """Position and contents of the last ``\\boxed{...}``, if it is closed within ``MAX_ANSWER_CHARS``.

    Only the last opening counts: an unclosed final ``\\boxed{`` means the answer was cut off, and
    searching earlier ones would make the cost quadratic in the number of tags.
    """
    at = text.rfind(_BOXED)
    if at < 0:
        return None
    start = at + len(_BOXED)
    depth = 1
    window = text[start : start + MAX_ANSWER_CHARS + 1]
    for offset, char in enumerate(window):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return at, window[:offset]
    return None


def extract_answer(text: Any) -> str | None:
    """The final answer written in ``text`` (after the last ``####`` or inside the last ``\\boxed{}``).

    Returns the raw answer text, or ``None`` when there is no complete marker. Whichever marker comes last
    in the text wins.
    """
    if not isinstance(text, str):
        return None
    candidates = [c for c in (_last_hashes_answer(text), _last_boxed_answer(text)) if c is not None]
    if not candidates:
        return None
    return max(candidates)[1].strip()


def _clean(answer: str) -> str:
    answer = answer.translate(_MINUS_SIGNS)
    answer = _LATEX_NOISE.sub(" ", answer)
    answer = answer.replace("{,}", ",").replace("\\$", "$").replace("\\%", "%")
    answer = answer.replace("{", "").replace("}", "").replace("$", "").replace("*", "")
    return answer.strip().rstrip("%").strip()


def parse_number(answer: Any) -> int | Decimal | None:
    """The number a final answer (or a ground truth) states, or ``None`` if it states none.

    ``"1,234"`` -> 1234, ``"-7"`` -> -7, ``"42.0"`` -> 42, ``"$42$"`` -> 42, ``"2.5"`` -> Decimal("2.5"),
    ``"42 apples"`` -> 42; ``"forty-two"``, ``"4 2"``, ``"12,34"`` -> None. Integers pass through.
    """
    if isinstance(answer, bool):
        return None
    if isinstance(answer, int):
        return answer
    if not isinstance(answer, str) or len(answer) > MAX_ANSWER_CHARS:
        return None
    text = _clean(answer)
    match = _NUMBER.match(text)
    if match is None or not _TRAILER.fullmatch(text, match.end()):
        return None
    sign, digits, fraction = match.groups()
    try:
        whole = int(digits.replace(",", ""))
        if fraction is None or not fraction.strip("0"):
            return -whole if sign == "-" else whole
        value = Decimal(f"{sign}{digits.replace(',', '')}.{fraction}")
    except (ValueError, InvalidOperation):
        return None
    return value


def _json_value(value: int | Decimal | None) -> int | str | None:
    return str(value) if isinstance(value, Decimal) else value


def grade(text: Any, ground_truth: Any) -> Grade:
    """Read the final answer in ``text`` and compare it with ``ground_truth`` (a number or its text).

    Numbers compare by value (``"42.0"`` equals ``42``); a ground truth that is not a number is compared
    with the answer as text, ignoring surrounding spaces and ``$``.
    """
    try:
        answer = extract_answer(text)
        if answer is None:
            return Grade(answer=None, value=None, format_valid=False, correct=False)
        value = parse_number(answer)
        expected = parse_number(ground_truth)
        if expected is not None:
            correct = value is not None and value == expected
        else:
            correct = isinstance(ground_truth, str) and _clean(answer) == _clean(ground_truth) != ""
        return Grade(
            answer=answer[:MAX_ANSWER_CHARS],
            value=_json_value(value),
            format_valid=value is not None,
            correct=bool(correct),
        )
    except Exception:  # scoring must never take an episode down; unreadable text scores 0
        return Grade(answer=None, value=None, format_valid=False, correct=False)


def score(text: Any, ground_truth: Any) -> float:
    """1.0 when the final answer in ``text`` equals ``ground_truth``, else 0.0. Never raises."""
    return grade(text, ground_truth).reward
