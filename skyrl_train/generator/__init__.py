"""The earlier name (and SkyRL's) of the rollout records and the multi-turn generator: see
:mod:`skyrl_train.rollout`. Kept for one release."""

from skyrl_train.compat import alias_modules
from skyrl_train.rollout import (
    END_STATES,
    ChatTemplate,
    EndState,
    Generator,
    GeneratorOutput,
    MultiTurnGenerator,
    TrajectoryResult,
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
    "TrajectoryResult",
    "rollout_metrics",
    "sample_seed",
    "stop_strings_for",
]

alias_modules(__name__, {"base": "skyrl_train.rollout.records"})
