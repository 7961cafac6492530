"""One long-lived thread that starts every sandboxed process.

Sandboxed processes die with their parent (``PR_SET_PDEATHSIG``, bubblewrap's ``--die-with-parent``), and
Linux means the parent *thread*: a process started from a short-lived worker thread would be killed when that
thread ends, for example a persistent interpreter session created inside a thread pool. Starting them all
from this daemon thread, which lives as long as the process, ties them to the process instead.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_requests: queue.SimpleQueue[tuple[Callable[[], Any], Future]] = queue.SimpleQueue()
_thread: threading.Thread | None = None
_lock = threading.Lock()


def _serve() -> None:
    while True:
        work, future = _requests.get()
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(work())
        except BaseException as exc:  # handed to the caller, who re-raises it
            future.set_exception(exc)


def submit(work: Callable[[], T]) -> Future:
    """Queue ``work`` for the keeper thread; its future holds the result."""
    global _thread
    with _lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_serve, name="sandbox-keeper", daemon=True)
            _thread.start()
    future: Future = Future()
    _requests.put((work, future))
    return future


def call(work: Callable[[], T]) -> T:
    """Run ``work`` on the keeper thread and return its result (or raise its exception)."""
    if threading.current_thread() is _thread:
        return work()
    return submit(work).result()
