"""Run a call with a wall-clock limit without blocking the caller past it.

Python cannot kill a thread, so a call that outlives its limit is abandoned: it runs on in a daemon thread
(which never blocks interpreter exit) and its result is dropped. Environments that run untrusted work (a
query, a sandboxed program) also put their own hard limit on it; this one protects the caller.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class CallTimedOut(Exception):
    """The call did not return within its limit."""


def call_with_timeout(fn: Callable[..., T], *args: Any, timeout: float | None, name: str = "call") -> T:
    """Return ``fn(*args)``, re-raise its exception, or raise :class:`CallTimedOut` after ``timeout`` s."""
    if timeout is None:
        return fn(*args)
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            outcome["error"] = exc
        finally:
            finished.set()

    thread = threading.Thread(target=run, name=f"skyrl-gym-{name}", daemon=True)
    thread.start()
    if not finished.wait(timeout):
        raise CallTimedOut(f"{name} did not return within {timeout:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
