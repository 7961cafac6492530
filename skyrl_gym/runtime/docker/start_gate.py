"""The bound on container starts: how many at once, and how many per second on average."""

from __future__ import annotations

import contextlib
import threading
import time


class _StartGate:
    """At most ``concurrent`` container starts at once, and on average ``rate`` per second (bursts of ``burst``)."""

    def __init__(self, rate: float, burst: int, concurrent: int):
        self.configure(rate, burst, concurrent)
        self._tokens = float(burst)
        self._stamp = time.monotonic()
        self._lock = threading.Lock()

    def configure(self, rate: float, burst: int, concurrent: int) -> None:
        if not rate > 0 or burst < 1 or concurrent < 1:
            raise ValueError(
                f"start limits must be positive, got rate={rate}, burst={burst}, concurrent={concurrent}"
            )
        self.rate, self.burst = float(rate), int(burst)
        self.slots = threading.BoundedSemaphore(concurrent)
        self.concurrent = concurrent

    @contextlib.contextmanager
    def admit(self):
        slots = self.slots
        with slots:
            while True:
                with self._lock:
                    now = time.monotonic()
                    self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
                    self._stamp = now
                    if self._tokens >= 1:
                        self._tokens -= 1
                        break
                    wait = (1 - self._tokens) / self.rate
                time.sleep(wait)
            yield
