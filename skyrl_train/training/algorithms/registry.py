"""Name -> function registries of advantage estimators and policy losses, so custom ones plug in by name.

::

    from skyrl_train.training.algorithms import register_advantage_estimator

    @register_advantage_estimator("my_baseline")
    def my_baseline(token_level_rewards, response_mask, group_ids, values=None, gamma=1.0, lambd=1.0,
                    *, valid=None, **kwargs):
        ...
        return advantages, returns

and then ``trainer.algorithm.advantage_estimator=my_baseline``. The module that registers must be imported
before the config is loaded. The registries are :class:`skyrl_gym.registries.Registry` objects; this module
imports no torch (the built-ins are imported when first used).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from skyrl_gym.registries import Registry, UnknownNameError
from skyrl_train import names

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "POLICY_LOSSES",
    "Registry",
    "UnknownAlgorithmError",
    "get_advantage_estimator",
    "get_policy_loss",
    "register_advantage_estimator",
    "register_policy_loss",
]

F = TypeVar("F", bound=Callable[..., Any])

UnknownAlgorithmError = UnknownNameError
"""A name that no algorithm is registered under (a ``LookupError``); the message suggests close names."""

ADVANTAGE_ESTIMATORS: Registry[Callable[..., Any]] = names.ADVANTAGE_ESTIMATORS
"""Advantage estimators by name; the built-ins (:data:`skyrl_train.names.BUILTIN_ADVANTAGE_ESTIMATORS`) are
imported when first asked for."""

POLICY_LOSSES: Registry[Callable[..., Any]] = names.POLICY_LOSSES
"""Policy losses by name (``regular`` is SkyRL's name for ``ppo``); the built-ins
(:data:`skyrl_train.names.BUILTIN_POLICY_LOSSES`) are imported when first asked for."""


def register_advantage_estimator(name: str, *, override: bool = False) -> Callable[[F], F]:
    """Decorator: make an advantage estimator available as ``trainer.algorithm.advantage_estimator=name``.

    Signature: ``fn(token_level_rewards [B,T], response_mask [B,T], group_ids [B], values [B,T] | None,
    gamma, lambd, *, valid [B] | None, **kwargs) -> (advantages [B,T], returns [B,T])``; both outputs are 0
    outside ``response_mask`` and on rows where ``valid`` is False. Unused keyword arguments are ignored.
    """
    return ADVANTAGE_ESTIMATORS.register(name, override=override)


def register_policy_loss(name: str, *, override: bool = False) -> Callable[[F], F]:
    """Decorator: make a policy loss available as ``trainer.algorithm.policy_loss_type=name``.

    Signature: ``fn(log_probs [B,T], old_log_probs [B,T], advantages [B,T], response_mask [B,T], cfg)
    -> (loss (scalar tensor), metrics dict[str, float])``; ``cfg`` is an
    :class:`~skyrl_train.config.AlgorithmConfig` (clip bounds, ``loss_reduction``).
    """
    return POLICY_LOSSES.register(name, override=override)


def get_advantage_estimator(name: str) -> Callable[..., Any]:
    """The advantage estimator registered as ``name`` (built-ins included)."""
    return ADVANTAGE_ESTIMATORS.get(name)


def get_policy_loss(name: str) -> Callable[..., Any]:
    """The policy loss registered as ``name`` (built-ins included)."""
    return POLICY_LOSSES.get(name)
