"""Tests of skyrl_gym.tools: the tool decorator, tool groups, schemas, parsers and checked execution."""

import enum
import functools
import json
import subprocess
import sys
from typing import Annotated, Any, Literal, Optional, Union

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skyrl_gym.errors import BudgetExceeded
from skyrl_gym.tools import (
    Tool,
    ToolCall,
    ToolCallParseError,
    ToolGroup,
    ToolResult,
    execute_tool_calls,
    extract_tag,
    function_schema,
    parse_tag_calls,
    parse_tool_calls,
    tool,
)
from skyrl_gym.tools.parsing import MAX_CALLS

EXPECTED_FORMAT = '<tool_call>{"name": "<tool name>", "arguments": {"<argument>": <value>, ...}}</tool_call>'


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Calculator(ToolGroup):
    """A small group used throughout these tests."""

    def __init__(self):
        super().__init__(name="calculator")

    @tool
    def add(self, a: int, b: int = 2) -> int:
        """Add two integers.

        Args:
            a: the first
                term.
            b (int): the second term.

        Returns:
            The sum.
        """
        return a + b

    @tool(name="paint", description="Paint a shape.")
    def paint_shape(self, color: Color, finish: Literal["matte", "gloss"] = "matte") -> dict:
        return {"color": color.value, "finish": finish}

    @tool
    def divide(self, x: float, y: float) -> float:
        """Divide x by y."""
        return x / y

    @tool
    def echo(self, value):
        """Return the value unchanged."""
        return value


def call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


# -- the decorator and the group ------------------------------------------------------------------------
def test_tool_descriptor_binds_like_a_method():
    calc = Calculator()
    assert isinstance(Calculator.add, Tool) and not Calculator.add.takes_workspace
    assert Calculator.add.name == "add"
    assert Calculator.paint_shape.name == "paint"
    assert Calculator.paint_shape.description == "Paint a shape."
    assert calc.add(1, 2) == 3
    assert calc.add.__self__ is calc
    assert Calculator.add(calc, 4, b=5) == 9
    assert Calculator.add.__doc__.startswith("Add two integers.")


def test_skyrl_group_interface():
    calc = Calculator()
    assert calc.get_name() == "calculator" == calc.name
    assert calc.get_tool_names() == ["add", "paint", "divide", "echo"]
    assert calc.get_tool("add")(1, b=1) == 2
    assert calc.get_tool("paint_shape") is None
    assert calc.get_tool("missing") is None
    assert calc.execute_tool("add", 1, 5) == 6
    assert calc.execute_tool("paint", Color.BLUE) == {"color": "blue", "finish": "matte"}
    assert calc.get_tool_to_group_mapping() == {
        "add": "calculator",
        "paint": "calculator",
        "divide": "calculator",
        "echo": "calculator",
    }


def test_execute_tool_unknown_names_group_and_tools():
    with pytest.raises(ValueError) as info:
        Calculator().execute_tool("mul", 1, 2)
    message = str(info.value)
    assert "'mul'" in message and "'calculator'" in message
    assert "add, paint, divide, echo" in message


def test_tool_exceptions_propagate_from_execute_tool():
    with pytest.raises(ZeroDivisionError):
        Calculator().execute_tool("divide", 1.0, 0.0)


def test_inherited_tools_and_overrides():
    class Scientific(Calculator):
        @tool
        def power(self, base: float, exponent: int) -> float:
            """Raise base to exponent."""
            return base**exponent

        @tool
        def add(self, a: int, b: int = 2) -> int:
            """Add and double."""
            return 2 * (a + b)

    class Plain(Calculator):
        def echo(self, value):  # no @tool: overriding removes the tool
            return value

    sci = Scientific()
    assert sci.get_tool_names() == ["add", "paint", "divide", "echo", "power"]
    assert sci.execute_tool("add", 1, 1) == 4
    assert sci.execute_tool("power", 2.0, 3) == 8.0
    assert Plain().get_tool_names() == ["add", "paint", "divide"]
    assert Calculator().execute_tool("add", 1, 1) == 2


def test_default_group_name_is_class_name():
    class Search(ToolGroup):
        @tool
        def search(self, query: str) -> str:
            return query

    assert Search().get_name() == "Search"
    assert Search("web").get_tool_to_group_mapping() == {"search": "web"}


def test_duplicate_tool_names_are_an_error_at_class_definition():
    with pytest.raises(ValueError) as info:

        class Twice(ToolGroup):
            @tool
            def search(self, query: str) -> str:
                return query

            @tool(name="search")
            def search_again(self, query: str) -> str:
                return query

    message = str(info.value)
    assert "Twice" in message and "'search'" in message and "search_again" in message


def test_duplicate_name_across_inheritance_is_an_error():
    with pytest.raises(ValueError, match="two tools named 'add'"):

        class Clash(Calculator):
            @tool(name="add")
            def plus(self, a: int, b: int) -> int:
                return a + b


def test_decorator_misuse():
    with pytest.raises(TypeError, match="decorates a function"):
        tool(42)
    with pytest.raises(ValueError, match="non-empty string"):
        tool(name="")
    with pytest.raises(TypeError, match="not applied to a function"):

        class Broken(ToolGroup):
            search = tool(name="search")

    with pytest.raises(TypeError, match="requires= is for a tool whose first parameter is the workspace"):
        tool(lambda self, x: x, requires=("run",))
    with pytest.raises(TypeError, match="is not a method"):

        class Misplaced(ToolGroup):
            @tool(register=False)
            def bash(workspace, command: str) -> str:
                return command


# -- schemas ---------------------------------------------------------------------------------------------
def test_group_schemas_are_openai_function_schemas():
    assert Calculator().get_tool_schemas() == [
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Add two integers.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "a": {"type": "integer", "description": "the first term."},
                        "b": {"type": "integer", "description": "the second term.", "default": 2},
                    },
                    "required": ["a"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "paint",
                "description": "Paint a shape.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "color": {"type": "string", "enum": ["red", "blue"]},
                        "finish": {"type": "string", "enum": ["matte", "gloss"], "default": "matte"},
                    },
                    "required": ["color"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "divide",
                "description": "Divide x by y.",
                "parameters": {
                    "type": "object",
                    "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                    "required": ["x", "y"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "echo",
                "description": "Return the value unchanged.",
                "parameters": {"type": "object", "properties": {"value": {}}, "required": ["value"]},
            },
        },
    ]


def _properties(fn) -> dict:
    return function_schema(fn)["function"]["parameters"]["properties"]


def test_type_mapping():
    def f(
        s: str,
        i: int,
        x: float,
        b: bool,
        n: None,
        anything,
        any_: Any,
        opt: Optional[int],  # noqa: UP045 - typing.Optional, not X | None
        pipe: int | None,
        union: Union[int, str],  # noqa: UP007 - typing.Union, not X | Y
        mixed: Union[list[int], None],  # noqa: UP007
        lit: Literal["a", "b"],
        lit_mixed: Literal[1, "one"],
        ints: list[int],
        bare_list: list,
        strs: set[str],
        pair: tuple[int, str],
        many: tuple[float, ...],
        mapping: dict[str, int],
        bare_dict: dict,
        color: Color,
        level: Level,
        described: Annotated[int, "an annotated description"],
    ):
        """Everything at once."""

    assert _properties(f) == {
        "s": {"type": "string"},
        "i": {"type": "integer"},
        "x": {"type": "number"},
        "b": {"type": "boolean"},
        "n": {"type": "null"},
        "anything": {},
        "any_": {},
        "opt": {"type": ["integer", "null"]},
        "pipe": {"type": ["integer", "null"]},
        "union": {"type": ["integer", "string"]},
        "mixed": {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}]},
        "lit": {"type": "string", "enum": ["a", "b"]},
        "lit_mixed": {"type": ["integer", "string"], "enum": [1, "one"]},
        "ints": {"type": "array", "items": {"type": "integer"}},
        "bare_list": {"type": "array"},
        "strs": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "pair": {
            "type": "array",
            "prefixItems": [{"type": "integer"}, {"type": "string"}],
            "minItems": 2,
            "maxItems": 2,
        },
        "many": {"type": "array", "items": {"type": "number"}},
        "mapping": {"type": "object", "additionalProperties": {"type": "integer"}},
        "bare_dict": {"type": "object"},
        "color": {"type": "string", "enum": ["red", "blue"]},
        "level": {"type": "integer", "enum": [1, 2]},
        "described": {"type": "integer", "description": "an annotated description"},
    }


def test_defaults_and_plain_function_schema():
    def search(
        query: str, k: int = 3, color: Color = Color.RED, tags: tuple = ("a",), sink: object = object()
    ):
        """Search the corpus for a query.

        Returns the best passages, joined
        by blank lines.

        Args:
            query (str): what to look for; a few
              keywords work best.
            k: how many passages.
            *ignored: not a parameter here.
        """

    assert function_schema(search) == {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the corpus for a query.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "what to look for; a few keywords work best."},
                    "k": {"type": "integer", "description": "how many passages.", "default": 3},
                    "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                    "tags": {"type": "array", "default": ["a"]},
                    "sink": {},
                },
                "required": ["query"],
            },
        },
    }
    renamed = function_schema(search, name="find", description="Find things.")
    assert renamed["function"]["name"] == "find"
    assert renamed["function"]["description"] == "Find things."


def test_schema_skips_varargs_self_and_partial_arguments():
    def tool_fn(a: int, /, b: str, *args: int, c: bool = False, **kwargs: Any) -> None:
        """Do a thing."""

    assert function_schema(tool_fn)["function"]["parameters"] == {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"type": "string"},
            "c": {"type": "boolean", "default": False},
        },
        "required": ["a", "b"],
    }
    partial = functools.partial(tool_fn, 1)
    assert function_schema(partial)["function"]["name"] == "tool_fn"
    assert function_schema(partial)["function"]["description"] == "Do a thing."
    assert list(_properties(partial)) == ["b", "c"]
    assert list(_properties(Calculator().add)) == ["a", "b"]


def test_string_annotations_resolve_and_unresolvable_ones_are_unconstrained():
    def f(a: "int", b: "list[Color]", c: "NoSuchType") -> None:  # noqa: F821
        pass

    assert _properties(f) == {
        "a": {"type": "integer"},
        "b": {"type": "array", "items": {"type": "string", "enum": ["red", "blue"]}},
        "c": {},
    }


def test_docstring_sections_and_empty_docstring():
    def f(x: int, y: int) -> int:
        """Summary line that
        continues here.
        Args:
            x: first.

            y: second,
                continued.
        Raises:
            ValueError: never.
        """

    schema = function_schema(f)["function"]
    assert schema["description"] == "Summary line that continues here."
    assert schema["parameters"]["properties"] == {
        "x": {"type": "integer", "description": "first."},
        "y": {"type": "integer", "description": "second, continued."},
    }

    def g(x):
        pass

    assert function_schema(g)["function"]["description"] == ""


# -- parse_tool_calls ------------------------------------------------------------------------------------
def test_parse_tool_calls_reads_blocks_in_order():
    text = (
        "I will search.\n"
        '<tool_call>\n{"name": "search", "arguments": {"query": "RL", "k": 2}}\n</tool_call>\n'
        'then <tool_call>{"name": "add", "arguments": "{\\"a\\": 1}"}</tool_call>'
        '<tool_call>{"name": "now"}</tool_call>'
        '<tool_call>{"name": "p", "parameters": {"x": null}}</tool_call>'
        '<tool_call>```json\n{"name": "fenced", "arguments": {}}\n```</tool_call>'
    )
    assert parse_tool_calls(text) == [
        ToolCall(
            "search",
            {"query": "RL", "k": 2},
            '<tool_call>\n{"name": "search", "arguments": {"query": "RL", "k": 2}}\n</tool_call>',
        ),
        ToolCall("add", {"a": 1}, '<tool_call>{"name": "add", "arguments": "{\\"a\\": 1}"}</tool_call>'),
        ToolCall("now", {}, '<tool_call>{"name": "now"}</tool_call>'),
        ToolCall("p", {"x": None}, '<tool_call>{"name": "p", "parameters": {"x": null}}</tool_call>'),
        ToolCall("fenced", {}, '<tool_call>```json\n{"name": "fenced", "arguments": {}}\n```</tool_call>'),
    ]


def test_parse_tool_calls_without_blocks():
    assert parse_tool_calls("") == []
    assert parse_tool_calls("plain answer </tool_call> with a stray closing tag") == []


@pytest.mark.parametrize(
    ("block", "must_contain"),
    [
        ("{not json}", ["not valid JSON", "line 1 column 2"]),
        ("", ["empty"]),
        ('["search"]', ["must hold a JSON object", "array"]),
        ('{"arguments": {}}', ['no "name"', '"arguments"']),
        ('{"name": 3}', ['"name" must be a non-empty string', "integer"]),
        ('{"name": ""}', ['"name" must be a non-empty string']),
        ('{"name": "search", "arguments": [1]}', ['"arguments"', "'search'", "JSON object", "array"]),
        ('{"name": "search", "arguments": "[1]"}', ['"arguments"', "'search'", "JSON object"]),
        (
            '{"name": "search", "arguments": "{oops"}',
            ['"arguments"', "string that does not hold a JSON object"],
        ),
        ("[" * 100_000, ["not valid JSON"]),
        ('{"name": "a", "arguments": {"x": ' + "9" * 10_000 + "}}", ["not valid JSON"]),
    ],
)
def test_parse_tool_calls_errors_explain_the_format(block, must_contain):
    raw = f"<tool_call>{block}</tool_call>"
    [error] = parse_tool_calls(f"text {raw} more")
    assert isinstance(error, ToolCallParseError)
    assert error.raw == raw
    assert error.message.startswith("Error: ")
    assert EXPECTED_FORMAT in error.message
    for fragment in must_contain:
        assert fragment in error.message


def test_parse_tool_calls_unclosed_blocks():
    good = '<tool_call>{"name": "b", "arguments": {}}</tool_call>'
    results = parse_tool_calls(f'<tool_call>{{"name": "a"{good} tail <tool_call>{{"name": "c"')
    assert [type(r) for r in results] == [ToolCallParseError, ToolCall, ToolCallParseError]
    assert results[0].raw == '<tool_call>{"name": "a"'
    assert results[1] == ToolCall("b", {}, good)
    assert results[2].raw == '<tool_call>{"name": "c"'
    for error in (results[0], results[2]):
        assert "not closed with </tool_call>" in error.message and EXPECTED_FORMAT in error.message


def test_literal_tag_inside_arguments_must_be_escaped():
    arguments = {"code": "print('<tool_call>')"}
    escaped = json.dumps({"name": "run", "arguments": arguments}).replace("<", "\\u003c")
    [result] = parse_tool_calls(f"<tool_call>{escaped}</tool_call>")
    assert result == ToolCall("run", arguments, f"<tool_call>{escaped}</tool_call>")


# -- parse_tag_calls and extract_tag ---------------------------------------------------------------------
def test_parse_tag_calls_in_text_order():
    text = "<think>hmm</think><sql> SELECT 1 </sql> then <search>\nRL papers\n</search><sql>SELECT 2</sql>"
    assert parse_tag_calls(text, ["sql", "search"]) == [
        ToolCall("sql", {"input": "SELECT 1"}, "<sql> SELECT 1 </sql>"),
        ToolCall("search", {"input": "RL papers"}, "<search>\nRL papers\n</search>"),
        ToolCall("sql", {"input": "SELECT 2"}, "<sql>SELECT 2</sql>"),
    ]
    assert parse_tag_calls(text, "search") == [
        ToolCall("search", {"input": "RL papers"}, "<search>\nRL papers\n</search>")
    ]


def test_parse_tag_calls_nesting_takes_the_outermost_balanced_block():
    text = "<sql>a <sql>b</sql> c</sql><sql>SELECT '<search>x</search>'</sql>"
    assert parse_tag_calls(text, ["sql", "search"]) == [
        ToolCall("sql", {"input": "a <sql>b</sql> c"}, "<sql>a <sql>b</sql> c</sql>"),
        ToolCall("sql", {"input": "SELECT '<search>x</search>'"}, "<sql>SELECT '<search>x</search>'</sql>"),
    ]


def test_parse_tag_calls_unclosed_tag_is_reported_and_parsing_goes_on():
    results = parse_tag_calls(
        "</sql><sql>oops <sql>SELECT 1</sql> and <search>never closed", ["sql", "search"]
    )
    assert [type(r) for r in results] == [ToolCallParseError, ToolCall, ToolCallParseError]
    assert results[0].raw == "<sql>oops "
    assert "<sql>" in results[0].message and "</sql>" in results[0].message
    assert results[1] == ToolCall("sql", {"input": "SELECT 1"}, "<sql>SELECT 1</sql>")
    assert results[2].raw == "<search>never closed"
    assert "</search>" in results[2].message


def test_parse_tag_calls_rejects_bad_tag_names():
    for tags in ([], ["<sql>"], [""], ["a b "], ["/sql"]):
        with pytest.raises(ValueError):
            parse_tag_calls("text", tags)


def test_extract_tag():
    text = "<answer> 1 </answer> <answer>2</answer> <answer>never closed"
    assert extract_tag(text, "answer") == "2"
    assert extract_tag(text, "answer", last=False) == "1"
    assert extract_tag("<think>I'll write <answer> later</think><answer>42</answer>", "answer") == "42"
    assert extract_tag("<answer>a<answer>b</answer>c</answer>", "answer") == "a<answer>b</answer>c"
    assert extract_tag("no tags", "answer") is None
    assert extract_tag("<answer>unclosed", "answer") is None


# -- adversarial text ----------------------------------------------------------------------------------
ADVERSARIAL = {
    "opening tool_call tags": "<tool_call>" * 90_000,
    "empty blocks": "<tool_call></tool_call>" * 40_000,
    "unbalanced mix": "<tool_call><tool_call>{</tool_call>" * 28_000,
    "deep json": "<tool_call>" + "[" * 1_000_000 + "</tool_call>",
    "nul bytes": "\x00" * 1_000_000 + '<tool_call>{"name": "a\\u0000"}</tool_call><sql>\x00</sql>',
    "emoji": "😀<sql>🤖</search>" * 60_000,
    "opening sql tags": "<sql>" * 200_000,
    "deep sql nesting": "<sql>" * 90_000 + "x" + "</sql>" * 90_000,
    "interleaved tags": "<sql><search></sql></search>" * 35_000,
    "near misses": "<tool_cal<sq<sql</sq" * 50_000,
    "angle brackets": "<" * 1_000_000,
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_parsers_stay_fast_and_total_on_adversarial_text(name):
    text = ADVERSARIAL[name]
    for results in (parse_tool_calls(text), parse_tag_calls(text, ["sql", "search"])):
        assert all(isinstance(r, (ToolCall, ToolCallParseError)) for r in results)
    extract_tag(text, "sql")


def test_adversarial_results_are_sensible():
    opened = parse_tool_calls(ADVERSARIAL["opening tool_call tags"])
    assert len(opened) == MAX_CALLS + 1 and "more than 256 tool calls" in opened[-1].message
    [deep] = parse_tag_calls(ADVERSARIAL["deep sql nesting"], "sql")
    assert deep.arguments["input"] == "<sql>" * 89_999 + "x" + "</sql>" * 89_999
    nul = parse_tool_calls(ADVERSARIAL["nul bytes"])
    assert nul[0].name == "a\x00"
    assert extract_tag(ADVERSARIAL["nul bytes"], "sql") == "\x00"


def test_parsers_read_a_bounded_prefix_and_a_bounded_number_of_calls():
    import tracemalloc

    huge = "<sql>" * 10_000_000  # 50 MB of opening tags
    tracemalloc.start()
    try:
        results = parse_tag_calls(huge, ["sql", "search"])
        tool_results = parse_tool_calls("<tool_call>{}</tool_call>" * 2_000_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # what the parser itself allocates: the 4 MB prefix it reads and its token arrays, not gigabytes
    assert peak < 64 * 2**20, peak
    assert len(results) == MAX_CALLS + 1 and "more than 256" in results[-1].message
    assert len(tool_results) == MAX_CALLS + 1
    cut = parse_tag_calls("x" * 20 + "<sql>SELECT 1</sql>", "sql", max_chars=10)
    assert cut == [ToolCallParseError(cut[0].message, "")] and "the last 29 were not read" in cut[0].message
    calls = parse_tag_calls("<sql>a</sql>" * 5, "sql", max_calls=2)
    assert [c.arguments["input"] for c in calls[:2]] == ["a", "a"] and len(calls) == 3
    with pytest.raises(ValueError, match="max_chars"):
        parse_tag_calls("x", "sql", max_chars=0)


# -- checked execution ---------------------------------------------------------------------------------
def test_execute_call_runs_and_converts_to_text():
    calc = Calculator()
    assert calc.execute_call(call("add", a=1)) == ToolResult("add", "3", True)
    assert calc.execute_call(call("add", a=2.0, b=3)) == ToolResult("add", "5", True)
    assert calc.execute_call(call("paint", color="blue")) == ToolResult(
        "paint", '{"color": "blue", "finish": "matte"}', True
    )
    assert calc.execute_call(call("divide", x=1, y=4)) == ToolResult("divide", "0.25", True)
    assert calc.execute_call(call("echo", value="text")) == ToolResult("echo", "text", True)
    assert calc.execute_call(call("echo", value=None)) == ToolResult("echo", "null", True)
    assert calc.execute_call(call("echo", value=["é", 1])) == ToolResult("echo", '["é", 1]', True)


def test_execute_call_converts_arguments_to_annotated_types():
    seen = {}

    class Types(ToolGroup):
        @tool
        def take(
            self,
            color: Color,
            pair: tuple[int, str],
            levels: list[Level],
            ratio: float,
            tags: set[str] = frozenset(),
            maybe: Optional[Color] = None,  # noqa: UP045
        ) -> str:
            seen.update(color=color, pair=pair, levels=levels, ratio=ratio, tags=tags, maybe=maybe)
            return "ok"

    arguments = {
        "color": "red",
        "pair": [1, "x"],
        "levels": [2, 1],
        "ratio": 2,
        "tags": ["a", "a"],
        "maybe": "blue",
    }
    assert Types().execute_call(ToolCall("take", arguments)) == ToolResult("take", "ok", True)
    assert seen == {
        "color": Color.RED,
        "pair": (1, "x"),
        "levels": [Level.HIGH, Level.LOW],
        "ratio": 2.0,
        "tags": {"a"},
        "maybe": Color.BLUE,
    }
    assert type(seen["ratio"]) is float


def test_execute_call_unknown_tool():
    result = Calculator().execute_call(call("mul", a=1))
    assert not result.ok and result.name == "mul"
    assert (
        result.content
        == "Error: unknown tool 'mul' in tool group 'calculator'; available tools: add, paint, divide, echo"
    )


def test_execute_call_missing_argument():
    result = Calculator().execute_call(call("add", b=1))
    assert not result.ok
    assert result.content == (
        "Error: tool 'add' is missing required argument 'a' (integer). "
        "Arguments of 'add': a (integer), b (integer, optional)."
    )


def test_execute_call_unexpected_argument():
    result = Calculator().execute_call(call("add", a=1, c=2, d=3))
    assert not result.ok
    assert result.content.startswith("Error: tool 'add' got unexpected arguments 'c', 'd'.")
    assert "Arguments of 'add': a (integer), b (integer, optional)." in result.content


@pytest.mark.parametrize(
    ("tool_call", "must_contain"),
    [
        (call("add", a="1"), ["'add'", "'a' expected integer", 'got string "1"']),
        (call("add", a=True), ["'a' expected integer", "got boolean true"]),
        (call("add", a=1.5), ["'a' expected integer", "got number 1.5"]),
        (call("divide", x=1, y=None), ["'divide'", "'y' expected number", "got null"]),
        (
            call("paint", color="green"),
            ["'paint'", '\'color\' expected one of "red", "blue"', 'got string "green"'],
        ),
        (
            call("paint", color="red", finish=["gloss"]),
            ['\'finish\' expected one of "matte", "gloss"', "got array"],
        ),
    ],
)
def test_execute_call_wrong_types(tool_call, must_contain):
    result = Calculator().execute_call(tool_call)
    assert not result.ok and result.name == tool_call.name
    assert result.content.startswith(f"Error: tool '{tool_call.name}' argument ")
    for fragment in must_contain:
        assert fragment in result.content


def test_execute_call_nested_type_errors_name_the_path():
    class Nested(ToolGroup):
        @tool
        def f(self, ids: list[int], scores: dict[str, float], pair: tuple[int, int]) -> None:
            pass

    group = Nested()
    first = group.execute_call(call("f", ids=[1, "2"], scores={}, pair=[1, 2]))
    assert "'ids[1]' expected integer, got string \"2\"" in first.content
    second = group.execute_call(call("f", ids=[], scores={"a": "x"}, pair=[1, 2]))
    assert "'scores[\"a\"]' expected number" in second.content
    third = group.execute_call(call("f", ids=[], scores={}, pair=[1]))
    assert "'pair' expected array of [integer, integer], got array of 1 items" in third.content


def test_execute_call_turns_tool_exceptions_into_results():
    result = Calculator().execute_call(call("divide", x=1, y=0))
    assert result == ToolResult(
        "divide", "Error: tool 'divide' raised ZeroDivisionError: float division by zero", False
    )


def test_execute_call_lets_budget_exceeded_through():
    class Budgeted(ToolGroup):
        @tool
        def spend(self) -> str:
            raise BudgetExceeded("max_tool_calls", "no calls left")

    with pytest.raises(BudgetExceeded):
        Budgeted().execute_call(call("spend"))


def test_execute_call_odd_signatures_and_return_values():
    class Odd(ToolGroup):
        @tool
        def positional(self, a: int, /, b: int = 10, **extra: Any) -> dict:
            return {"a": a, "b": b, "extra": extra}

        @tool
        def unserialisable(self) -> object:
            loop: list = []
            loop.append(loop)
            return loop

        @tool
        def tuple_keys(self) -> dict:
            return {(1, 2): "x"}

    odd = Odd()
    assert odd.execute_call(call("positional", a=1, z=2)) == ToolResult(
        "positional", '{"a": 1, "b": 10, "extra": {"z": 2}}', True
    )
    assert odd.execute_call(call("unserialisable")) == ToolResult("unserialisable", "[[...]]", True)
    assert odd.execute_call(call("tuple_keys")) == ToolResult("tuple_keys", "{(1, 2): 'x'}", True)
    bad = odd.execute_call(ToolCall("positional", ["not", "a", "dict"]))  # type: ignore[arg-type]
    assert not bad.ok and "must be an object" in bad.content


def test_execute_tool_calls_dispatches_to_the_owning_group():
    class Search(ToolGroup):
        @tool
        def search(self, query: str) -> list:
            return [query.upper()]

    text = (
        '<tool_call>{"name": "add", "arguments": {"a": 40}}</tool_call>'
        '<tool_call>{"name": "search", "arguments": {"query": "rl"}}</tool_call>'
        "<tool_call>{broken</tool_call>"
        '<tool_call>{"name": "fly", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "add", "arguments": {"a": "x"}}</tool_call>'
    )
    results = execute_tool_calls(text, [Calculator(), Search("web")])
    assert results[:2] == [ToolResult("add", "42", True), ToolResult("search", '["RL"]', True)]
    assert results[2].name == "" and not results[2].ok
    assert "not valid JSON" in results[2].content and EXPECTED_FORMAT in results[2].content
    assert results[3] == ToolResult(
        "fly", "Error: unknown tool 'fly'; available tools: add, paint, divide, echo, search", False
    )
    assert not results[4].ok and "'a' expected integer" in results[4].content
    assert execute_tool_calls("no calls here", [Calculator()]) == []


def test_execute_tool_calls_max_calls():
    block = '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
    results = execute_tool_calls(block * 5, Calculator(), max_calls=2)
    assert results == [
        ToolResult("add", "3", True),
        ToolResult("add", "3", True),
        ToolResult(
            "",
            "Error: 5 tool calls in one turn, more than the limit of 2; ran the first 2 and skipped the other 3",
            False,
        ),
    ]
    assert execute_tool_calls(block * 2, Calculator(), max_calls=2) == [ToolResult("add", "3", True)] * 2
    assert len(execute_tool_calls(block, Calculator(), max_calls=0)) == 1
    with pytest.raises(ValueError, match="max_calls"):
        execute_tool_calls(block, Calculator(), max_calls=-1)


def test_first_group_wins_on_shared_names():
    class Other(ToolGroup):
        @tool
        def add(self, a: int, b: int = 0) -> str:
            return "other"

    block = '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
    assert execute_tool_calls(block, [Other(), Calculator()]) == [ToolResult("add", "other", True)]


def test_importing_tools_stays_light():
    code = (
        "import sys, skyrl_gym.tools; "
        "heavy = {'torch', 'duckdb', 'docker', 'vllm', 'transformers'} & {m.split('.')[0] for m in sys.modules}; "
        "print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- properties ------------------------------------------------------------------------------------------
TAG_ALPHABET = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "<sql>",
        "</sql>",
        "<search>",
        "</search>",
        "{",
        "}",
        '"',
        ":",
        "name",
        "\x00",
        "😀",
    ]
)
MODEL_TEXT = st.one_of(st.text(), st.lists(st.one_of(TAG_ALPHABET, st.text(max_size=5))).map("".join))


@given(MODEL_TEXT)
def test_parsers_never_raise(text):
    for results in (parse_tool_calls(text), parse_tag_calls(text, ["sql", "search"])):
        assert all(isinstance(r, (ToolCall, ToolCallParseError)) for r in results)
        assert all(r.raw in text for r in results)
    extracted = extract_tag(text, "sql")
    assert extracted is None or extracted in text


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(), children, max_size=3),
    max_leaves=10,
)


@given(
    st.text(min_size=1).filter(str.strip),
    st.dictionaries(st.text(), JSON_VALUES, max_size=4),
    st.text(),
    st.text(),
)
def test_rendered_tool_call_parses_back(name, arguments, before, after):
    rendered = (
        "<tool_call>"
        + json.dumps({"name": name, "arguments": arguments}).replace("<", "\\u003c")
        + "</tool_call>"
    )
    while "<tool_call>" in before:  # an unclosed block before the call would swallow it
        before = before.replace("<tool_call>", "")
    results = parse_tool_calls(before + rendered + after)
    assert ToolCall(name, arguments, rendered) in results
