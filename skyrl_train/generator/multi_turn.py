"""The earlier home of :class:`~skyrl_train.rollout.runner.MultiTurnGenerator`, kept for one release."""

from skyrl_train.rollout import (
    ChatTemplate,
    MultiTurnGenerator,
    rollout_metrics,
    sample_seed,
    stop_strings_for,
)

__all__ = ["ChatTemplate", "MultiTurnGenerator", "rollout_metrics", "sample_seed", "stop_strings_for"]
