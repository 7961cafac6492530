"""Sandboxes for untrusted code: one interface, several backends, persistent Python sessions.

    from skyrl_gym.runtime import make_sandbox, Limits

    sandbox = make_sandbox()                      # the strongest backend available here
    result = sandbox.run_python("print(6 * 7)", limits=Limits(timeout_s=5))
    result.stdout, result.exit_code, result.timed_out, result.oom, result.duration_s

Backends, strongest first: ``bwrap`` (bubblewrap namespaces, unprivileged user, cgroup limits) and
``process`` (``setrlimit`` only). ``make_sandbox("auto")`` picks the strongest that works on this machine;
``make_sandbox("bwrap")`` insists and says why it cannot. Other backends (a container engine, a remote
service) plug in with :func:`register_backend`. Which backend ran is in every :class:`RunResult` and in
``Sandbox.describe()``, so environments can put it in their metadata.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from skyrl_gym.runtime.base import Limits, RunResult, Sandbox, SandboxProcess
from skyrl_gym.runtime.session import CellResult, PythonSession

__all__ = [
    "CellResult",
    "Limits",
    "PythonSession",
    "RunResult",
    "Sandbox",
    "SandboxProcess",
    "available_backends",
    "make_sandbox",
    "register_backend",
]


def _bwrap_factory(**options: Any) -> Sandbox:
    from skyrl_gym.runtime.bwrap import BwrapSandbox

    return BwrapSandbox(**options)


def _bwrap_check() -> tuple[bool, str]:
    from skyrl_gym.runtime.bwrap import bwrap_available

    return bwrap_available()


def _process_factory(**options: Any) -> Sandbox:
    from skyrl_gym.runtime.process import ProcessSandbox

    return ProcessSandbox(**options)


# name -> (strength, factory, availability check); higher strength is stronger isolation
_BACKENDS: dict[str, tuple[int, Callable[..., Sandbox], Callable[[], tuple[bool, str]]]] = {
    "bwrap": (20, _bwrap_factory, _bwrap_check),
    "process": (0, _process_factory, lambda: (True, "")),
}


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
) -> None:
    """Add a sandbox backend: ``factory(**options)`` builds it, ``check()`` says whether it works here (and why
    not), ``strength`` orders backends for ``make_sandbox("auto")`` (bwrap is 20, process 0)."""
    _BACKENDS[name] = (strength, factory, check)


# Docker is chosen by name only (make_sandbox("docker", image=...)): "auto" would otherwise move the Python and
# code environments into containers whenever an engine happens to run, where they need an image built first.
register_backend("docker", _docker_factory, strength=-10, check=_docker_check)


def available_backends() -> list[str]:
    """The backends that work on this machine, strongest first."""
    ranked = sorted(_BACKENDS.items(), key=lambda item: -item[1][0])
    return [name for name, (_, _, check) in ranked if check()[0]]


def make_sandbox(backend: str = "auto", **options: Any) -> Sandbox:
    """A sandbox of the named backend, or of the strongest one available with ``"auto"``.

    ``options`` go to the backend (``limits=Limits(...)``, ``python=...``, and for bwrap ``ro_paths``,
    ``cpus``). An unknown or unavailable backend is a ``ValueError`` / ``RuntimeError`` saying what to do.
    """
    if backend == "auto":
        for name in available_backends():
            return _BACKENDS[name][1](**options)
        raise RuntimeError("no sandbox backend works on this machine")
    if backend not in _BACKENDS:
        raise ValueError(f"unknown sandbox backend {backend!r}; known: {', '.join(sorted(_BACKENDS))}")
    ok, why = _BACKENDS[backend][2]()
    if not ok:
        raise RuntimeError(f"sandbox backend {backend!r} is not available here: {why}")
    return _BACKENDS[backend][1](**options)
