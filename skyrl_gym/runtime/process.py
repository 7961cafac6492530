"""The ``process`` backend: a child process with resource limits, for machines without namespaces.

Each run gets a fresh work folder under ``<tmp>/skyrl_sandbox/`` (its current directory), a new session and
process group, a cleared environment, and ``setrlimit`` limits: address space (memory), CPU time, file size,
open files and, for users other than root, the number of processes. The process dies with its parent and its
whole process group is killed at the end of the run.

Processes a run leaves behind in other sessions (a daemonised child) are found at the end of the run by a
marker variable in their environment and killed too.

This is the weaker backend (``isolation = "rlimits"``): the code sees the host's files, network and
processes as the user running it, a child that both leaves its session and clears its environment
outlives the run, and ``RLIMIT_NPROC`` counts every process of the user, so concurrent runs share one process
budget (with the caller too); ``bwrap`` gives each run its own. Work folders are named after their owner's pid
and start time; those of an owner that died are swept when a sandbox is made and every minute while runs start.
Use ``bwrap`` wherever it is available; :func:`skyrl_gym.runtime.make_sandbox` does.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from skyrl_gym.runtime import _keeper
from skyrl_gym.runtime.base import FileMap, Limits, Sandbox, SandboxProcess, write_files
from skyrl_gym.runtime.cgroups import owner_gone, owner_tag, sweep_due

__all__ = ["ProcessSandbox", "work_root", "sweep_stale_folders"]

PR_SET_PDEATHSIG = 1
SAFE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


def work_root() -> Path:
    """Where the work folders of ``process`` runs live: ``<tmp>/skyrl_sandbox``."""
    return Path(tempfile.gettempdir()) / "skyrl_sandbox"


def sweep_stale_folders() -> int:
    """Remove work folders whose owning process died without removing them (their names start with the owner's
    pid and start time, see :func:`~skyrl_gym.runtime.cgroups.owner_tag`), and kill what their runs left
    running (a child in a session of its own does not die with its parent); returns how many."""
    stale = []
    with contextlib.suppress(OSError):
        stale = [folder for folder in work_root().iterdir() if owner_gone(folder.name)]
    if stale:
        _kill_marked_any({folder.name.encode() for folder in stale})
    for folder in stale:
        shutil.rmtree(folder, ignore_errors=True)
    return len(stale)


def _make_work_root() -> Path:
    root = work_root()
    if not root.is_dir():
        root.mkdir(parents=True, exist_ok=True)
        # shared by every user of the machine, like /tmp itself: each run's folder is private (mkdtemp: 0700)
        with contextlib.suppress(OSError):
            os.chmod(root, 0o1777)
    return root


MARKER = "SKYRL_SANDBOX_RUN"


def _kill_marked(marker: bytes) -> None:
    """Kill every process whose environment carries ``MARKER=<marker>`` (children that left the group)."""
    _kill_marked_any({marker})


def _kill_marked_any(markers: set[bytes]) -> None:
    """Kill every process whose environment carries ``MARKER=<m>`` for one of ``markers``."""
    prefix = f"{MARKER}=".encode()
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as handle:
                    variables = handle.read().split(b"\0")
            except OSError:
                continue
            if any(v.startswith(prefix) and v[len(prefix) :] in markers for v in variables):
                with contextlib.suppress(OSError):
                    os.kill(int(entry.name), signal.SIGKILL)


def _rlimit_setter(limits: Limits, set_nproc: bool):
    memory = limits.memory_mb * 1024 * 1024
    file_size = limits.max_file_mb * 1024 * 1024
    cpu = limits.cpu_seconds
    nproc = limits.max_processes

    def apply() -> None:  # runs in the child between fork and exec: no locks, no imports
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        if set_nproc:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    return apply


_LIBC = ctypes.CDLL(None, use_errno=True)


class ProcessSandbox(Sandbox):
    """Runs commands as child processes with ``setrlimit`` limits in a private work folder (weak isolation)."""

    name = "process"
    isolation = "rlimits"

    def __init__(self, limits: Limits | None = None, python: str | None = None, warm: int = 0):
        super().__init__(limits, python, warm)
        sweep_stale_folders()
        self.prewarm()

    def default_python(self) -> str:
        return sys.executable

    def spawn(
        self,
        command: Sequence[str],
        *,
        files: FileMap | None = None,
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
        stderr_to_stdout: bool = False,
    ) -> SandboxProcess:
        limits = limits or self.limits
        if sweep_due("folders"):
            sweep_stale_folders()
        folder = tempfile.mkdtemp(prefix=f"{owner_tag(os.getpid())}-", dir=_make_work_root())
        try:
            write_files(folder, files)
            marker = os.path.basename(folder)
            environment = {**SAFE_ENV, "HOME": folder, "TMPDIR": folder, **(env or {}), MARKER: marker}
            popen = _keeper.call(
                lambda: subprocess.Popen(
                    list(command),
                    cwd=folder,
                    env=environment,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT if stderr_to_stdout else subprocess.PIPE,
                    start_new_session=True,
                    preexec_fn=_rlimit_setter(limits, set_nproc=os.geteuid() != 0),
                    close_fds=True,
                )
            )
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise

        def release() -> None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(popen.pid, signal.SIGKILL)
            _kill_marked(marker.encode())
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                popen.wait(timeout=5)
            shutil.rmtree(folder, ignore_errors=True)

        return SandboxProcess(popen, self.name, release)

    def describe(self) -> dict:
        info = super().describe()
        info["enforced"] = {
            "memory": "rlimit-as",
            "processes": "rlimit-nproc" if os.geteuid() != 0 else "none (root ignores RLIMIT_NPROC)",
            "network": "none",
            "filesystem": "none",
        }
        return info
