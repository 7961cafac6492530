"""Tools and tool groups (SkyRL compatible), and running tool calls with errors as observations.

A tool group is a class whose methods marked with :class:`tool` are its tools::

    class Calculator(ToolGroup):
        def __init__(self):
            super().__init__(name="calculator")

        @tool
        def add(self, a: int, b: int) -> int:
            \"\"\"Add two integers.

            Args:
                a: the first term.
                b: the second term.
            \"\"\"
            return a + b

    calc = Calculator()
    calc.execute_tool("add", 1, 2)                        # 3, SkyRL's direct call
    calc.get_tool_schemas()                               # OpenAI function schemas, from the signature
    calc.execute_call(ToolCall("add", {"a": 1, "b": 2}))  # ToolResult(name="add", content="3", ok=True)

:meth:`ToolGroup.execute_call` and :func:`execute_tool_calls` never raise because of what the model wrote or
what the tool did: a bad call or a failing tool becomes a :class:`ToolResult` with ``ok=False`` and a
message for the model. The one exception is :class:`~skyrl_gym.errors.BudgetExceeded`, which a tool raises
to tell the framework that a budget ran out; it propagates so that the episode ends as truncated.
"""

from __future__ import annotations

import functools
import inspect
import json
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from skyrl_gym.errors import BudgetExceeded
from skyrl_gym.tools.parsing import ToolCall, ToolCallParseError, parse_tool_calls
from skyrl_gym.tools.schema import (
    ParameterInfo,
    coerce_value,
    describe_schema,
    function_schema,
    json_type_name,
    parameters_of,
    validate_value,
)

__all__ = ["ToolGroup", "ToolResult", "execute_tool_calls", "tool"]


class tool:
    """Mark a method of a :class:`ToolGroup` subclass as a tool: ``@tool`` or ``@tool(name=..., description=...)``.

    The tool's name defaults to the method's name and its description to the docstring's first paragraph.
    The decorated object is a descriptor: read from an instance it is the bound method, read from the class
    it is the ``tool`` itself (with ``.name``, ``.description`` and ``.func``).
    """

    def __init__(
        self,
        func: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
    ):
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"a tool name must be a non-empty string, got {name!r}")
        self.func: Callable[..., Any] | None = None
        self._name = name
        self.description = description
        if func is not None:
            self._attach(func)

    def _attach(self, func: Callable[..., Any]) -> None:
        if not callable(func):
            raise TypeError(
                f"@tool decorates a function, got {type(func).__name__}; use @tool or @tool(name=...)"
            )
        self.func = func
        functools.update_wrapper(self, func)

    @property
    def name(self) -> str:
        """The name the model calls the tool by."""
        if self._name is not None:
            return self._name
        return getattr(self.func, "__name__", "") if self.func is not None else ""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.func is None:  # @tool(name=...) receiving the function it decorates
            if len(args) != 1 or kwargs:
                raise TypeError("@tool(...) must be applied to exactly one function")
            self._attach(args[0])
            return self
        return self.func(*args, **kwargs)

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None or self.func is None:
            return self
        return types.MethodType(self.func, instance)

    def __repr__(self) -> str:
        return f"<tool {self.name!r}>"


@dataclass
class ToolResult:
    """The outcome of one tool call: the tool's ``name``, the text to show the model and whether it worked.

    ``content`` is the tool's return value as text, or a message starting with ``Error:`` when ``ok`` is
    false (the call could not be parsed, named an unknown tool, had bad arguments, or the tool raised).
    """

    name: str
    content: str
    ok: bool


@dataclass(frozen=True)
class _ToolSpec:
    """What ``execute_call`` needs to know about one tool, computed once per group."""

    func: Callable[..., Any]
    schema: dict[str, Any]
    params: dict[str, ParameterInfo]
    var_keyword: bool


def _collect_tools(cls: type) -> dict[str, str]:
    """Tool name -> attribute name for every tool of ``cls``, inherited ones included, bases first."""
    attributes: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        attributes.update(vars(klass))  # a subclass's attribute replaces its base's, as lookup does
    tools: dict[str, str] = {}
    for attribute, value in attributes.items():
        if not isinstance(value, tool):
            continue
        if value.func is None:
            raise TypeError(f"{cls.__name__}.{attribute}: @tool(...) was not applied to a function")
        if value.name in tools:
            raise ValueError(
                f"tool group {cls.__name__} has two tools named '{value.name}' "
                f"({tools[value.name]} and {attribute}); rename one with @tool(name=...)"
            )
        tools[value.name] = attribute
    return tools


class ToolGroup:
    """A named set of tools: the methods of a subclass marked with :class:`tool` (inherited ones too).

    SkyRL's methods (``get_name``, ``get_tool``, ``get_tool_names``, ``execute_tool``,
    ``get_tool_to_group_mapping``) work as there. On top: ``get_tool_schemas`` (OpenAI function schemas from
    the signatures and docstrings) and ``execute_call`` (checked execution that returns a :class:`ToolResult`
    and never raises). Two tools with one name in a class are an error when the class is defined. A
    subclass that overrides a tool must mark the override with ``@tool`` again, or it stops being a tool.
    """

    _tool_attributes: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._tool_attributes = _collect_tools(cls)

    def __init__(self, name: str | None = None):
        self.name = name if name is not None else type(self).__name__
        self._tool_registry: dict[str, Callable[..., Any]] = {
            tool_name: getattr(self, attribute)
            for tool_name, attribute in type(self)._tool_attributes.items()
        }
        self._specs: dict[str, _ToolSpec] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, tools={self.get_tool_names()})"

    # -- SkyRL's interface ------------------------------------------------------------------------------
    def get_name(self) -> str:
        """The group's name."""
        return self.name

    def get_tool(self, name: str) -> Callable[..., Any] | None:
        """The bound tool called ``name``, or ``None`` if the group has none by that name."""
        return self._tool_registry.get(name)

    def get_tool_names(self) -> list[str]:
        """The names of the group's tools, base-class tools first, each in definition order."""
        return list(self._tool_registry)

    def execute_tool(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call tool ``name`` with the arguments as given (no checks); its exceptions propagate.

        Raises ``ValueError`` naming the group and its tools if there is no tool ``name``.
        """
        func = self.get_tool(name)
        if func is None:
            raise ValueError(self._unknown(name))
        return func(*args, **kwargs)

    def get_tool_to_group_mapping(self) -> dict[str, str]:
        """Tool name -> this group's name, for every tool of the group."""
        return {tool_name: self.name for tool_name in self._tool_registry}

    # -- schemas and checked execution ------------------------------------------------------------------
    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """The OpenAI function schema of every tool (see :func:`~skyrl_gym.tools.function_schema`)."""
        return [spec.schema for spec in self._tool_specs().values()]

    def execute_call(self, call: ToolCall) -> ToolResult:
        """Check ``call`` against the tool's schema, run it, and return its result as text. Never raises.

        Unknown tools, missing, unexpected or mistyped arguments and exceptions raised by the tool all become
        ``ok=False`` results whose ``content`` names the tool, the argument and the expected type. A return
        value that is not a string is shown as JSON. :class:`~skyrl_gym.errors.BudgetExceeded` propagates.
        """
        spec = self._tool_specs().get(call.name)
        if spec is None:
            return ToolResult(call.name, f"Error: {self._unknown(call.name)}", False)
        if not isinstance(call.arguments, dict):
            got = json_type_name(call.arguments)
            return ToolResult(
                call.name, f"Error: the arguments of tool '{call.name}' must be an object, got {got}", False
            )
        problem = _check_arguments(spec, call.arguments)
        if problem:
            return ToolResult(
                call.name, f"Error: tool '{call.name}' {problem}. {_usage(call.name, spec)}", False
            )
        try:
            args, kwargs = _bind(spec, call.arguments)
        except Exception as exc:  # a value that cannot become the annotated type, e.g. set[dict]
            return ToolResult(
                call.name, f"Error: tool '{call.name}' could not take its arguments: {_safe_str(exc)}", False
            )
        try:
            value = spec.func(*args, **kwargs)
        except BudgetExceeded:
            raise
        except Exception as exc:
            return ToolResult(
                call.name, f"Error: tool '{call.name}' raised {type(exc).__name__}: {_safe_str(exc)}", False
            )
        return ToolResult(call.name, _to_text(value), True)

    def _tool_specs(self) -> dict[str, _ToolSpec]:
        if self._specs is None:
            specs = {}
            for tool_name, func in self._tool_registry.items():
                descriptor = type(self)._tool_attributes.get(tool_name)
                marker = getattr(type(self), descriptor) if descriptor else None
                description = marker.description if isinstance(marker, tool) else None
                params, var_keyword = parameters_of(func)
                schema = function_schema(func, name=tool_name, description=description)
                specs[tool_name] = _ToolSpec(func, schema, {p.name: p for p in params}, var_keyword)
            self._specs = specs
        return self._specs

    def _unknown(self, name: str) -> str:
        known = ", ".join(self._tool_registry) or "none"
        return f"unknown tool '{name}' in tool group '{self.name}'; available tools: {known}"


def _check_arguments(spec: _ToolSpec, arguments: dict[str, Any]) -> str | None:
    unexpected = [key for key in arguments if key not in spec.params]
    if unexpected and not spec.var_keyword:
        names = ", ".join(repr(str(key)) for key in unexpected)
        return f"got unexpected argument{'s' if len(unexpected) > 1 else ''} {names}"
    missing = [param for param in spec.params.values() if param.required and param.name not in arguments]
    if missing:
        names = ", ".join(f"'{p.name}' ({describe_schema(p.schema)})" for p in missing)
        return f"is missing required argument{'s' if len(missing) > 1 else ''} {names}"
    for key, value in arguments.items():
        param = spec.params.get(key)
        if param is not None:
            problem = validate_value(value, param.schema, key)
            if problem:
                return f"argument {problem}"
    return None


def _usage(name: str, spec: _ToolSpec) -> str:
    if not spec.params:
        return f"'{name}' takes no arguments."
    parts = [
        f"{param.name} ({describe_schema(param.schema)}{'' if param.required else ', optional'})"
        for param in spec.params.values()
    ]
    return f"Arguments of '{name}': {', '.join(parts)}."


def _bind(spec: _ToolSpec, arguments: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Positional-only parameters by position (their defaults filling gaps), the rest by keyword."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for param in spec.params.values():
        if param.name in arguments:
            value = coerce_value(arguments[param.name], param.annotation)
        elif param.kind is inspect.Parameter.POSITIONAL_ONLY:
            value = param.default
        else:
            continue
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            args.append(value)
        else:
            kwargs[param.name] = value
    for key, value in arguments.items():
        if key not in spec.params:  # accepted by **kwargs
            kwargs[key] = value
    return args, kwargs


def _safe_str(value: Any) -> str:
    try:
        return str(value)
    except Exception:  # a broken __str__ must not turn a tool error into a crash
        return object.__repr__(value)


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, default=str, ensure_ascii=False)
    except Exception:  # circular, non-string keys, a default=str that fails...
        return _safe_str(value)


def execute_tool_calls(
    text: str,
    tool_groups: ToolGroup | Iterable[ToolGroup],
    *,
    max_calls: int | None = None,
) -> list[ToolResult]:
    """Run every ``<tool_call>`` block of ``text`` with the group that owns the tool; never raises on the text.

    Returns one :class:`ToolResult` per block, in order: a parse error becomes an ``ok=False`` result with the
    parser's message (and an empty name), an unknown tool one that lists the tools available. When a name
    is in several groups, the first group wins. With ``max_calls``, only the first ``max_calls`` blocks run
    and one more ``ok=False`` result says how many were skipped.
    """
    if max_calls is not None and (not isinstance(max_calls, int) or max_calls < 0):
        raise ValueError(f"max_calls must be a non-negative integer or None, got {max_calls!r}")
    groups = [tool_groups] if isinstance(tool_groups, ToolGroup) else list(tool_groups)
    owners: dict[str, ToolGroup] = {}
    for group in groups:
        for tool_name in group.get_tool_names():
            owners.setdefault(tool_name, group)

    items = parse_tool_calls(text)
    total = len(items)
    if max_calls is not None and total > max_calls:
        items = items[:max_calls]
    results: list[ToolResult] = []
    for item in items:
        if isinstance(item, ToolCallParseError):
            results.append(ToolResult("", item.message, False))
            continue
        group = owners.get(item.name)
        if group is None:
            known = ", ".join(owners) or "none"
            results.append(
                ToolResult(item.name, f"Error: unknown tool '{item.name}'; available tools: {known}", False)
            )
            continue
        results.append(group.execute_call(item))
    if total > len(items):
        message = (
            f"Error: {total} tool calls in one turn, more than the limit of {max_calls}; "
            f"ran the first {len(items)} and skipped the other {total - len(items)}"
        )
        results.append(ToolResult("", message, False))
    return results
