"""Run a call with a wall-clock limit without blocking the caller past it.

Python cannot kill a thread, so a call that outlives its limit is abandoned: it runs on in a daemon thread
(which never blocks interpreter exit) and its result is dropped. Environments that run untrusted work (a
query, a sandboxed program) also put their own hard limit on it; this one protects the caller.

:class:`TimeoutRunner` keeps one daemon worker thread and reuses it from call to call (starting a thread per
call costs up to a millisecond of CPU); a worker that timed out is abandoned and a fresh one starts.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class CallTimedOut(Exception):
    """The call did not return within its limit."""


class _Worker:
    def __init__(self, name: str):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            fn, args, outcome, finished = job
            try:
                outcome["value"] = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
                outcome["error"] = exc
            finally:
                finished.set()


class TimeoutRunner:
    """Runs calls one at a time on a reused daemon thread, each with its own limit."""

    def __init__(self, name: str = "call"):
        self.name = name
        self._worker: _Worker | None = None

    def call(self, fn: Callable[..., T], *args: Any, timeout: float | None) -> T:
        """Return ``fn(*args)``, re-raise its exception, or raise :class:`CallTimedOut` after ``timeout`` s."""
        if timeout is None:
            return fn(*args)
        if self._worker is None:
            self._worker = _Worker(f"skyrl-gym-{self.name}")
        outcome: dict[str, Any] = {}
        finished = threading.Event()
        self._worker.jobs.put((fn, args, outcome, finished))
        if not finished.wait(timeout):
            self._worker.jobs.put(None)  # it stops once the stuck call returns, if ever
            self._worker = None
            raise CallTimedOut(f"{self.name} did not return within {timeout:g} s")
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    def close(self) -> None:
        """Let the worker thread end (idempotent)."""
        if self._worker is not None:
            self._worker.jobs.put(None)
            self._worker = None
