"""Daemon worker threads whose calls can be given up at a deadline: the one thread pool of ``skyrl_gym``.

Python cannot kill a thread. A call that outlives its deadline is *abandoned*: the caller stops waiting, the
worker running it is written off (a fresh worker takes its place, so the pool keeps its size) and the call
runs on in its daemon thread until it returns, when its result is dropped and the thread ends. Daemon
threads never block interpreter exit, which is why this pool exists instead of ``ThreadPoolExecutor``.
Environments that run untrusted work (a query, a sandboxed program) also put their own hard limit on it; this
one protects the caller.

A deadline counts from the moment a worker *starts* the call, not from when it was submitted: a call that
waits in the queue for a free worker is not charged for the wait.

:class:`DaemonPool` runs calls (:func:`run_all` runs several and waits for them, each with its deadline); the
vector environments use it. :class:`TimeoutRunner` is one worker of it that runs one call at a time (reused
from call to call: starting a thread per call costs up to a millisecond of CPU); the episode guard uses it.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")

_PENDING, _RUNNING, _FINISHED, _ABANDONED = "pending", "running", "finished", "abandoned"


@dataclass(frozen=True)
class Outcome:
    """How one call ended: with ``value``, with ``error`` (the exception it raised) or ``timed_out``."""

    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False


_TIMED_OUT = Outcome(timed_out=True)


class Call:
    """One function call submitted to a :class:`DaemonPool`.

    ``outcome`` is ``None`` until the call finishes or is abandoned. ``stopped`` is set once the function is
    no longer running and never will be (it returned or raised, or it was abandoned before it started); an
    abandoned call that is still running leaves it unset.
    """

    def __init__(
        self, pool: DaemonPool, fn: Callable[..., Any], args: tuple, on_change: Callable[[], None] | None
    ):
        self._pool = pool
        self._fn = fn
        self._args = args
        self._on_change = on_change
        self._lock = threading.Lock()
        self._state = _PENDING
        self.started_at: float | None = None
        self.outcome: Outcome | None = None
        self.stopped = threading.Event()

    def expire(self) -> bool:
        """Give up on the call because its deadline passed; False if it finished first."""
        return self._abandon(_TIMED_OUT)

    def cancel(self) -> bool:
        """Give up on the call because its caller went away; False if it finished first."""
        return self._abandon(None)

    def _abandon(self, outcome: Outcome | None) -> bool:
        with self._lock:
            if self._state == _FINISHED:
                return False
            if self._state == _ABANDONED:
                return True
            was_running = self._state == _RUNNING
            self._state = _ABANDONED
            self.outcome = outcome
        if was_running:
            self._pool._write_off_worker()
        else:
            self.stopped.set()
        return True

    def _start(self) -> bool:
        with self._lock:
            if self._state != _PENDING:
                return False
            self._state = _RUNNING
            self.started_at = time.monotonic()
        self._notify()
        return True

    def _run(self) -> bool:
        """Run the function; True if the caller took the outcome, False if it had given up on the call."""
        try:
            outcome = Outcome(value=self._fn(*self._args))
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            outcome = Outcome(error=exc)
        with self._lock:
            taken = self._state == _RUNNING
            if taken:
                self._state = _FINISHED
                self.outcome = outcome
        self.stopped.set()
        if taken:
            self._notify()
        return taken

    def _notify(self) -> None:
        if self._on_change is not None:
            self._on_change()


class DaemonPool:
    """Up to ``max_workers`` daemon threads (unbounded when ``None``), started as work arrives and reused."""

    def __init__(self, max_workers: int | None = None, name: str = "skyrl-gym-worker"):
        if max_workers is not None and (isinstance(max_workers, bool) or not isinstance(max_workers, int)):
            raise TypeError(f"max_workers must be a positive int or None, got {max_workers!r}")
        if max_workers is not None and max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        self.max_workers = max_workers
        self.name = name
        self._cond = threading.Condition()
        self._queue: deque[Call] = deque()
        self._workers = 0  # threads that count towards max_workers (written-off ones do not)
        self._idle = 0
        self._closed = False
        self._serial = itertools.count()

    def submit(self, fn: Callable[..., Any], *args: Any, on_change: Callable[[], None] | None = None) -> Call:
        """Queue ``fn(*args)``; ``on_change`` is called (from the worker) when it starts and when it finishes."""
        call = Call(self, fn, args, on_change)
        with self._cond:
            if self._closed:
                raise RuntimeError(f"the worker pool {self.name!r} is shut down")
            self._queue.append(call)
            if self._idle >= len(self._queue):
                self._cond.notify()
            elif self.max_workers is None or self._workers < self.max_workers:
                self._spawn()
        return call

    def shutdown(self) -> None:
        """Let idle workers exit; queued calls still run. Written-off workers end when their call returns."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _spawn(self) -> None:
        self._workers += 1
        name = f"{self.name}-{next(self._serial)}"
        threading.Thread(target=self._work, name=name, daemon=True).start()

    def _write_off_worker(self) -> None:
        """A worker is stuck in an abandoned call: stop counting it, and replace it if work is waiting."""
        with self._cond:
            self._workers -= 1
            if self._queue and (self.max_workers is None or self._workers < self.max_workers):
                self._spawn()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._idle += 1
                    self._cond.wait()
                    self._idle -= 1
                if not self._queue:
                    self._workers -= 1
                    return
                call = self._queue.popleft()
            if call._start() and not call._run():
                return  # the call was abandoned and this worker written off; a replacement took its place


class Job(NamedTuple):
    """A zero-argument call and its deadline in seconds from when it starts (``None``: no deadline)."""

    fn: Callable[[], Any]
    timeout_s: float | None = None


def submit_all(
    pool: DaemonPool, jobs: Sequence[Job], on_change: Callable[[], None] | None = None
) -> list[Call]:
    """Submit every job; ``on_change`` is shared by all of them."""
    return [pool.submit(job.fn, on_change=on_change) for job in jobs]


def wait_all(calls: Sequence[Call], timeouts_s: Sequence[float | None], changed: threading.Condition) -> None:
    """Block until every call has an outcome, expiring each one its timeout after it started.

    ``changed`` must be the condition the calls notify (see :func:`run_all`). On any exception (a
    ``KeyboardInterrupt``) the calls still out are cancelled before it propagates.
    """
    try:
        with changed:
            while True:
                now = time.monotonic()
                wait_s: float | None = None
                expired = False
                for call, timeout_s in zip(calls, timeouts_s, strict=True):
                    started_at = call.started_at
                    if call.outcome is not None or timeout_s is None or started_at is None:
                        continue
                    left = started_at + timeout_s - now
                    if left <= 0:
                        call.expire()
                        expired = True
                    else:
                        wait_s = left if wait_s is None else min(wait_s, left)
                if all(call.outcome is not None for call in calls):
                    return
                if not expired:
                    changed.wait(wait_s)
    except BaseException:
        for call in calls:
            call.cancel()
        raise


def run_all(pool: DaemonPool, jobs: Sequence[Job]) -> list[Call]:
    """Run the jobs concurrently on ``pool``; return their calls, each with an outcome (see :func:`wait_all`)."""
    changed = threading.Condition()

    def notify() -> None:
        with changed:
            changed.notify_all()

    calls = submit_all(pool, jobs, notify)
    wait_all(calls, [job.timeout_s for job in jobs], changed)
    return calls


# ------------------------------------------------------------------------------------------- one call at a time
class CallTimedOut(TimeoutError):
    """A call did not return within its limit (it runs on, abandoned, in its thread)."""


class TimeoutRunner:
    """Runs calls one at a time on a reused daemon thread (a :class:`DaemonPool` of one), each with its own
    limit."""

    def __init__(self, name: str = "call"):
        self.name = name
        self._pool: DaemonPool | None = None

    def call(self, fn: Callable[..., T], *args: Any, timeout: float | None) -> T:
        """Return ``fn(*args)``, re-raise its exception, or raise :class:`CallTimedOut` after ``timeout`` s."""
        if timeout is None:
            return fn(*args)
        if self._pool is None:
            self._pool = DaemonPool(max_workers=1, name=f"skyrl-gym-{self.name}")
        call = self._pool.submit(fn, *args)
        # the one worker is idle when the call comes (a stuck one was written off and replaced), so the
        # deadline counts from here; one event to wait on keeps the hop to the thread cheap
        if not call.stopped.wait(timeout):
            call.expire()  # False when it finished in between: its outcome stands
        outcome = call.outcome
        assert outcome is not None  # finished, or expired
        if outcome.timed_out:
            raise CallTimedOut(f"{self.name} did not return within {timeout:g} s")
        if outcome.error is not None:
            raise outcome.error
        return outcome.value

    def close(self) -> None:
        """Let the worker thread end (idempotent)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
