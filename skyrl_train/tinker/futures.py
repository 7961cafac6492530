"""Futures the client polls, per-model lanes that queue and batch the work, and client sessions.

Every model operation becomes a :class:`Job` on the :class:`Lane` of its model (or sampler). A lane is one
thread that runs its jobs one at a time, in the client's ``seq_id`` order, so a model sees its requests in the
order the training script made them while different models run side by side. When several jobs that can share
one backend call are waiting (``forward_backward`` chunks or calls with the same loss, ``sample`` calls with the
same prompt and parameters), the lane runs them as one call and splits the result. Each job resolves a
:class:`Future`; ``/retrieve_future`` long-polls it through :meth:`FutureStore.wait`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


class Failure(Exception):
    """A job's error as the client sees it: a message and a category (``user`` or ``server``)."""

    def __init__(self, message: str, category: str = "user"):
        super().__init__(message)
        self.category = category


@dataclass
class Future:
    """One request's outcome: pending, then a payload (JSON-able dict or protobuf bytes) or an error."""

    request_id: str
    session_id: str | None
    created: float = field(default_factory=time.monotonic)
    done: bool = False
    payload: Any = None
    proto: bool = False
    error: str | None = None
    category: str = "server"
    finished: float | None = None
    retrieved: float | None = None  # when a poll last received the outcome
    _waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = field(default_factory=list, repr=False)


class FutureStore:
    """Futures by request id. An outcome stays retrievable for ``retrieved_keep_s`` seconds after a poll
    received it (a client whose connection dropped mid-answer asks again) and for ``keep_s`` seconds when
    nobody came for it."""

    def __init__(self, keep_s: float = 3600.0, retrieved_keep_s: float = 120.0):
        self.keep_s = keep_s
        self.retrieved_keep_s = retrieved_keep_s
        self._futures: dict[str, Future] = {}
        self._lock = threading.Lock()
        self._created = 0

    def create(self, session_id: str | None) -> Future:
        """A new pending future with a fresh request id."""
        fut = Future(request_id=uuid.uuid4().hex, session_id=session_id)
        with self._lock:
            self._futures[fut.request_id] = fut
            self._created += 1
            if self._created % 256 == 0:
                self._evict_locked()
        return fut

    def get(self, request_id: str) -> Future | None:
        """The future of ``request_id``, or None when the id was never issued (or has expired)."""
        with self._lock:
            return self._futures.get(request_id)

    def resolve(self, fut: Future, payload: Any, *, proto: bool = False) -> None:
        """Complete ``fut`` with a result and wake its pollers."""
        self._finish(fut, payload=payload, proto=proto)

    def fail(self, fut: Future, message: str, category: str = "user") -> None:
        """Complete ``fut`` with an error and wake its pollers."""
        self._finish(fut, error=message, category=category)

    def _finish(self, fut: Future, *, payload=None, proto=False, error=None, category="server") -> None:
        with self._lock:
            if fut.done:
                return
            fut.payload, fut.proto, fut.error, fut.category = payload, proto, error, category
            fut.done, fut.finished = True, time.monotonic()
            waiters, fut._waiters = fut._waiters, []
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)

    async def wait(self, fut: Future, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for ``fut``; True when it is done."""
        event = asyncio.Event()
        with self._lock:
            if fut.done:
                return True
            fut._waiters.append((asyncio.get_running_loop(), event))
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        return fut.done

    def mark_retrieved(self, fut: Future) -> None:
        """Note that a poll received ``fut``'s outcome (it may then be forgotten sooner)."""
        fut.retrieved = time.monotonic()

    def pending(self) -> int:
        """How many futures are not done yet."""
        with self._lock:
            return sum(not f.done for f in self._futures.values())

    def _evict_locked(self) -> None:
        now = time.monotonic()
        stale = [
            k
            for k, f in self._futures.items()
            if f.done
            and (
                now - (f.finished or now) > self.keep_s
                or (f.retrieved is not None and now - f.retrieved > self.retrieved_keep_s)
            )
        ]
        for k in stale:
            del self._futures[k]


@dataclass
class Job:
    """Work for one future. ``order`` is the client's seq_id (training) or the arrival number (sampling).

    A job with a ``batch_key`` may run together with the waiting jobs of the same key through the lane's
    batch runner; any other job runs alone through ``run``, which returns ``(payload, proto)``.
    """

    future: Future
    order: int
    run: Callable[[], tuple[Any, bool]] | None = None
    batch_key: Any = None
    args: Any = None
    seq_id: int | None = None


BatchRunner = Callable[[list[Job]], list[tuple[Any, bool] | Failure]]


class Lane:
    """One model's (or sampler's) queue and the thread that works it off in order.

    ``seq_ordered`` lanes (training models) wait up to ``gap_wait_s`` for a missing seq_id before running a
    later one: the client sends the chunks of one large ``forward_backward`` in parallel with the first chunk
    last, so that the whole call arrives before any of it runs and can be batched.
    """

    def __init__(
        self,
        name: str,
        store: FutureStore,
        batch_runner: BatchRunner | None = None,
        *,
        seq_ordered: bool = False,
        max_batch: int = 64,
        gap_wait_s: float = 2.0,
    ):
        self.name = name
        self.store = store
        self.batch_runner = batch_runner
        self.seq_ordered = seq_ordered
        self.max_batch = max_batch
        self.gap_wait_s = gap_wait_s
        self.next_seq = 1
        self.calls = 0  # backend calls made (one per batch), for tests and benchmarks
        self.jobs_run = 0
        self.gap_timeouts = 0  # times a missing seq_id was given up on
        self._pending: list[Job] = []
        self._skipped: set[int] = set()  # seq_ids refused at submission: nothing to wait for
        self._cond = threading.Condition()
        self._closed = False
        self._arrivals = itertools.count()
        self._thread = threading.Thread(target=self._work, name=f"tinker-lane-{name}", daemon=True)
        self._thread.start()

    def next_order(self) -> int:
        """An arrival number, for jobs without a seq_id."""
        return next(self._arrivals)

    def submit(self, job: Job) -> None:
        """Queue ``job``; refused once the lane is closed."""
        with self._cond:
            if self._closed:
                raise Failure(f"{self.name} is closed", "user")
            self._pending.append(job)
            self._cond.notify()

    def skip(self, seq_id: int | None) -> None:
        """A request of ``seq_id`` was refused before it became a job: later ones need not wait for it."""
        if seq_id is None:
            return
        with self._cond:
            self._skipped.add(seq_id)
            self._cond.notify()

    def close(self, then: Callable[[], None] | None = None) -> None:
        """Take no new jobs; run ``then`` on the lane's thread after the queued ones finish."""
        with self._cond:
            self._closed = True
            self._then = then
            self._cond.notify()

    def idle(self) -> bool:
        """True when nothing is queued."""
        with self._cond:
            return not self._pending

    def _take(self) -> list[Job] | None:
        with self._cond:
            gap_since: float | None = None
            while True:
                while self.next_seq in self._skipped:
                    self._skipped.discard(self.next_seq)
                    self.next_seq += 1
                if self._pending:
                    self._pending.sort(key=lambda j: j.order)
                    head = self._pending[0]
                    late = self.seq_ordered and head.seq_id is not None and head.seq_id > self.next_seq
                    if late and not self._closed:
                        now = time.monotonic()
                        gap_since = gap_since or now
                        if now - gap_since < self.gap_wait_s:
                            self._cond.wait(self.gap_wait_s - (now - gap_since))
                            continue
                        log.warning(
                            "%s: seq_id %d missing, running %d", self.name, self.next_seq, head.seq_id
                        )
                        self.gap_timeouts += 1
                    group = [head]
                    if head.batch_key is not None and self.batch_runner is not None:
                        for job in self._pending[1:]:
                            if job.batch_key != head.batch_key or len(group) >= self.max_batch:
                                break
                            if self.seq_ordered and job.seq_id is not None:
                                # Only a contiguous run of seq_ids: a gap may be a request of another kind.
                                if job.seq_id != group[-1].seq_id + 1:
                                    break
                            group.append(job)
                    del self._pending[: len(group)]
                    last = group[-1].seq_id
                    if last is not None:
                        self.next_seq = max(self.next_seq, last + 1)
                    return group
                if self._closed:
                    return None
                self._cond.wait()

    def _work(self) -> None:
        while True:
            group = self._take()
            if group is None:
                then = getattr(self, "_then", None)
                if then is not None:
                    try:
                        then()
                    except Exception:
                        log.exception("%s: clean-up after close failed", self.name)
                return
            self.calls += 1
            self.jobs_run += len(group)
            if len(group) == 1 and group[0].batch_key is None:
                outcomes = [self._run_one(group[0])]
            else:
                outcomes = self._run_batch(group)
            for job, outcome in zip(group, outcomes, strict=True):
                if isinstance(outcome, Failure):
                    self.store.fail(job.future, str(outcome), outcome.category)
                else:
                    payload, proto = outcome
                    self.store.resolve(job.future, payload, proto=proto)

    @staticmethod
    def _run_one(job: Job) -> tuple[Any, bool] | Failure:
        try:
            assert job.run is not None
            return job.run()
        except Failure as exc:
            return exc
        except Exception as exc:  # a bug or a backend crash fails this request only
            log.exception("request %s failed", job.future.request_id)
            return Failure(f"{type(exc).__name__}: {exc}", "server")

    def _run_batch(self, group: list[Job]) -> list[tuple[Any, bool] | Failure]:
        assert self.batch_runner is not None
        try:
            return self.batch_runner(group)
        except Failure as exc:
            if len(group) == 1:
                return [exc]
            # One bad request must not fail the others it was batched with: run each on its own.
            return [self._run_alone(job) for job in group]
        except Exception as exc:
            log.exception("batch of %d on %s failed", len(group), self.name)
            return [Failure(f"{type(exc).__name__}: {exc}", "server") for _ in group]

    def _run_alone(self, job: Job) -> tuple[Any, bool] | Failure:
        assert self.batch_runner is not None
        try:
            return self.batch_runner([job])[0]
        except Failure as exc:
            return exc
        except Exception as exc:
            log.exception("request %s failed", job.future.request_id)
            return Failure(f"{type(exc).__name__}: {exc}", "server")


@dataclass
class Session:
    """A client's session: what it created, when it was last heard from, and whether it has ended."""

    session_id: str
    user_metadata: dict[str, Any] | None = None
    created: float = field(default_factory=time.time)
    last_seen: float = field(default_factory=time.monotonic)
    ended: str | None = None  # the finish reason once the session is over
    models: list[str] = field(default_factory=list)
    samplers: list[str] = field(default_factory=list)
    sampler_clones: int = 0


class SessionRegistry:
    """Sessions by id; a session ends when its client finishes it or stops sending heartbeats."""

    def __init__(self, timeout_s: float = 900.0):
        self.timeout_s = timeout_s
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def create(self, user_metadata: dict[str, Any] | None) -> Session:
        """A new live session."""
        session = Session(session_id=f"s-{uuid.uuid4().hex[:16]}", user_metadata=user_metadata)
        with self._lock:
            self._sessions[session.session_id] = session
        return session

    def get(self, session_id: str) -> Session | None:
        """The session of ``session_id`` (live or ended), or None."""
        with self._lock:
            return self._sessions.get(session_id)

    def touch(self, session_id: str) -> Session | None:
        """Record a sign of life; the session (None if unknown)."""
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None:
                session.last_seen = time.monotonic()
            return session

    def expired(self) -> list[Session]:
        """Live sessions not heard from within ``timeout_s``."""
        now = time.monotonic()
        with self._lock:
            return [
                s for s in self._sessions.values() if s.ended is None and now - s.last_seen > self.timeout_s
            ]

    def all(self) -> list[Session]:
        """Every session."""
        with self._lock:
            return list(self._sessions.values())
