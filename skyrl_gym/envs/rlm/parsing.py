"""Reading the model's reply and writing the REPL's answer, in SkyRL's RLM protocol.

The model runs code in a block fenced as ```` ```repl ```` and ends the episode with ``FINAL(answer)`` or
``FINAL_VAR(variable_name)`` at the start of a line (or by calling ``FINAL_VAR`` inside the code). SkyRL reads
these with three regular expressions; the functions here give the same answers in time linear in the reply's
length (a backtracking regex over a reply of many unclosed ```` ```repl ```` fences takes quadratic time):

- :func:`find_code_block`: the last block of ``r"```repl\\s*\\n(.*?)\\n```"`` (DOTALL), stripped;
- :func:`find_final_var`: the last ``r"^\\s*FINAL_VAR\\((.*?)\\)"`` (MULTILINE, DOTALL);
- :func:`find_final`: the last ``r"^\\s*FINAL\\((.*)\\)\\s*$"`` (MULTILINE, DOTALL), stripped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MAX_RESULT_CHARS",
    "find_code_block",
    "find_final",
    "find_final_var",
    "format_context_metadata",
    "format_execution_result",
    "format_tools_for_prompt",
]

MAX_RESULT_CHARS = 20_000
"""REPL output shown to the model per turn (SkyRL's cap); the rest is counted in a note."""
FENCE = "```repl"


def _whitespace_end(text: str, start: int) -> int:
    end = start
    while end < len(text) and text[end].isspace():
        end += 1
    return end


def find_code_block(text: str) -> str | None:
    """The last ```` ```repl ```` block's code (stripped), or ``None`` when the reply has none."""
    found: str | None = None
    position = 0
    while True:
        start = text.find(FENCE, position)
        if start < 0:
            return found
        after = start + len(FENCE)
        run_end = _whitespace_end(text, after)
        last_newline = text.rfind("\n", after, run_end)
        if last_newline < 0:
            position = start + 1  # no newline right after the fence: not a block here
            continue
        close = text.find("\n```", last_newline + 1)
        if close >= 0:
            found, position = text[last_newline + 1 : close].strip(), close + 4
            continue
        # the regex would also try a shorter run of whitespace: the run's own last newline can close the
        # block when "```" follows it and an earlier newline in the run opens it
        previous = text.rfind("\n", after, last_newline)
        if previous >= 0 and text.startswith("```", last_newline + 1):
            found, position = text[previous + 1 : last_newline].strip(), last_newline + 4
            continue
        return found  # no closing fence anywhere after this point: no later block can close either


def find_final_var(text: str) -> str | None:
    """What the last line-leading ``FINAL_VAR(...)`` holds (up to its first ``)``), or ``None``."""
    marker = "FINAL_VAR("
    found: str | None = None
    line = 0
    while True:
        start = _whitespace_end(text, line)
        after = start  # lines that begin inside this run of whitespace lead to the same place
        if text.startswith(marker, start):
            close = text.find(")", start + len(marker))
            if close < 0:
                return found  # no ")" after this point: no later marker can close either
            found, after = text[start + len(marker) : close], close + 1
        newline = text.find("\n", after)
        if newline < 0:
            return found
        line = newline + 1


def find_final(text: str) -> str | None:
    """What the first line-leading ``FINAL(...)`` holds, up to the last ``)`` that ends a line, stripped."""
    marker = "FINAL("
    line = 0
    while True:
        start = _whitespace_end(text, line)
        if text.startswith(marker, start):
            opening = start + len(marker)
            break
        newline = text.find("\n", start)
        if newline < 0:
            return None
        line = newline + 1
    # the greedy group ends at the last ")" that only whitespace follows on its line: scan lines from the end
    end = len(text)
    while True:
        line_start = max(text.rfind("\n", 0, end) + 1, opening)
        last = line_start + len(text[line_start:end].rstrip()) - 1
        if last >= line_start and text[last] == ")":
            return text[opening:last].strip()
        if line_start <= opening:
            return None
        end = line_start - 1


# -- what the model sees -------------------------------------------------------------------------------------
def format_execution_result(stdout: str, stderr: str, variables: list[str], dropped: int = 0) -> str:
    """The REPL's answer to a cell, as SkyRL writes it: the output, the errors, then the variable names,
    cut at :data:`MAX_RESULT_CHARS` with a count of the rest (``dropped``: characters the sandbox did not
    keep)."""
    parts = []
    if stdout:
        parts.append(f"\n{stdout}")
    if stderr:
        parts.append(f"\n{stderr}")
    if variables:
        parts.append(f"REPL variables: {list(variables)}\n")
    text = "\n\n".join(parts) if parts else "No output"
    if len(text) > MAX_RESULT_CHARS or dropped:
        text = text[:MAX_RESULT_CHARS] + f"... + [{len(text) - MAX_RESULT_CHARS + dropped} chars...]"
    return text


def format_context_metadata(context: Any) -> str:
    """The line that tells the model what ``context`` is: its type, total length and chunk lengths."""
    if isinstance(context, str):
        kind, lengths = "str", [len(context)]
    elif isinstance(context, Mapping):
        kind, lengths = "dict", []
        for chunk in context.values():
            if isinstance(chunk, str):
                lengths.append(len(chunk))
            else:
                try:
                    lengths.append(len(json.dumps(chunk, default=str)))
                except (TypeError, ValueError, RecursionError):
                    lengths.append(len(repr(chunk)))
    elif isinstance(context, list):
        kind, lengths = "list", [len(str(chunk)) for chunk in context]
    else:
        kind, lengths = type(context).__name__, [len(repr(context))]
    return (
        f"Your context is a {kind} with {sum(lengths)} total characters, "
        f"and is broken up into chunks of char lengths: {lengths}."
    )


def format_tools_for_prompt(entries: list[tuple[str, Any, str | None]]) -> str | None:
    """The custom tools' lines of the system prompt (``None`` without tools)."""
    lines = []
    for name, value, description in entries:
        if description:
            lines.append(f"- `{name}`: {description}")
        elif callable(value):
            lines.append(f"- `{name}`: A custom function")
        else:
            lines.append(f"- `{name}`: A custom {type(value).__name__} value")
    return "\n".join(lines) if lines else None
