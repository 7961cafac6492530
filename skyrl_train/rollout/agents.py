"""Agents by name (``generator.agent``): the :class:`~skyrl_train.rollout.trajectory.Trajectory` class a runner
plays each sample with.

- ``multi_turn`` (the default): the environment's own protocol, turn by turn;
- agents registered with :func:`register_agent` (the ReAct tool loop registers itself as ``react``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from skyrl_gym.registries import Registry
from skyrl_train import names

__all__ = ["AGENTS", "agent_class", "register_agent"]

AGENTS: Registry[Callable[..., Any]] = names.AGENTS
"""Trajectory classes by agent name."""


def register_agent(name: str) -> Callable[[type], type]:
    """Class decorator: make a :class:`~skyrl_train.rollout.trajectory.Trajectory` subclass an agent."""
    return AGENTS.register(name)


def agent_class(name: str) -> Any:
    """The trajectory class registered as ``name`` (an unknown name gets the registry's did-you-mean)."""
    return AGENTS.get(name)
