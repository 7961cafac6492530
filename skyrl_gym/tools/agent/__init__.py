"""Tools an agent calls in an environment's workspace, one module each, registered by name in :data:`TOOLS`.

Built-ins: ``bash``, ``editor``, ``code_search``, ``python``, ``sql``, ``search``, ``finish`` (the module of
each is named after it). Each is a :class:`~skyrl_gym.tools.core.Tool` made by the one decorator,
:func:`~skyrl_gym.tools.core.tool`, from a function whose first parameter is the workspace; it runs on the
workspace's capabilities (:class:`~skyrl_gym.tools.workspace.Workspace`), never on an environment.
:mod:`.core` holds the choice of a workspace's tools (:func:`~.core.resolve_tools`) and, for one release, the
old names ``AgentTool``, ``ToolOutput`` and ``agent_tool``, all reachable from this package.

Importing this package imports only the registry (:mod:`.registry`): a tool's module is imported the first time
the tool is asked for, and the trainer's configuration checks a tool's name against :data:`TOOLS` without
importing any.
"""

from __future__ import annotations

from typing import Any

from skyrl_gym.tools.agent.registry import TOOLS

__all__ = ["HIDDEN_PARAMETERS", "TOOLS", "AgentTool", "ToolOutput", "agent_tool", "resolve_tools"]

_CORE = ("HIDDEN_PARAMETERS", "AgentTool", "ToolOutput", "agent_tool", "resolve_tools")


def __getattr__(name: str) -> Any:
    if name in _CORE:
        from skyrl_gym.tools.agent import core

        return getattr(core, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
