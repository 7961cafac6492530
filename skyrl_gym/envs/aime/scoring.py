"""AIME/MATH answer checking with SkyRL's rules (SkyRL's ``skyrl_gym.envs.aime.utils``, a name
:mod:`skyrl_gym.compat` keeps for this module).

The default rule (Minerva's, as in DAPO and SkyRL): of the solution's last 300 characters, the text after the
last ``Answer:`` (any case, spaces allowed around the colon) up to the end of the line or the first ``<`` is
the prediction. Prediction and ground truth are both normalised (:func:`normalize_final_answer`: the part
after the last ``=``, units and LaTeX spacing removed, ``\\text{}``/``\\boxed{}`` unwrapped, ``\\frac12``
written out, thousands commas dropped from integers) and must then be equal as text. So
``"Answer: \\boxed{42}"`` and ``"Answer: 42<|im_end|>"`` match ``"42"``, ``"Answer: 0.5"`` does not match
``"\\frac{1}{2}"``, and a chat template's end token written without its ``<`` is part of the answer.

The strict rule (``strict_box_verify=True``): the content of the last ``\\boxed{}`` in the last 100
characters must equal the ground truth exactly.

:func:`compute_score` pays 1.0 for a match and -1.0 otherwise. Nothing here raises on any input text.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "compute_score",
    "is_correct_minerva",
    "is_correct_strict_box",
    "last_boxed_only_string",
    "normalize_final_answer",
    "remove_boxed",
    "verify",
]

_BOXED = "\\boxed{"
_ANSWER = r"(?i)Answer\s*:\s*([^\n<]+)"
_INVALID = "[INVALID]"
SOLUTION_TAIL_CHARS = 300
"""Only the solution's last characters are read (the longest MATH-500 answer has 159)."""
STRICT_TAIL_CHARS = 100

# Literal rewrites, in order (Minerva's normalisation): articles, dollar signs, spacing, "and" lists.
_REWRITES = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    ("\\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)
# Units, words and LaTeX decorations dropped wherever they appear, in order.
_DROPPED = (
    *"square ways integers dollars mph inches hours km units".split(),
    "\\ldots",
    *"sue points feet minutes digits cents degrees cm gm pounds meters meals edges students".split(),
    "childrentickets",
    "multiples",
    "\\text{s}",
    "\\text{.}",
    "\\text{\ns}",
    "\\text{}^2",
    "\\text{}^3",
    "\\text{\n}",
    "\\text{}",
    "\\mathrm{th}",
    "^\\circ",
    "^{\\circ}",
    "\\;",
    ",\\!",
    "{,}",
    '"',
    "\\dots",
)
# Regular rewrites, in order: keep what is inside $...$, unwrap \text, \textbf, \overline and \boxed, then
# write out the shorthand \fracab and \sqrta.
_PATTERNS = (
    (re.compile(r"(.*?)(\$)(.*?)(\$)(.*)"), "$\\3$"),
    (re.compile(r"(\\text\{)(.*?)(\})"), "\\2"),
    (re.compile(r"(\\textbf\{)(.*?)(\})"), "\\2"),
    (re.compile(r"(\\overline\{)(.*?)(\})"), "\\2"),
    (re.compile(r"(\\boxed\{)(.*)(\})"), "\\2"),
    (re.compile(r"(frac)([^{])(.)"), "frac{\\2}{\\3}"),
    (re.compile(r"(sqrt)([^{])"), "sqrt{\\2}"),
)


def last_boxed_only_string(string: str) -> str | None:
    """The last ``\\boxed{...}`` of ``string``, braces included (nested ones balanced), or ``None``."""
    start = string.rfind(_BOXED)
    if start < 0:
        return None
    depth = 0
    for index in range(start, len(string)):
        char = string[index]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return string[start : index + 1]
    return None


def remove_boxed(s: str) -> str:
    """The content of ``"\\boxed{content}"``; a ``ValueError`` when ``s`` is not such a string."""
    if not (s.startswith(_BOXED) and s.endswith("}")):
        raise ValueError(f"not a \\boxed{{...}} expression: {s!r:.80}")
    return s[len(_BOXED) : -1]


def normalize_final_answer(final_answer: str) -> str:
    """``final_answer`` normalised for comparison (Minerva's rules; see the module docstring)."""
    text = final_answer.split("=")[-1]
    for before, after in _REWRITES:
        text = text.replace(before, after)
    for dropped in _DROPPED:
        text = text.replace(dropped, "")
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    text = text.replace("$", "")
    if text.replace(",", "").isdigit():
        text = text.replace(",", "")
    return text.strip()


def is_correct_minerva(
    solution_str: str, gt: str, gt_need_extract: bool = False, answer_pattern: str = _ANSWER
) -> tuple[bool, str]:
    """Whether the ``Answer:`` of ``solution_str`` matches ``gt`` after normalisation, and the prediction.

    ``gt_need_extract``: the ground truth is a solution whose last ``\\boxed{}`` holds the answer.
    """
    found = re.findall(answer_pattern, solution_str)
    prediction = normalize_final_answer(found[-1] if found else _INVALID)
    if gt_need_extract:
        boxed = last_boxed_only_string(gt)
        gt = remove_boxed(boxed) if boxed is not None else gt
    return prediction == normalize_final_answer(gt), prediction


def is_correct_strict_box(
    pred: str, gt: str, pause_tokens_index: list[int] | None = None
) -> tuple[int, str | None]:
    """``(1, content)`` when the last ``\\boxed{}`` near the end of ``pred`` holds exactly ``gt``, else
    ``(-1, content or None)``.

    ``pause_tokens_index``: four character positions; the box is looked for from 100 characters before the
    last one to the end, instead of in the last 100 characters.
    """
    if pause_tokens_index is not None:
        if len(pause_tokens_index) != 4:
            raise ValueError(f"pause_tokens_index must hold 4 positions, got {pause_tokens_index!r}")
        pred = pred[max(0, pause_tokens_index[-1] - STRICT_TAIL_CHARS) :]
    else:
        pred = pred[-STRICT_TAIL_CHARS:]
    boxed = last_boxed_only_string(pred)
    extracted = remove_boxed(boxed) if boxed is not None else None
    return (1 if extracted == gt else -1), extracted


def verify(
    solution_str: str,
    answer: str,
    strict_box_verify: bool = False,
    pause_tokens_index: list[int] | None = None,
) -> tuple[bool, str | None]:
    """Whether ``solution_str`` answers ``answer`` (the strict or the Minerva rule), and the prediction."""
    if strict_box_verify:
        score, prediction = is_correct_strict_box(solution_str, answer, pause_tokens_index)
        return score == 1, prediction
    return is_correct_minerva(solution_str, answer)


def compute_score(
    solution_str: Any,
    ground_truth: Any,
    strict_box_verify: bool = False,
    pause_tokens_index: list[int] | None = None,
) -> dict[str, Any]:
    """``{"score": 1.0 or -1.0, "acc": bool, "pred": the prediction}`` for a solution and its ground truth."""
    text = solution_str[-SOLUTION_TAIL_CHARS:] if isinstance(solution_str, str) else ""
    truth = ground_truth if isinstance(ground_truth, str) else str(ground_truth)
    correct, prediction = verify(text, truth, strict_box_verify, pause_tokens_index)
    return {"score": 1.0 if correct else -1.0, "acc": bool(correct), "pred": prediction}
