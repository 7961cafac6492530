"""The ``react`` agent: a trajectory that plays the row's environment wrapped in
:class:`~skyrl_gym.tools.react.ReActEnv`, the ReAct loop over the agent tools (``generator.react`` sets it).

``ReActEnv``, ``ReActConfig`` and the tool-call helpers live in :mod:`skyrl_gym.tools.react`; their names here
are kept for one release.
"""

from __future__ import annotations

from typing import Any

from skyrl_gym.tools.react import (
    ReActConfig,
    ReActEnv,
    render_tool_call,
    template_renders_tools,
    tools_system_prompt,
)
from skyrl_train.rollout.agents import register_agent
from skyrl_train.rollout.trajectory import Trajectory

__all__ = [
    "ReActConfig",
    "ReActEnv",
    "ReActTrajectory",
    "render_tool_call",
    "template_renders_tools",
    "tools_system_prompt",
]


@register_agent("react")
class ReActTrajectory(Trajectory):
    """The ``react`` agent: a :class:`~skyrl_train.rollout.trajectory.Trajectory` that plays the row's
    environment wrapped in :class:`ReActEnv`.

    Args:
        react: the loop's settings (a :class:`ReActConfig` or a dict of its fields: ``tools``, ``max_repeats``,
            ``max_tool_timeouts``, ``tool_timeout_s``, ``max_context``...); the runner passes its
            ``agent_kwargs`` here.

    The tool list goes into the prompt as a system message (the runner's one chat template is shared by
    every trajectory, so it is not given ``tools=``).
    """

    reads_react_section = True

    def __init__(self, context: Any, row: Any, sampling_params: Any, *, react: Any = None, **kwargs: Any):
        super().__init__(context, row, sampling_params, **kwargs)
        self.react_config = react if isinstance(react, ReActConfig) else ReActConfig(**dict(react or {}))

    def wrap_env(self, env: Any) -> ReActEnv:
        """The row's environment inside the ReAct tool loop."""
        return ReActEnv(env, self.react_config)
