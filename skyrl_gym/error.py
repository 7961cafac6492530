"""SkyRL's name for the module of skyrl_gym's exceptions (``from skyrl_gym import error``; ``error.Error``).

The classes live in :mod:`skyrl_gym.errors`; both names give the same objects.
"""

from skyrl_gym.errors import (
    BudgetExceeded,
    EpisodeEndedError,
    EpisodeNotStartedError,
    Error,
    RegistrationError,
    StepTimeout,
    ToolCallError,
    UnknownEnvironmentError,
)

__all__ = [
    "BudgetExceeded",
    "EpisodeEndedError",
    "EpisodeNotStartedError",
    "Error",
    "RegistrationError",
    "StepTimeout",
    "ToolCallError",
    "UnknownEnvironmentError",
]
