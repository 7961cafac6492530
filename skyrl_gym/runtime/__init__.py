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

from skyrl_gym.runtime.backends import BACKENDS, Backend, available_backends, make_sandbox, register_backend
from skyrl_gym.runtime.base import Limits, RunResult, Sandbox, SandboxProcess
from skyrl_gym.runtime.session import CellResult, PythonSession

__all__ = [
    "BACKENDS",
    "Backend",
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
