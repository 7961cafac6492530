"""The process's connection to a Docker engine: one client per engine address, the limits on container starts
and concurrent commands, the containers started and not removed yet, and their clean-up."""

from __future__ import annotations

import atexit
import functools
import os
import subprocess
import threading
from typing import TYPE_CHECKING, Any

from skyrl_gym.runtime.docker.errors import DockerUnavailable, _docker_module
from skyrl_gym.runtime.docker.images import read_workdir
from skyrl_gym.runtime.docker.reaper import owner_label, start_reaper, sweep_dead_owners
from skyrl_gym.runtime.docker.start_gate import _StartGate

if TYPE_CHECKING:
    from skyrl_gym.runtime.docker.container import DockerContainer


class DockerEngine:
    """The process's connection to one Docker engine, with its limits and its clean-up.

    Args:
        base_url: the engine's address (default: ``DOCKER_HOST`` or the local socket).
        max_starts_per_s: container starts per second, on average (``start_burst`` at once).
        max_concurrent_starts: container starts in flight at once.
        max_concurrent_execs: commands running at once, over all containers of this process.
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        max_starts_per_s: float = 20.0,
        start_burst: int = 8,
        max_concurrent_starts: int = 8,
        max_concurrent_execs: int = 32,
    ):
        docker = _docker_module()
        kwargs: dict[str, Any] = {"timeout": 120, "max_pool_size": 128}
        try:
            if base_url:
                self.client = docker.DockerClient(base_url=base_url, **kwargs)
            else:
                self.client = docker.from_env(**kwargs)
        except Exception as exc:
            raise DockerUnavailable(
                f"cannot connect to the Docker engine ({exc}); start it with images/start-dockerd.sh"
            ) from exc
        self.api = self.client.api
        self.base_url = self.api.base_url
        self.local = self.base_url.startswith("http+docker://localhost") or "unix" in self.base_url
        self.host = os.uname().nodename
        self.owner = owner_label(self.host, os.getpid())
        self.starts = _StartGate(max_starts_per_s, start_burst, max_concurrent_starts)
        self.execs = threading.BoundedSemaphore(max_concurrent_execs)
        self.max_concurrent_execs = max_concurrent_execs
        self._live: dict[str, DockerContainer] = {}
        self._lock = threading.Lock()
        self._reaper: subprocess.Popen | None = None
        self._workdirs: dict[tuple[str, str], tuple[bytes, int, int]] = {}
        self.swept = 0
        self._sweep()

    def configure(
        self,
        *,
        max_starts_per_s: float | None = None,
        start_burst: int | None = None,
        max_concurrent_starts: int | None = None,
        max_concurrent_execs: int | None = None,
    ) -> None:
        """Change the limits (for starts and commands begun after the call)."""
        gate = self.starts
        gate.configure(
            max_starts_per_s if max_starts_per_s is not None else gate.rate,
            start_burst if start_burst is not None else gate.burst,
            max_concurrent_starts if max_concurrent_starts is not None else gate.concurrent,
        )
        if max_concurrent_execs is not None:
            if max_concurrent_execs < 1:
                raise ValueError(f"max_concurrent_execs must be positive, got {max_concurrent_execs}")
            self.execs = threading.BoundedSemaphore(max_concurrent_execs)
            self.max_concurrent_execs = max_concurrent_execs

    def _sweep(self) -> None:
        """Remove the containers of owners on this machine that died (killed before they could clean up)."""
        self.swept += sweep_dead_owners(self.api, self.host)

    def ensure_reaper(self) -> None:
        """Start (once) the reaper process that removes this process's containers when it dies."""
        with self._lock:
            if self._reaper is not None and self._reaper.poll() is None:
                return
            self._reaper = start_reaper(_client_url(self), self.owner)

    def track(self, container: DockerContainer) -> None:
        with self._lock:
            self._live[container.id] = container

    def untrack(self, container: DockerContainer) -> None:
        with self._lock:
            self._live.pop(container.id, None)

    def live(self) -> list[str]:
        """Ids of the containers this process started and has not removed yet."""
        with self._lock:
            return list(self._live)

    def remove_all(self) -> None:
        """Remove every container this process started (at exit, and on SIGTERM through atexit)."""
        with self._lock:
            live = list(self._live.values())
        for container in live:
            container.remove()

    def workdir_archive(self, image_id: str, image: str, workdir: str) -> tuple[bytes, int, int]:
        """What ``image`` has in ``workdir``: a tar of the folder's contents, and the folder's owner uid and mode
        (read once per image through a created, never started, container)."""
        key = (image_id, workdir)
        with self._lock:
            if key in self._workdirs:
                return self._workdirs[key]
        result = read_workdir(self.api, self.owner, image, workdir)
        with self._lock:
            self._workdirs[key] = result
        return result


def _client_url(engine: DockerEngine) -> str:
    url = engine.base_url
    if url.startswith("http+docker://"):  # the SDK's spelling of the local socket
        return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    return url


_engines: dict[str, DockerEngine] = {}
_engines_lock = threading.Lock()


def engine(base_url: str | None = None) -> DockerEngine:
    """The process's :class:`DockerEngine` for ``base_url`` (made, and dead owners swept, at the first call)."""
    key = base_url or ""
    with _engines_lock:
        found = _engines.get(key)
        if found is None:
            found = _engines[key] = DockerEngine(base_url)
        return found


def configure(base_url: str | None = None, **limits: Any) -> DockerEngine:
    """Set the start rate and the bounds on concurrent starts and commands of this process's engine
    (see :class:`DockerEngine`); returns it."""
    found = engine(base_url)
    found.configure(**limits)
    return found


@functools.lru_cache(maxsize=1)
def docker_available() -> tuple[bool, str]:
    """Whether a Docker engine answers here, and why not when it does not (asked once per process)."""
    try:
        engine().client.ping()
    except DockerUnavailable as exc:
        return False, str(exc)
    except Exception as exc:
        return False, f"the Docker engine does not answer ({exc}); start it with images/start-dockerd.sh"
    return True, ""


@atexit.register
def _remove_at_exit() -> None:
    for found in list(_engines.values()):
        found.remove_all()
