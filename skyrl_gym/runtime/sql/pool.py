"""The caller's pools of query workers: per (engine, file, settings), the idle workers between queries.

:data:`POOLS` keeps, for the databases open on a file, the idle workers; a query takes one, and a worker that
has not answered :data:`~.base.KILL_GRACE_S` after the query's deadline is killed (a fresh one is started
for the next query). The last idle worker of a file stays :data:`WORKER_LINGER_S` seconds after the last
database on it closed, for the next episode on the same file.
"""

from __future__ import annotations

import atexit
import math
import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from skyrl_gym.runtime.sql.folders import sweep_stale_folders
from skyrl_gym.runtime.sql.frames import FRAME_SLACK
from skyrl_gym.runtime.sql.values import megabytes
from skyrl_gym.runtime.sql.worker import (
    Worker,
    WorkerGone,
    WorkerLate,
    WorkerTooLarge,
    forget_workers,
    join_reapers,
)
from skyrl_gym.runtime.sql.zygote import ZYGOTE

__all__ = [
    "POOLS",
    "WORKER_LINGER_S",
    "Pool",
    "Pools",
]

WORKER_LINGER_S = 2.0
"""Seconds the last idle worker of a file stays after the last database on it closed, so that the next
episode on the same file (a ``reset``) does not pay a worker's start (tens of milliseconds)."""


class Pool:
    """The workers of one (engine, file, settings): idle ones wait here between queries.

    While databases are open on it, it keeps at most as many idle workers as there are open databases (each
    query takes one, so concurrent queries run in parallel); once the last database closed, one idle worker
    stays :data:`WORKER_LINGER_S` seconds.
    """

    def __init__(self, pools: Pools, key: tuple, engine: str, path: str, options: Mapping[str, Any]):
        self.pools, self.key = pools, key
        self.engine, self.path, self.options = engine, path, dict(options)
        self.users = 0
        self.busy = 0
        self.idle: list[Worker] = []
        self.idle_since: float | None = None
        self.owner_pid = os.getpid()

    def request(self, message: dict[str, Any], deadline: float, timeout_s: float | None) -> dict[str, Any]:
        """Run one request on a worker; the answer, or ``{"error": kind, "message": text}``.

        The worker stops the query at ``deadline`` itself; one that has not answered
        :data:`~.base.KILL_GRACE_S` later is killed (kind ``timeout``), as is one whose answer would be
        larger than the request's ``max_bytes`` (kind ``resources``).
        """
        from skyrl_gym.runtime.sql.base import KILL_GRACE_S

        if self.owner_pid != os.getpid():
            raise RuntimeError(
                "this database was opened in another process (before a fork); open it again in this one"
            )
        worker = self._acquire()
        remaining = None if deadline == math.inf else max(0.0, deadline - time.monotonic())
        max_bytes = message.get("max_bytes")
        max_frame = math.inf if max_bytes is None or message["op"] != "query" else max_bytes + FRAME_SLACK
        try:
            reply = worker.call({**message, "timeout_s": remaining}, deadline + KILL_GRACE_S, max_frame)
        except WorkerLate:
            self._discard(worker)
            return {"error": "timeout", "message": ""}
        except WorkerTooLarge:
            self._discard(worker)
            return {
                "error": "resources",
                "message": f"the result is larger than {megabytes(max_bytes)}; select fewer or shorter values",
            }
        except WorkerGone:
            self._discard(worker)
            return {
                "error": "resources",
                "message": (
                    "the query stopped the database engine (it ran out of memory or crashed); "
                    "write a cheaper query"
                ),
            }
        except BaseException:
            self._discard(worker)  # interrupted mid-answer: the pipe is out of step
            raise
        if reply.get("retire"):
            self._discard(worker)  # killed, not asked: the caller need not wait for a big engine to close
        else:
            self._release(worker)
        return reply

    def _acquire(self) -> Worker:
        with self.pools.lock:
            while self.idle:
                worker = self.idle.pop()
                if worker.alive():
                    self.busy += 1
                    return worker
                worker.kill()
            self.busy += 1
        try:
            return Worker(self.engine, self.path, self.options)
        except BaseException:
            with self.pools.lock:
                self.busy -= 1
            raise

    def _release(self, worker: Worker) -> None:
        with self.pools.lock:
            self.busy -= 1
            keep = len(self.idle) < max(self.users, 1) and self.pools.pools.get(self.key) is self
            if keep:
                self.idle.append(worker)
        if not keep:
            worker.stop()

    def _discard(self, worker: Worker, kill: bool = True) -> None:
        with self.pools.lock:
            self.busy -= 1
        if kill:
            worker.kill()
        else:
            worker.stop()

    def leave(self) -> None:
        """A database on this pool closed."""
        if self.owner_pid != os.getpid():
            return  # a copy made by fork: the workers are the other process's
        self.pools.leave(self)


class Pools:
    """Every :class:`Pool` of this process, and the thread that ends the lingering ones."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.pools: dict[tuple, Pool] = {}
        self._janitor: threading.Thread | None = None
        self._wake = threading.Condition(self.lock)
        self.closing = False

    def join(self, engine: str, path: Any, options: Mapping[str, Any], stamp: tuple) -> Pool:
        """The pool for a database that opens, with a worker ready (so that opening errors show now)."""
        sweep_stale_folders()
        key = (engine, str(path), _freeze(options), stamp)
        with self.lock:
            pool = self.pools.get(key)
            if pool is None:
                pool = self.pools[key] = Pool(self, key, engine, str(path), options)
            pool.users += 1
            pool.idle_since = None
            ready = bool(pool.idle) or pool.busy > 0
            if not ready:
                pool.busy += 1  # the worker being started counts as busy, so a second opener waits for none
        if not ready:
            try:
                worker = Worker(engine, str(path), options)
            except BaseException:
                with self.lock:
                    pool.busy -= 1
                    pool.users -= 1
                    if pool.users == 0 and pool.busy == 0 and not pool.idle and self.pools.get(key) is pool:
                        del self.pools[key]
                raise
            pool._release(worker)
        return pool

    def leave(self, pool: Pool) -> None:
        stop: list[Worker] = []
        with self.lock:
            pool.users -= 1
            if pool.users > 0:
                return
            if WORKER_LINGER_S <= 0 or self.closing or sys.is_finalizing():  # no new threads at exit
                if self.pools.get(pool.key) is pool:
                    del self.pools[pool.key]
                stop, pool.idle = pool.idle, []
            else:
                pool.idle_since = time.monotonic()
                stop, pool.idle = pool.idle[1:], pool.idle[:1]
                self._start_janitor()
        for worker in stop:
            worker.stop()

    def _start_janitor(self) -> None:
        if self._janitor is None or not self._janitor.is_alive():
            self._janitor = threading.Thread(target=self._run_janitor, name="skyrl-sql-pools", daemon=True)
            self._janitor.start()
        else:
            self._wake.notify()

    def _run_janitor(self) -> None:
        while True:
            with self.lock:
                now = time.monotonic()
                expired = [
                    p
                    for p in self.pools.values()
                    if p.users == 0 and p.busy == 0 and (p.idle_since or math.inf) + WORKER_LINGER_S <= now
                ]
                for pool in expired:
                    del self.pools[pool.key]
                waiting = [
                    p.idle_since + WORKER_LINGER_S
                    for p in self.pools.values()
                    if p.users == 0 and p.idle_since
                ]
                if not expired and not waiting:
                    self._janitor = None
                    return
                if not expired:
                    self._wake.wait(max(0.01, min(waiting) - now))
                    continue
            for pool in expired:
                for worker in pool.idle:
                    worker.stop()
                pool.idle = []

    def close_idle(self) -> int:
        """End at once every pool no database uses (and their workers); returns how many."""
        with self.lock:
            idle = [p for p in self.pools.values() if p.users == 0 and p.busy == 0]
            for pool in idle:
                del self.pools[pool.key]
            janitor = self._janitor
            self._wake.notify()
        workers = [w for pool in idle for w in pool.idle]
        for pool in idle:
            pool.idle = []
        for worker in workers:  # EOF to all first, so that they end together
            worker.hang_up()
        for worker in workers:
            worker.stop()
        if janitor is not None:
            janitor.join(1.0)
        join_reapers(10.0)  # the folders of killed workers are gone once this returns
        return len(idle)

    def close_all(self) -> None:
        """End every worker (at exit)."""
        with self.lock:
            self.closing = True
            pools, self.pools = list(self.pools.values()), {}
        for pool in pools:
            if pool.owner_pid == os.getpid():
                for worker in pool.idle:
                    worker.stop(0.5)
            pool.idle = []
        ZYGOTE.close()

    def _after_fork(self) -> None:
        # The child has copies of the parent's pipes: it must never use them, nor keep them open (a worker
        # would not see its caller hang up), nor stop the parent's workers.
        forget_workers()
        self.lock = threading.RLock()
        self._wake = threading.Condition(self.lock)
        self.pools = {}
        self._janitor = None
        ZYGOTE.after_fork()


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


POOLS = Pools()
atexit.register(POOLS.close_all)
os.register_at_fork(after_in_child=POOLS._after_fork)
