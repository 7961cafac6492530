"""The registry of agent tools, :data:`TOOLS`, and nothing of the tools: each built-in is found in this package's
folder by its module's name and imported the first time it is asked for."""

from __future__ import annotations

import pkgutil
from pathlib import Path
from typing import Any

from skyrl_gym.registries import Registry

__all__ = ["TOOLS"]

_NOT_TOOLS = ("core", "registry")


def _builtins() -> dict[str, str]:
    """Each module of the package but :data:`_NOT_TOOLS` holds the tool of its name."""
    package = __name__.rpartition(".")[0]
    return {
        info.name: f"{package}.{info.name}:{info.name}"
        for info in pkgutil.iter_modules([str(Path(__file__).parent)])
        if info.name not in _NOT_TOOLS
    }


TOOLS: Registry[Any] = Registry("agent tool", config_key="generator.agent.tools", builtins=_builtins())
"""Agent tools by name (``generator.agent.tools`` names them); :func:`~skyrl_gym.tools.core.tool` registers a
workspace tool into it."""
