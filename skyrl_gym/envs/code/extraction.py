"""Finding the program in a model's answer: the last fenced Python code block.

A block opens with a line of three or more backticks followed by an optional language tag (```` ```python ````)
and closes with a line of at least as many backticks. Blocks tagged ``python``, ``py``, ``python3``, ``py3``
or not tagged at all count as Python; blocks in other languages (```` ```text ````, ```` ```bash ````) are
skipped. The program is the last closed block tagged as Python, or, when no block is tagged so, the last closed
untagged block (an untagged block after a tagged one is more often sample output than code). A closing fence written at the end of the last code
line (``print(x)```) is accepted when nothing but whitespace follows it.
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["CodeBlock", "Extraction", "PYTHON_TAGS", "code_blocks", "extract_program"]

PYTHON_TAGS = frozenset({"", "python", "py", "python3", "py3"})
"""Language tags read as Python (``""``: an untagged block)."""

_OPEN = re.compile(r"^[ \t]{0,3}(`{3,})[ \t]*([^`]*)$")


@dataclasses.dataclass(frozen=True)
class CodeBlock:
    """One fenced block: its language tag (lower case, ``""`` when untagged), its code and whether it closed."""

    language: str
    code: str
    closed: bool

    @property
    def is_python(self) -> bool:
        """Whether the block's tag reads as Python."""
        return self.language in PYTHON_TAGS


@dataclasses.dataclass(frozen=True)
class Extraction:
    """The program found in an answer (``code``), or ``None`` with ``problem`` saying why there is none."""

    code: str | None
    problem: str | None = None
    blocks: int = 0


def code_blocks(text: str) -> list[CodeBlock]:
    """Every fenced block of ``text``, in order; an unclosed last block comes back with ``closed=False``."""
    blocks: list[CodeBlock] = []
    fence = ""
    language = ""
    lines: list[str] = []
    inside = False
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if not inside:
            opened = _OPEN.match(line)
            if opened:
                inside, fence, lines = True, opened.group(1), []
                info = opened.group(2).strip().split()
                language = info[0].lower().lstrip(".{") if info else ""
            continue
        stripped = line.strip()
        if stripped.startswith(fence) and not stripped.strip("`"):
            blocks.append(CodeBlock(language, "\n".join(lines) + "\n", True))
            inside = False
            continue
        lines.append(line)
    if inside:
        # "print(x)```" at the very end: the model closed the fence on its last code line
        while lines and not lines[-1].strip():
            lines.pop()
        if lines and lines[-1].rstrip().endswith("```"):
            lines[-1] = lines[-1].rstrip()[:-3]
            blocks.append(CodeBlock(language, "\n".join(lines) + "\n", True))
        else:
            blocks.append(CodeBlock(language, "\n".join(lines) + "\n", False))
    return blocks


def extract_program(text: str) -> Extraction:
    """The last closed Python block of ``text``; without one, a ``problem`` the model can act on."""
    if not isinstance(text, str):
        return Extraction(None, "The answer is not text.")
    blocks = code_blocks(text)
    python = [b for b in blocks if b.is_python]
    closed = [b for b in python if b.closed and b.language] or [b for b in python if b.closed]
    if closed:
        return Extraction(closed[-1].code, None, len(blocks))
    if python:
        return Extraction(
            None, "The ```python code block is not closed: end it with a line holding only ```.", len(blocks)
        )
    if blocks:
        shown = ", ".join(sorted({f"```{b.language}" for b in blocks}))
        return Extraction(
            None, f"Only code blocks in other languages were found ({shown}); write the program in Python.",
            len(blocks),
        )  # fmt: skip
    return Extraction(None, "No code block found. Write your program in a ```python code block.", 0)
