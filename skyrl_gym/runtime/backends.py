"""The sandbox backends by name and ``make_sandbox``, which picks one (see :mod:`skyrl_gym.runtime`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from skyrl_gym.registries import Registry
from skyrl_gym.runtime.base import Sandbox

__all__ = ["BACKENDS", "Backend", "available_backends", "make_sandbox", "register_backend"]


def _bwrap_factory(**options: Any) -> Sandbox:
    from skyrl_gym.runtime.bwrap import BwrapSandbox

    return BwrapSandbox(**options)


def _bwrap_check() -> tuple[bool, str]:
    from skyrl_gym.runtime.bwrap import bwrap_available

    return bwrap_available()


def _process_factory(**options: Any) -> Sandbox:
    from skyrl_gym.runtime.process import ProcessSandbox

    return ProcessSandbox(**options)


@dataclasses.dataclass(frozen=True)
class Backend:
    """One sandbox backend: ``factory(**options)`` builds it, ``check()`` says whether it works here (and why
    not), ``strength`` orders backends for ``make_sandbox("auto")``, which only considers ``auto`` ones."""

    factory: Callable[..., Sandbox]
    check: Callable[[], tuple[bool, str]]
    strength: int
    auto: bool = True


BACKENDS: Registry[Backend] = Registry("sandbox backend", "env_config.sandbox")
"""Sandbox backends by name (``bwrap`` is 20 strong, ``process`` 0)."""
BACKENDS.register("bwrap", Backend(_bwrap_factory, _bwrap_check, strength=20))
BACKENDS.register("process", Backend(_process_factory, lambda: (True, ""), strength=0))


def _docker_factory(**options: Any) -> Sandbox:
    from skyrl_gym.runtime.docker import DockerSandbox

    return DockerSandbox(**options)


def _docker_check() -> tuple[bool, str]:
    from skyrl_gym.runtime.docker import docker_available

    return docker_available()


def register_backend(
    name: str,
    factory: Callable[..., Sandbox],
    *,
    strength: int,
    check: Callable[[], tuple[bool, str]] = lambda: (True, ""),
    auto: bool = True,
) -> None:
    """Add a sandbox backend to :data:`BACKENDS` (see :class:`Backend`); a name given again is replaced."""
    BACKENDS.register(name, Backend(factory, check, strength, auto), override=True)


# Docker is chosen by name only (make_sandbox("docker", image=...)): "auto" would otherwise move the Python and
# code environments into containers whenever an engine happens to run, where they need an image built first.
register_backend("docker", _docker_factory, strength=-10, check=_docker_check, auto=False)


def available_backends(*, named_only: bool = False) -> list[str]:
    """The backends that work on this machine, strongest first: those ``"auto"`` may pick, and with
    ``named_only=True`` also those chosen only by name (``docker``, which needs an ``image``)."""
    ranked = sorted(BACKENDS.items(), key=lambda item: -item[1].strength)
    return [name for name, backend in ranked if (backend.auto or named_only) and backend.check()[0]]


def make_sandbox(backend: str = "auto", **options: Any) -> Sandbox:
    """A sandbox of the named backend, or of the strongest one available with ``"auto"``.

    ``options`` go to the backend (``limits=Limits(...)``, ``python=...``, and for bwrap ``ro_paths``,
    ``cpus``). An unknown or unavailable backend is a ``ValueError`` / ``RuntimeError`` saying what to do.
    """
    if backend == "auto":
        for name in available_backends():
            return BACKENDS.get(name).factory(**options)
        raise RuntimeError("no sandbox backend works on this machine")
    chosen = BACKENDS.get(backend)  # an unknown name: UnknownNameError (a ValueError) with a did-you-mean
    ok, why = chosen.check()
    if not ok:
        raise RuntimeError(f"sandbox backend {backend!r} is not available here: {why}")
    return chosen.factory(**options)
