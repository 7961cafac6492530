"""Generators: dataset rows in, trajectories (token ids, loss masks, rewards, end states) out.

- :class:`~skyrl_train.generator.base.Trajectory`, :class:`~skyrl_train.generator.base.GeneratorOutput`,
  :class:`~skyrl_train.generator.base.Generator`: the interface the trainer consumes.
- :class:`~skyrl_train.generator.multi_turn.MultiTurnGenerator`: multi-turn rollouts in skyrl_gym
  environments, token in, token out, many at once through a dispatcher.
"""

from skyrl_train.generator.base import END_STATES, EndState, Generator, GeneratorOutput, Trajectory
from skyrl_train.generator.multi_turn import (
    ChatTemplate,
    MultiTurnGenerator,
    rollout_metrics,
    sample_seed,
    stop_strings_for,
)

__all__ = [
    "END_STATES",
    "ChatTemplate",
    "EndState",
    "Generator",
    "GeneratorOutput",
    "MultiTurnGenerator",
    "Trajectory",
    "rollout_metrics",
    "sample_seed",
    "stop_strings_for",
]
