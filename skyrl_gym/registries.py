"""``Registry``: named implementations of one swappable part, chosen by name from a config.

Every seam of the project that is chosen by name (sandbox backends, retrievers, inference engines,
dispatchers, advantage estimators, policy losses; environments aside, which keep Gymnasium's registry in
:mod:`skyrl_gym.envs.registration`) is one of these::

    LOSSES = Registry("policy loss", config_key="trainer.algorithm.policy_loss_type",
                      builtins={"ppo": "skyrl_train.training.algorithms.policy_loss:ppo_loss"})

    @LOSSES.register("my_loss")
    def my_loss(...): ...

    LOSSES.get("ppo")      # imports the module of a built-in the first time it is asked for
    LOSSES.get("ppp")      # UnknownNameError: unknown policy loss 'ppp' (trainer.algorithm.policy_loss_type);
                           # did you mean 'ppo'? Registered: my_loss, ppo

Built-ins are given as ``"module:attribute"`` strings, so a registry never imports the package that
implements them (no import cycle) and nothing heavy is imported until an implementation is used.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar

__all__ = ["Registry", "UnknownNameError", "did_you_mean"]

T = TypeVar("T")


class UnknownNameError(LookupError, ValueError):
    """No implementation is registered under a name; the message suggests close names and lists all."""


def did_you_mean(name: str, known: list[str] | tuple[str, ...], *, cutoff: float = 0.5) -> str:
    """``"did you mean 'x' or 'y'? "`` for the names in ``known`` close to ``name``, or ``""``."""
    close = difflib.get_close_matches(str(name), list(known), n=3, cutoff=cutoff)
    return f"did you mean {' or '.join(map(repr, close))}? " if close else ""


class Registry(Generic[T]):
    """Implementations of one kind by name.

    Args:
        kind: what is registered, in words ("sandbox backend"); error messages use it.
        config_key: the configuration key that names one (``"generator.dispatcher"``), for messages.
        builtins: ``name -> "module:attribute"`` of the implementations that ship with the project, imported
            the first time each is asked for.
    """

    def __init__(self, kind: str, config_key: str | None = None, builtins: Mapping[str, str] | None = None):
        self.kind = kind
        self.config_key = config_key
        self._entries: dict[str, T] = {}
        self._lazy: dict[str, str] = {}
        self._builtins = tuple(builtins or ())
        for name, entry_point in (builtins or {}).items():
            self.register_lazy(name, entry_point)

    # -- registering --------------------------------------------------------------------------------------
    def register(self, name: str, obj: T | None = None, *, override: bool = False) -> Any:
        """Register ``obj`` under ``name``; without ``obj``, a decorator that registers what it decorates.

        Registering another object under a taken name raises ``ValueError`` unless ``override=True``.
        """
        self._check_name(name)

        def add(value: T) -> T:
            existing = self._entries.get(name)
            if existing is not None and existing is not value and not override:
                raise ValueError(
                    f"{self.kind} {name!r} is already registered ({_describe(existing)}); "
                    "pass override=True to replace it"
                )
            if name in self._lazy and not override and not _is_entry_point(value, self._lazy[name]):
                raise ValueError(
                    f"{self.kind} {name!r} is already registered ({self._lazy[name]}); pass override=True"
                )
            self._lazy.pop(name, None)
            self._entries[name] = value
            return value

        return add if obj is None else add(obj)

    def register_lazy(self, name: str, entry_point: str, *, override: bool = False) -> None:
        """Register ``"module:attribute"`` under ``name``; it is imported when first asked for."""
        self._check_name(name)
        module, sep, attribute = entry_point.partition(":")
        if not sep or not module or not attribute:
            raise ValueError(f"an entry point must look like 'package.module:name', got {entry_point!r}")
        if (name in self._entries or name in self._lazy) and not override:
            if self._lazy.get(name) == entry_point:
                return
            raise ValueError(f"{self.kind} {name!r} is already registered; pass override=True to replace it")
        self._entries.pop(name, None)
        self._lazy[name] = entry_point

    def unregister(self, name: str) -> None:
        """Forget ``name`` (a ``KeyError``-free no-op when it is not registered)."""
        self._entries.pop(name, None)
        self._lazy.pop(name, None)

    # -- looking up ---------------------------------------------------------------------------------------
    def get(self, name: str) -> T:
        """The implementation registered as ``name``; :class:`UnknownNameError` with a did-you-mean if none."""
        if name in self._entries:
            return self._entries[name]
        if isinstance(name, str) and name in self._lazy:
            return self._load(name)
        raise UnknownNameError(self.unknown_message(name))

    def unknown_message(self, name: Any) -> str:
        """The error text for an unknown ``name``."""
        known = self.names()
        where = f" ({self.config_key})" if self.config_key else ""
        return (
            f"unknown {self.kind} {name!r}{where}; {did_you_mean(str(name), known)}"
            f"Registered: {', '.join(known) or 'none'}"
        )

    def builtin_names(self) -> list[str]:
        """The names of the implementations that ship with the project, in the order they were given."""
        return list(self._builtins)

    def names(self) -> list[str]:
        """Every registered name, sorted (built-ins included, imported or not)."""
        return sorted({*self._entries, *self._lazy})

    def items(self) -> list[tuple[str, T]]:
        """``(name, implementation)`` for every name, importing the built-ins not imported yet."""
        return [(name, self.get(name)) for name in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._lazy

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self.names()) or 'empty'})"

    # -- internals ----------------------------------------------------------------------------------------
    def _load(self, name: str) -> T:
        module_name, _, attribute = self._lazy[name].partition(":")
        module = importlib.import_module(module_name)
        try:
            value = getattr(module, attribute)
        except AttributeError:
            raise ImportError(
                f"{self.kind} {name!r}: module '{module_name}' has no attribute '{attribute}'"
            ) from None
        if name in self._lazy:  # importing the module may have registered it already
            self._lazy.pop(name)
            self._entries.setdefault(name, value)
        return self._entries[name]

    def _check_name(self, name: Any) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r}")


def _is_entry_point(obj: Any, entry_point: str) -> bool:
    """Whether ``obj`` is what ``"module:attribute"`` names (a built-in registering itself by decorator)."""
    module, _, attribute = entry_point.partition(":")
    return getattr(obj, "__module__", None) == module and getattr(obj, "__qualname__", None) == attribute


def _describe(obj: Any) -> str:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else repr(obj)
