"""The one tool system: :class:`Tool`, its decorator :func:`tool`, tool groups (SkyRL compatible), and running
tool calls with errors as observations.

A tool is a function the model calls by name with JSON arguments; its signature and docstring give its OpenAI
function schema. :func:`tool` makes one of two kinds, told apart by the function's first parameter:

- a method of a :class:`ToolGroup` (first parameter ``self``), SkyRL's kind::

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

- a function of the :class:`~skyrl_gym.tools.workspace.Workspace` it runs in (first parameter ``workspace``),
  registered by name in :data:`skyrl_gym.tools.agent.TOOLS` for agents (``ReActEnv``) to offer where the
  workspace has one of the capabilities it ``requires``::

    @tool(requires=("run",))
    def bash(workspace: Workspace, command: str, *, timeout_s: float = 30.0) -> ToolResult: ...

Keyword-only parameters named in :data:`HIDDEN_PARAMETERS` (``timeout_s``) are set by the caller, not the
model, and stay out of the schema. :meth:`Tool.call`, :meth:`ToolGroup.execute_call` and
:func:`execute_tool_calls` never raise because of what the model wrote or what the tool did: a bad call or a
failing tool becomes a :class:`ToolResult` with ``ok=False`` and a message for the model. The one exception
is :class:`~skyrl_gym.errors.BudgetExceeded`, which a tool raises to tell the framework that a budget ran
out; it propagates so that the episode ends as truncated.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import types
from collections.abc import Callable, Iterable, Sequence
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

__all__ = ["HIDDEN_PARAMETERS", "Tool", "ToolGroup", "ToolResult", "execute_tool_calls", "tool"]

HIDDEN_PARAMETERS = frozenset({"timeout_s"})
"""Keyword-only parameters the caller sets (an agent, from its configuration); the model never sees them."""

_MESSAGE_CHARS = 2000
"""Most characters of a tool's exception shown to the model."""


@dataclass
class ToolResult:
    """The outcome of one tool call: the tool's ``name``, the text to show the model and whether it worked;
    also whether it ran out of time, and, for an agent's ``finish``, that ``content`` is the final answer.

    ``content`` is the tool's return value as text, or a message starting with ``Error:`` when ``ok`` is
    false (the call could not be parsed, named an unknown tool, had bad arguments, or the tool raised). A tool
    may return a :class:`ToolResult` itself (its ``name`` left empty) to say more than its text.
    """

    name: str = ""
    content: str = ""
    ok: bool = True
    timed_out: bool = False
    finish: bool = False


@dataclass(frozen=True)
class _Spec:
    """What calling a tool needs to know, computed once from its signature."""

    schema: dict[str, Any]
    params: dict[str, ParameterInfo]
    hidden: frozenset[str]
    var_keyword: bool


class Tool:
    """One tool: ``func``, the ``name`` the model calls it by (default: the function's), a ``description``
    (default: the docstring's first paragraph), its OpenAI ``schema``, and what a call needs.

    ``takes_workspace``: ``func``'s first parameter is the workspace the tool runs in, given by the caller and
    not part of the schema; the tool is offered only where the workspace has one of the capabilities it
    ``requires`` (none: everywhere). A :class:`Tool` in a :class:`ToolGroup` class body is a method: read from
    an instance it is the bound method, read from the class it is the :class:`Tool`.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        requires: Sequence[str] = (),
        takes_workspace: bool = False,
    ):
        if not callable(func):
            raise TypeError(f"a tool is a function, got {type(func).__name__}")
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"a tool name must be a non-empty string, got {name!r}")
        if isinstance(requires, str) or not all(isinstance(r, str) and r for r in requires):
            raise ValueError(f"requires must be capability names, got {requires!r}")
        self.func = func
        self._name = name
        self.description = description
        self.requires = tuple(requires)
        self.takes_workspace = takes_workspace
        functools.update_wrapper(self, func)

    @property
    def name(self) -> str:
        """The name the model calls the tool by."""
        return self._name if self._name is not None else getattr(self.func, "__name__", "")

    def __repr__(self) -> str:
        return f"<tool {self.name!r}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return types.MethodType(self.func, instance)

    @functools.cached_property
    def _spec(self) -> _Spec:
        # the workspace is the caller's, so the schema is the one of the function without it
        target = functools.partial(self.func, None) if self.takes_workspace else self.func
        params, var_keyword = parameters_of(target)
        hidden = frozenset(
            p.name for p in params if p.name in HIDDEN_PARAMETERS and p.kind is inspect.Parameter.KEYWORD_ONLY
        )
        schema = function_schema(target, name=self.name, description=self.description)
        parameters = schema["function"]["parameters"]
        for name in hidden:
            parameters["properties"].pop(name, None)
        parameters["required"] = [r for r in parameters["required"] if r not in hidden]
        return _Spec(schema, {p.name: p for p in params if p.name not in hidden}, hidden, var_keyword)

    @property
    def schema(self) -> dict[str, Any]:
        """The tool's OpenAI function schema (see :func:`~skyrl_gym.tools.function_schema`)."""
        return self._spec.schema

    def available(self, workspace: Any) -> bool:
        """Whether ``workspace`` offers one of the capabilities the tool needs (always, when it needs none)."""
        if not self.requires:
            return True
        return workspace is not None and any(workspace.supports(c) for c in self.requires)

    def usage(self) -> str:
        """One line naming the tool's arguments and their types."""
        params = self._spec.params
        if not params:
            return f"'{self.name}' takes no arguments."
        parts = [
            f"{p.name} ({describe_schema(p.schema)}{'' if p.required else ', optional'})"
            for p in params.values()
        ]
        return f"Arguments of '{self.name}': {', '.join(parts)}."

    def check(self, arguments: dict[str, Any]) -> str | None:
        """What is wrong with ``arguments`` for this tool (an unexpected, missing or mistyped argument), or
        ``None``."""
        spec = self._spec
        unexpected = [key for key in arguments if key not in spec.params]
        if unexpected and not spec.var_keyword:
            names = ", ".join(repr(str(key)[:50]) for key in unexpected)
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

    def call(self, arguments: Any, *, workspace: Any = None, **hidden: Any) -> ToolResult:
        """Check ``arguments`` (the model's JSON object) against the schema, run the tool (in ``workspace``
        for a tool that takes one; ``hidden`` sets its :data:`HIDDEN_PARAMETERS`) and return its result as
        text. Never raises, except :class:`~skyrl_gym.errors.BudgetExceeded`."""
        name = self.name
        if not isinstance(arguments, dict):
            got = json_type_name(arguments)
            return ToolResult(
                name, f"Error: the arguments of tool '{name}' must be an object, got {got}", False
            )
        problem = self.check(arguments)
        if problem:
            return ToolResult(name, f"Error: tool '{name}' {problem}. {self.usage()}", False)
        if not self.available(workspace):
            needs = " or ".join(self.requires)
            return ToolResult(
                name, f"Error: tool '{name}' needs {needs}, which this task does not offer.", False
            )
        try:
            args, kwargs = _bind(self._spec, arguments)
        except Exception as exc:  # a value that cannot become the annotated type, e.g. set[dict]
            return ToolResult(
                name, f"Error: tool '{name}' could not take its arguments: {_message(exc)}", False
            )
        kwargs.update({key: value for key, value in hidden.items() if key in self._spec.hidden})
        try:
            value = (
                self.func(workspace, *args, **kwargs) if self.takes_workspace else self.func(*args, **kwargs)
            )
        except BudgetExceeded:
            raise
        except Exception as exc:  # the tool's own failure is the model's observation
            return ToolResult(
                name, f"Error: tool '{name}' raised {type(exc).__name__}: {_message(exc)}", False
            )
        if isinstance(value, ToolResult):
            return dataclasses.replace(value, name=name)
        return ToolResult(name, _to_text(value), True)


def tool(
    func: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    requires: Sequence[str] | None = None,
    register: bool = True,
) -> Any:
    """Make ``func`` a :class:`Tool`: ``@tool``, or ``@tool(name=..., description=..., requires=...)``.

    A function whose first parameter is ``workspace`` becomes a workspace tool, offered where the workspace
    has one of the capabilities it ``requires``, and is registered by its name in
    :data:`skyrl_gym.tools.agent.TOOLS` (unless ``register=False``). Any other function is a method of a
    :class:`ToolGroup` (``requires`` is refused there: a group's tools need no workspace).
    """

    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"a tool name must be a non-empty string, got {name!r}")

    def make(target: Callable[..., Any]) -> Tool:
        if not callable(target):
            raise TypeError(
                f"@tool decorates a function, got {type(target).__name__}; use @tool or @tool(name=...)"
            )
        if _first_parameter(target) != "workspace":
            if requires is not None:
                raise TypeError(
                    f"tool {getattr(target, '__name__', target)!r}: requires= is for a tool whose first "
                    "parameter is the workspace"
                )
            return Tool(target, name=name, description=description)
        made = Tool(target, name=name, description=description, requires=requires or (), takes_workspace=True)
        if register:
            from skyrl_gym.tools.agent.registry import TOOLS

            TOOLS.register(made.name, made)
        return made

    if func is not None:
        return make(func)
    make._tool_not_applied = True  # type: ignore[attr-defined]  # found in a class body: @tool(...) unapplied
    return make


def _first_parameter(func: Callable[..., Any]) -> str | None:
    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):  # a callable without a signature
        return None
    if not parameters or parameters[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        return None
    return parameters[0].name


def _collect_tools(cls: type) -> dict[str, str]:
    """Tool name -> attribute name for every tool of ``cls``, inherited ones included, bases first."""
    attributes: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        attributes.update(vars(klass))  # a subclass's attribute replaces its base's, as lookup does
    tools: dict[str, str] = {}
    for attribute, value in attributes.items():
        if getattr(value, "_tool_not_applied", False):
            raise TypeError(f"{cls.__name__}.{attribute}: @tool(...) was not applied to a function")
        if not isinstance(value, Tool):
            continue
        if value.takes_workspace:
            raise TypeError(
                f"{cls.__name__}.{attribute}: a tool whose first parameter is the workspace is not a method; "
                "a group's tool takes self"
            )
        if value.name in tools:
            raise ValueError(
                f"tool group {cls.__name__} has two tools named '{value.name}' "
                f"({tools[value.name]} and {attribute}); rename one with @tool(name=...)"
            )
        tools[value.name] = attribute
    return tools


class ToolGroup:
    """A named set of tools: the methods of a subclass marked with :func:`tool` (inherited ones too).

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
        self._tools: dict[str, Tool] | None = None

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
        return [bound.schema for bound in self._bound_tools().values()]

    def execute_call(self, call: ToolCall) -> ToolResult:
        """Check ``call`` against the tool's schema, run it, and return its result as text (:meth:`Tool.call`).
        Never raises.

        Unknown tools, missing, unexpected or mistyped arguments and exceptions raised by the tool all become
        ``ok=False`` results whose ``content`` names the tool, the argument and the expected type. A return
        value that is not a string is shown as JSON. :class:`~skyrl_gym.errors.BudgetExceeded` propagates.
        """
        bound = self._bound_tools().get(call.name)
        if bound is None:
            return ToolResult(call.name, f"Error: {self._unknown(call.name)}", False)
        return bound.call(call.arguments)

    def _bound_tools(self) -> dict[str, Tool]:
        """Each tool of the group as a :class:`Tool` of its bound method, made once."""
        if self._tools is None:
            self._tools = {}
            for tool_name, method in self._tool_registry.items():
                marker = getattr(type(self), type(self)._tool_attributes[tool_name])
                self._tools[tool_name] = Tool(method, name=tool_name, description=marker.description)
        return self._tools

    def _unknown(self, name: str) -> str:
        known = ", ".join(self._tool_registry) or "none"
        return f"unknown tool '{name}' in tool group '{self.name}'; available tools: {known}"


def _bind(spec: _Spec, arguments: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
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


def _message(exc: BaseException) -> str:
    """An exception's message for the model (a ``KeyError``'s key without quotes), at most
    :data:`_MESSAGE_CHARS` characters."""
    text = _safe_str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else _safe_str(exc)
    return text[:_MESSAGE_CHARS]


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
