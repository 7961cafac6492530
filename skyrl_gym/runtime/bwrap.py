"""The ``bwrap`` backend: bubblewrap namespaces, an unprivileged user and cgroup limits.

Each run starts ``bwrap`` with new network (no interfaces but loopback: no network at all), PID, mount, IPC,
UTS, cgroup and user namespaces (no nested user namespaces allowed), and:

- a read-only view of the system: ``/usr`` (and the ``/bin``, ``/lib*`` links into it), a handful of files from
  ``/etc`` (no ``/etc/shadow``; ``/etc/passwd`` is a two-line file of our own), plus any ``ro_paths`` asked for;
  the host's ``/home``, ``/root``, ``/work``, ``/tmp``, ``/var`` and so on do not exist inside;
- a private work folder ``/work`` (the current directory, where the run's files are copied) and a private
  ``/tmp``, both memory-backed (``tmpfs``) of ``max_file_mb`` each, so nothing is written to the host's disk and
  nothing can be left behind; a read-only ``/dev`` with the usual devices and a ``/dev/shm`` of at most
  :data:`SHM_MB` (so the memory files can hold on the host is bounded even without a memory cgroup);
- a cleared environment (``PATH``, ``HOME=/work``, ``LANG`` and what the caller passes), so the host's
  variables (tokens, keys) never reach the code;
- when started as root: the run goes into its own control group (memory incl. swap, pids, CPU quota) and
  ``bwrap`` itself is started as the unprivileged user ``nobody`` (uid 65534), so even a sandbox escape lands
  without privileges; otherwise the caller's own uid and ``setrlimit`` limits. The process limit is then set
  inside the sandbox's own user namespace, where the kernel counts processes per namespace: one run's fork
  bomb uses up its own budget, never the caller's or another run's.

``--die-with-parent`` and the PID namespace make the whole process tree die with the run (or with the
caller, even when it is SIGKILLed); cgroups left by a killed caller are swept when the next sandbox starts.

The sandbox's first process reports on a pipe of its own that it started; a run whose sandbox never got that far
(no namespace could be created, a mount failed) is a start failure of the machinery (``exit_code`` ``None``),
never the program's output. The command never holds that pipe (nor any descriptor above 2 but those it opens):
the first process closes its copies before starting it, so the code cannot fake or swallow the signal.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from skyrl_gym.runtime import _keeper, cgroups
from skyrl_gym.runtime.base import FileMap, Limits, Sandbox, SandboxProcess, check_relative, wait_exit

__all__ = ["BwrapSandbox", "bwrap_available", "SANDBOX_UID"]

SANDBOX_UID = 65534
WORKDIR = "/work"
ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/python3",
    "/etc/python3.11",
    "/etc/python3.12",
    "/etc/ssl/certs",
)
SHM_MB = 16
"""Largest size of the sandbox's ``/dev/shm`` (POSIX semaphores and shared memory), in MB (or ``max_file_mb``
when that is smaller)."""


def init_command(start_fd: int, max_processes: int | None) -> list[str]:
    """The sandbox's first process: a shell that says it started (one byte on ``start_fd``), then runs the
    command in the foreground as process 2, so that the command has the usual signal semantics (the first
    process of a PID namespace ignores signals it has no handler for), and exits with its status (128 + N for a
    command killed by signal N). With ``max_processes``, ``prlimit`` sets ``RLIMIT_NPROC`` first, inside the
    sandbox's user namespace.

    The shell closes the start pipe right after writing its byte, and every other descriptor above 2 it
    inherited, before the command starts: the command gets no copy, and the first process keeps none that the
    command could reopen through ``/proc/1/fd`` (Linux reopens a pipe there in either direction), so the code
    can neither swallow the byte nor fake it. bash, not dash: dash only redirects single-digit descriptors.
    The first process keeps the command's stderr as its descriptor 3 (its own stderr goes to ``/dev/null``):
    a pipe the command holds anyway.
    """
    script = (
        f"printf . >&{start_fd}; exec {start_fd}>&-; "
        'for fd in /proc/self/fd/*; do fd=${fd##*/}; [ "$fd" -gt 2 ] && exec {fd}>&-; done; '
        # bash reports a command killed by a signal on its stderr ("line 1: 2 Killed"): not the command's output
        'exec 3>&2 2>/dev/null; "$@" 2>&3 3>&-; exit $?'
    )
    shell = [_bash(), "-c", script, "sandbox-init"]
    if max_processes is None:
        return shell
    return ["/usr/bin/prlimit", f"--nproc={max_processes}:{max_processes}", "--", *shell]


@functools.lru_cache(maxsize=1)
def _bash() -> str:
    """The path of bash inside the sandbox (which sees the host's ``/usr`` and ``/bin``)."""
    for candidate in ("/bin/bash", "/usr/bin/bash"):
        if os.path.exists(candidate):
            return candidate
    raise OSError("sandboxes need bash (Debian/Ubuntu: apt-get install bash)")


PASSWD = f"root:x:0:0:root:/root:/bin/sh\nsandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:{WORKDIR}:/bin/sh\n"
GROUP = f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\n"


def _system_binds() -> list[str]:
    """``/usr`` read-only, and ``/bin``, ``/lib``... as the host has them (links into /usr or folders)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), f"/{name}"]
        elif path.is_dir():
            args += ["--ro-bind", str(path), f"/{name}"]
    for path in ETC_FILES:
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


@functools.lru_cache(maxsize=1)
def bwrap_available() -> tuple[bool, str]:
    """Whether bubblewrap runs here, and why not when it does not (tried once per process)."""
    binary = shutil.which("bwrap")
    if binary is None:
        return False, "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    try:
        sandbox = BwrapSandbox(Limits(timeout_s=10, memory_mb=256))
        result = sandbox.run(["/bin/sh", "-c", "echo ok"])
    except OSError as exc:
        return False, f"bubblewrap could not start: {exc}"
    if result.stdout.strip() != "ok":
        return False, f"bubblewrap could not start a sandbox: {result.stderr.strip() or result.explain()}"
    return True, ""


def _memfd(name: str, content: str | bytes) -> int:
    data = content.encode("utf-8", errors="surrogatepass") if isinstance(content, str) else content
    fd = os.memfd_create(name, 0)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class BwrapSandbox(Sandbox):
    """Runs commands inside bubblewrap namespaces as an unprivileged user (strong isolation).

    Args:
        limits: default limits of each run.
        python: the interpreter inside the sandbox (default: the system's ``/usr/bin/python3``, which the
            sandbox can see; the host's virtual environment is not visible unless listed in ``ro_paths``).
        ro_paths: host paths to show read-only inside the sandbox at the same place (when started as root,
            bwrap runs as ``nobody``, so the paths must be readable by every user).
        cpus: CPU quota of each run, in cores (cgroups only); ``None`` for no quota.
        warm: interpreters to keep started ahead of time for ``run_python`` (see :class:`Sandbox`).
    """

    name = "bwrap"
    isolation = "namespaces"

    def __init__(
        self,
        limits: Limits | None = None,
        python: str | None = None,
        ro_paths: Sequence[str] = (),
        cpus: float | None = 1.0,
        warm: int = 0,
    ):
        super().__init__(limits, python, warm)
        self.ro_paths = [os.path.abspath(p) for p in ro_paths]
        self.cpus = cpus
        self.as_root = os.geteuid() == 0
        self.use_cgroups = self.as_root and cgroups.available()
        if self.use_cgroups:
            cgroups.sweep_stale()
        self.prewarm()

    def default_python(self) -> str:
        for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
            if os.path.exists(candidate):
                return candidate
        return "python3"

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["enforced"] = {
            "memory": "cgroup" if self.use_cgroups else "rlimit-as",
            "processes": "cgroup" if self.use_cgroups else "rlimit-nproc",
            "cpu": "cgroup quota + rlimit-cpu" if self.use_cgroups and self.cpus else "rlimit-cpu",
            "network": "none (own network namespace)",
            "filesystem": "read-only system, private /work and /tmp",
            "user": "nobody" if self.as_root else "caller",
        }
        return info

    def _arguments(
        self, limits: Limits, file_fds: list[tuple[int, str]], passwd_fds: tuple[int, int]
    ) -> list[str]:
        size = str(limits.max_file_mb * 1024 * 1024)
        args = ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent"]
        # --disable-userns: the code cannot make nested user namespaces (and be "root" in them), which keeps
        # the kernel's namespace code out of its reach
        # --as-pid-1 with a shell as the namespace's first process (see init_command): bwrap's own init would outlive
        # bwrap and wait, a zombie, for the host's init to collect it (counting against the process limit
        # of a reused cgroup until then)
        args += ["--new-session", "--hostname", "sandbox", "--as-pid-1"]
        args += _system_binds()
        args += ["--ro-bind-data", str(passwd_fds[0]), "/etc/passwd"]
        args += ["--ro-bind-data", str(passwd_fds[1]), "/etc/group"]
        args += ["--proc", "/proc", "--dev", "/dev"]
        # bwrap's /dev is a writable tmpfs without a size: without a memory cgroup, files there would hold
        # host memory beyond every limit; /dev keeps its devices but becomes read-only, /dev/shm a small tmpfs
        shm = str(min(limits.max_file_mb, SHM_MB) * 1024 * 1024)
        args += ["--size", shm, "--perms", "1777", "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
        args += ["--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs", WORKDIR]
        for path in self.ro_paths:  # after /tmp's tmpfs, which would hide a path under /tmp
            args += ["--ro-bind", path, path]
        folders: set[str] = set()
        for _, relative in file_fds:
            parent = os.path.dirname(relative)
            while parent:
                folders.add(parent)
                parent = os.path.dirname(parent)
        for folder in sorted(folders, key=len):
            args += ["--dir", f"{WORKDIR}/{folder}"]
        for fd, relative in file_fds:
            args += ["--file", str(fd), f"{WORKDIR}/{relative}"]
        # the root is bwrap's own tmpfs: make it read-only once everything is mounted on it
        args += ["--remount-ro", "/", "--chdir", WORKDIR, "--clearenv"]
        return args

    def spawn(
        self,
        command: Sequence[str],
        *,
        files: FileMap | None = None,
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
        stderr_to_stdout: bool = False,
    ) -> SandboxProcess:
        limits = limits or self.limits
        file_fds: list[tuple[int, str]] = []
        fds: list[int] = []
        start_fds: list[int] = []  # the read end of the start pipe, kept by the returned process
        group: cgroups.Cgroup | None = None
        try:
            for relative, content in (files or {}).items():
                normal = check_relative(relative)
                fds.append(_memfd("file", content))
                file_fds.append((fds[-1], normal))
            passwd_fds = (_memfd("passwd", PASSWD), _memfd("group", GROUP))
            fds += passwd_fds
            environment = {
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "HOME": WORKDIR,
                "TMPDIR": "/tmp",
                "LANG": "C.UTF-8",
                "PYTHONDONTWRITEBYTECODE": "1",
                **(env or {}),
            }
            args = self._arguments(limits, file_fds, passwd_fds)
            for key, value in environment.items():
                args += ["--setenv", key, value]
            start_read, start_write = os.pipe()
            os.set_blocking(start_read, False)
            fds.append(start_write)
            start_fds.append(start_read)
            nproc = None if self.use_cgroups else limits.max_processes
            args += ["--", *init_command(start_write, nproc), *command]
            if self.use_cgroups:
                group = cgroups.acquire(limits.memory_mb * 1024 * 1024, limits.max_processes, self.cpus)
            # bwrap waits on this pipe until the run is confined (cgroup, rlimits); starting it without a
            # preexec_fn lets Python use vfork, which stays fast when the caller is a large trainer process
            block_read, block_write = os.pipe()
            fds.append(block_read)
            args[1:1] = ["--block-fd", str(block_read)]
            prefix = _rlimit_prefix(limits, cgroup=group is not None)
            prefix += _drop_privileges(self.as_root)
            try:
                popen = _keeper.call(
                    lambda: subprocess.Popen(
                        prefix + args,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT if stderr_to_stdout else subprocess.PIPE,
                        pass_fds=fds,
                        env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
                        cwd="/",
                        start_new_session=True,
                    )
                )
                try:
                    if group is not None:
                        _confine(popen.pid, group)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.killpg(popen.pid, signal.SIGKILL)
                    popen.wait()
                    raise
                os.write(block_write, b"x")
            finally:
                os.close(block_write)
        except BaseException:
            if group is not None:
                cgroups.release(group)
            for fd in start_fds:
                os.close(fd)
            raise
        finally:
            for fd in fds:
                os.close(fd)

        def release() -> None:
            # Kill the sandbox's first process (its PID namespace dies with it) and let bwrap reap it and
            # exit; killing bwrap first would orphan that process as a zombie of the host's init.
            if popen.poll() is None:
                for child in _children(popen.pid):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(child, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    popen.wait(timeout=1)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(popen.pid, signal.SIGKILL)
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                popen.wait(timeout=5)
            if group is not None:
                cgroups.release(group)

        process = SandboxProcess(popen, self.name, release, start_fd=start_fds[0])
        process.cgroup = group  # type: ignore[attr-defined]
        return process

    def _exit_code(self, process: SandboxProcess) -> int | None:
        code = wait_exit(process.popen)
        # bwrap reports a command killed by signal N as 128 + N, as a shell does
        if code is not None and code > 128 and code - 128 < 65:
            return -(code - 128)
        return code

    def _killed_for_memory(self, process: SandboxProcess) -> bool:
        group = getattr(process, "cgroup", None)
        return bool(group is not None and group.oom_killed())


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(n) for n in handle.read().split()]
    except (OSError, ValueError):
        return []


@functools.lru_cache(maxsize=2)
def _drop_privileges(as_root: bool) -> list[str]:
    """The command prefix that makes bwrap die with its parent and, for root, run as the sandbox user.

    Two setpriv steps: a uid change clears the parent-death signal, so it is set after the change, by a
    second setpriv that already runs as the sandbox user (exec keeps the signal, and the parent).
    """
    if shutil.which("setpriv") is None:
        raise OSError("sandboxes need setpriv (Debian/Ubuntu: apt-get install util-linux)")
    die_with_parent = ["setpriv", "--pdeathsig", "KILL", "--"]
    if not as_root:
        return die_with_parent
    drop = ["setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups", "--"]
    return drop + die_with_parent


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants, parents first."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop(0)
        found.append(current)
        queue.extend(_children(current))
    return found


def _rlimit_prefix(limits: Limits, cgroup: bool) -> list[str]:
    """util-linux's ``prlimit`` command setting the run's rlimits before the rest of the chain starts.

    The limits are set by the process on itself while it still runs as the caller, which needs no privilege
    (changing another user's limits needs CAP_SYS_RESOURCE, which containers often lack).
    """
    if shutil.which("prlimit") is None:
        raise OSError("sandbox limits need prlimit (Debian/Ubuntu: apt-get install util-linux)")
    cpu = limits.cpu_seconds
    file_size = limits.max_file_mb * 1024 * 1024
    args = ["prlimit", f"--cpu={cpu}:{cpu + 1}", f"--fsize={file_size}:{file_size}", "--core=0:0"]
    if not cgroup:  # without a cgroup, a per-process limit stands in for the group's memory limit
        memory = limits.memory_mb * 1024 * 1024
        args.append(f"--as={memory}:{memory}")
        # and no RLIMIT_NPROC here: set on bwrap, it would count every process of the caller's uid (all runs
        # together) and bound the user namespace bwrap creates; init_command sets it inside that namespace
    return [*args, "--"]


def _confine(pid: int, group: cgroups.Cgroup) -> None:
    """Put the (blocked) bwrap process tree in its cgroup; its later children are born in it.

    The parent goes first: a child cloned after that inherits the group, one cloned before is found by the walk.
    """
    with contextlib.suppress(ProcessLookupError):  # bwrap may already have exited (a bad argument)
        group.attach(pid)
        for member in _tree(pid):
            group.attach(member)
