"""The earlier name of :mod:`skyrl_train.rollout.dispatch`, kept for one release."""

from skyrl_train.compat import alias_modules
from skyrl_train.rollout.dispatch import *  # noqa: F403
from skyrl_train.rollout.dispatch import __all__  # noqa: F401

alias_modules(
    __name__,
    {
        name: f"skyrl_train.rollout.dispatch.{name}"
        for name in ("async_batch", "async_pipeline", "base", "fixed_pool")
    },
)
