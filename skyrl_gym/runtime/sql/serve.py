"""The query worker process: :func:`serve` opens one database file and answers its caller's requests.

It opens the file with an :class:`~.base.Engine`, caps its own memory (``RLIMIT_DATA``) and file sizes,
runs each query with a deadline (a watchdog thread interrupts the engine when it passes), fetches rows with
:func:`~.values.fetch_rows`, and sends plain Python values back (:mod:`.frames`). It exits when the
pipe closes or its parent ends, removing its private folder (:mod:`.folders`), and retires itself after
a query that left it holding much memory or that may have changed its connection.

Standard library only: the worker process imports this module (and the engine modules) without the rest of
the package.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import threading
import time
from collections.abc import Mapping
from typing import Any

from skyrl_gym.runtime.sql.folders import make_private_folder
from skyrl_gym.runtime.sql.frames import recv_frame, send_frame
from skyrl_gym.runtime.sql.values import ResultTooLarge, fetch_rows, megabytes

__all__ = [
    "MEMORY_SLACK_BYTES",
    "TEMP_FILE_LIMIT_BYTES",
    "serve",
]

MEMORY_SLACK_BYTES = 1 << 30
"""Memory a worker may use beyond its engine's own limit (the interpreter, fetched values)."""
TEMP_FILE_LIMIT_BYTES = 4 << 30
"""The largest temporary file a worker may write (``RLIMIT_FSIZE``)."""


class _Watchdog(threading.Thread):
    """Inside the worker: interrupts the engine at the query's deadline, and ends the worker with its parent."""

    TICK_S = 0.25
    """Seconds between two checks of the parent."""

    def __init__(self, engine: Any, parent: int, folder: str):
        super().__init__(name="skyrl-sql-worker-watchdog", daemon=True)
        self.engine, self.parent, self.folder = engine, parent, folder
        self.cond = threading.Condition()
        self.deadline = math.inf
        self.wake_at = 0.0

    def arm(self, deadline: float) -> None:
        """Interrupt the engine at ``deadline`` (``inf``: never)."""
        with self.cond:
            self.deadline = deadline
            if deadline < self.wake_at:  # only then: a query costs no wake-up of this thread
                self.cond.notify()

    def run(self) -> None:
        with self.cond:
            while True:
                now = time.monotonic()
                if now >= self.deadline:
                    self.deadline = math.inf
                    with contextlib.suppress(Exception):
                        self.engine.interrupt()
                if os.getppid() != self.parent:  # the caller died: nobody will read the answer
                    shutil.rmtree(self.folder, ignore_errors=True)
                    os._exit(0)
                self.wake_at = min(now + self.TICK_S, self.deadline)
                self.cond.wait(max(0.0, self.wake_at - now))


def _limit(resource_id: int, size: int) -> None:
    import resource

    soft, hard = resource.getrlimit(resource_id)
    if hard != resource.RLIM_INFINITY:
        size = min(size, hard)
    resource.setrlimit(resource_id, (size, hard))


def _open_engine(request: Mapping[str, Any], folder: str) -> Any:
    if request["engine"] == "duckdb":
        from skyrl_gym.runtime.sql.duckdb_engine import DuckDBEngine

        return DuckDBEngine(request["path"], request["options"], folder)
    from skyrl_gym.runtime.sql.sqlite_engine import SQLiteEngine

    return SQLiteEngine(request["path"], request["options"], folder)


def serve(frames_in: int = 0, frames_out: int | None = None) -> None:
    """A worker's main loop: open the file the first request names, then answer requests until EOF.

    ``frames_in`` / ``frames_out``: the pipes from and to the caller (by default stdin and stdout, for a
    worker started as a fresh interpreter).
    """
    import resource

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a temporary file past its limit fails the query instead
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if frames_out is None:
        frames_out = os.dup(1)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 1)  # a stray print must not corrupt the frames
    parent = os.getppid()
    try:
        request = recv_frame(frames_in)
    except EOFError:
        return
    folder, _owner_fd = make_private_folder(request["temp_root"], request.get("caller", parent))
    engine = None
    try:
        _limit(resource.RLIMIT_FSIZE, TEMP_FILE_LIMIT_BYTES)
        try:
            engine = _open_engine(request, folder)
            memory = engine.memory_bytes() + MEMORY_SLACK_BYTES
            _limit(resource.RLIMIT_DATA, memory)
        except Exception as exc:  # the file cannot be opened: say why, then end
            send_frame(frames_out, {"error": "open", "message": f"{type(exc).__name__}: {exc}"})
            return
        watchdog = _Watchdog(engine, parent, folder)
        watchdog.start()
        send_frame(frames_out, {"ok": True, "folder": folder})
        while True:
            try:
                request = recv_frame(frames_in)
            except EOFError:
                return
            if request["op"] == "close":
                return
            send_frame(frames_out, _answer(engine, watchdog, request, memory))
    finally:
        if engine is not None:
            with contextlib.suppress(Exception):
                engine.close()
        shutil.rmtree(folder, ignore_errors=True)


def _answer(
    engine: Any, watchdog: _Watchdog, request: Mapping[str, Any], memory_limit: int
) -> dict[str, Any]:
    if request["op"] == "describe":
        try:
            return engine.describe()
        except Exception as exc:
            return {"error": "execution", "message": f"{type(exc).__name__}: {exc}"}
    reply = _query(engine, watchdog, request)
    if reply.get("error") == "resources" or (
        request.get("internal") and engine.changes_state(request["sql"])
    ):
        reply["retire"] = True  # out of memory, or trusted SQL that may have changed this connection
    elif _data_bytes() > memory_limit // 2:
        reply["retire"] = True  # the engine keeps what a big query allocated: a fresh worker has all its room
    return reply


def _query(engine: Any, watchdog: _Watchdog, request: Mapping[str, Any]) -> dict[str, Any]:
    """Run one query within the request's time and size limits; its rows, or ``{"error", "message"}``."""
    timeout = request.get("timeout_s")
    deadline = math.inf if timeout is None else time.monotonic() + timeout
    sql, internal = request["sql"], bool(request.get("internal"))
    engine.set_deadline(deadline)
    watchdog.arm(deadline)
    lenient = False
    try:
        while True:
            cursor = None
            try:
                cursor = engine.execute(sql, internal=internal, lenient=lenient)
                return fetch_rows(cursor, request, deadline, engine.first_batch)
            except ResultTooLarge as exc:
                return {"error": "resources", "message": str(exc)}
            except MemoryError:
                return {"error": "resources", "message": _out_of_memory(engine)}
            except Exception as exc:
                if not lenient and engine.retry_lenient(exc):
                    lenient = True
                    continue
                described = engine.error(exc, time.monotonic() >= deadline)
                if described is None:
                    described = ("execution", f"{type(exc).__name__}: {exc}")
                kind, message = described
                if kind == "resources" and not message:
                    message = _out_of_memory(engine)
                return {"error": kind, "message": message}
            finally:
                if cursor is not None:
                    with contextlib.suppress(Exception):
                        cursor.close()
    finally:
        watchdog.arm(math.inf)
        engine.set_deadline(math.inf)


def _data_bytes() -> int:
    """This process's private writable memory (what ``RLIMIT_DATA`` counts)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[5]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _out_of_memory(engine: Any) -> str:
    return (
        f"the query needed more memory than the {megabytes(engine.memory_bytes() + MEMORY_SLACK_BYTES)} "
        "a query may use; write a cheaper query (filter early, avoid cross joins, aggregate less)"
    )
