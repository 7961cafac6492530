"""``MultiTurnGenerator``: the trainer's name for the agent runner (multi-turn rollouts, token in, token out).

There is one rollout path: :class:`~skyrl_train.agent.runner.AgentRunner` schedules each sample as a
:class:`~skyrl_train.agent.trajectory.Trajectory` (its module docstring describes the turn loop and the token
rules). ``MultiTurnGenerator`` is that runner under the name the trainer, the warm-up and SkyRL users know.
"""

from __future__ import annotations

from skyrl_train.agent.metrics import rollout_metrics
from skyrl_train.agent.runner import AgentRunner
from skyrl_train.agent.template import ChatTemplate, sample_seed, stop_strings_for

__all__ = [
    "ChatTemplate",
    "MultiTurnGenerator",
    "rollout_metrics",
    "sample_seed",
    "stop_strings_for",
]


class MultiTurnGenerator(AgentRunner):
    """The :class:`~skyrl_train.agent.runner.AgentRunner` (same arguments, same behaviour).

    ``from_config(engine, config)`` (the trainer's order) and ``from_config(config, engine)`` both work.
    """
