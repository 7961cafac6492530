"""Finding tool calls in a model's text.

Two protocols are understood:

- JSON tool calls, Hermes/Qwen style: ``<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>``
  (:func:`parse_tool_calls`);
- tag calls, SkyRL style: ``<sql>SELECT 1</sql>``, ``<search>query</search>`` (:func:`parse_tag_calls`).

The parsers never raise on model text: each call comes back as a :class:`ToolCall`, and each block that
cannot be understood as a :class:`ToolCallParseError` whose message tells the model what went wrong and
what the expected format is. They run in linear time (``str.find`` and one literal-alternation regex, no
backtracking), so a megabyte of adversarial text with thousands of unbalanced tags costs milliseconds, and
their memory is bounded whatever the text: they read at most :data:`MAX_PARSE_CHARS` characters and return
at most :data:`MAX_CALLS` results, and say so in a last :class:`ToolCallParseError` when they stop early.
"""

from __future__ import annotations

import array
import functools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from skyrl_gym.tools.schema import json_type_name

__all__ = [
    "MAX_CALLS",
    "MAX_PARSE_CHARS",
    "TOOL_CALL_FORMAT",
    "ToolCall",
    "ToolCallParseError",
    "extract_tag",
    "parse_tag_calls",
    "parse_tool_calls",
]

_OPEN = "<tool_call>"
_CLOSE = "</tool_call>"

MAX_PARSE_CHARS = 4_000_000
"""The most characters of a text the parsers read; the rest is reported, not parsed."""
MAX_CALLS = 256
"""The most calls (and parse errors) one parse returns; the rest is reported, not parsed."""

TOOL_CALL_FORMAT = '<tool_call>{"name": "<tool name>", "arguments": {"<argument>": <value>, ...}}</tool_call>'
"""How a JSON tool call is written; parse error messages quote it."""


@dataclass
class ToolCall:
    """One call the model asked for: the tool's ``name``, its ``arguments`` and the ``raw`` text it came from."""

    name: str
    arguments: dict[str, Any]
    raw: str = ""


@dataclass
class ToolCallParseError:
    """A block of model text that looked like a tool call but could not be read.

    ``message`` is written for the model (it says what is wrong and what the expected format is); ``raw`` is
    the offending text. It is a result, not an exception: parsers return it in place of a :class:`ToolCall`.
    """

    message: str
    raw: str


# -- <tool_call>{json}</tool_call> -----------------------------------------------------------------------
def parse_tool_calls(
    text: str, *, max_calls: int = MAX_CALLS, max_chars: int = MAX_PARSE_CHARS
) -> list[ToolCall | ToolCallParseError]:
    """Parse every ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` block of ``text``, in order.

    ``arguments`` may be an object or a JSON string holding one; missing or ``null`` means no arguments, and
    ``parameters`` is accepted in its place. The JSON may sit in a Markdown code fence. Tool calls do not
    nest: a ``<tool_call>`` that is followed by another ``<tool_call>`` before any ``</tool_call>`` is
    reported as unclosed, so a literal tag inside an argument must be escaped (``\\u003c`` for ``<``, which
    ``json.dumps(...).replace("<", "\\\\u003c")`` does). Text outside the blocks, and a stray
    ``</tool_call>``, are ignored. Only the first ``max_chars`` characters are read and at most ``max_calls``
    results returned; stopping early is reported as a last parse error.
    """
    text, cut = _bounded(text, max_chars)
    results: list[ToolCall | ToolCallParseError] = []
    end = len(text)
    pos = 0
    close = -2  # the first </tool_call> at or after the current block's body; -1: none left, -2: unknown
    while True:
        start = text.find(_OPEN, pos)
        if start < 0:
            return _with_cut_note(results, cut, max_chars)
        if len(results) >= max_calls:
            return _with_limit_note(results, max_calls)
        body_start = start + len(_OPEN)
        if close == -2 or 0 <= close < body_start:
            close = text.find(_CLOSE, body_start)
        next_open = text.find(_OPEN, body_start, close if close >= 0 else end)
        if next_open >= 0 or close < 0:
            stop = next_open if next_open >= 0 else end
            results.append(
                ToolCallParseError(
                    f"Error: a {_OPEN} block was opened but not closed with {_CLOSE}. "
                    f"Write each tool call as {TOOL_CALL_FORMAT}",
                    text[start:stop],
                )
            )
            if next_open < 0:
                return _with_cut_note(results, cut, max_chars)
            pos = next_open
            continue
        pos = close + len(_CLOSE)
        results.append(_parse_block(text[body_start:close], text[start:pos]))


def _bounded(text: str, max_chars: int) -> tuple[str, int]:
    """The first ``max_chars`` characters of ``text`` and how many were left out."""
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(f"max_chars must be a positive int, got {max_chars!r}")
    if len(text) <= max_chars:
        return text, 0
    return text[:max_chars], len(text) - max_chars


def _with_cut_note(results: list, cut: int, max_chars: int) -> list:
    if cut:
        results.append(
            ToolCallParseError(
                f"Error: the text is longer than {max_chars} characters; the last {cut} were not read. "
                "Write shorter turns.",
                "",
            )
        )
    return results


def _with_limit_note(results: list, max_calls: int) -> list:
    results.append(
        ToolCallParseError(
            f"Error: more than {max_calls} tool calls in one turn; the rest were not read. "
            "Make fewer calls per turn.",
            "",
        )
    )
    return results


def _parse_block(body: str, raw: str) -> ToolCall | ToolCallParseError:
    def error(problem: str) -> ToolCallParseError:
        return ToolCallParseError(f"Error: {problem}. Write each tool call as {TOOL_CALL_FORMAT}", raw)

    source = _strip_code_fence(body.strip())
    if not source:
        return error(f"the {_OPEN} block is empty")
    try:
        payload = json.loads(source)
    except json.JSONDecodeError as exc:
        return error(
            f"the {_OPEN} block is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        )
    except (ValueError, RecursionError) as exc:  # nesting too deep, an integer too long
        return error(f"the {_OPEN} block is not valid JSON ({type(exc).__name__}: {str(exc)[:100]})")
    if not isinstance(payload, dict):
        return error(f"the {_OPEN} block must hold a JSON object, got {json_type_name(payload)}")
    name = payload.get("name")
    if name is None:
        return error(f'the tool call has no "name"; keys found: {_keys(payload)}')
    if not isinstance(name, str) or not name.strip():
        return error(f'the tool call\'s "name" must be a non-empty string, got {json_type_name(name)}')
    key = "arguments" if "arguments" in payload or "parameters" not in payload else "parameters"
    arguments = payload.get(key)
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else None
        except (ValueError, RecursionError):
            return error(f"\"{key}\" of tool call '{name}' is a string that does not hold a JSON object")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return error(
            f"\"{key}\" of tool call '{name}' must be a JSON object, got {json_type_name(arguments)}"
        )
    return ToolCall(name=name, arguments=arguments, raw=raw)


def _strip_code_fence(source: str) -> str:
    """``json {...}`` in a Markdown fence -> ``{...}``; anything else unchanged."""
    if len(source) < 6 or not (source.startswith("```") and source.endswith("```")):
        return source
    inner = source[3:-3]
    newline = inner.find("\n")
    if newline >= 0 and inner[:newline].strip().isalnum():  # a language tag such as "json"
        inner = inner[newline + 1 :]
    return inner.strip()


def _keys(payload: dict[str, Any]) -> str:
    keys = list(payload)
    shown = ", ".join(json.dumps(key) for key in keys[:10])
    return (shown + (", ..." if len(keys) > 10 else "")) or "none"


# -- <tag>input</tag> ------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def _tag_pattern(tags: tuple[str, ...]) -> re.Pattern[str]:
    # Plain alternation of literals between fixed delimiters: each match is found without backtracking.
    return re.compile("<(/?)(" + "|".join(re.escape(tag) for tag in tags) + ")>")


def _normalise_tags(tags: str | Iterable[str]) -> tuple[str, ...]:
    names = (tags,) if isinstance(tags, str) else tuple(tags)
    if not names:
        raise ValueError("parse_tag_calls needs at least one tag name, for example ['sql']")
    for name in names:
        if not isinstance(name, str) or not name or any(c in name for c in "<>/") or name != name.strip():
            raise ValueError(f"invalid tag name {name!r}: give the bare name, for example 'sql' for <sql>")
    return tuple(dict.fromkeys(names))


def parse_tag_calls(
    text: str, tags: str | Iterable[str], *, max_calls: int = MAX_CALLS, max_chars: int = MAX_PARSE_CHARS
) -> list[ToolCall | ToolCallParseError]:
    """Parse tag-style calls such as ``<sql>SELECT 1</sql>`` for the given tag names, in text order.

    Each complete block becomes ``ToolCall(name=tag, arguments={"input": inner_text.strip()}, raw=block)``.
    Rules, chosen so that a block's content is exactly what the model wrote between its tags:

    - Identical tags nest: ``<sql>a <sql>b</sql> c</sql>`` is one call whose input is
      ``a <sql>b</sql> c`` (the outermost balanced block).
    - Other tags inside a block are part of its input, not calls of their own.
    - An opening tag with no matching closing tag becomes a :class:`ToolCallParseError` (its ``raw`` runs to
      the next tag), and parsing goes on right after it: in ``<sql>oops <sql>SELECT 1</sql>`` the first tag
      is reported and ``SELECT 1`` is still a call.
    - A closing tag with no opening tag is ignored.

    ``tags`` is one name or several (``"sql"``, ``["sql", "solution"]``). Raises ``ValueError`` only for an
    invalid tag name, never because of ``text``. Only the first ``max_chars`` characters are read and at most
    ``max_calls`` results returned; stopping early is reported as a last parse error.
    """
    names = _normalise_tags(tags)
    text, cut = _bounded(text, max_chars)
    # Tokens as flat arrays (start offset; name index, negative for a closing tag): a few bytes per tag.
    starts = array.array("q")
    kinds = array.array("i")
    for m in _tag_pattern(names).finditer(text):
        starts.append(m.start())
        index = names.index(m.group(2))
        kinds.append(-index - 1 if m.group(1) else index + 1)
    # Bracket matching per tag name: the closing token that balances each opening token (-1: none).
    partner = array.array("q", [-1]) * len(starts)
    open_stacks: list[list[int]] = [[] for _ in names]
    for index, kind in enumerate(kinds):
        if kind > 0:
            open_stacks[kind - 1].append(index)
        elif open_stacks[-kind - 1]:
            partner[open_stacks[-kind - 1].pop()] = index
    del open_stacks

    results: list[ToolCall | ToolCallParseError] = []
    pos = 0
    for index, kind in enumerate(kinds):
        start = starts[index]
        if kind < 0 or start < pos:
            continue
        if len(results) >= max_calls:
            return _with_limit_note(results, max_calls)
        name = names[kind - 1]
        end = start + len(name) + 2
        match = partner[index]
        if match >= 0:
            inner_end = starts[match]
            pos = inner_end + len(name) + 3
            results.append(
                ToolCall(name=name, arguments={"input": text[end:inner_end].strip()}, raw=text[start:pos])
            )
        else:
            stop = starts[index + 1] if index + 1 < len(starts) else len(text)
            results.append(
                ToolCallParseError(
                    f"Error: <{name}> was opened but not closed with </{name}>. Write <{name}>...</{name}>",
                    text[start:stop],
                )
            )
            pos = end
    return _with_cut_note(results, cut, max_chars)


def extract_tag(text: str, tag: str, last: bool = True) -> str | None:
    """The stripped content of the last (or, with ``last=False``, the first) complete ``<tag>...</tag>``.

    Blocks are found as :func:`parse_tag_calls` finds them (outermost balanced block; an unclosed tag is
    skipped). Returns ``None`` when there is no complete block.
    """
    calls = [item for item in parse_tag_calls(text, tag) if isinstance(item, ToolCall)]
    if not calls:
        return None
    return calls[-1 if last else 0].arguments["input"]
