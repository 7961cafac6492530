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

import math
import os
import signal
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import IO, Any

__all__ = ["Limits", "RunResult", "Sandbox", "SandboxProcess", "FileMap", "OutputCollector"]

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


class OutputCollector:
    """Reads a pipe to its end on a daemon thread, keeping the first ``limit`` bytes and dropping the rest.

    Reading on past the limit (rather than closing the pipe) lets a chatty command finish normally instead of
    dying of SIGPIPE, while its memory cost stays bounded.
    """

    def __init__(self, stream: IO[bytes], limit: int):
        self._stream = stream
        self._limit = limit
        self._chunks: list[bytes] = []
        self._kept = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._pump, name="sandbox-output", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        read = getattr(self._stream, "read1", self._stream.read)
        try:
            while True:
                chunk = read(65536)
                if not chunk:
                    break
                room = self._limit - self._kept
                if room > 0:
                    self._chunks.append(chunk[:room])
                    self._kept += min(room, len(chunk))
                self.dropped += max(0, len(chunk) - max(room, 0))
        except (OSError, ValueError):
            pass  # the pipe was closed under us: the run is being torn down

    def result(self, wait_s: float = 1.0) -> str:
        """The kept output as text (undecodable bytes replaced), after waiting up to ``wait_s`` for the end."""
        self._thread.join(wait_s)
        return b"".join(self._chunks).decode("utf-8", errors="replace")


@dataclass
class SandboxProcess:
    """A long-running process inside a sandbox (for persistent sessions), with pipes to talk to it.

    ``stdin`` / ``stdout`` are the raw pipes of the process; ``kill()`` ends it and everything it started and
    releases the sandbox's resources (idempotent).
    """

    popen: subprocess.Popen
    backend: str
    _release: Any = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

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
        for stream in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass


class Sandbox(ABC):
    """A place to run untrusted code. One instance can run many commands, also concurrently."""

    name: str = ""
    """The backend's name: ``"bwrap"``, ``"process"``..."""
    isolation: str = ""
    """How strongly the backend isolates: ``"namespaces"`` (bwrap), ``"rlimits"`` (process)..."""

    def __init__(self, limits: Limits | None = None, python: str | None = None):
        self.limits = limits or Limits()
        self.python = python or self.default_python()

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

    def close(self) -> None:  # noqa: B027 - most backends hold nothing between runs
        """Release what the sandbox holds (nothing for most backends)."""

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
        try:
            out = OutputCollector(process.stdout, limits.max_output_bytes)
            err = OutputCollector(process.popen.stderr, limits.max_output_bytes)  # type: ignore[arg-type]
            _feed_stdin(process, stdin)
            timed_out = False
            try:
                process.popen.wait(timeout=limits.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            duration = time.monotonic() - start
            oom = self._killed_for_memory(process)
            process.stop()
            stdout, stderr = out.result(), err.result()
        finally:
            process.kill()
        exit_code = self._exit_code(process)
        return RunResult(
            stdout=stdout,
            stderr=stderr,
            exit_code=exit_code,
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
        """Run ``code`` as the script ``main.py`` in the work folder with the sandbox's interpreter."""
        all_files = dict(files or {})
        all_files["main.py"] = code
        return self.run([self.python, "-u", "main.py", *args], files=all_files, stdin=stdin, limits=limits)

    def _exit_code(self, process: SandboxProcess) -> int | None:
        """The command's exit status (backends that wrap the command translate the wrapper's)."""
        return process.popen.wait()

    def _killed_for_memory(self, process: SandboxProcess) -> bool:
        """Whether the memory limit killed the run (backends with a way to tell override this)."""
        return False


def _feed_stdin(process: SandboxProcess, data: str | bytes | None) -> None:
    """Write ``data`` to the process's stdin from a daemon thread (a full pipe must not block us), then
    close it so the command sees the end of its input."""
    payload = data.encode("utf-8", errors="surrogatepass") if isinstance(data, str) else (data or b"")

    def write() -> None:
        try:
            if payload:
                process.stdin.write(payload)
            process.stdin.close()
        except (OSError, ValueError):
            pass  # the command exited without reading its input

    threading.Thread(target=write, name="sandbox-stdin", daemon=True).start()


def write_files(root: str, files: FileMap | None) -> None:
    """Write ``files`` under ``root``, refusing paths that would land outside it."""
    for relative, content in (files or {}).items():
        path = os.path.normpath(os.path.join(root, relative))
        if os.path.isabs(relative) or not path.startswith(os.path.join(root, "")):
            raise ValueError(
                f"sandbox file path {relative!r} must be relative and stay inside the work folder"
            )
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = content.encode("utf-8", errors="surrogatepass") if isinstance(content, str) else content
        with open(path, "wb") as handle:
            handle.write(data)
