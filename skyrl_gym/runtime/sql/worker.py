"""Query workers: the child processes that run a :class:`~.client.Database`'s queries, seen from the caller.

Why a process: some queries cannot be stopped from inside the engine. A single SQLite ``LIKE``, ``GLOB``,
``instr``, ``replace`` or ``printf`` call runs as one virtual-machine instruction and never reaches the
progress handler; some DuckDB functions (``list_sort`` of a huge list, ``damerau_levenshtein`` of long
strings) neither check for an interrupt nor count their memory against ``memory_limit``. A process can be
killed, and the kernel bounds its memory. The caller only ever receives a result already cut to its
limits.

The parts, one module each:

- :mod:`.frames`: the frames on the pipes and the caller's restricted unpickler;
- :mod:`.serve`: the worker's main loop (open the file, cap resources, answer queries before a deadline),
  with :mod:`.values` turning rows into plain values within the limits;
- :mod:`.zygote`: the process that forks workers, and the boot script of every worker process;
- :mod:`.folders`: the workers' private temporary folders and the sweep of dead workers' folders;
- this module: :class:`Worker`, the caller's handle on one worker (start, call with a deadline, stop, kill);
- :mod:`.pool`: the idle workers kept per (engine, file, settings), :data:`~.pool.POOLS`.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any

from skyrl_gym.runtime.sql.frames import HEADER, ValueUnpickler, send_frame
from skyrl_gym.runtime.sql.zygote import BOOT, PACKAGE_ROOT, ZYGOTE, ChildProcess

__all__ = [
    "OPEN_TIMEOUT_S",
    "Worker",
    "WorkerGone",
    "WorkerLate",
    "WorkerTooLarge",
    "forget_workers",
    "join_reapers",
]

OPEN_TIMEOUT_S = 60.0
"""Seconds a worker may take to start and open its file."""


class WorkerGone(Exception):
    """The worker ended (crashed, was killed) before it answered."""


class WorkerLate(Exception):
    """The worker did not answer by the hard deadline."""


class WorkerTooLarge(Exception):
    """The worker's answer was larger than the request allows."""


_WORKERS: weakref.WeakSet[Worker] = weakref.WeakSet()
_REAPERS: set[threading.Thread] = set()
_REAPERS_LOCK = threading.Lock()
_KILL_WAIT_S = 0.2


class Worker:
    """The caller's handle on one query worker process (see the module docstring)."""

    def __init__(self, engine: str, path: str, options: Mapping[str, Any]):
        self.folder: str | None = None
        spawned = ZYGOTE.spawn(engine)
        if spawned is not None:
            self.child, self._in, self._out = spawned
        else:  # no zygote (no pidfds here): a fresh interpreter
            popen = subprocess.Popen(
                [sys.executable, "-s", "-c", BOOT, PACKAGE_ROOT],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
            assert popen.stdin is not None and popen.stdout is not None
            self.child = ChildProcess(popen.pid, popen=popen)
            self._in, self._out = os.dup(popen.stdin.fileno()), os.dup(popen.stdout.fileno())
            popen.stdin.close()
            popen.stdout.close()
        self.pid = self.child.pid
        _WORKERS.add(self)
        os.set_blocking(self._out, False)
        self._poller = select.poll()
        self._poller.register(self._out, select.POLLIN | select.POLLHUP | select.POLLERR)
        request = {
            "engine": engine,
            "path": path,
            "options": dict(options),
            "temp_root": tempfile.gettempdir(),
            "caller": os.getpid(),
        }
        try:
            reply = self.call(request, time.monotonic() + OPEN_TIMEOUT_S, 1 << 20)
        except (WorkerGone, WorkerLate, WorkerTooLarge) as exc:
            self.kill()
            raise OSError(f"the SQL query worker did not start ({type(exc).__name__}: {exc})") from None
        except BaseException:
            self.kill()
            raise
        if "error" in reply:
            self.kill()
            raise ValueError(f"could not open {path!r}: {reply['message']}")
        self.folder = reply["folder"]

    def call(self, message: Any, deadline: float, max_frame: float) -> Any:
        """Send ``message`` and return the answer, read by ``deadline`` and at most ``max_frame`` bytes long."""
        try:
            send_frame(self._in, message)
        except OSError as exc:  # a broken pipe: the worker is gone
            raise WorkerGone(f"could not send the request ({exc.strerror or exc})") from None
        data = self._read(HEADER.size, deadline, greedy=True)  # a small answer comes in this one read
        (size,) = HEADER.unpack_from(data)
        if size > max_frame:
            raise WorkerTooLarge(f"{size} bytes")
        body = data[HEADER.size :]
        if len(body) < size:
            body += self._read(size - len(body), deadline)
        answer = ValueUnpickler(io.BytesIO(body)).load()
        if isinstance(answer, dict) and "chunks" in answer:  # rows, pickled in the worker a batch at a time
            rows: list[tuple] = []
            for chunk in answer.pop("chunks"):
                rows.extend(ValueUnpickler(io.BytesIO(chunk)).load())
            answer["rows"] = rows
        return answer

    def _read(self, size: int, deadline: float, greedy: bool = False) -> bytes:
        """``size`` bytes from the worker (with ``greedy``, whatever more is there at once, up to 64 KB)."""
        chunks: list[bytes] = []
        got = 0
        while got < size:
            wait = None if deadline == math.inf else max(0.0, deadline - time.monotonic())
            if not self._poller.poll(None if wait is None else wait * 1000):
                raise WorkerLate
            try:
                chunk = os.read(self._out, max(size - got, 1 << 16) if greedy else min(size - got, 1 << 20))
            except BlockingIOError:
                continue
            except OSError as exc:
                raise WorkerGone(exc.strerror or str(exc)) from None
            if not chunk:
                raise WorkerGone("it ended")
            chunks.append(chunk)
            got += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.child.alive()

    def forget(self) -> None:
        """In a forked child: close this process's copies of the worker's pipes, leaving the worker be."""
        for fd in (self._in, self._out, self.child.pidfd):
            if fd is not None and fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._in = self._out = -1
        self.child.pidfd, self.child.popen, self.folder = None, None, None

    def stop(self, wait_s: float = 1.0) -> None:
        """Ask the worker to end (it removes its folder), and kill it if it has not after ``wait_s``."""
        self.hang_up()
        if not self.child.wait(wait_s):
            self.kill()
            return
        self._cleanup()

    def hang_up(self) -> None:
        """Close the request pipe: the worker ends after the request it is answering."""
        if self._in >= 0:
            with contextlib.suppress(OSError):
                os.close(self._in)
            self._in = -1

    def kill(self) -> None:
        """Kill the worker now and remove its folder; one that takes long to die (freeing gigabytes, stuck
        in the kernel) is finished off by a reaper thread, so that the caller does not wait for it."""
        self.child.kill()
        if not self.child.wait(_KILL_WAIT_S):
            reaper = threading.Thread(target=self._reap, name="skyrl-sql-reaper", daemon=True)
            with _REAPERS_LOCK:
                _REAPERS.add(reaper)
            reaper.start()
            return
        self._cleanup()

    def _reap(self) -> None:
        try:
            self.child.wait(None)
            self._cleanup()
        finally:
            with _REAPERS_LOCK:
                _REAPERS.discard(threading.current_thread())

    def _cleanup(self) -> None:
        self.hang_up()
        if self._out >= 0:
            with contextlib.suppress(OSError):
                os.close(self._out)
            self._out = -1
        self.child.release()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def forget_workers() -> None:
    """In a forked child: close the child's copies of every worker's pipes (see :meth:`Worker.forget`)."""
    for worker in list(_WORKERS):
        worker.forget()


def join_reapers(timeout_s: float) -> None:
    """Wait (at most ``timeout_s`` each) for the threads finishing off killed workers and their folders."""
    with _REAPERS_LOCK:
        reapers = list(_REAPERS)
    for reaper in reapers:
        reaper.join(timeout_s)
