"""Agent tools: a function whose first parameter is the :class:`~skyrl_gym.tools.workspace.Workspace` it runs
in, decorated with :func:`agent_tool`; the rest of its signature and its docstring give its JSON schema in the
OpenAI tools format::

    @agent_tool(requires=("run",))
    def bash(workspace: Workspace, command: str, *, timeout_s: float = 30.0) -> ToolOutput:
        \"\"\"Run a shell command ...

        Args:
            command: the command.
        \"\"\"

Keyword-only parameters listed in :data:`HIDDEN_PARAMETERS` (``timeout_s``) are set by the agent, not the
model, and stay out of the schema. :meth:`AgentTool.call` checks the model's arguments against the schema
and never raises: bad arguments, a failing tool, an unsupported workspace all come back as a
:class:`ToolOutput` with ``ok=False`` and a message for the model. :func:`agent_tool` registers the tool in
:data:`skyrl_gym.tools.agent.TOOLS` by its name.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from skyrl_gym.errors import BudgetExceeded
from skyrl_gym.tools.agent.registry import TOOLS
from skyrl_gym.tools.schema import (
    coerce_value,
    describe_schema,
    function_schema,
    parameters_of,
    validate_value,
)

__all__ = ["HIDDEN_PARAMETERS", "AgentTool", "ToolOutput", "agent_tool", "resolve_tools"]

HIDDEN_PARAMETERS = frozenset({"timeout_s"})
"""Keyword-only parameters the agent sets (from its configuration); the model never sees them."""


@dataclass
class ToolOutput:
    """What one tool call produced: the text for the model, whether it worked, whether it ran out of time, and
    for ``finish`` the final answer."""

    content: str
    ok: bool = True
    timed_out: bool = False
    finish: bool = False


class AgentTool:
    """One registered tool: its ``name``, the function, the workspace capabilities it needs (any one of
    ``requires``; none: always available) and its OpenAI ``schema``."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        requires: Sequence[str] = (),
        description: str | None = None,
    ):
        self.func = func
        self.name = name or func.__name__
        self.requires = tuple(requires)
        functools.update_wrapper(self, func)
        # the workspace is bound by the agent, so the schema is the one of the function without it
        bound = functools.partial(func, None)
        params, _ = parameters_of(bound)
        self._params = {p.name: p for p in params if p.name not in HIDDEN_PARAMETERS}
        self._hidden = {p.name for p in params if p.name in HIDDEN_PARAMETERS}
        schema = function_schema(bound, name=self.name, description=description)
        properties = schema["function"]["parameters"]["properties"]
        for hidden in self._hidden:
            properties.pop(hidden, None)
        required = schema["function"]["parameters"]["required"]
        schema["function"]["parameters"]["required"] = [r for r in required if r not in self._hidden]
        self.schema: dict[str, Any] = schema

    def __repr__(self) -> str:
        return f"<agent tool {self.name!r}>"

    def __call__(self, workspace: Any, *args: Any, **kwargs: Any) -> Any:
        return self.func(workspace, *args, **kwargs)

    def available(self, workspace: Any) -> bool:
        """Whether ``workspace`` offers one of the capabilities the tool needs."""
        if not self.requires:
            return True
        return workspace is not None and any(workspace.supports(c) for c in self.requires)

    def call(self, workspace: Any, arguments: Any, **hidden: Any) -> ToolOutput:
        """Check ``arguments`` (the model's JSON object), run the tool, return its output. Never raises,
        except :class:`~skyrl_gym.errors.BudgetExceeded`, which ends the episode as truncated."""
        if not isinstance(arguments, dict):
            return ToolOutput(f"Error: the arguments of '{self.name}' must be a JSON object.", ok=False)
        problem = self._check(arguments)
        if problem:
            return ToolOutput(f"Error: tool '{self.name}' {problem}. {self.usage()}", ok=False)
        if not self.available(workspace):
            needs = " or ".join(self.requires)
            return ToolOutput(
                f"Error: tool '{self.name}' needs {needs}, which this task does not offer.", ok=False
            )
        kwargs = {key: coerce_value(value, self._params[key].annotation) for key, value in arguments.items()}
        kwargs.update({key: value for key, value in hidden.items() if key in self._hidden})
        try:
            value = self.func(workspace, **kwargs)
        except BudgetExceeded:
            raise
        except Exception as exc:  # the tool's own failure is the model's observation
            return ToolOutput(f"Error: {_message(exc)}", ok=False)
        if isinstance(value, ToolOutput):
            return value
        return ToolOutput(value if isinstance(value, str) else json.dumps(value, default=str))

    def usage(self) -> str:
        """One line naming the tool's arguments and their types."""
        if not self._params:
            return f"'{self.name}' takes no arguments."
        parts = [
            f"{p.name} ({describe_schema(p.schema)}{'' if p.required else ', optional'})"
            for p in self._params.values()
        ]
        return f"Arguments of '{self.name}': {', '.join(parts)}."

    def _check(self, arguments: dict[str, Any]) -> str | None:
        unexpected = [str(key)[:50] for key in arguments if key not in self._params]
        if unexpected:
            return f"got unexpected argument(s) {', '.join(map(repr, unexpected))}"
        missing = [p.name for p in self._params.values() if p.required and p.name not in arguments]
        if missing:
            return f"is missing required argument(s) {', '.join(map(repr, missing))}"
        for key, value in arguments.items():
            problem = validate_value(value, self._params[key].schema, key)
            if problem:
                return f"argument {problem}"
        return None


def _message(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, (KeyError,)) and exc.args:
        text = str(exc.args[0])
    return text[:2000]


def agent_tool(
    func: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    requires: Sequence[str] = (),
    description: str | None = None,
    register: bool = True,
) -> Any:
    """Make ``func`` an :class:`AgentTool` and register it in :data:`TOOLS` (``@agent_tool`` or
    ``@agent_tool(requires=("run",))``). Its first parameter must be the workspace."""

    def wrap(target: Callable[..., Any]) -> AgentTool:
        parameters = list(inspect.signature(target).parameters.values())
        if not parameters or parameters[0].kind not in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            raise TypeError(f"agent tool {target.__name__}: the first parameter must be the workspace")
        made = AgentTool(target, name=name, requires=requires, description=description)
        if register:
            TOOLS.register(made.name, made)
        return made

    return wrap if func is None else wrap(func)


def resolve_tools(names: Iterable[str | AgentTool] | None, workspace: Any) -> list[AgentTool]:
    """The tools named (or every registered one when ``names`` is ``None``) that ``workspace`` can run,
    ``finish`` always included and last. An unknown name raises with a did-you-mean."""
    chosen: list[AgentTool] = []
    explicit = names is not None
    for entry in TOOLS.names() if names is None else names:
        found = entry if isinstance(entry, AgentTool) else TOOLS.get(entry)
        if found.name == "finish":
            continue
        if found.available(workspace):
            chosen.append(found)
        elif explicit and not found.requires:
            chosen.append(found)
    chosen.append(TOOLS.get("finish"))
    return chosen
