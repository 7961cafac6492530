"""The ``python`` environment's protocol: reading code and the final answer out of a reply, and writing
observations.

A reply holds any of:

- code to run, in fenced blocks (```` ```python ````, ```` ```py ```` or ```` ```python3 ````, closed by a
  fence of at least as many backticks) or between ``<python>`` and ``</python>`` tags;
- the final answer, ``\\boxed{...}`` written outside code (the last one counts; braces may nest inside it).

The output of the code comes back as a user message holding one ```` ```output ```` block per code block (the
ToRL convention; a longer fence is used when the output itself holds backticks), then how many turns are
left. A reply's parts are read in one pass over its text, in time linear in its length.
"""

from __future__ import annotations

import dataclasses
import re

__all__ = [
    "CodeBlock",
    "ParsedAction",
    "cap_output",
    "output_block",
    "parse_action",
    "protocol_reminder",
    "turns_left_note",
]

MAX_ANSWER_CHARS = 500
"""A ``\\boxed{`` not closed within this many characters holds no answer."""

_BOXED = "\\boxed{"
_TAG_OPEN, _TAG_CLOSE = "<python>", "</python>"
# An opening tag, or an opening fence: a whole run of three or more backticks (the look-behind keeps the
# search linear on long runs of backticks), the language, the end of the line.
_OPENER = re.compile(r"<python>|(?<!`)(?P<fence>`{3,})[ \t]*(?i:python3?|py)[ \t]*(?:\r?\n|$)")
_BACKTICKS = re.compile(r"`+")


@dataclasses.dataclass(frozen=True)
class CodeBlock:
    """One block of code as written: its ``code`` and whether it was fenced (``"fence"``) or tagged
    (``"tag"``)."""

    code: str
    style: str


@dataclasses.dataclass(frozen=True)
class ParsedAction:
    """What a reply holds.

    Attributes:
        blocks: the closed code blocks, in order.
        answer: the text inside the last ``\\boxed{}`` outside code, ``None`` when there is none.
        unclosed: ``"fence"`` or ``"tag"`` when the reply ends inside a code block that was never closed
            (its code is not run), else ``None``.
        boxed_unclosed: the last ``\\boxed{`` outside code is not closed (so there is no answer).
    """

    blocks: list[CodeBlock]
    answer: str | None
    unclosed: str | None = None
    boxed_unclosed: bool = False


def _last_boxed(prose: str) -> tuple[str | None, bool]:
    """The contents of the last ``\\boxed{...}`` in ``prose``, and whether a last one was left open.

    Only the last opening is read: an unclosed final ``\\boxed{`` means the answer was cut off, and
    searching the earlier ones would cost time quadratic in the number of openings.
    """
    at = prose.rfind(_BOXED)
    if at < 0:
        return None, False
    start = at + len(_BOXED)
    depth = 1
    for offset, char in enumerate(prose[start : start + MAX_ANSWER_CHARS + 1]):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return prose[start : start + offset].strip(), False
    return None, True


def parse_action(text: str) -> ParsedAction:
    """Split a reply into its code blocks and the prose around them, and read the answer from the prose."""
    blocks: list[CodeBlock] = []
    prose: list[str] = []
    unclosed = None
    position = 0
    while True:
        opener = _OPENER.search(text, position)
        if opener is None:
            prose.append(text[position:])
            break
        prose.append(text[position : opener.start()])
        start = opener.end()
        fence = opener.group("fence")
        if fence is None:
            end = text.find(_TAG_CLOSE, start)
            close_end = end + len(_TAG_CLOSE)
        else:
            end, close_end = _closing_fence(text, start, len(fence))
        if end < 0:
            unclosed = "tag" if fence is None else "fence"
            break
        code = text[start:end]
        if fence is not None and code.endswith("\n"):
            code = code[:-1]
        blocks.append(CodeBlock(code=code, style="tag" if fence is None else "fence"))
        position = close_end
    answer, boxed_unclosed = _last_boxed("".join(prose))
    return ParsedAction(blocks=blocks, answer=answer, unclosed=unclosed, boxed_unclosed=boxed_unclosed)


def _closing_fence(text: str, start: int, width: int) -> tuple[int, int]:
    """Where the fence that closes a block opened with ``width`` backticks starts and ends (-1 if none)."""
    for run in _BACKTICKS.finditer(text, start):
        if run.end() - run.start() >= width:
            return run.start(), run.end()
    return -1, -1


def cap_output(text: str, max_chars: int) -> tuple[str, bool]:
    """``text`` cut to about ``max_chars`` characters, keeping its beginning and its end (where a traceback's
    error line is) and saying how much was cut; and whether anything was."""
    if len(text) <= max_chars:
        return text, False
    head = max_chars * 2 // 3
    tail = max_chars - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[len(text) - tail :]}", True


def output_block(text: str) -> str:
    """``text`` in an ```` ```output ```` block, fenced with more backticks than any run inside it."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}output\n{text}\n{fence}"


def turns_left_note(left: int) -> str:
    """The reminder that ends every observation."""
    if left == 1:
        return "You have 1 turn left: give your final answer now as \\boxed{...}."
    return f"You have {left} turns left."


def protocol_reminder(parsed: ParsedAction) -> str:
    """What to tell a reply that ran no code and gave no answer."""
    if parsed.unclosed == "tag":
        problem = "The <python> block was not closed, so it was not run: end the code with </python>."
    elif parsed.unclosed == "fence":
        problem = "The ```python block was not closed, so it was not run: end the code with a line of ```."
    elif parsed.boxed_unclosed:
        problem = "The last \\boxed{ was not closed, so it holds no answer."
    else:
        problem = "No code to run and no final answer found."
    return (
        f"{problem} To run Python, write it in a ```python\n...\n``` block (or between <python> and "
        "</python>) and print what you need to see. To answer, write \\boxed{ANSWER} outside any code block."
    )
