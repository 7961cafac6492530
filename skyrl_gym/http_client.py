"""POSTs to servers with retries: the one HTTP client that the project's calls to servers go through.

The search tool's retrieval requests and the trainer's remote inference engine both send a body, wait a
bounded time for the answer, and try again after a failure that another attempt could cure: no answer (the
connection failed, or, where the caller says so, the time ran out) or a 5xx / 429 status. They differ only in
what they make of the outcome, so :class:`HttpClient` hands back the last answer (:class:`Reply`) or raises
:class:`NoAnswer`, and leaves the wording to the caller.

The transport is httpx (imported when the first client is made), one connection pool per client and safe to
share between threads. A proxy set in the environment is used for other machines' servers and never for one on
this machine (a loopback address or ``localhost``). A caller may send through something else, e.g. a
``requests.Session``: ``send`` replaces one attempt.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["HttpClient", "NoAnswer", "Reply", "is_loopback", "retryable_status"]

Send = Callable[[str, bytes, Mapping[str, str], float], tuple[int, bytes]]
"""One attempt: ``(url, body, headers, timeout_s)`` to ``(status, body of the answer)``."""


def retryable_status(status: int) -> bool:
    """Whether another attempt could get a better answer: a server error or too many requests."""
    return status >= 500 or status == 429


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is this machine."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclasses.dataclass(frozen=True)
class Reply:
    """The server's last answer: its status, its body, and how many requests were sent to get it."""

    status: int
    content: bytes
    attempts: int


class NoAnswer(Exception):
    """No answer came, after ``attempts`` requests: ``kind`` is ``"timeout"`` (none within the time) or
    ``"connection"`` (the connection failed); ``reason`` says what happened, in a few words."""

    def __init__(self, kind: str, reason: str, attempts: int):
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
        self.attempts = attempts


def _is_timeout(exc: BaseException) -> bool:
    # httpx's and requests' timeouts are not TimeoutErrors; urllib's come wrapped in a reason
    reason = getattr(exc, "reason", None)
    return (
        isinstance(exc, TimeoutError) or isinstance(reason, TimeoutError) or "Timeout" in type(exc).__name__
    )


class HttpClient:
    """POSTs with retries.

    ``retries``: further attempts after one with no answer or a 5xx / 429 status; ``backoff_s``: the wait
    before the first retry, doubled for each one after; ``retry_timeouts``: whether an attempt that ran out of
    time is tried again (a server that is slow to answer may only get slower under more requests);
    ``max_connections``: requests in flight at once to one server."""

    def __init__(
        self,
        *,
        retries: int = 2,
        backoff_s: float = 0.5,
        retry_timeouts: bool = True,
        max_connections: int = 64,
    ):
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be a non-negative integer, got {retries!r}")
        if isinstance(backoff_s, bool) or not isinstance(backoff_s, (int, float)) or backoff_s < 0:
            raise ValueError(f"backoff_s must be a number of seconds >= 0, got {backoff_s!r}")
        self.retries = retries
        self.backoff_s = float(backoff_s)
        self.retry_timeouts = retry_timeouts
        self.max_connections = max_connections
        self._clients: dict[bool, Any] = {}
        self._lock = threading.Lock()

    def _client(self, direct: bool) -> Any:
        with self._lock:
            if direct not in self._clients:
                import httpx

                limits = httpx.Limits(
                    max_connections=self.max_connections, max_keepalive_connections=self.max_connections
                )
                # trust_env=False: no proxy from the environment for a server on this machine
                self._clients[direct] = httpx.Client(trust_env=not direct, limits=limits)
            return self._clients[direct]

    def send(self, url: str, content: bytes, headers: Mapping[str, str], timeout: float) -> tuple[int, bytes]:
        """One attempt through httpx; raises httpx's errors."""
        response = self._client(is_loopback(url)).post(
            url, content=content, headers=dict(headers), timeout=timeout
        )
        return response.status_code, response.content

    def post(
        self,
        url: str,
        content: bytes,
        *,
        headers: Mapping[str, str],
        timeout: float,
        send: Send | None = None,
        before_attempt: Callable[[int, int], None] | None = None,
        after_failure: Callable[[int, int, str], None] | None = None,
    ) -> Reply:
        """POST ``content`` to ``url``, trying again as the client's settings say.

        Returns the answer that ended the tries: a status that is not worth another attempt, or the last
        attempt's. Raises :class:`NoAnswer` when the last attempt got no answer. ``send`` replaces one
        attempt; ``before_attempt(attempt, attempts)`` and ``after_failure(attempt, attempts, reason)`` are
        told of each attempt and each failed one (counted from 1)."""
        import httpx

        send = send or self.send
        attempts = self.retries + 1
        for attempt in range(1, attempts + 1):
            if attempt > 1:
                time.sleep(self.backoff_s * 2 ** (attempt - 2))
            if before_attempt is not None:
                before_attempt(attempt, attempts)
            try:
                status, body = send(url, content, headers, timeout)
            except (httpx.TransportError, OSError) as exc:  # requests' errors are OSErrors
                if _is_timeout(exc):
                    failure = NoAnswer("timeout", f"no answer within {timeout:g} s", attempt)
                else:
                    cause = getattr(exc, "reason", None) or exc
                    failure = NoAnswer("connection", f"{type(cause).__name__}: {cause}", attempt)
                if attempt == attempts or (failure.kind == "timeout" and not self.retry_timeouts):
                    raise failure from exc
                if after_failure is not None:
                    after_failure(attempt, attempts, failure.reason)
                continue
            if not retryable_status(status) or attempt == attempts:
                return Reply(status, body, attempt)
            if after_failure is not None:
                after_failure(attempt, attempts, f"HTTP {status}")
        raise AssertionError("unreachable: the last attempt returns or raises")

    def close(self) -> None:
        """Close the connection pools (a later request opens new ones)."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
