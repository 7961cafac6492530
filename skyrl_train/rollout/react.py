"""The ``react`` agent: a trajectory that plays the row's environment wrapped in
:class:`~skyrl_gym.tools.react.ReActEnv`, the ReAct loop over the agent tools, and its settings
(:class:`ReActSettings`, ``generator.agent: {type: react, ...}``).

``ReActEnv``, ``ReActConfig`` and the tool-call helpers live in :mod:`skyrl_gym.tools.react`; their names here
are kept for one release.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from skyrl_gym.tools.agent.registry import TOOLS
from skyrl_gym.tools.react import (
    ReActConfig,
    ReActEnv,
    render_tool_call,
    template_renders_tools,
    tools_system_prompt,
)
from skyrl_train.config.base import Float, PartSettings, StrList
from skyrl_train.rollout.agents import register_agent
from skyrl_train.rollout.trajectory import Trajectory

__all__ = [
    "ReActConfig",
    "ReActEnv",
    "ReActSettings",
    "ReActTrajectory",
    "render_tool_call",
    "template_renders_tools",
    "tools_system_prompt",
]


class ReActSettings(PartSettings):
    """Settings of ``generator.agent: {type: react}``: the ReAct loop over tools in the OpenAI tool-call
    format (see :class:`ReActConfig`)."""

    tools: StrList | None = None
    """Tool names from the TOOLS registry (bash, editor, code_search, python, sql, search, finish, or your own);
    null: every registered tool the task's workspace can run. finish is always offered."""
    max_turns: int | None = Field(None, ge=1)
    """Actions per episode before it ends truncated (max_turns); null: generator.max_turns."""
    max_repeats: int = Field(3, ge=1)
    """The same tool call this many times in a row ends the episode (stuck_loop)."""
    max_tool_timeouts: int = Field(3, ge=1)
    """Tool calls that may run out of time before the episode ends (tool_timeouts)."""
    tool_timeout_s: Float = Field(30.0, gt=0, allow_inf_nan=False)
    """Seconds one command of a tool may run."""
    max_context: int = Field(200_000, ge=1)
    """Size of the conversation in characters that ends the episode (context)."""
    max_calls_per_turn: int = Field(4, ge=1)
    """Tool calls run per model turn; later ones are skipped with a note."""
    max_tool_output_chars: int = Field(10_000, ge=100)
    """Characters of one tool result the model sees (its beginning and end are kept)."""

    @field_validator("tools")
    @classmethod
    def _registered(cls, tools: list[str] | None) -> list[str] | None:
        unknown = [TOOLS.unknown_message(name) for name in tools or () if name not in TOOLS]
        if unknown:
            raise ValueError("; ".join(unknown))
        return tools


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

    settings = ReActSettings

    def __init__(self, context: Any, row: Any, sampling_params: Any, *, react: Any = None, **kwargs: Any):
        super().__init__(context, row, sampling_params, **kwargs)
        self.react_config = react if isinstance(react, ReActConfig) else ReActConfig(**dict(react or {}))

    def wrap_env(self, env: Any) -> ReActEnv:
        """The row's environment inside the ReAct tool loop."""
        return ReActEnv(env, self.react_config)
