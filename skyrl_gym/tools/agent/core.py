"""Choosing a workspace's tools (:func:`resolve_tools`), and the names agent tools had before there was one tool
system.

An agent tool is a :class:`~skyrl_gym.tools.core.Tool` whose first parameter is the workspace, made with
:func:`~skyrl_gym.tools.core.tool`. ``AgentTool``, ``ToolOutput`` and ``agent_tool`` are the old names of
:class:`~skyrl_gym.tools.core.Tool`, :class:`~skyrl_gym.tools.core.ToolResult` and that decorator; they stay
for one release.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from skyrl_gym.tools.agent.registry import TOOLS
from skyrl_gym.tools.core import HIDDEN_PARAMETERS, Tool, ToolResult, _first_parameter

__all__ = ["HIDDEN_PARAMETERS", "AgentTool", "ToolOutput", "agent_tool", "resolve_tools"]

AgentTool = Tool
"""The old name of :class:`~skyrl_gym.tools.core.Tool`."""


def ToolOutput(content: str, ok: bool = True, timed_out: bool = False, finish: bool = False) -> ToolResult:  # noqa: N802
    """The old way to make a :class:`~skyrl_gym.tools.core.ToolResult` without a name."""
    return ToolResult(content=content, ok=ok, timed_out=timed_out, finish=finish)


def agent_tool(
    func: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    requires: Sequence[str] = (),
    description: str | None = None,
    register: bool = True,
) -> Any:
    """The old decorator of a workspace tool: :func:`~skyrl_gym.tools.core.tool`, whose first parameter is the
    workspace whatever its name."""

    def wrap(target: Callable[..., Any]) -> Tool:
        if _first_parameter(target) is None:
            raise TypeError(f"agent tool {target.__name__}: the first parameter must be the workspace")
        made = Tool(target, name=name, description=description, requires=requires, takes_workspace=True)
        if register:
            TOOLS.register(made.name, made)
        return made

    return wrap if func is None else wrap(func)


def resolve_tools(names: Iterable[str | Tool] | None, workspace: Any) -> list[Tool]:
    """The workspace tools named (or every registered one when ``names`` is ``None``) that ``workspace`` can
    run, ``finish`` always included and last. An unknown name raises with a did-you-mean."""
    chosen: list[Tool] = []
    for entry in TOOLS.names() if names is None else names:
        found = entry if isinstance(entry, Tool) else TOOLS.get(entry)
        if found.name != "finish" and found.available(workspace):
            chosen.append(found)
    chosen.append(TOOLS.get("finish"))
    return chosen
