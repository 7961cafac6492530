"""Hypothesis strategies for property tests of environments.

from hypothesis import given
from skyrl_gym.testing import play_episode
from skyrl_gym.testing.strategies import episodes, tag_actions

@given(episodes(tag_actions(["sql", "solution"])))
def test_sql_env_survives(actions):
    play_episode(skyrl_gym.make("text2sql"), actions, seed=0)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from skyrl_gym.testing.checker import adversarial_action_list

__all__ = [
    "adversarial_actions",
    "episodes",
    "tag_actions",
    "text_actions",
    "tool_call_actions",
    "json_values",
]

_ANY_CHAR = st.characters(codec=None, exclude_categories=())
"""Every code point, control characters, NUL and lone surrogates included."""


def text_actions(max_size: int = 2000) -> st.SearchStrategy[str]:
    """Free text: any code points (NUL and lone surrogates included), mixed with a few hostile constants."""
    return st.one_of(
        st.text(alphabet=_ANY_CHAR, max_size=max_size),
        st.text(max_size=max_size),
        st.sampled_from(["", " ", "\n", "\x00", "🙂", "\ud800", "<", ">", "</", "x" * 10_000]),
    )


def adversarial_actions(tags: Sequence[str] = ()) -> st.SearchStrategy[str]:
    """The checker's hostile actions (see :func:`~skyrl_gym.testing.checker.adversarial_action_list`)."""
    return st.sampled_from(adversarial_action_list(tags))


def tag_actions(tags: Sequence[str], inner: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[str]:
    """Text in a tag protocol: well-formed, unbalanced, nested, repeated and mis-cased tags, mixed with text.

    Args:
        tags: the protocol's tag names, e.g. ``["sql", "solution"]``.
        inner: what goes between tags (default: short free text and digits).
    """
    if not tags:
        raise ValueError("tag_actions needs at least one tag name")
    inner = inner if inner is not None else st.one_of(st.text(max_size=40), st.integers().map(str))
    tag = st.sampled_from(list(tags))

    def block(draw_tag: str, body: str) -> str:
        return f"<{draw_tag}>{body}</{draw_tag}>"

    fragment = st.one_of(
        st.tuples(tag, inner).map(lambda t: block(*t)),
        tag.map(lambda t: f"<{t}>"),
        tag.map(lambda t: f"</{t}>"),
        st.tuples(tag, inner).map(lambda t: f"<{t[0]}>{block(t[0], t[1])}</{t[0]}>"),
        st.tuples(tag, inner).map(lambda t: f"<{t[0].upper()}>{t[1]}</{t[0].upper()}>"),
        st.tuples(tag, inner, st.integers(2, 50)).map(lambda t: block(t[0], t[1]) * t[2]),
        st.text(alphabet=_ANY_CHAR, max_size=40),
    )
    return st.lists(fragment, min_size=0, max_size=6).map("".join)


def json_values(max_leaves: int = 8) -> st.SearchStrategy[Any]:
    """Arbitrary JSON values (for wrong-typed tool arguments)."""
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
        ),
        max_leaves=max_leaves,
    )


def _value_for(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    kind = schema.get("type")
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if isinstance(kind, list):
        return st.one_of([_value_for({**schema, "type": k}) for k in kind])
    simple = {
        "string": st.text(max_size=40),
        "integer": st.integers(-(10**6), 10**6),
        "number": st.floats(allow_nan=False, allow_infinity=False, width=32),
        "boolean": st.booleans(),
        "null": st.none(),
        "object": st.dictionaries(st.text(max_size=8), st.integers(), max_size=3),
    }
    if kind == "array":
        return st.lists(_value_for(schema.get("items", {})), max_size=4)
    return simple.get(kind, json_values())


def tool_call_actions(tool_group: Any, *, well_formed_only: bool = False) -> st.SearchStrategy[str]:
    """``<tool_call>{"name", "arguments"}</tool_call>`` actions generated from a ToolGroup's JSON schemas.

    Mostly valid calls (arguments of the declared types), plus wrong types, missing or unexpected
    arguments, unknown tools and malformed JSON unless ``well_formed_only``.
    """
    schemas = [s["function"] for s in tool_group.get_tool_schemas()]
    if not schemas:
        raise ValueError(f"tool group {tool_group.get_name()!r} has no tools")

    @st.composite
    def valid(draw: Any) -> dict[str, Any]:
        fn = draw(st.sampled_from(schemas))
        params = fn.get("parameters", {})
        properties = params.get("properties", {})
        required = set(params.get("required", []))
        arguments = {}
        for name, prop in properties.items():
            if name in required or draw(st.booleans()):
                arguments[name] = draw(_value_for(prop))
        return {"name": fn["name"], "arguments": arguments}

    @st.composite
    def broken(draw: Any) -> dict[str, Any]:
        call = draw(valid())
        how = draw(st.sampled_from(["wrong-type", "missing", "extra", "unknown-tool"]))
        arguments = dict(call["arguments"])
        if how == "wrong-type" and arguments:
            arguments[draw(st.sampled_from(sorted(arguments)))] = draw(json_values())
        elif how == "missing" and arguments:
            arguments.pop(draw(st.sampled_from(sorted(arguments))))
        elif how == "extra":
            arguments["unexpected_" + draw(st.text("abc", min_size=1, max_size=5))] = 1
        else:
            return {
                "name": "no_such_tool_" + draw(st.text("xyz", min_size=1, max_size=5)),
                "arguments": arguments,
            }
        return {"name": call["name"], "arguments": arguments}

    def render(call: dict[str, Any]) -> str:
        return f"<tool_call>{json.dumps(call)}</tool_call>"

    calls = valid().map(render)
    if well_formed_only:
        return calls
    malformed = st.one_of(
        st.just("<tool_call>{not json}</tool_call>"),
        st.just("<tool_call>"),
        st.just('<tool_call>{"arguments": {}}</tool_call>'),
        st.text(max_size=40).map(lambda t: f"<tool_call>{t}</tool_call>"),
    )
    return st.one_of(calls, calls, broken().map(render), malformed)


def episodes(
    actions: st.SearchStrategy[Any] | None = None, min_turns: int = 1, max_turns: int = 5
) -> st.SearchStrategy[list[Any]]:
    """Whole episodes: lists of actions (default: :func:`text_actions`)."""
    return st.lists(
        actions if actions is not None else text_actions(), min_size=min_turns, max_size=max_turns
    )
