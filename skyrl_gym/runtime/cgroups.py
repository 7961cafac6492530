"""Control groups for sandboxed runs: memory, process-count and CPU limits on a command and all its children.

One :class:`Cgroup` per run at a time, under ``/sys/fs/cgroup/<controller>/skyrl_sandbox/`` (cgroup v1, one
folder per controller) or ``/sys/fs/cgroup/skyrl_sandbox/`` (cgroup v2), named after the owning process
(``<pid>-<start time>-<n>``: with the start time, a new process that got a dead owner's pid, as a restarted
container's trainer does, is not taken for that owner). Runs take a group with :func:`acquire` and give it back with :func:`release`, which kills
whatever is left in it; emptied groups are kept for the next run, because the kernel's first allocations in a
brand-new memory cgroup are slow (per-group kernel caches) and that cost would otherwise land on every run.
Groups are removed at exit; those of an owner that died without cleaning up (a SIGKILLed trainer) are swept by
:func:`sweep_stale` when the next sandbox starts.

Only root (or a user the cgroup tree was delegated to) can do this; :func:`available` says whether it works
here, and sandboxes fall back to ``setrlimit`` limits when it does not.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import math
import os
import signal
import threading
import time
from pathlib import Path

__all__ = ["Cgroup", "acquire", "available", "release", "sweep_stale", "version"]

ROOT = Path("/sys/fs/cgroup")
GROUP = "skyrl_sandbox"
V1_CONTROLLERS = ("memory", "pids", "cpu")
_counter = itertools.count()


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


@functools.lru_cache(maxsize=1)
def version() -> int | None:
    """1 or 2 when this process can create control groups with the memory and pids controllers, else None."""
    if (ROOT / "cgroup.controllers").exists():
        controllers = (ROOT / "cgroup.controllers").read_text().split()
        if {"memory", "pids"} <= set(controllers) and _can_create(ROOT / GROUP):
            _write(ROOT / GROUP / "cgroup.subtree_control", "+memory +pids +cpu")
            return 2
        return None
    if all((ROOT / c).is_dir() for c in ("memory", "pids")) and all(
        _can_create(ROOT / c / GROUP) for c in ("memory", "pids")
    ):
        return 1
    return None


def available() -> bool:
    """Whether sandboxes can put their runs in control groups here."""
    return version() is not None


def _can_create(parent: Path) -> bool:
    try:
        parent.mkdir(exist_ok=True)
        probe = parent / f"probe-{os.getpid()}"
        probe.mkdir(exist_ok=True)
        probe.rmdir()
        return True
    except OSError:
        return False


class Cgroup:
    """A control group with memory, pids and CPU limits; processes join it with :meth:`attach`."""

    def __init__(self, memory_bytes: int, max_pids: int, cpus: float | None = None, owner: int | None = None):
        self.version = version()
        if self.version is None:
            raise OSError("control groups are not available to this process")
        self.owner = owner or os.getpid()
        self.name = f"{owner_tag(self.owner)}-{next(_counter)}"
        if self.version == 1:
            self.dirs = [ROOT / c / GROUP / self.name for c in V1_CONTROLLERS if (ROOT / c).is_dir()]
        else:
            self.dirs = [ROOT / GROUP / self.name]
        for folder in self.dirs:
            folder.mkdir(parents=True)
        self._oom_base = 0
        self.set_limits(memory_bytes, max_pids, cpus)

    def _file(self, controller: str, name: str) -> Path:
        if self.version == 2:
            return self.dirs[0] / name
        return ROOT / controller / GROUP / self.name / name

    def set_limits(self, memory_bytes: int, max_pids: int, cpus: float | None) -> None:
        """Set the limits (and start counting out-of-memory kills from zero)."""
        self._oom_base = self._oom_kills()
        if self.version == 1:
            _write(self._file("memory", "memory.failcnt"), "0")
            _write(self._file("memory", "memory.limit_in_bytes"), str(memory_bytes))
            # without this, the limit only covers RAM and a run could grow into swap
            _write(self._file("memory", "memory.memsw.limit_in_bytes"), str(memory_bytes))
            _write(self._file("memory", "memory.swappiness"), "0")
            _write(self._file("pids", "pids.max"), str(max_pids))
            _write(self._file("cpu", "cpu.cfs_period_us"), "100000")
            _write(self._file("cpu", "cpu.cfs_quota_us"), str(int(cpus * 100000)) if cpus else "-1")
        else:
            _write(self._file("memory", "memory.max"), str(memory_bytes))
            _write(self._file("memory", "memory.swap.max"), "0")
            _write(self._file("pids", "pids.max"), str(max_pids))
            _write(self._file("cpu", "cpu.max"), f"{int(cpus * 100000)} 100000" if cpus else "max 100000")

    def attach(self, pid: int) -> None:
        """Move ``pid`` into the group (its later children follow it)."""
        for folder in self.dirs:
            (folder / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        """The processes in the group now."""
        found: set[int] = set()
        for folder in self.dirs:
            with contextlib.suppress(OSError):
                found.update(int(line) for line in (folder / "cgroup.procs").read_text().split())
        return sorted(found)

    def _oom_kills(self) -> int:
        try:
            name = "memory.oom_control" if self.version == 1 else "memory.events"
            lines = self._file("memory", name).read_text().splitlines()
            return int(dict(line.split() for line in lines if line.strip()).get("oom_kill", 0))
        except (OSError, ValueError):
            return 0

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the group for memory since the limits were set."""
        if self._oom_kills() > self._oom_base:
            return True
        if self.version == 1:  # kernels without the oom_kill counter: the limit was hit
            with contextlib.suppress(OSError, ValueError):
                return int(self._file("memory", "memory.failcnt").read_text()) > 0 and self._oom_base == 0
        return False

    def counted_tasks(self) -> int:
        """``pids.current``: the group's tasks as its process limit counts them, including exited ones whose
        parent has not collected them yet (they leave ``cgroup.procs`` before they leave this count)."""
        try:
            return int(self._file("pids", "pids.current").read_text())
        except (OSError, ValueError):
            return 0

    def empty(self, timeout_s: float = 2.0) -> bool:
        """Kill every process in the group; True once none is left."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = self.pids()
            if not remaining:
                return True
            for pid in remaining:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)

    def destroy(self, timeout_s: float = 2.0) -> bool:
        """Kill every process left in the group and remove it; False if something could not be removed."""
        return _destroy(self.dirs, self.version, timeout_s)


POOL_SIZE = 16
_pool: list[Cgroup] = []
_pool_lock = threading.Lock()


SWEEP_EVERY_S = 60.0
"""How often a long-lived process looks again for what dead owners left (see :func:`sweep_due`)."""
_last_sweep: dict[str, float] = {}


def sweep_due(kind: str) -> bool:
    """True at most once every :data:`SWEEP_EVERY_S` per process and ``kind`` (``"cgroups"``,
    ``"folders"``): time to sweep again, so that what an owner killed after this process's sandboxes were made
    left behind does not wait for the next sandbox to be made."""
    now = time.monotonic()
    with _pool_lock:
        if now - _last_sweep.get(kind, -math.inf) < SWEEP_EVERY_S:
            return False
        _last_sweep[kind] = now
        return True


def acquire(memory_bytes: int, max_pids: int, cpus: float | None) -> Cgroup:
    """An empty group with these limits: a kept one if there is one, else a new one."""
    if sweep_due("cgroups"):
        sweep_stale()
    with _pool_lock:
        group = _pool.pop() if _pool else None
    if group is None or group.owner != os.getpid():  # a forked child must not share its parent's groups
        return Cgroup(memory_bytes, max_pids, cpus)
    group.set_limits(memory_bytes, max_pids, cpus)
    return group


def release(group: Cgroup) -> None:
    """Kill what is left in ``group`` and keep it for the next run (or remove it if the pool is full or it
    cannot be emptied)."""
    # a group still counting uncollected tasks would start the next run with part of its process limit used
    if group.empty() and group.counted_tasks() == 0:
        with _pool_lock:
            if len(_pool) < POOL_SIZE and group.owner == os.getpid():
                _pool.append(group)
                return
    group.destroy()


@atexit.register
def _remove_pool() -> None:
    with _pool_lock:
        groups, _pool[:] = list(_pool), []
    for group in groups:
        group.destroy(timeout_s=0.5)


def _destroy(dirs: list[Path], cg_version: int | None, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    if cg_version == 2:
        _write(dirs[0] / "cgroup.kill", "1")
    while True:
        remaining: set[int] = set()
        for folder in dirs:
            with contextlib.suppress(OSError):
                remaining.update(int(line) for line in (folder / "cgroup.procs").read_text().split())
        for pid in remaining:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        removed = True
        for folder in dirs:
            try:
                folder.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                removed = False
        if removed or time.monotonic() > deadline:
            return removed
        time.sleep(0.005)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (owned by anyone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_time(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (``/proc/<pid>/stat``), ``None`` if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return int(fields[19])  # field 22 of the whole line; the command name before ")" may hold spaces
    except (OSError, IndexError, ValueError):
        return None


@functools.lru_cache(maxsize=8)
def owner_tag(pid: int) -> str:
    """``<pid>-<start time>``: the prefix of the names of what a process leaves on the host (control groups,
    work folders), from which :func:`owner_gone` tells whether that process is still the one running."""
    return f"{pid}-{start_time(pid) or 0}"


def owner_gone(name: str) -> bool:
    """Whether the process that made something named ``<pid>-<start time>-...`` (or ``<pid>-...``, the older
    form) has died: no such pid, or the pid is now another process's. Ours is never gone."""
    parts = name.split("-")
    if not parts[0].isdigit():
        return False
    pid = int(parts[0])
    if pid == os.getpid():
        return len(parts) > 2 and parts[1].isdigit() and f"{parts[0]}-{parts[1]}" != owner_tag(pid)
    if not pid_alive(pid):
        return True
    if len(parts) > 2 and parts[1].isdigit():
        started = start_time(pid)
        return started is not None and started != int(parts[1])
    return False


def sweep_stale() -> int:
    """Remove the groups of owners that died without cleaning up (killing what runs in them); returns how many."""
    cg_version = version()
    if cg_version is None:
        return 0
    parents = [ROOT / GROUP] if cg_version == 2 else [ROOT / c / GROUP for c in V1_CONTROLLERS]
    names: set[str] = set()
    for parent in parents:
        with contextlib.suppress(OSError):
            names.update(p.name for p in parent.iterdir() if p.is_dir() and p.name[0].isdigit())
    swept = 0
    for name in sorted(names):
        if not owner_gone(name):
            continue
        if _destroy([p / name for p in parents if (p / name).exists()], cg_version, 1.0):
            swept += 1
    return swept
