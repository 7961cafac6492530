"""Containers started ahead of time, so that an episode does not wait for its container to start."""

from __future__ import annotations

import threading
from typing import Any

from skyrl_gym.runtime.docker.container import DockerContainer
from skyrl_gym.runtime.docker.errors import _short


class ContainerPool:
    """Keeps ``size`` containers of one kind started ahead of time; :meth:`acquire` hands one out (used by one
    episode, then removed: never reused, so nothing leaks from one episode to the next) and starts a
    replacement in the background. ``options`` are :class:`DockerContainer`'s."""

    def __init__(self, size: int, **options: Any):
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"pool size must be a non-negative integer, got {size!r}")
        self.size = size
        self.options = options
        self._ready: list[DockerContainer] = []
        self._lock = threading.Lock()
        self._starting = 0
        self._closed = False
        self.hits = 0
        self.misses = 0
        self.failures: list[str] = []
        self._refill()

    def _refill(self) -> None:
        with self._lock:
            wanted = self.size - len(self._ready) - self._starting
            if self._closed or wanted <= 0:
                return
            self._starting += wanted
        for _ in range(wanted):
            threading.Thread(target=self._start_one, name="docker-pool", daemon=True).start()

    def _start_one(self) -> None:
        container = None
        try:
            container = DockerContainer(**self.options)
        except Exception as exc:
            with self._lock:
                self.failures.append(_short(exc))
        finally:
            with self._lock:
                self._starting -= 1
                if container is not None and not self._closed:
                    self._ready.append(container)
                    container = None
        if container is not None:
            container.remove()

    def ready(self) -> int:
        """Containers started and waiting."""
        with self._lock:
            return len(self._ready)

    def acquire(self) -> DockerContainer:
        """A started container: a waiting one if there is one, else one started now."""
        with self._lock:
            container = self._ready.pop() if self._ready else None
        if container is not None and not container.alive():
            container.remove()
            container = None
        if container is None:
            self.misses += 1
            container = DockerContainer(**self.options)
        else:
            self.hits += 1
        self._refill()
        return container

    def close(self) -> None:
        """Remove the waiting containers and stop refilling."""
        with self._lock:
            self._closed = True
            idle, self._ready = self._ready, []
        for container in idle:
            container.remove()

    def __enter__(self) -> ContainerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
