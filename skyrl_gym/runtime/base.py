"""The sandbox interface: run a command or Python code with files, a timeout and resource limits.

A :class:`Sandbox` backend (``bwrap``, ``process``, ...) runs each command in a fresh, private work folder
(the current directory of the command, ``/work`` inside the ``bwrap`` sandbox) and answers with a
:class:`RunResult`. Whatever happens in the command (an infinite loop, a fork bomb, gigabytes of output),
``run`` returns within ``limits.timeout_s`` plus about a second, leaves no process running and no temporary
folder behind.

Backends differ in isolation (``Sandbox.isolation``): ``bwrap`` puts the command in its own network, PID, mount,
IPC and user namespaces with a read-only system and enforces memory and process limits with cgroups;
``process`` only applies resource limits (``setrlimit``) to a child process, for machines without namespaces.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import math
import os
import selectors
import signal
import subprocess
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import IO, Any

from skyrl_gym.runtime import frames
from skyrl_gym.runtime.frames import wait_readable

__all__ = ["Limits", "RunResult", "Sandbox", "SandboxProcess", "FileMap", "communicate"]

FileMap = Mapping[str, "str | bytes"]
"""Files to put in the work folder before the command starts: relative path -> text or bytes."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed run (or of a whole persistent session)."""

    timeout_s: float = 10.0
    """Wall-clock limit; the command and everything it started is killed when it runs out."""
    memory_mb: int = 512
    """Memory limit of the command and its children together (cgroup) or of each process (rlimit)."""
    cpu_s: float | None = None
    """CPU-time limit per process (``RLIMIT_CPU``); ``None``: the timeout plus one second."""
    max_processes: int = 64
    """Most processes and threads alive at once (cgroup ``pids.max``; ``RLIMIT_NPROC`` otherwise)."""
    max_file_mb: int = 64
    """Largest file the command may write (``RLIMIT_FSIZE``); also the size of the sandbox's private /tmp."""
    max_output_bytes: int = 256 * 1024
    """Stdout and stderr kept, each; the rest is read and dropped (``RunResult.output_truncated``)."""

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "max_processes", "max_file_mb", "max_output_bytes"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"Limits.{name} must be a positive number, got {value!r}")
        if self.cpu_s is not None and not self.cpu_s > 0:
            raise ValueError(f"Limits.cpu_s must be positive or None, got {self.cpu_s!r}")

    @property
    def cpu_seconds(self) -> int:
        """The CPU-time limit in whole seconds, as ``RLIMIT_CPU`` takes it."""
        return max(1, math.ceil(self.cpu_s if self.cpu_s is not None else self.timeout_s + 1))

    def replace(self, **changes: Any) -> Limits:
        """A copy with some fields changed."""
        return replace(self, **changes)


@dataclass
class RunResult:
    """What one sandboxed run produced.

    ``exit_code`` is the command's exit status, negative for a signal (``-9`` for SIGKILL), ``None`` if the
    command could not be started. ``timed_out`` and ``oom`` say why a run was killed.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool = False
    oom: bool = False
    duration_s: float = 0.0
    output_truncated: bool = False
    backend: str = ""
    isolation: str = ""

    @property
    def ok(self) -> bool:
        """The command ran to the end and exited with status 0."""
        return self.exit_code == 0 and not self.timed_out and not self.oom

    def explain(self) -> str:
        """One line on how the run ended, for an observation: 'exit code 1', 'timed out after 5.0 s'..."""
        if self.timed_out:
            return f"timed out after {self.duration_s:.1f} s and was killed"
        if self.oom:
            return "ran out of memory and was killed"
        if self.exit_code is None:
            return "could not be started"
        if self.exit_code < 0:
            try:
                name = signal.Signals(-self.exit_code).name
            except ValueError:
                name = f"signal {-self.exit_code}"
            return f"was killed by {name}"
        return f"exit code {self.exit_code}"

    def to_metadata(self) -> dict[str, Any]:
        """The run as JSON-serialisable metadata, without the (possibly long) output."""
        data = asdict(self)
        del data["stdout"], data["stderr"]
        data["duration_s"] = round(self.duration_s, 4)
        return data


class _Capture:
    """The first ``limit`` bytes of a stream; the rest is counted and dropped."""

    def __init__(self, limit: int):
        self.limit = limit
        self.chunks: list[bytes] = []
        self.kept = 0
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.limit - self.kept
        if room > 0:
            self.chunks.append(chunk[:room])
            self.kept += min(room, len(chunk))
        self.dropped += max(0, len(chunk) - max(room, 0))

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", errors="replace")


def communicate(
    process: SandboxProcess, stdin: bytes, limit: int, timeout_s: float
) -> tuple[_Capture, _Capture, bool]:
    """Feed ``stdin``, read stdout and stderr (keeping ``limit`` bytes of each) until the process exits or
    ``timeout_s`` passes; returns the two captures and whether it timed out.

    One selector loop in the calling thread: no helper threads per run. Reading goes on past the limit (rather
    than closing the pipe) so a chatty command finishes normally instead of dying of SIGPIPE. The process's exit
    is watched through a pidfd, so a background child that keeps the pipes open cannot hold the run past its end.
    """
    popen = process.popen
    captures = {popen.stdout.fileno(): _Capture(limit), popen.stderr.fileno(): _Capture(limit)}  # type: ignore[union-attr]
    selector = selectors.DefaultSelector()
    for fd in captures:
        selector.register(fd, selectors.EVENT_READ)
    pending = memoryview(stdin)
    stdin_fd = popen.stdin.fileno()  # type: ignore[union-attr]
    if pending:
        os.set_blocking(stdin_fd, False)
        selector.register(stdin_fd, selectors.EVENT_WRITE)
    else:
        _close_quietly(popen.stdin)
    pidfd = os.pidfd_open(popen.pid)
    selector.register(pidfd, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    timed_out = exited = False
    try:
        while not exited or selector.get_map():  # after the exit, only the pipes are left to read
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = not exited
                break
            for key, _ in selector.select(left):
                fd = key.fd
                if fd == pidfd:
                    exited = True
                    selector.unregister(pidfd)
                    # the command is over: what is still open belongs to leftovers, which stop() kills
                    deadline = min(deadline, time.monotonic() + 0.2)
                elif fd == stdin_fd:
                    try:
                        pending = pending[os.write(fd, pending[:65536]) :]
                    except (BrokenPipeError, OSError):
                        pending = pending[:0]
                    if not pending:
                        selector.unregister(fd)
                        _close_quietly(popen.stdin)
                else:
                    chunk = os.read(fd, 65536)
                    if chunk:
                        captures[fd].add(chunk)
                    else:
                        selector.unregister(fd)
    finally:
        selector.close()
        os.close(pidfd)
    out, err = captures.values()
    return out, err, timed_out


def drain(process: SandboxProcess, out: _Capture, err: _Capture, wait_s: float = 1.0) -> None:
    """Read what is left in the pipes after the process and its leftovers were killed."""
    deadline = time.monotonic() + wait_s
    for stream, capture in ((process.popen.stdout, out), (process.popen.stderr, err)):
        if stream is None or stream.closed:
            continue
        fd = stream.fileno()
        os.set_blocking(fd, False)
        while time.monotonic() < deadline:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                if not wait_readable(fd, deadline - time.monotonic()):
                    break
                continue
            except OSError:
                break
            if not chunk:
                break
            capture.add(chunk)


def _close_quietly(stream: Any) -> None:
    try:
        stream.close()
    except (OSError, ValueError):
        pass


_live: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _kill_live() -> None:
    """At exit, end what is still running (warm interpreters, open sessions) and close its pipes."""
    for process in list(_live):
        process.kill()


@dataclass(eq=False)
class SandboxProcess:
    """A long-running process inside a sandbox (for persistent sessions), with pipes to talk to it.

    ``stdin`` / ``stdout`` are the raw pipes of the process; ``kill()`` ends it and everything it started and
    releases the sandbox's resources (idempotent). ``start_fd``, where the backend has one, is the read end of a
    pipe on which the sandbox says that it started (see :meth:`started`).
    """

    popen: subprocess.Popen
    backend: str
    _release: Any = field(default=None, repr=False)
    start_fd: int | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _started: bool | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        _live.add(self)

    def started(self) -> bool | None:
        """Whether the sandbox got as far as starting the command: ``True`` once it said so, ``False`` when it
        ended without saying so (the machinery failed: no namespace, a failed mount), ``None`` while that is
        not known yet (or the backend cannot tell, which counts as started)."""
        with self._lock:
            if self._started is not None or self.start_fd is None:
                return True if self._started is None else self._started
            try:
                byte = os.read(self.start_fd, 1)
            except BlockingIOError:
                return None
            self._started = bool(byte)
            return self._started

    @property
    def stdin(self) -> IO[bytes]:
        return self.popen.stdin  # type: ignore[return-value]

    @property
    def stdout(self) -> IO[bytes]:
        return self.popen.stdout  # type: ignore[return-value]

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.popen.poll() is None

    def stop(self) -> None:
        """Kill the process and everything it started and release the sandbox; the pipes stay open so that
        what is still buffered in them can be read (idempotent)."""
        with self._lock:
            release, self._release = self._release, None
        if release is not None:
            release()

    def kill(self) -> None:
        """Kill the process and everything it started, release the sandbox and close the pipes."""
        self.stop()
        self.started()  # read the answer before its pipe goes
        with self._lock:
            start_fd, self.start_fd = self.start_fd, None
            if start_fd is not None and self._started is None:
                self._started = True  # never answered while it ran: nothing to blame on the machinery
        if start_fd is not None:
            with contextlib.suppress(OSError):
                os.close(start_fd)
        for stream in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass


# Started in the sandbox ahead of time by a warm pool: waits for one request (files, stdin data, argv), then
# runs main.py as ``python -u main.py`` would, in this fresh process. The standard library only.
LAUNCHER = r"""
import atexit, base64, json, os, runpy, sys, traceback
def _read(n):
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            os._exit(0)
        data += chunk
    return data
_header = _read(16)
_request = json.loads(_read(int(_header[5:15])))
for _path, _data in _request["files"].items():
    if os.path.dirname(_path):
        os.makedirs(os.path.dirname(_path), exist_ok=True)
    with open(_path, "wb") as _handle:
        _handle.write(base64.b64decode(_data))
_fd = os.open(os.devnull, os.O_RDONLY)
if _request["stdin"]:
    _name = os.path.join(os.environ.get("TMPDIR", "/tmp"), ".skyrl_stdin")
    with open(_name, "wb") as _handle:
        _handle.write(base64.b64decode(_request["stdin"]))
    os.close(_fd)
    _fd = os.open(_name, os.O_RDONLY)
    os.unlink(_name)
os.dup2(_fd, 0)
os.close(_fd)
_main = os.path.abspath("main.py")
sys.argv = [_main] + _request["argv"]
sys.path[0] = os.path.dirname(_main)
_code = 0
try:
    runpy.run_path(_main, run_name="__main__")
except SystemExit as _exit:
    _code = _exit.code
    if _code is not None and not isinstance(_code, int):
        print(_code, file=sys.stderr)
        _code = 1
except BaseException as _exc:
    _tb = _exc.__traceback__
    while _tb is not None and _tb.tb_frame.f_code.co_filename != _main:
        _tb = _tb.tb_next
    traceback.print_exception(type(_exc), _exc, _tb)
    _code = 1
# what the interpreter's shutdown does that a program can observe, without the slow teardown of modules
atexit._run_exitfuncs()
for _stream in (sys.stdout, sys.stderr):
    try:
        _stream.flush()
    except BaseException:
        pass
os._exit((_code or 0) & 0xFF)
"""


class Sandbox(ABC):
    """A place to run untrusted code. One instance can run many commands, also concurrently.

    With ``warm=N``, the sandbox keeps N interpreters started ahead of time, each in its own fresh sandbox
    with the default limits, and ``run_python`` hands its program to one of them (used once, then discarded;
    another is started in the background). The program then runs as ``python -u main.py`` would, without
    waiting for the sandbox and the interpreter to start. Runs whose limits the warm interpreters cannot
    honour (another memory, process or file-size limit, a longer CPU-time limit), or when none is ready,
    start cold.
    """

    name: str = ""
    """The backend's name: ``"bwrap"``, ``"process"``..."""
    isolation: str = ""
    """How strongly the backend isolates: ``"namespaces"`` (bwrap), ``"rlimits"`` (process)..."""

    def __init__(self, limits: Limits | None = None, python: str | None = None, warm: int = 0):
        self.limits = limits or Limits()
        self.python = python or self.default_python()
        if not isinstance(warm, int) or isinstance(warm, bool) or warm < 0:
            raise ValueError(f"warm must be a non-negative number of interpreters, got {warm!r}")
        self.warm = warm
        self._warm: list[SandboxProcess] = []
        self._warm_lock = threading.Lock()
        self._refilling = False
        self._closed = False

    # -- what backends implement ------------------------------------------------------------------------
    @abstractmethod
    def default_python(self) -> str:
        """The Python interpreter commands run with inside this sandbox."""

    @abstractmethod
    def spawn(
        self,
        command: Sequence[str],
        *,
        files: FileMap | None = None,
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
        stderr_to_stdout: bool = False,
    ) -> SandboxProcess:
        """Start ``command`` in a fresh work folder with pipes on stdin, stdout and stderr.

        The caller must ``kill()`` the returned process; ``limits.timeout_s`` is not applied here (``run``
        applies it), the other limits are.
        """

    def describe(self) -> dict[str, Any]:
        """What this sandbox enforces, for metadata: backend, isolation and the limits."""
        return {"backend": self.name, "isolation": self.isolation, "limits": asdict(self.limits)}

    def close(self) -> None:
        """Stop the warm interpreters (runs already going are not affected); the sandbox can still run cold."""
        with self._warm_lock:
            self._closed = True
            idle, self._warm = self._warm, []
        for process in idle:
            process.kill()

    def __del__(self) -> None:
        try:
            for process in self._warm:
                process.kill()
        except Exception:
            pass

    # -- the warm pool -------------------------------------------------------------------------------------
    def prewarm(self) -> None:
        """Start filling the warm pool now rather than at the first run (backends call it when constructed)."""
        if self.warm:
            self._schedule_refill()

    def _warm_can_take(self, limits: Limits | None) -> bool:
        """Whether a run with ``limits`` fits an interpreter started with the sandbox's own limits: the same
        memory, processes and file size (set when it started); timeout and output are applied from outside,
        and its CPU-time limit must not be lower than the run's."""
        if limits is None or limits == self.limits:
            return True
        own = self.limits
        fixed_at_start = ("memory_mb", "max_processes", "max_file_mb")
        same = all(getattr(limits, name) == getattr(own, name) for name in fixed_at_start)
        return same and limits.cpu_seconds <= own.cpu_seconds

    def _take_warm(self) -> SandboxProcess | None:
        with self._warm_lock:
            while self._warm:
                process = self._warm.pop()
                if process.alive():
                    break
                process.kill()
            else:
                process = None
        self._schedule_refill()
        return process

    def _schedule_refill(self) -> None:
        with self._warm_lock:
            if self._refilling or self._closed or len(self._warm) >= self.warm:
                return
            self._refilling = True
        # not on the keeper thread itself: its queue must stay free for the Popen calls of cold runs
        threading.Thread(target=self._refill, name="sandbox-warm-refill", daemon=True).start()

    def _refill(self) -> None:
        try:
            while True:
                with self._warm_lock:
                    if self._closed or len(self._warm) >= self.warm:
                        return
                try:
                    process = self.spawn([self.python, "-u", "-c", LAUNCHER], limits=self.limits)
                except (OSError, ValueError):
                    return  # runs start cold until the next refill
                with self._warm_lock:
                    if self._closed:
                        process.kill()
                        return
                    self._warm.append(process)
        finally:
            with self._warm_lock:
                self._refilling = False

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- running -------------------------------------------------------------------------------------------
    def run(
        self,
        command: Sequence[str],
        *,
        files: FileMap | None = None,
        stdin: str | bytes | None = None,
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
    ) -> RunResult:
        """Run ``command`` to its end (or its timeout) and return what it printed and how it ended."""
        limits = limits or self.limits
        start = time.monotonic()
        try:
            process = self.spawn(command, files=files, limits=limits, env=env)
        except OSError as exc:
            return RunResult(
                "", f"the sandbox could not start the command: {exc}", None, backend=self.name,
                isolation=self.isolation, duration_s=time.monotonic() - start,
            )  # fmt: skip
        payload = stdin.encode("utf-8", errors="surrogatepass") if isinstance(stdin, str) else (stdin or b"")
        return self._finish(process, payload, limits, start)

    def _finish(self, process: SandboxProcess, payload: bytes, limits: Limits, start: float) -> RunResult:
        """Feed and read a started process to its end or its timeout, then kill what is left."""
        try:
            out, err, timed_out = communicate(process, payload, limits.max_output_bytes, limits.timeout_s)
            duration = time.monotonic() - start
            oom = self._killed_for_memory(process)
            process.stop()
            drain(process, out, err)
            started = process.started()
        finally:
            process.kill()
        if started is False:
            # what was printed came from the machinery (bwrap, prlimit), not from the command
            why = (err.text() + out.text()).strip()[-2000:] or "it ended before starting the command"
            if timed_out:
                why = f"it did not start within {limits.timeout_s:g} s"
            return RunResult(
                "", f"the sandbox could not start the command: {why}", None, backend=self.name,
                isolation=self.isolation, duration_s=duration,
            )  # fmt: skip
        return RunResult(
            stdout=out.text(),
            stderr=err.text(),
            exit_code=self._exit_code(process),
            timed_out=timed_out,
            oom=oom and not timed_out,
            duration_s=duration,
            output_truncated=bool(out.dropped or err.dropped),
            backend=self.name,
            isolation=self.isolation,
        )

    def run_python(
        self,
        code: str,
        *,
        files: FileMap | None = None,
        stdin: str | bytes | None = None,
        limits: Limits | None = None,
        args: Sequence[str] = (),
    ) -> RunResult:
        """Run ``code`` as the script ``main.py`` in the work folder with the sandbox's interpreter (in a warm
        one when the sandbox keeps some and ``limits`` are the default ones)."""
        all_files = dict(files or {})
        all_files["main.py"] = code
        if self.warm and self._warm_can_take(limits):
            start = time.monotonic()
            process = self._take_warm()
            if process is not None:
                for relative in all_files:
                    check_relative(relative)
                request = {
                    "files": {path: _b64(content) for path, content in all_files.items()},
                    "stdin": _b64(stdin or b""),
                    "argv": [str(a) for a in args],
                }
                data = json.dumps(request).encode()
                return self._finish(process, frames.frame(data), limits or self.limits, start)
        return self.run([self.python, "-u", "main.py", *args], files=all_files, stdin=stdin, limits=limits)

    def _exit_code(self, process: SandboxProcess) -> int | None:
        """The command's exit status (backends that wrap the command translate the wrapper's)."""
        return wait_exit(process.popen)

    def _killed_for_memory(self, process: SandboxProcess) -> bool:
        """Whether the memory limit killed the run (backends with a way to tell override this)."""
        return False


def wait_exit(popen: subprocess.Popen, timeout_s: float = 5.0) -> int:
    """The exit status of a process that was killed; -9 if it has still not gone after ``timeout_s`` (stuck in
    the kernel), so that no caller waits on it for ever."""
    try:
        return popen.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return -signal.SIGKILL


def _b64(content: str | bytes) -> str:
    data = content.encode("utf-8", errors="surrogatepass") if isinstance(content, str) else content
    return base64.b64encode(data).decode()


def check_relative(relative: str) -> str:
    """``relative`` normalised; a ``ValueError`` if it is absolute or leaves the work folder."""
    normal = os.path.normpath(relative) if isinstance(relative, str) else ""
    if not normal or os.path.isabs(relative) or normal == ".." or normal.startswith("../") or normal == ".":
        raise ValueError(f"sandbox file path {relative!r} must be relative and stay inside the work folder")
    return normal


def write_files(root: str, files: FileMap | None) -> None:
    """Write ``files`` under ``root``, refusing paths that would land outside it."""
    for relative, content in (files or {}).items():
        path = os.path.join(root, check_relative(relative))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = content.encode("utf-8", errors="surrogatepass") if isinstance(content, str) else content
        with open(path, "wb") as handle:
            handle.write(data)
