"""Rollouts: dataset rows in, trajectories (token ids, loss masks, rewards, end states) out.

- :mod:`~skyrl_train.rollout.records`: what a rollout returns (:class:`TrajectoryResult`,
  :class:`GeneratorOutput`) and the :class:`Generator` interface the trainer consumes;
- :class:`~skyrl_train.rollout.runner.AgentRunner` (also named :class:`MultiTurnGenerator`): rows in,
  a :class:`GeneratorOutput` out, each sample a staged job of the configured agent run through a dispatcher;
- :class:`~skyrl_train.rollout.trajectory.Trajectory`: one sample as a staged job (set-up, the turn loop,
  verification after the episode, release), token in, token out; :mod:`~skyrl_train.rollout.react`: the
  ReAct agent, which plays the row's environment in :class:`~skyrl_gym.tools.react.ReActEnv` over the agent
  tools of :mod:`~skyrl_gym.tools.agent`;
- :data:`~skyrl_train.rollout.agents.AGENTS`: trajectory classes by name (``generator.agent``);
- :mod:`~skyrl_train.rollout.dispatch`: the strategies that run many staged jobs at once
  (``generator.dispatcher``);
- :class:`~skyrl_train.rollout.template.ChatTemplate` and :func:`~skyrl_train.rollout.metrics.rollout_metrics`.

The package rolls out through an inference engine and never reaches the training side (workers, algorithms,
the trainer's loop): ``tests/test_structure.py`` holds it to that. ``skyrl_train.agent``,
``skyrl_train.dispatch`` and ``skyrl_train.generator`` are this package's earlier names, kept as aliases.
"""

from skyrl_train.rollout.agents import AGENTS, agent_class, register_agent
from skyrl_train.rollout.metrics import rollout_metrics
from skyrl_train.rollout.records import END_STATES, EndState, Generator, GeneratorOutput, TrajectoryResult
from skyrl_train.rollout.runner import AgentRunner, MultiTurnGenerator
from skyrl_train.rollout.template import ChatTemplate, sample_seed, stop_strings_for
from skyrl_train.rollout.trajectory import RolloutContext, Trajectory, split_row

__all__ = [
    "AGENTS",
    "END_STATES",
    "AgentRunner",
    "ChatTemplate",
    "EndState",
    "Generator",
    "GeneratorOutput",
    "MultiTurnGenerator",
    "RolloutContext",
    "Trajectory",
    "TrajectoryResult",
    "agent_class",
    "register_agent",
    "rollout_metrics",
    "sample_seed",
    "split_row",
    "stop_strings_for",
]
