"""The ``docker`` backend: a long-lived container per episode, on the Docker engine (docker SDK, imported lazily).

    from skyrl_gym.runtime.docker import DockerContainer

    with DockerContainer("local/terminal:latest") as box:      # started here, removed at the end
        shell = box.shell()                                     # one bash whose state lives across commands
        shell.run("cd /tmp && X=6").exit_code                   # 0
        shell.run("echo $((X * 7)) in $PWD").output            # '42 in /tmp\\n'
        box.exec(["python3", "-c", "print(1)"], timeout_s=5)    # a RunResult, like every sandbox's

What every container gets (see :class:`DockerContainer`):

- limits: memory (swap included), CPUs, processes (``pids``), the largest file (``RLIMIT_FSIZE``) and disk: the
  root file system is read-only and every writable place (the work folder, ``/tmp``, ``/var/tmp``, ``/run``,
  the home folder, ``/logs``, ``/tests``) is a memory-backed file system of at most ``disk_mb``, charged to the
  container's memory limit, so nothing an episode writes reaches the host's disk or outlives the container.
  The work folder starts with what the image has there (copied in when the container starts);
- no network (``network_mode="none"``: loopback only) unless asked for; every capability dropped;
  ``no-new-privileges``; a non-root user (uid 1000 by default); an init process that reaps zombies; never the
  Docker socket inside;
- labels (:data:`RUNTIME_LABEL`, :data:`OWNER_LABEL`) naming the process that started it: the next engine start
  of any process on this machine removes the containers of owners that died, and a small reaper process removes
  this process's containers when it dies, even by SIGKILL. A container also ends by itself after
  ``lifetime_s`` (its first process is ``sleep``) and is then removed by the engine (``auto_remove``).

A command that outruns its timeout is killed with everything it started (found by a marker in their
environment, the container paused meanwhile so that a fork bomb cannot outrun the kill); the container and the
shell stay usable. A command killed by the memory limit says so (``oom``). A missing image is named with the
command that builds it. Container starts are rate-limited and concurrent commands bounded, per process
(:func:`configure`), so that 64 episodes starting at once do not overload the engine; a
:class:`ContainerPool` keeps containers started ahead of time.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import os
import re
import secrets
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from skyrl_gym.runtime.base import FileMap, Limits, RunResult, Sandbox, SandboxProcess, check_relative

__all__ = [
    "DEFAULT_IMAGE",
    "ContainerPool",
    "DockerContainer",
    "DockerEngine",
    "DockerSandbox",
    "DockerUnavailable",
    "ImageNotFound",
    "ShellResult",
    "ShellSession",
    "configure",
    "docker_available",
    "engine",
]

DEFAULT_IMAGE = "local/terminal:latest"
"""The image of the terminal environment, built by ``images/build.sh``."""
RUNTIME_LABEL = "org.skyrl.runtime"
OWNER_LABEL = "org.skyrl.owner"
DEFAULT_USER = "1000:1000"
DEFAULT_LIFETIME_S = 6 * 3600
BUILD_HINT = "build it with images/build.sh"
_TOKEN_VAR = "SKYRL_EXEC"
_STREAM_HEADER = struct.Struct(">BxxxL")


class DockerUnavailable(RuntimeError):
    """The Docker engine (or the docker Python package) cannot be used; the message says what to do."""


class ImageNotFound(DockerUnavailable):
    """The image is not on the engine; the message names it and how to build it."""

    def __init__(self, image: str):
        super().__init__(f"image {image} not found; {BUILD_HINT}")
        self.image = image


def _docker_module() -> Any:
    try:
        import docker
    except ImportError as exc:
        raise DockerUnavailable(
            "the docker Python package is not installed: pip install 'skyrl[docker]'"
        ) from exc
    return docker


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


# -- the engine: one client, the rate limits and the clean-up, per process --------------------------------------
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


def _process_start_ticks(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _owner_alive(owner: str, host: str) -> bool:
    """Whether the process named by an owner label (``host:pid:start``) still runs; other hosts' count as alive."""
    parts = owner.split(":")
    if len(parts) != 3 or parts[0] != host:
        return True
    try:
        pid = int(parts[1])
    except ValueError:
        return False
    return _process_start_ticks(pid) == parts[2]


# Run by the reaper process: waits for its stdin to close (its parent died, however) and removes what the parent
# left. The standard library and the docker package only.
_REAPER = r"""
import os, signal, sys
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)
while os.read(0, 4096):
    pass
import docker
client = docker.DockerClient(base_url=sys.argv[1])
for c in client.containers.list(all=True, filters={"label": "%s=%s" % (sys.argv[2], sys.argv[3])}):
    try:
        c.remove(force=True, v=True)
    except Exception:
        pass
"""


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
        self.owner = f"{self.host}:{os.getpid()}:{_process_start_ticks(os.getpid())}"
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
        try:
            found = self.api.containers(all=True, filters={"label": RUNTIME_LABEL}, quiet=False)
        except Exception:
            return
        for info in found:
            owner = (info.get("Labels") or {}).get(OWNER_LABEL, "")
            if not _owner_alive(owner, self.host):
                with contextlib.suppress(Exception):
                    self.api.remove_container(info["Id"], force=True, v=True)
                    self.swept += 1

    def ensure_reaper(self) -> None:
        """Start (once) the reaper process that removes this process's containers when it dies."""
        with self._lock:
            if self._reaper is not None and self._reaper.poll() is None:
                return
            self._reaper = subprocess.Popen(
                [sys.executable, "-c", _REAPER, _client_url(self), OWNER_LABEL, self.owner],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )

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
        labels = {RUNTIME_LABEL: "probe", OWNER_LABEL: self.owner}
        created = self.api.create_container(image, command=["true"], labels=labels)
        try:
            stream, _ = self.api.get_archive(created["Id"], workdir)
            result = _reroot(b"".join(stream))
        except Exception:  # the image has no such folder: it starts empty
            result = (b"", int(DEFAULT_USER.split(":")[0]), 0o755)
        finally:
            with contextlib.suppress(Exception):
                self.api.remove_container(created["Id"], force=True, v=True)
        with self._lock:
            self._workdirs[key] = result
        return result


def _client_url(engine: DockerEngine) -> str:
    url = engine.base_url
    if url.startswith("http+docker://"):  # the SDK's spelling of the local socket
        return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    return url


def _reroot(data: bytes) -> tuple[bytes, int, int]:
    """A tar of a folder (``app/...``) re-rooted at its contents, with the folder's own uid and mode."""
    source = tarfile.open(fileobj=io.BytesIO(data))
    out = io.BytesIO()
    uid, mode = 0, 0o755
    with tarfile.open(fileobj=out, mode="w") as target:
        for member in source.getmembers():
            top, _, rest = member.name.partition("/")
            if not rest:
                uid, mode = member.uid, member.mode & 0o7777
                continue
            member.name = rest
            if member.islnk():
                member.linkname = member.linkname.partition("/")[2]
            target.addfile(member, source.extractfile(member) if member.isfile() else None)
    return out.getvalue(), uid, mode


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


@atexit.register
def _remove_at_exit() -> None:
    for found in list(_engines.values()):
        found.remove_all()


# -- talking to an exec over its hijacked connection ------------------------------------------------------------
def _raw(sock: Any) -> socket.socket:
    """The plain socket under what ``exec_start(socket=True)`` returns."""
    inner = getattr(sock, "_sock", sock)
    return inner


class _Output:
    """The first ``limit`` bytes of a stream and its last ``tail`` bytes; what lies between is counted."""

    def __init__(self, limit: int, tail: int = 0):
        self.limit, self.tail_limit = limit, tail
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_limit:
            self.tail += chunk
            del self.tail[: max(0, len(self.tail) - self.tail_limit)]

    @property
    def dropped(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        if not self.tail:
            return head
        tail = self.tail.decode("utf-8", errors="replace")
        if self.dropped:
            return f"{head}\n[... {self.dropped} bytes of output not shown ...]\n{tail}"
        return head + tail


def _pump(raw: socket.socket, stdin: bytes, out: _Output, err: _Output, deadline: float) -> bool:
    """Write ``stdin`` (then half-close), read the multiplexed stdout/stderr frames until the stream ends or
    ``deadline`` passes; returns whether the stream ended."""
    raw.setblocking(False)
    selector = selectors.DefaultSelector()
    selector.register(raw, selectors.EVENT_READ | (selectors.EVENT_WRITE if stdin else 0))
    pending = memoryview(stdin)
    if not stdin:
        with contextlib.suppress(OSError):
            raw.shutdown(socket.SHUT_WR)
    buffer = bytearray()
    ended = False
    try:
        while not ended:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for _, events in selector.select(left):
                if events & selectors.EVENT_WRITE and pending:
                    try:
                        pending = pending[raw.send(pending[:65536]) :]
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        pending = pending[:0]
                    if not pending:
                        with contextlib.suppress(OSError):
                            raw.shutdown(socket.SHUT_WR)
                        selector.modify(raw, selectors.EVENT_READ)
                if events & selectors.EVENT_READ:
                    try:
                        chunk = raw.recv(262144)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        chunk = b""
                    if not chunk:
                        ended = True
                        break
                    buffer += chunk
                    while len(buffer) >= 8:
                        kind, size = _STREAM_HEADER.unpack_from(buffer)
                        if len(buffer) < 8 + size:
                            break
                        (err if kind == 2 else out).add(bytes(buffer[8 : 8 + size]))
                        del buffer[: 8 + size]
    finally:
        selector.close()
    return ended


def _signal_code(code: int | None) -> int | None:
    """An exec's exit status as a RunResult has it: a command killed by signal N (128 + N) as -N."""
    if code is not None and 128 < code < 128 + 65:
        return -(code - 128)
    return code


# -- the container ------------------------------------------------------------------------------------------------
class DockerContainer:
    """One long-lived container (for one episode), started by the constructor and removed by :meth:`remove`.

    Args:
        image: the image (``local/terminal:latest`` by default; :class:`ImageNotFound` if the engine lacks it).
        limits: ``memory_mb`` (swap included), ``max_processes`` (pids), ``max_file_mb`` (largest file),
            ``timeout_s`` (of each :meth:`exec` that sets none) and ``max_output_bytes`` (kept per stream).
        cpus: CPU quota in cores (``None``: no quota).
        disk_mb: size of each writable place (work folder, ``/tmp``, home...); memory-backed, so it also counts
            against the memory limit.
        network: ``False`` (default): no network but loopback; ``True``: the engine's default bridge.
        user: ``"uid:gid"`` (or a user name the image knows) that commands run as; never root by default.
        workdir: the work folder (default: the image's, else ``/app``), filled with what the image has there.
        env: environment variables of every command.
        lifetime_s: the container ends by itself after this long, whatever happens to its owner.
        engine: the :class:`DockerEngine` (default: this process's).
    """

    def __init__(
        self,
        image: str = DEFAULT_IMAGE,
        *,
        limits: Limits | None = None,
        cpus: float | None = 1.0,
        disk_mb: int = 512,
        network: bool = False,
        user: str = DEFAULT_USER,
        workdir: str | None = None,
        env: Mapping[str, str] | None = None,
        lifetime_s: float = DEFAULT_LIFETIME_S,
        engine: DockerEngine | None = None,
    ):
        if not isinstance(disk_mb, int) or isinstance(disk_mb, bool) or disk_mb < 1:
            raise ValueError(f"disk_mb must be a positive integer, got {disk_mb!r}")
        if cpus is not None and not cpus > 0:
            raise ValueError(f"cpus must be positive or None, got {cpus!r}")
        self.image = image
        self.limits = limits or Limits(timeout_s=30, memory_mb=1024, max_processes=256, max_file_mb=256)
        self.cpus = cpus
        self.disk_mb = disk_mb
        self.network = bool(network)
        self.user = user
        self.env = dict(env or {})
        self.lifetime_s = lifetime_s
        self.engine = engine or globals()["engine"]()
        self.id = ""
        self.removed = False
        self._oom_seen = 0
        self._cgroup_files: list[str] | None = None
        self._lock = threading.Lock()
        self.started_s = 0.0
        self.workdir = self._start(workdir)

    # -- start and end ----------------------------------------------------------------------------------
    def _image_info(self) -> dict[str, Any]:
        docker = _docker_module()
        try:
            return self.engine.api.inspect_image(self.image)
        except docker.errors.ImageNotFound:
            raise ImageNotFound(self.image) from None
        except docker.errors.APIError as exc:
            if getattr(exc, "status_code", None) == 404:
                raise ImageNotFound(self.image) from None
            raise DockerUnavailable(f"the Docker engine refused to inspect {self.image}: {exc}") from exc

    def _start(self, workdir: str | None) -> str:
        docker = _docker_module()
        api = self.engine.api
        info = self._image_info()
        workdir = workdir or (info.get("Config") or {}).get("WorkingDir") or "/app"
        archive, owner, mode = self.engine.workdir_archive(info["Id"], self.image, workdir)
        uid = self.user.split(":")[0] if self.user.split(":")[0].isdigit() else str(owner)
        gid = self.user.split(":")[1] if ":" in self.user else uid
        size = f"{self.disk_mb}m"
        home = self.env.get("HOME", "/home/agent")
        writable = f"rw,nosuid,nodev,size={size}"
        tmpfs = {
            "/tmp": f"{writable},mode=1777",
            "/var/tmp": f"{writable},mode=1777",
            "/run": "rw,nosuid,nodev,size=16m,mode=755",
            home: f"{writable},uid={uid},gid={gid},mode=755",
            "/logs": f"{writable},uid={uid},gid={gid},mode=755",
            "/tests": f"{writable},uid={uid},gid={gid},mode=755",
        }
        tmpfs.pop(workdir, None)
        # the work folder is a memory-backed volume (not a plain tmpfs) so that the engine can copy the image's
        # files into it: the engine's archive calls see volumes, never a container's own tmpfs mounts
        mounts = [
            docker.types.Mount(
                target=workdir,
                source=None,
                type="volume",
                driver_config=docker.types.DriverConfig(
                    "local",
                    {
                        "type": "tmpfs",
                        "device": "tmpfs",
                        "o": f"size={size},uid={owner if archive else uid},gid={gid},mode={mode:o}",
                    },
                ),
            )
        ]
        limits = self.limits
        file_size = limits.max_file_mb * 1024 * 1024
        host_config = api.create_host_config(
            network_mode="bridge" if self.network else "none",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges:true"],
            init=True,
            read_only=True,
            auto_remove=True,
            mem_limit=f"{limits.memory_mb}m",
            memswap_limit=f"{limits.memory_mb}m",
            nano_cpus=int(self.cpus * 1e9) if self.cpus else None,
            pids_limit=limits.max_processes,
            shm_size=f"{min(64, self.disk_mb)}m",
            ulimits=[
                docker.types.Ulimit(name="fsize", soft=file_size, hard=file_size),
                docker.types.Ulimit(name="core", soft=0, hard=0),
                docker.types.Ulimit(name="nofile", soft=4096, hard=4096),
            ],
            tmpfs=tmpfs,
            mounts=mounts,
        )
        labels = {RUNTIME_LABEL: "docker", OWNER_LABEL: self.engine.owner}
        environment = {"HOME": home, "LANG": "C.UTF-8", **self.env}
        self.engine.ensure_reaper()
        begin = time.monotonic()
        with self.engine.starts.admit():
            try:
                created = api.create_container(
                    self.image,
                    command=["sleep", str(int(self.lifetime_s))],
                    user=self.user,
                    working_dir=workdir,
                    environment=environment,
                    labels=labels,
                    host_config=host_config,
                    network_disabled=not self.network,
                )
            except docker.errors.ImageNotFound:
                raise ImageNotFound(self.image) from None
            self.id = created["Id"]
            self.engine.track(self)
            try:
                api.start(self.id)
                if archive:  # after the start: the volume is mounted only then
                    api.put_archive(self.id, workdir, archive)
            except BaseException:
                self.remove()
                raise
        self.started_s = time.monotonic() - begin
        return workdir

    def alive(self) -> bool:
        """Whether the container still runs."""
        if self.removed:
            return False
        try:
            return bool(self.engine.api.inspect_container(self.id)["State"]["Running"])
        except Exception:
            return False

    def remove(self) -> None:
        """Stop and remove the container and its volumes (idempotent, never raises)."""
        with self._lock:
            if self.removed or not self.id:
                self.removed = True
                return
            self.removed = True
        with contextlib.suppress(Exception):
            self.engine.api.remove_container(self.id, force=True, v=True)
        self.engine.untrack(self)

    close = remove

    def __enter__(self) -> DockerContainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def describe(self) -> dict[str, Any]:
        """What the container enforces, for metadata."""
        return {
            "backend": "docker",
            "image": self.image,
            "id": self.id[:12],
            "user": self.user,
            "workdir": self.workdir,
            "network": "bridge" if self.network else "none",
            "cpus": self.cpus,
            "disk_mb": self.disk_mb,
            "limits": asdict(self.limits),
        }

    # -- commands ----------------------------------------------------------------------------------------
    def exec(
        self,
        command: str | Sequence[str],
        *,
        timeout_s: float | None = None,
        stdin: str | bytes | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
        max_output_bytes: int | None = None,
    ) -> RunResult:
        """Run ``command`` (a shell string, or an argv list) to its end or its timeout, in a new process.

        At the timeout the command and everything it started are killed; the container stays usable.
        """
        timeout = self.limits.timeout_s if timeout_s is None else timeout_s
        limit = self.limits.max_output_bytes if max_output_bytes is None else max_output_bytes
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else [str(a) for a in command]
        payload = stdin.encode("utf-8", errors="surrogatepass") if isinstance(stdin, str) else (stdin or b"")
        token = secrets.token_hex(12)
        environment = {**self.env, **(env or {}), _TOKEN_VAR: token}
        api = self.engine.api
        out, err = _Output(limit), _Output(limit)
        with self.engine.execs:
            start = time.monotonic()
            try:
                exec_id = api.exec_create(
                    self.id, argv, stdin=bool(payload), environment=environment,
                    workdir=workdir or self.workdir, user=user or self.user,
                )["Id"]  # fmt: skip
                sock = api.exec_start(exec_id, socket=True)
            except Exception as exc:
                return RunResult(
                    "", f"the container could not start the command: {_short(exc)}", None,
                    backend="docker", isolation="container", duration_s=time.monotonic() - start,
                )  # fmt: skip
            raw = _raw(sock)
            try:
                ended = _pump(raw, payload, out, err, start + timeout)
                timed_out = not ended
                if timed_out:
                    self.kill_marked(token, user or self.user)
                    _pump(raw, b"", out, err, time.monotonic() + 1.0)
                    # a fork bomb's killed processes still count against the container's process limit until
                    # they are reaped: wait for them (briefly) so that the next command can start
                    self._settle(token, user or self.user, time.monotonic() + 1.0)
                elif self._marked_left(token):  # what the command left running in the background goes too
                    self.kill_marked(token, user or self.user)
                    self._settle(token, user or self.user, time.monotonic() + 1.0)
            finally:
                with contextlib.suppress(Exception):
                    sock.close()
                with contextlib.suppress(Exception):
                    raw.close()
            duration = time.monotonic() - start
            code = self._exit_code(exec_id)
        code = _signal_code(code)
        oom = code == -signal.SIGKILL and not timed_out and self.oom_killed()
        return RunResult(
            stdout=out.text(),
            stderr=err.text(),
            exit_code=-signal.SIGKILL if timed_out and code is None else code,
            timed_out=timed_out,
            oom=oom,
            duration_s=duration,
            output_truncated=bool(out.dropped or err.dropped),
            backend="docker",
            isolation="container",
        )

    def _exit_code(self, exec_id: str, wait_s: float = 2.0) -> int | None:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                info = self.engine.api.exec_inspect(exec_id)
            except Exception:
                return None
            if not info.get("Running") or time.monotonic() > deadline:
                return info.get("ExitCode")
            time.sleep(0.01)

    def host_pids(self) -> list[int]:
        """The host's process ids of everything running in the container (a local engine only)."""
        try:
            top = self.engine.api.top(self.id, ps_args="-eo pid")
        except Exception:
            return []
        pids = []
        for row in top.get("Processes") or []:
            with contextlib.suppress(ValueError, IndexError):
                pids.append(int(row[0]))
        return pids

    def _marked_left(self, token: str) -> bool:
        """Whether a process of the command is still running (read from the host; ``True`` when it cannot tell)."""
        if not (self.engine.local and os.path.isdir("/proc/1")):
            return True
        marker = f"{_TOKEN_VAR}={token}".encode()
        for pid in self.host_pids():
            with contextlib.suppress(OSError):
                with open(f"/proc/{pid}/environ", "rb") as handle:
                    if marker in handle.read().split(b"\0"):
                        return True
        return False

    def _settle(self, token: str, user: str, deadline: float) -> None:
        """Until ``deadline``: kill what is left of one command, until none of it runs and nothing in the
        container is a zombie waiting to be reaped (a local engine only; elsewhere nothing to wait on)."""
        if not (self.engine.local and os.path.isdir("/proc/1")):
            return
        while time.monotonic() < deadline:
            if not self._marked_left(token) and not any(_is_zombie(pid) for pid in self.host_pids()):
                return
            self.kill_marked(token, user)
            time.sleep(0.02)

    def kill_marked(self, token: str, user: str | None = None) -> int:
        """Kill every process of one command (they carry its marker in their environment); returns how many.

        From the host when the engine runs here (the container is paused meanwhile, so a fork bomb cannot make
        new processes faster than they die), else from a helper command inside the container.
        """
        marker = f"{_TOKEN_VAR}={token}".encode()
        if self.engine.local and os.path.isdir("/proc/1"):
            with self._paused():
                killed = 0
                for pid in self.host_pids():
                    try:
                        with open(f"/proc/{pid}/environ", "rb") as handle:
                            if marker not in handle.read().split(b"\0"):
                                continue
                        os.kill(pid, signal.SIGKILL)
                        killed += 1
                    except OSError:
                        continue
            if killed or not self.host_pids():
                return killed
        script = (
            'for p in /proc/[0-9]*; do [ "${p#/proc/}" = "$$" ] && continue; '
            'if tr "\\0" "\\n" < "$p/environ" 2>/dev/null | grep -qx "$1"; then kill -9 "${p#/proc/}" 2>/dev/null; fi; done'
        )
        with contextlib.suppress(Exception):
            exec_id = self.engine.api.exec_create(
                self.id, ["/bin/sh", "-c", script, "kill", marker.decode()], user=user or self.user
            )["Id"]
            self.engine.api.exec_start(exec_id)
        return 0

    def kill_commands(self) -> None:
        """Kill everything running in the container but its own first processes (init and its ``sleep``):
        every command, shell and leftover background process; the container stays up."""
        if self.engine.local and os.path.isdir("/proc/1"):
            try:
                init = int(self.engine.api.inspect_container(self.id)["State"]["Pid"])
            except Exception:
                init = 0
            keep = {init, *_child_pids(init)}
            with self._paused():
                for pid in self.host_pids():
                    if pid not in keep:
                        with contextlib.suppress(OSError):
                            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 1.0  # until the killed are reaped and free their process slots
            while time.monotonic() < deadline and any(_is_zombie(pid) for pid in self.host_pids()):
                time.sleep(0.02)
            return
        script = (
            'keep="1 $(cat /proc/1/task/1/children 2>/dev/null)"; for p in /proc/[0-9]*; do n=${p#/proc/}; '
            'case " $keep $$ " in *" $n "*) continue;; esac; kill -9 "$n" 2>/dev/null; done'
        )
        with contextlib.suppress(Exception):
            exec_id = self.engine.api.exec_create(self.id, ["/bin/sh", "-c", script], user=self.user)["Id"]
            self.engine.api.exec_start(exec_id)

    @contextlib.contextmanager
    def _paused(self):
        api = self.engine.api
        paused = False
        try:
            with contextlib.suppress(Exception):
                api.pause(self.id)
                paused = True
            yield
        finally:
            if paused:
                with contextlib.suppress(Exception):
                    api.unpause(self.id)

    def kill_process_group(self, host_pgid: int) -> None:
        """Kill a process group of the container by its host id (local engine), the container paused meanwhile."""
        with self._paused():
            for pid in self.host_pids():
                with contextlib.suppress(OSError):
                    if os.getpgid(pid) == host_pgid:
                        os.kill(pid, signal.SIGKILL)

    # -- memory ------------------------------------------------------------------------------------------
    def _oom_files(self) -> list[str]:
        if self._cgroup_files is None:
            files: list[str] = []
            try:
                pid = self.engine.api.inspect_container(self.id)["State"]["Pid"]
                with open(f"/proc/{pid}/cgroup") as handle:
                    for line in handle:
                        _, controllers, path = line.rstrip("\n").split(":", 2)
                        if "memory" in controllers.split(","):
                            files.append(f"/sys/fs/cgroup/memory{path}/memory.oom_control")
                        elif controllers == "" and os.path.exists(f"/sys/fs/cgroup{path}/memory.events"):
                            files.append(f"/sys/fs/cgroup{path}/memory.events")
            except (OSError, KeyError, ValueError, Exception):
                files = []
            self._cgroup_files = files
        return self._cgroup_files

    def oom_kills(self) -> int | None:
        """How many processes the memory limit killed in this container so far (``None``: cannot tell)."""
        for path in self._oom_files():
            with contextlib.suppress(OSError):
                with open(path) as handle:
                    for line in handle:
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            return int(value)
        return None

    def oom_killed(self) -> bool:
        """Whether the memory limit killed a process since the last call (or the container itself)."""
        count = self.oom_kills()
        if count is None:
            try:
                return bool(self.engine.api.inspect_container(self.id)["State"].get("OOMKilled"))
            except Exception:
                return False
        new = count > self._oom_seen
        self._oom_seen = count
        return new

    # -- files -------------------------------------------------------------------------------------------
    def put_files(self, files: FileMap, dest: str | None = None, mode: int = 0o644) -> None:
        """Write ``files`` (relative path -> text or bytes) under ``dest`` (default: the work folder), owned by
        the container's user; folders are made as needed. Through ``tar`` inside the container, which reaches
        every writable place (the engine's own copy cannot write into a container's tmpfs)."""
        data = _tar(files, mode)
        result = self.exec(
            ["tar", "-x", "-m", "--no-same-owner", "-C", dest or self.workdir, "-f", "-"],
            stdin=data, timeout_s=max(10.0, len(data) / 20e6),
        )  # fmt: skip
        if not result.ok:
            raise OSError(
                f"could not write files into the container: {(result.stderr or result.explain())[:500]}"
            )

    def get_file(self, path: str, max_bytes: int = 64 * 1024 * 1024) -> bytes | None:
        """The content of ``path`` (absolute, or relative to the work folder), ``None`` if it cannot be read."""
        result = self.exec(["cat", "--", path], timeout_s=30, max_output_bytes=max_bytes)
        if result.exit_code != 0:
            return None
        return result.stdout.encode("utf-8", errors="surrogateescape")

    def shell(self, **options: Any) -> ShellSession:
        """A persistent bash in this container (see :class:`ShellSession`)."""
        return ShellSession(self, **options)


def _is_zombie(pid: int) -> bool:
    """Whether host process ``pid`` has exited and waits to be reaped (``False`` when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def _child_pids(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(n) for n in handle.read().split()]
    except (OSError, ValueError):
        return []


def _tar(files: FileMap, mode: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        folders: set[str] = set()
        for relative, content in files.items():
            name = check_relative(relative)
            parent = os.path.dirname(name)
            while parent and parent not in folders:
                folders.add(parent)
                parent = os.path.dirname(parent)
            data = (
                content.encode("utf-8", errors="surrogatepass")
                if isinstance(content, str)
                else bytes(content)
            )
            member = tarfile.TarInfo(name)
            member.size, member.mode, member.mtime = len(data), mode, int(time.time())
            archive.addfile(member, io.BytesIO(data))
        for folder in sorted(folders):
            member = tarfile.TarInfo(folder)
            member.type, member.mode, member.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
            archive.addfile(member)
    return out.getvalue()


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) < 500 else text[:500] + "..."


# -- the persistent shell -----------------------------------------------------------------------------------------
@dataclass
class ShellResult:
    """One command of a :class:`ShellSession`: what it printed (stdout and stderr together, as a terminal shows
    them), its exit code (``None`` when it was killed at the timeout), how long it took, and what happened."""

    output: str
    exit_code: int | None
    duration_s: float
    timed_out: bool = False
    oom: bool = False
    output_truncated: bool = False
    restarted: bool = False
    """The shell had to be replaced (it exited, or could not be interrupted): cwd, variables and jobs are gone."""
    shell_exited: bool = False
    """The command ended the shell itself (``exit``); the next command gets a new one."""

    def to_metadata(self) -> dict[str, Any]:
        """The result without its output, for metadata."""
        data = asdict(self)
        del data["output"]
        data["duration_s"] = round(self.duration_s, 4)
        return data


_SHELL_SETUP = (
    "stty -echo -icanon -onlcr 2>/dev/null; PS1=''; PS2=''; PS0=''; PROMPT_COMMAND=''; set +o history; "
    "unset HISTFILE; builtin printf '\\036READY %s\\036\\n' {token}\n"
)
_STALE_MARKER = re.compile("\n?\x1eDONE [0-9a-f]{24} \\d+\x1e\n")
"""A marker of an earlier, interrupted command that arrived late: never part of the output."""


class ShellSession:
    """One interactive ``bash`` in a container whose state (cwd, variables, functions, background jobs) lives
    across commands, like a terminal's.

    Each command goes to the shell as one line (base64, so that quotes, heredocs and a ``read`` in it cannot
    swallow what follows) and is ``eval``-ed there; a marker with a fresh random token and the exit status ends
    its output. At the timeout the foreground job gets a Ctrl-C through the terminal, then, if it ignores it,
    its process group is killed; a shell that still does not answer (a builtin loop with SIGINT trapped) is
    replaced by a new one and the result says ``restarted``. Output past ``max_output_bytes`` is dropped from
    the middle (the beginning and the last quarter are kept).
    """

    def __init__(
        self,
        container: DockerContainer,
        *,
        max_output_bytes: int = 64 * 1024,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
    ):
        self.container = container
        self.max_output_bytes = max_output_bytes
        self.env = dict(env or {})
        self.user = user
        self._sock: Any = None
        self._raw: socket.socket | None = None
        self._exec_id = ""
        self.host_pid: int | None = None
        self.starts = 0
        self._pending = bytearray()

    # -- life ----------------------------------------------------------------------------------------------
    def _open(self) -> None:
        api = self.container.engine.api
        token = secrets.token_hex(12)
        environment = {
            **self.container.env, **self.env, "TERM": "dumb", "PS1": "", "HISTFILE": "/dev/null",
            _TOKEN_VAR: "shell-" + token,
        }  # fmt: skip
        self._exec_id = api.exec_create(
            self.container.id, ["/bin/bash", "--noprofile", "--norc", "--noediting", "-i"], stdin=True,
            tty=True, environment=environment, user=self.user or self.container.user,
            workdir=self.container.workdir,
        )["Id"]  # fmt: skip
        self._sock = api.exec_start(self._exec_id, socket=True, tty=True)
        self._raw = _raw(self._sock)
        self._raw.setblocking(False)
        self._pending = bytearray()
        self._send(_SHELL_SETUP.format(token=token).encode())
        found, _, _ = self._read_until(
            b"\x1eREADY " + token.encode() + b"\x1e\n", time.monotonic() + 30, None
        )
        if not found:
            self._discard()
            raise DockerUnavailable("the container's bash did not start (is /bin/bash in the image?)")
        with contextlib.suppress(Exception):
            self.host_pid = int(api.exec_inspect(self._exec_id)["Pid"]) or None
        self.starts += 1

    def _discard(self) -> None:
        for thing in (self._sock, self._raw):
            with contextlib.suppress(Exception):
                if thing is not None:
                    thing.close()
        self._sock = self._raw = None
        if self.host_pid:
            with contextlib.suppress(OSError):
                os.kill(self.host_pid, signal.SIGKILL)
        self.host_pid = None

    def close(self) -> None:
        """End the shell (its background jobs go with the container)."""
        self._discard()

    def alive(self) -> bool:
        """Whether the shell is running (a command may have ended it)."""
        if self._raw is None:
            return False
        try:
            return bool(self.container.engine.api.exec_inspect(self._exec_id).get("Running"))
        except Exception:
            return False

    # -- i/o -------------------------------------------------------------------------------------------------
    def _send(self, data: bytes) -> bool:
        raw = self._raw
        if raw is None:
            return False
        view = memoryview(data)
        deadline = time.monotonic() + 10
        while view:
            try:
                view = view[raw.send(view[:65536]) :]
            except (BlockingIOError, InterruptedError):
                if time.monotonic() > deadline:
                    return False
                selectors.DefaultSelector().select(0.01)
                time.sleep(0.001)
            except OSError:
                return False
        return True

    def _read_until(
        self, marker: bytes | re.Pattern, deadline: float, output: _Output | None
    ) -> tuple[bool, bool, re.Match | None]:
        """Read into ``output`` until ``marker`` (bytes or a regex) shows up; returns (found, eof, match). What
        follows the marker stays pending for the next read."""
        raw = self._raw
        keep = 256  # enough of the stream's end to find a marker that a chunk boundary cut
        if raw is None:
            return False, True, None
        selector = selectors.DefaultSelector()
        selector.register(raw, selectors.EVENT_READ)
        try:
            while True:
                buffer = self._pending
                if isinstance(marker, bytes):
                    at = buffer.find(marker)
                    match = None
                    end = at + len(marker)
                else:
                    match = marker.search(buffer)
                    at = match.start() if match else -1
                    end = match.end() if match else -1
                if at >= 0:
                    if output is not None:
                        output.add(bytes(buffer[:at]))
                    self._pending = bytearray(buffer[end:])
                    return True, False, match
                if len(buffer) > keep and output is not None:
                    output.add(bytes(buffer[:-keep]))
                    del buffer[:-keep]
                left = deadline - time.monotonic()
                if left <= 0:
                    return False, False, None
                if not selector.select(left):
                    continue
                try:
                    chunk = raw.recv(262144)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    if output is not None:
                        output.add(bytes(self._pending))
                    self._pending = bytearray()
                    return False, True, None
                self._pending += chunk
        finally:
            selector.close()

    # -- commands ----------------------------------------------------------------------------------------
    def run(self, command: str, timeout_s: float = 30.0) -> ShellResult:
        """Run ``command`` (any bash text, several lines too) in the shell; returns within ``timeout_s`` plus
        about two seconds."""
        import base64

        restarted = False
        if self._raw is None:
            restarted = self.starts > 0
            self._open()
        token = secrets.token_hex(12)
        encoded = base64.b64encode(command.encode("utf-8", errors="surrogatepass")).decode()
        line = (
            f'eval "$(builtin printf %s {encoded} | command base64 -d)"; '
            f"builtin printf '\\n\\036DONE {token} %s\\036\\n' \"$?\"\n"
        )
        done = re.compile(rb"\n?\x1eDONE " + token.encode() + rb" (\d+)\x1e\n")
        output = _Output(self.max_output_bytes, self.max_output_bytes // 4)
        engine = self.container.engine
        with engine.execs:
            start = time.monotonic()
            self._send(line.encode())
            found, eof, match = self._read_until(done, start + timeout_s, output)
            timed_out = not found and not eof
            if timed_out:
                found, eof, match = self._interrupt(token, output)
                if not found and not eof:
                    self._discard()
                    restarted = True
            duration = time.monotonic() - start
        exit_code = int(match.group(1)) if match else None
        shell_exited = eof and not timed_out
        if eof:
            exit_code = self._final_code() if shell_exited else None
            self._discard()
        if timed_out:
            exit_code = None
        oom = exit_code == 137 and self.container.oom_killed()
        return ShellResult(
            output=_STALE_MARKER.sub("", output.text()),
            exit_code=exit_code,
            duration_s=duration,
            timed_out=timed_out,
            oom=oom,
            output_truncated=output.dropped > 0,
            restarted=restarted,
            shell_exited=shell_exited,
        )

    def _interrupt(self, token: str, output: _Output) -> tuple[bool, bool, re.Match | None]:
        """Stop the foreground job: Ctrl-C, then its process group killed; found once the shell answers again
        (with the command's own marker, or, as bash drops the rest of a line on Ctrl-C, a second one asked for)."""
        ask_token = secrets.token_hex(12)
        either = re.compile(
            rb"\n?\x1eDONE (?:" + token.encode() + b"|" + ask_token.encode() + rb") (\d+)\x1e\n"
        )
        ask = f"builtin printf '\\n\\036DONE {ask_token} 130\\036\\n'\n".encode()
        self._send(b"\x03")
        found, eof, match = self._read_until(either, time.monotonic() + 0.3, output)
        if found or eof:
            return found, eof, match
        self._send(ask)
        found, eof, match = self._read_until(either, time.monotonic() + 0.5, output)
        if found or eof:
            return found, eof, match
        group = self._foreground_group()
        if group is not None:
            self.container.kill_process_group(group)
            found, eof, match = self._read_until(either, time.monotonic() + 0.5, output)
            if not (found or eof):  # the job read our request from the terminal before it died: ask again
                self._send(ask)
                found, eof, match = self._read_until(either, time.monotonic() + 0.5, output)
        return found, eof, match

    def _foreground_group(self) -> int | None:
        """The host id of the terminal's foreground process group, if it is not the shell's own."""
        if not self.host_pid:
            return None
        try:
            with open(f"/proc/{self.host_pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            pgrp, tpgid = int(fields[2]), int(fields[5])
        except (OSError, IndexError, ValueError):
            return None
        return tpgid if tpgid > 0 and tpgid != pgrp else None

    def _final_code(self) -> int | None:
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                info = self.container.engine.api.exec_inspect(self._exec_id)
            except Exception:
                return None
            if not info.get("Running"):
                return info.get("ExitCode")
            time.sleep(0.02)
        return None

    def __enter__(self) -> ShellSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- a pool of containers started ahead of time -----------------------------------------------------------------
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


# -- the sandbox interface ------------------------------------------------------------------------------------------
class DockerSandbox(Sandbox):
    """The :class:`~skyrl_gym.runtime.Sandbox` interface on Docker: each :meth:`run` gets a fresh container
    (from the pool when ``pool`` > 0), removed at its end, so nothing outlives a run.

    For an episode that keeps state between commands, take a long-lived container with :meth:`container`.

    Args:
        image, cpus, disk_mb, network, user: see :class:`DockerContainer`.
        limits: the default limits of each run.
        python: the interpreter inside the image (default ``python3``).
        pool: containers kept started ahead of time.
    """

    name = "docker"
    isolation = "container"

    def __init__(
        self,
        limits: Limits | None = None,
        python: str | None = None,
        warm: int = 0,
        *,
        image: str = DEFAULT_IMAGE,
        cpus: float | None = 1.0,
        disk_mb: int = 512,
        network: bool = False,
        user: str = DEFAULT_USER,
        pool: int = 0,
    ):
        if warm:
            raise ValueError("the docker sandbox keeps started containers with pool=N, not warm interpreters")
        super().__init__(limits, python, 0)
        self.image = image
        self.options = {"image": image, "cpus": cpus, "disk_mb": disk_mb, "network": network, "user": user}
        self.pool = ContainerPool(pool, limits=self.limits, **self.options) if pool else None

    def default_python(self) -> str:
        return "python3"

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info.update(image=self.image, pool=self.pool.size if self.pool else 0)
        info["enforced"] = {
            "memory": "cgroup (container)",
            "processes": "cgroup pids (container)",
            "cpu": f"{self.options['cpus']} cores" if self.options["cpus"] else "none",
            "network": "bridge" if self.options["network"] else "none (loopback only)",
            "filesystem": f"read-only image, memory-backed writable places of {self.options['disk_mb']} MB",
            "user": self.options["user"],
            "capabilities": "all dropped, no-new-privileges",
        }
        return info

    def container(self, limits: Limits | None = None, **overrides: Any) -> DockerContainer:
        """A started container for an episode (the caller removes it); from the pool when it fits."""
        if self.pool is not None and not overrides and (limits is None or limits == self.limits):
            return self.pool.acquire()
        return DockerContainer(limits=limits or self.limits, **{**self.options, **overrides})

    def close(self) -> None:
        super().close()
        if self.pool is not None:
            self.pool.close()

    def run(
        self,
        command: Sequence[str],
        *,
        files: FileMap | None = None,
        stdin: str | bytes | None = None,
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
    ) -> RunResult:
        limits = limits or self.limits
        start = time.monotonic()
        try:
            box = self.container(limits)
        except DockerUnavailable as exc:
            return RunResult("", str(exc), None, backend=self.name, isolation=self.isolation,
                             duration_s=time.monotonic() - start)  # fmt: skip
        try:
            if files:
                box.put_files(files)
            return box.exec(
                list(command), timeout_s=limits.timeout_s, stdin=stdin, env=env,
                max_output_bytes=limits.max_output_bytes,
            )  # fmt: skip
        finally:
            box.remove()

    def spawn(
        self,
        command: Sequence[str],
        *,
        files: FileMap | None = None,
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
        stderr_to_stdout: bool = False,
    ) -> SandboxProcess:
        """A long-running command in a fresh container, with pipes (through the ``docker`` command-line
        client, whose ``exec -i`` gives a process with plain pipes, as persistent sessions need); killing the
        process removes the container."""
        import shutil

        cli = shutil.which("docker")
        if cli is None:
            raise OSError("persistent sessions in the docker sandbox need the docker command-line client")
        box = self.container(limits)
        try:
            if files:
                box.put_files(files)
            args = [cli, "exec", "-i", "-w", box.workdir, "-u", box.user]
            for key, value in (env or {}).items():
                args += ["-e", f"{key}={value}"]
            popen = subprocess.Popen(
                [*args, box.id, *command],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if stderr_to_stdout else subprocess.PIPE,
                start_new_session=True,
            )
        except BaseException:
            box.remove()
            raise

        def release() -> None:
            with contextlib.suppress(OSError):
                popen.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=5)
            box.remove()

        process = SandboxProcess(popen, self.name, release)
        process.container = box  # type: ignore[attr-defined]
        return process

    def _killed_for_memory(self, process: SandboxProcess) -> bool:
        box = getattr(process, "container", None)
        return bool(box is not None and box.oom_killed())
