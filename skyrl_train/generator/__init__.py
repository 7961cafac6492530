"""Generators: dataset rows in, trajectories (token ids, loss masks, rewards, end states) out.

- :class:`~skyrl_train.generator.base.TrajectoryResult`, :class:`~skyrl_train.generator.base.GeneratorOutput`,
  :class:`~skyrl_train.generator.base.Generator`: the interface the trainer consumes.
- :class:`~skyrl_train.generator.multi_turn.MultiTurnGenerator`: the agent runner
  (:class:`skyrl_train.agent.AgentRunner`): multi-turn rollouts in skyrl_gym environments, token in, token
  out, many at once through a dispatcher.

The runner's names are loaded on first use: the agent layer imports this package's records, so importing
them here eagerly would import the agent layer back while it loads.
"""

from typing import Any

from skyrl_train.generator.base import END_STATES, EndState, Generator, GeneratorOutput, TrajectoryResult

__all__ = [
    "END_STATES",
    "ChatTemplate",
    "EndState",
    "Generator",
    "GeneratorOutput",
    "MultiTurnGenerator",
    "TrajectoryResult",
    "rollout_metrics",
    "sample_seed",
    "stop_strings_for",
]

_FROM_MULTI_TURN = (
    "ChatTemplate",
    "MultiTurnGenerator",
    "rollout_metrics",
    "sample_seed",
    "stop_strings_for",
)


def __getattr__(name: str) -> Any:
    if name in _FROM_MULTI_TURN:
        from skyrl_train.generator import multi_turn

        return getattr(multi_turn, name)
    raise AttributeError(f"module 'skyrl_train.generator' has no attribute {name!r}")
