"""One long-lived container for one episode: started with its limits and isolation, commands run in it (killed
with everything they started at their timeout), memory kills told apart, files written in and read out."""

from __future__ import annotations

import contextlib
import copy
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from skyrl_gym.runtime.base import FileMap, Limits, RunResult
from skyrl_gym.runtime.docker.archives import _reroot_stream, _tar
from skyrl_gym.runtime.docker.client import DockerEngine
from skyrl_gym.runtime.docker.client import engine as default_engine
from skyrl_gym.runtime.docker.defaults import (
    DEFAULT_IMAGE,
    DEFAULT_LIFETIME_S,
    DEFAULT_USER,
    OWNER_LABEL,
    RUNTIME_LABEL,
)
from skyrl_gym.runtime.docker.errors import ImageNotFound, _docker_module, _short
from skyrl_gym.runtime.docker.exec_io import _TOKEN_VAR, _Output, _pump, _raw, _signal_code
from skyrl_gym.runtime.docker.images import inspect_image
from skyrl_gym.runtime.docker.procfs import _child_pids, _first_started, _is_zombie, _parent_pid
from skyrl_gym.runtime.docker.shell import ShellSession


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
        self.engine = engine or default_engine()
        self.id = ""
        self.removed = False
        self._oom_seen = 0
        self._cgroup_files: list[str] | None = None
        self._lock = threading.Lock()
        self.started_s = 0.0
        self.workdir = self._start(workdir)

    # -- start and end ----------------------------------------------------------------------------------
    def _image_info(self) -> dict[str, Any]:
        return inspect_image(self.engine.api, self.image)

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
        host_config = self._host_config(network=self.network, caps=(), tmpfs=tmpfs, mounts=mounts)
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

    def _host_config(self, *, network: bool, caps: Sequence[str], tmpfs: dict[str, str], mounts: list) -> Any:
        """The engine's host settings of a container of this one's limits: no capabilities but ``caps``,
        ``no-new-privileges``, an init, a read-only image, memory, CPU, pids and file limits."""
        docker = _docker_module()
        limits = self.limits
        file_size = limits.max_file_mb * 1024 * 1024
        return self.engine.api.create_host_config(
            network_mode="bridge" if network else "none",
            cap_drop=["ALL"],
            cap_add=list(caps) or None,
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

    def restore(self) -> None:
        """Bring the container back to the state it started in, for another episode: every command and
        leftover process is killed, every writable place (work folder, ``/tmp``, ``/var/tmp``, home,
        ``/logs``, ``/tests``, ``/dev/shm``) is emptied, and the image's work folder is copied in again. The
        root file system is read-only, so nothing else can have changed."""
        self.kill_commands()
        # kill_commands() spares init's children (the container's own command), and a process the episode
        # double-forked is one of them once init adopted it: keep only the first, the container's command
        orphans = (
            "main=$(tr ' ' '\\n' < /proc/1/task/1/children | sort -n | head -n 1); "
            'for p in /proc/[0-9]*; do n=${p#/proc/}; case " 1 $main $$ " in *" $n "*) continue;; esac; '
            'kill -9 "$n" 2>/dev/null; done; true'
        )
        self.exec(orphans, timeout_s=30)
        home = self.env.get("HOME", "/home/agent")
        places = " ".join(
            f"'{p}'" for p in (self.workdir, "/tmp", "/var/tmp", home, "/logs", "/tests", "/dev/shm")
        )
        # chmod first: a folder the episode made unreadable must not keep its contents
        script = (
            f'for d in {places}; do [ -d "$d" ] || continue; chmod -R u+rwX "$d" 2>/dev/null; '
            'find "$d" -mindepth 1 -delete 2>/dev/null; done; true'
        )
        self.exec(script, timeout_s=60)
        archive, _, _ = self.engine.workdir_archive(self._image_info()["Id"], self.image, self.workdir)
        if archive:
            self.engine.api.put_archive(self.id, self.workdir, archive)

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

    def _kill_matching(self, key: Callable[[int], int], value: int) -> None:
        """Kill the container's processes whose ``key(host pid)`` is ``value`` (local engine), the container
        paused meanwhile, so that a fork bomb in it cannot replace what is killed."""
        with self._paused():
            for pid in self.host_pids():
                with contextlib.suppress(OSError):
                    if key(pid) == value:
                        os.kill(pid, signal.SIGKILL)

    def kill_process_group(self, host_pgid: int) -> None:
        """Kill a process group of the container by its host id (local engine)."""
        self._kill_matching(os.getpgid, host_pgid)

    def kill_session(self, host_sid: int) -> None:
        """Kill every process of a session of the container by its host id (local engine)."""
        self._kill_matching(os.getsid, host_sid)

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

    # -- verification apart from the agent -------------------------------------------------------------------
    def _kept_pids(self) -> set[int]:
        """Host ids of the container's init and of its own command (the child of init that started first).

        Init's children are found from each of the container's processes' parent as well as from init's
        ``children`` file, which can miss one while the container runs (a fork bomb's processes exiting and
        being adopted meanwhile): missing the container's own command would kill it with the episode's.
        """
        try:
            init = int(self.engine.api.inspect_container(self.id)["State"]["Pid"])
        except Exception:
            return set()
        adopted = {pid for pid in self.host_pids() if _parent_pid(pid) == init}
        first = _first_started(sorted(adopted | set(_child_pids(init))))
        return {init} if first is None else {init, first}

    def stop_all_processes(self, wait_s: float = 5.0) -> tuple[int, list[int]]:
        """Kill every process in the container but init and its own command, those that init adopted included
        (what a double fork, ``setsid``, ``nohup`` or ``disown`` leaves), the container paused meanwhile so that
        none can start another, until the engine's listing of the container's processes shows no other one.

        Returns how many were killed and the host ids of those still listed after ``wait_s`` (none, unless a
        process cannot be killed). Elsewhere than on a local engine, from a command inside the container.
        """
        deadline = time.monotonic() + wait_s
        killed: set[int] = set()
        if not (self.engine.local and os.path.isdir("/proc/1")):
            script = (
                'main=$(tr " " "\\n" < /proc/1/task/1/children | sort -n | head -n 1); n=0; '
                'for p in /proc/[0-9]*; do q=${p#/proc/}; case " 1 $main $$ " in *" $q "*) continue;; esac; '
                'kill -9 "$q" 2>/dev/null && n=$((n+1)); done; echo "$n"'
            )
            count = 0
            for _ in range(3):
                result = self.exec(script, timeout_s=max(1.0, deadline - time.monotonic()))
                with contextlib.suppress(ValueError):
                    count += int(result.stdout.strip() or 0)
            return count, []
        while True:
            keep = self._kept_pids()
            others = [pid for pid in self.host_pids() if pid not in keep]
            if not others or time.monotonic() > deadline:
                return len(killed), others
            with self._paused():
                for pid in self.host_pids():
                    if pid in keep:
                        continue
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                        if not _is_zombie(pid):
                            killed.add(pid)
            time.sleep(0.02)

    def verification_copy(
        self,
        *,
        caps: Sequence[str] = ("CHOWN", "DAC_OVERRIDE", "FOWNER"),
        user: str = "0:0",
        env: Mapping[str, str] | None = None,
        lifetime_s: float = 3600.0,
    ) -> DockerContainer:
        """A new container of the same image and limits, for verifying what this one's commands did: its work
        folder holds a copy of this container's (owners, modes and unreadable files kept, through the
        engine's archives), every other writable place (``/tmp``, ``/var/tmp``, the home, ``/logs``,
        ``/tests``) is new and empty, ``/logs`` and ``/tests`` belong to root. Nothing of this container runs
        in it. Its commands run as ``user`` (root by default) with only the capabilities ``caps`` (by default
        those that reach any file of the copy), no network, ``no-new-privileges`` and a read-only root file
        system. Stop this container's processes first (:meth:`stop_all_processes`) so that the copy is whole.
        Remove it with :meth:`remove`.
        """
        docker = _docker_module()
        api = self.engine.api
        box = copy.copy(self)
        box.id, box.removed, box.user, box.network = "", False, user, False
        box.env = {"HOME": "/root", "LANG": "C.UTF-8", "PYTHONNOUSERSITE": "1", **(env or {})}
        box.lifetime_s = lifetime_s
        box._lock, box._oom_seen, box._cgroup_files = threading.Lock(), 0, None
        stream, _ = api.get_archive(self.id, self.workdir)
        work, uid, gid, mode = _reroot_stream(stream)
        size = f"{self.disk_mb}m"
        work_options = f"size={size},uid={uid},gid={gid},mode={mode:o}"
        writable = f"rw,nosuid,nodev,size={size}"
        agent = [*self.user.split(":"), self.user.split(":")[0]][:2]
        owner = f",uid={agent[0]},gid={agent[1]}" if agent[0].isdigit() else ""
        tmpfs = {
            "/tmp": f"{writable},mode=1777",
            "/var/tmp": f"{writable},mode=1777",
            "/run": "rw,nosuid,nodev,size=16m,mode=755",
            self.env.get("HOME", "/home/agent"): f"{writable}{owner},mode=755",
            "/logs": f"{writable},mode=755",
            "/tests": f"{writable},mode=755",
        }
        tmpfs.pop(self.workdir, None)
        mounts = [
            docker.types.Mount(
                target=self.workdir,
                source=None,
                type="volume",
                driver_config=docker.types.DriverConfig(
                    "local",
                    {"type": "tmpfs", "device": "tmpfs", "o": work_options},
                ),
            )
        ]
        host_config = self._host_config(network=False, caps=caps, tmpfs=tmpfs, mounts=mounts)
        begin = time.monotonic()
        with self.engine.starts.admit():
            try:
                created = api.create_container(
                    self.image,
                    command=["sleep", str(int(lifetime_s))],
                    user=user,
                    working_dir=self.workdir,
                    environment=box.env,
                    labels={RUNTIME_LABEL: "docker", OWNER_LABEL: self.engine.owner},
                    host_config=host_config,
                    network_disabled=True,
                )
            except docker.errors.ImageNotFound:
                raise ImageNotFound(self.image) from None
            box.id = created["Id"]
            self.engine.track(box)
            try:
                api.start(box.id)
                api.put_archive(box.id, self.workdir, work)  # after the start: the volume is mounted then
            except BaseException:
                box.remove()
                raise
            finally:
                work.close()
        box.started_s = time.monotonic() - begin
        return box
