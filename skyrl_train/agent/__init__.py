"""The agent layer: one rollout path from dataset rows to trajectories.

- :class:`~skyrl_train.agent.runner.AgentRunner`: rows in, :class:`~skyrl_train.generator.base.GeneratorOutput`
  out, each sample a staged job of the configured agent run through a dispatcher;
- :class:`~skyrl_train.agent.trajectory.Trajectory`: one sample as a staged job (set-up, the turn loop,
  verification after the episode, release); ``.result`` is its
  :class:`~skyrl_train.generator.base.TrajectoryResult`;
- :data:`~skyrl_train.agent.registry.AGENTS`: trajectory classes by name (``generator.agent``);
- :class:`~skyrl_train.agent.template.ChatTemplate` and :func:`~skyrl_train.agent.metrics.rollout_metrics`.
"""

from skyrl_train.agent.metrics import rollout_metrics
from skyrl_train.agent.registry import AGENTS, agent_class, register_agent
from skyrl_train.agent.runner import AgentRunner
from skyrl_train.agent.template import ChatTemplate, sample_seed, stop_strings_for
from skyrl_train.agent.trajectory import Trajectory, split_row

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
