"""The zygote: the process that forks query workers on request, and the caller's handle on it.

A single-threaded child of the caller that imported the engines once, so that a worker starts in
milliseconds (a fresh interpreter importing DuckDB takes a few hundred). It ends with the caller, and its
workers with it. Where pidfds are missing, :class:`~.worker.Worker` starts each worker as a fresh
interpreter with the same :data:`BOOT` script instead.

Standard library only: the zygote imports this module without the rest of the package.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
from typing import Any

from skyrl_gym.runtime.sql.serve import serve

__all__ = [
    "BOOT",
    "PACKAGE_ROOT",
    "ZYGOTE",
    "ChildProcess",
    "live_workers",
    "zygote_main",
]

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# Workers run without the packages' __init__ modules (skyrl_gym's imports gymnasium and numpy): empty stand-ins
# for the three packages let them import the worker's modules (this one, serve, values, frames, folders) and
# the engine modules, which need only the standard library, skyrl_gym.errors and the engine.
BOOT = (
    "import sys, types\n"
    "root = sys.argv[1]\n"
    "packages = (('skyrl_gym', ''), ('skyrl_gym.runtime', '/runtime'), ('skyrl_gym.runtime.sql', '/runtime/sql'))\n"
    "for name, sub in packages:\n"
    "    module = types.ModuleType(name)\n"
    "    module.__path__ = [root + sub]\n"
    "    sys.modules[name] = module\n"
    "from skyrl_gym.runtime.sql import serve, zygote\n"
    "zygote.zygote_main(int(sys.argv[2])) if len(sys.argv) > 2 else serve.serve()\n"
)


class ChildProcess:
    """A worker process seen from the caller: a pidfd (a forked child of the zygote) or a ``Popen``."""

    def __init__(self, pid: int, pidfd: int | None = None, popen: subprocess.Popen | None = None):
        self.pid, self.pidfd, self.popen = pid, pidfd, popen

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return not self.wait(0)

    def wait(self, timeout: float | None) -> bool:
        """Whether the process ended within ``timeout`` seconds (``None``: wait as long as it takes)."""
        if self.popen is not None:
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        if self.pidfd is None:
            return True
        ready, _, _ = select.select([self.pidfd], [], [], timeout)
        return bool(ready)

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            if self.popen is not None:
                self.popen.kill()
            elif self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def release(self) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = None


def zygote_main(control_fd: int) -> None:
    """The zygote: a single-threaded process that has imported the engines and forks a worker on request.

    A fork costs a few milliseconds where a fresh interpreter that imports DuckDB costs a few hundred, which
    matters because a worker is started for every file and after every query that had to be killed. The
    zygote ends when its caller does (its socket closes); its workers then end too (their parent changed).
    """
    import socket

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the workers; the caller holds pidfds
    control = socket.socket(fileno=control_fd)
    from skyrl_gym.runtime.sql import sqlite_engine  # noqa: F401  (imported once, shared by every fork)

    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, 1 << 16, 2)
        except OSError:
            return
        if not data:
            return
        request = pickle.loads(data)
        try:
            if request.get("engine") == "duckdb":
                import duckdb  # noqa: F401  (once, here: importing it costs ~100 ms, a fork ~1 ms)
            pid = os.fork()
        except BaseException as exc:
            for fd in fds:
                os.close(fd)
            socket.send_fds(control, [pickle.dumps({"error": f"{type(exc).__name__}: {exc}"})], [])
            continue
        if pid == 0:  # the worker
            try:
                control.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                serve(fds[0], fds[1])
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as exc:
            socket.send_fds(control, [pickle.dumps({"error": f"pidfd_open: {exc}"})], [])
            continue
        socket.send_fds(control, [pickle.dumps({"pid": pid})], [pidfd])
        os.close(pidfd)


class _Zygote:
    """The caller's handle on the zygote (started on first use; restarted if it dies)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.sock: Any = None
        self.broken = not (hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal"))

    def spawn(self, engine: str) -> tuple[ChildProcess, int, int] | None:
        """A forked worker: (its process, the fd to write requests to, the fd to read answers from)."""
        import socket

        if self.broken:
            return None
        with self.lock:
            for _ in range(2):
                if self.proc is None or self.proc.poll() is not None:
                    self._start()
                    if self.broken:
                        return None
                to_worker_r, to_worker_w = os.pipe()
                from_worker_r, from_worker_w = os.pipe()
                try:
                    socket.send_fds(
                        self.sock, [pickle.dumps({"engine": engine})], [to_worker_r, from_worker_w]
                    )
                    data, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 1)
                except OSError:
                    data, fds = b"", []
                finally:
                    os.close(to_worker_r)
                    os.close(from_worker_w)
                reply = pickle.loads(data) if data else {"error": "the zygote ended"}
                if "pid" in reply and fds:
                    return ChildProcess(reply["pid"], pidfd=fds[0]), to_worker_w, from_worker_r
                for fd in (to_worker_w, from_worker_r, *fds):
                    os.close(fd)
                self._stop()
        return None

    def _start(self) -> None:
        import socket

        self._stop()
        try:
            parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError:
            self.broken = True
            return
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-s", "-c", BOOT, PACKAGE_ROOT, str(child_end.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=[child_end.fileno()],
            )
        except OSError:
            parent_end.close()
            self.broken = True
            return
        finally:
            child_end.close()
        self.sock = parent_end

    def _stop(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None
        if self.proc is not None:
            try:
                self.proc.wait(1.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def close(self) -> None:
        """End the zygote (at exit)."""
        with self.lock:
            self._stop()

    def after_fork(self) -> None:
        """In a forked child: drop the parent's zygote (closing the child's copy of its socket, so that the
        zygote still sees its caller end), without touching the process."""
        self.lock = threading.Lock()
        if self.sock is not None:
            with contextlib.suppress(OSError):
                os.close(self.sock.detach())
        self.proc, self.sock = None, None


ZYGOTE = _Zygote()


def live_workers() -> list[int]:
    """The pids of this process's query workers that are running now (the zygote's children)."""
    zygote = ZYGOTE.proc
    if zygote is None or zygote.poll() is not None:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # Z and X: it has ended (a worker's pidfd is readable from then on) and the kernel has yet to
        # remove its entry (the zygote's children are reaped at once, passing through X)
        if int(fields[1]) == zygote.pid and fields[0] not in ("Z", "X", "x"):
            pids.append(int(entry))
    return pids
