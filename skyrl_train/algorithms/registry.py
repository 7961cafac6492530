"""Name -> function registries of advantage estimators and policy losses, so custom ones plug in by name.

::

    from skyrl_train.algorithms import register_advantage_estimator

    @register_advantage_estimator("my_baseline")
    def my_baseline(token_level_rewards, response_mask, group_ids, values=None, gamma=1.0, lambd=1.0,
                    *, valid=None, **kwargs):
        ...
        return advantages, returns

and then ``trainer.algorithm.advantage_estimator=my_baseline``. The module that registers must be imported
before the config is loaded. This module imports no torch.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

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


class UnknownAlgorithmError(LookupError):
    """A name that no function is registered under; the message suggests close names and lists all."""


class Registry(Generic[F]):
    """Functions by name, for one kind of algorithm (``kind`` appears in error messages)."""

    def __init__(self, kind: str, config_key: str):
        self.kind = kind
        self.config_key = config_key
        self._functions: dict[str, F] = {}

    def register(self, name: str, *, override: bool = False) -> Callable[[F], F]:
        """Decorator: register the function under ``name`` (an existing name needs ``override=True``)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r}")

        def add(fn: F) -> F:
            existing = self._functions.get(name)
            if existing is not None and existing is not fn and not override:
                raise ValueError(
                    f"{self.kind} {name!r} is already registered ({existing.__module__}."
                    f"{existing.__qualname__}); pass override=True to replace it"
                )
            self._functions[name] = fn
            return fn

        return add

    def get(self, name: str) -> F:
        """The function registered as ``name``; :class:`UnknownAlgorithmError` with a did-you-mean if none."""
        try:
            return self._functions[name]
        except KeyError:
            raise UnknownAlgorithmError(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        """The error text for an unknown ``name``."""
        known = self.names()
        close = difflib.get_close_matches(str(name), known, n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
        return f"unknown {self.kind} {name!r} ({self.config_key}); {hint}Registered: {', '.join(known) or 'none'}"

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._functions)

    def __contains__(self, name: object) -> bool:
        return name in self._functions

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


ADVANTAGE_ESTIMATORS: Registry[Callable[..., Any]] = Registry(
    "advantage estimator", "trainer.algorithm.advantage_estimator"
)
"""Advantage estimators by name. Built-ins register when :mod:`skyrl_train.algorithms` is imported."""

POLICY_LOSSES: Registry[Callable[..., Any]] = Registry("policy loss", "trainer.algorithm.policy_loss_type")
"""Policy losses by name. Built-ins register when :mod:`skyrl_train.algorithms` is imported."""


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
    import skyrl_train.algorithms  # noqa: F401 - registers the built-ins

    return ADVANTAGE_ESTIMATORS.get(name)


def get_policy_loss(name: str) -> Callable[..., Any]:
    """The policy loss registered as ``name`` (built-ins included)."""
    import skyrl_train.algorithms  # noqa: F401 - registers the built-ins

    return POLICY_LOSSES.get(name)
