"""The earlier name of :mod:`skyrl_train.rollout` (its agents, runner and tools), kept for one release."""

from skyrl_train.compat import alias_modules
from skyrl_train.names import BUILTIN_AGENT_TOOLS
from skyrl_train.rollout import (
    AGENTS,
    AgentRunner,
    ChatTemplate,
    Trajectory,
    agent_class,
    register_agent,
    rollout_metrics,
    sample_seed,
    split_row,
    stop_strings_for,
)

__all__ = [
    "AGENTS",
    "AgentRunner",
    "ChatTemplate",
    "Trajectory",
    "agent_class",
    "register_agent",
    "rollout_metrics",
    "sample_seed",
    "split_row",
    "stop_strings_for",
]

alias_modules(
    __name__,
    {
        **{
            name: f"skyrl_train.rollout.{name}"
            for name in ("metrics", "react", "runner", "template", "trajectory")
        },
        "registry": "skyrl_train.rollout.agents",
        "tools": "skyrl_train.rollout.tools",
        **{f"tools.{name}": f"skyrl_train.rollout.tools.{name}" for name in BUILTIN_AGENT_TOOLS},
    },
)
