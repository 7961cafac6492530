"""Persistent Python sessions: an interpreter inside a sandbox whose state lives across cells.

    with PythonSession() as session:          # the strongest sandbox available
        session.run_cell("x = 6")
        session.run_cell("x * 7").output        # '42\\n'

A small driver program runs in the sandbox and executes each cell in one namespace, like a notebook kernel:
what the cell prints (also from child processes, since file descriptors 1 and 2 are redirected) and the
``repr`` of a final bare expression come back as ``output``, an exception as ``error`` (its traceback, from
the cell's own frames only). The driver talks to us over its original stdout, in length-prefixed JSON frames.

A cell that runs past its timeout, or kills the interpreter (a segfault, ``os._exit``, the memory limit), ends
that interpreter and everything it started; the next cell starts a fresh one, and the result says that the
state is gone (``restarted``). The session's :class:`~skyrl_gym.runtime.Limits` (memory, processes, file size)
apply to the interpreter as a whole for its life.
"""

from __future__ import annotations

import json
import os
import select
import threading
import time
from dataclasses import dataclass
from typing import Any

from skyrl_gym.runtime.base import FileMap, Limits, Sandbox, SandboxProcess

__all__ = ["CellResult", "PythonSession", "SessionError"]

DRIVER_FILE = ".skyrl_session.py"
MAGIC = b"SKYRL"
HEADER = len(MAGIC) + 11  # magic, 10 digits of length, newline
SESSION_CPU_S = 24 * 3600.0
"""CPU-time limit of a session's interpreter when its limits set none (``Limits.cpu_s`` is per process life)."""

# Runs inside the sandbox with the sandbox's Python (3.8 or newer); the standard library only.
DRIVER = r"""
import ast, json, os, signal, sys, traceback

PROTOCOL = os.dup(1)
INPUT = os.dup(0)
CAPTURE = os.path.join(os.environ.get("TMPDIR", "/tmp"), ".skyrl_cell_output")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the file-size limit a write fails instead of killing us
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(null, 2)
sys.stdin = open(os.devnull)

def send(message):
    data = json.dumps(message).encode()
    data = b"SKYRL%010d\n" % len(data) + data
    while data:
        data = data[os.write(PROTOCOL, data):]

def receive():
    header = _read(16)
    if len(header) < 16 or header[:5] != b"SKYRL":
        sys.exit(0)
    return json.loads(_read(int(header[5:15])))

def _read(n):
    chunks = []
    while n:
        chunk = os.read(INPUT, n)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)

namespace = {"__name__": "__main__", "__builtins__": __builtins__}

def run(code, number):
    name = "<cell %d>" % number
    tree = ast.parse(code, name, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, name, "exec"), namespace)
    if last is not None:
        value = eval(compile(last, name, "eval"), namespace)
        if value is not None:
            namespace["_"] = value
            print(repr(value))

def cell_traceback(exc):
    frames = traceback.extract_tb(exc.__traceback__)
    frames = [f for f in frames if f.filename.startswith("<cell ")]
    text = "Traceback (most recent call last):\n" if frames else ""
    text += "".join(traceback.format_list(frames))
    return text + "".join(traceback.format_exception_only(type(exc), exc))

send({"ready": True, "python": sys.version.split()[0]})
number = 0
while True:
    request = receive()
    number += 1
    fd = os.open(CAPTURE, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False, errors="backslashreplace")
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")
    error = None
    try:
        run(request["code"], number)
    except BaseException as exc:
        error = cell_traceback(exc)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    limit = request.get("max_output", 65536)
    size = os.fstat(1).st_size
    with open(CAPTURE, "rb") as handle:
        output = handle.read(limit)
    os.dup2(null, 1)
    os.dup2(null, 2)
    send({"output": output.decode("utf-8", "replace"), "error": error, "truncated": size > limit})
"""


class SessionError(RuntimeError):
    """The interpreter could not be started or broke the session's protocol."""


@dataclass
class CellResult:
    """What one cell did.

    ``output`` is what the cell printed (stdout and stderr as they were written) and the ``repr`` of a final
    bare expression; ``error`` the traceback of an exception it raised. ``timed_out`` and ``crashed`` say the
    interpreter was killed during the cell; ``restarted`` that the interpreter this cell ran in (or the next one
    will run in) is a new one, so earlier state is gone.
    """

    output: str
    error: str | None = None
    timed_out: bool = False
    crashed: bool = False
    restarted: bool = False
    truncated: bool = False
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        """The cell ran to its end without an exception."""
        return self.error is None and not self.timed_out and not self.crashed

    def render(self) -> str:
        """The result as text for an observation: the output, then what went wrong, if anything."""
        parts = [self.output.rstrip("\n")] if self.output.strip() else []
        if self.truncated:
            parts.append("[output truncated]")
        if self.error:
            parts.append(self.error.rstrip("\n"))
        if self.timed_out:
            parts.append(
                f"TimeoutError: the cell did not finish in {self.duration_s:.0f} s and was stopped; "
                "the interpreter was restarted, so earlier variables are gone."
            )
        elif self.crashed:
            parts.append("The interpreter crashed; it was restarted, so earlier variables are gone.")
        elif self.restarted:
            parts.append("(A new interpreter was started for this cell: earlier variables are gone.)")
        return "\n".join(parts)


class PythonSession:
    """A persistent Python interpreter in a sandbox (started on the first cell).

    Args:
        sandbox: where to run it; ``None``: :func:`~skyrl_gym.runtime.make_sandbox` ``("auto")``.
        limits: limits of the interpreter over its life (memory, processes, file size, output per cell);
            ``limits.timeout_s`` is not used: cells have ``cell_timeout_s``; ``limits.cpu_s`` caps the CPU
            time of the whole life (default :data:`SESSION_CPU_S`).
        cell_timeout_s: the default wall-clock limit of one cell.
        files: files to put in the work folder each time an interpreter starts.
    """

    def __init__(
        self,
        sandbox: Sandbox | None = None,
        *,
        limits: Limits | None = None,
        cell_timeout_s: float = 10.0,
        files: FileMap | None = None,
        startup_timeout_s: float = 30.0,
    ):
        if sandbox is None:
            from skyrl_gym.runtime import make_sandbox

            sandbox = make_sandbox("auto")
        self.sandbox = sandbox
        limits = limits or sandbox.limits
        if limits.cpu_s is None:
            # RLIMIT_CPU counts the interpreter's whole life, not one cell: cells have their own timeout
            limits = limits.replace(cpu_s=SESSION_CPU_S)
        self.limits = limits
        self.cell_timeout_s = float(cell_timeout_s)
        self.startup_timeout_s = startup_timeout_s
        self.files = dict(files or {})
        self.python_version = ""
        self.restarts = 0
        self.cells = 0
        self._process: SandboxProcess | None = None
        self._lost_state = False
        self._closed = False
        self._lock = threading.Lock()

    @property
    def backend(self) -> str:
        """The sandbox backend the interpreter runs in."""
        return self.sandbox.name

    # -- the interpreter ---------------------------------------------------------------------------------
    def _start(self) -> None:
        files = {**self.files, DRIVER_FILE: DRIVER}
        command = [self.sandbox.python, "-u", DRIVER_FILE]
        self._process = self.sandbox.spawn(command, files=files, limits=self.limits, stderr_to_stdout=True)
        try:
            hello = self._receive(time.monotonic() + self.startup_timeout_s)
        except (SessionError, TimeoutError) as exc:
            self._kill()
            raise SessionError(
                f"the Python interpreter did not start in the {self.backend} sandbox: {exc}"
            ) from None
        self.python_version = str(hello.get("python", ""))

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.kill()

    def restart(self) -> None:
        """Drop the interpreter and its state; the next cell starts a new one."""
        with self._lock:
            if self._process is not None:
                self._lost_state = True
                self.restarts += 1
            self._kill()

    def close(self) -> None:
        """Kill the interpreter and everything it started (idempotent)."""
        with self._lock:
            self._closed = True
            self._kill()

    def __enter__(self) -> PythonSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._kill()
        except Exception:
            pass

    # -- the protocol ------------------------------------------------------------------------------------
    def _send(self, message: dict[str, Any]) -> None:
        assert self._process is not None
        data = json.dumps(message).encode("utf-8", errors="surrogatepass")
        self._process.stdin.write(MAGIC + b"%010d\n" % len(data) + data)
        self._process.stdin.flush()

    def _read_exactly(self, n: int, deadline: float) -> bytes:
        assert self._process is not None
        fd = self._process.stdout.fileno()
        chunks: list[bytes] = []
        while n > 0:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer before the deadline")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, min(n, 1 << 20))
            if not chunk:
                raise SessionError("the interpreter exited")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _receive(self, deadline: float) -> dict[str, Any]:
        header = self._read_exactly(HEADER, deadline)
        if not header.startswith(MAGIC) or not header[len(MAGIC) : -1].isdigit():
            raise SessionError(f"unexpected output from the interpreter: {header[:80]!r}")
        length = int(header[len(MAGIC) : -1])
        if length > 64 * 1024 * 1024:
            raise SessionError("the interpreter sent an oversized message")
        try:
            message = json.loads(self._read_exactly(length, deadline))
        except ValueError as exc:
            raise SessionError(f"the interpreter sent a malformed message: {exc}") from None
        if not isinstance(message, dict):
            raise SessionError("the interpreter sent a malformed message")
        return message

    # -- cells -------------------------------------------------------------------------------------------
    def run_cell(self, code: str, timeout_s: float | None = None) -> CellResult:
        """Run ``code`` in the session's namespace; see :class:`CellResult` for what comes back."""
        timeout = self.cell_timeout_s if timeout_s is None else float(timeout_s)
        if not isinstance(code, str):
            raise TypeError(f"a cell is a str of Python code, got {type(code).__name__}")
        with self._lock:
            if self._closed:
                raise SessionError("the session is closed")
            restarted, self._lost_state = self._lost_state, False
            start = time.monotonic()
            if self._process is None or not self._process.alive():
                if self._process is not None:
                    restarted = True
                    self._kill()
                self._start()
            self.cells += 1
            try:
                self._send({"code": code, "max_output": self.limits.max_output_bytes})
                reply = self._receive(time.monotonic() + timeout)
            except TimeoutError:
                return self._lose(CellResult("", timed_out=True, restarted=True), start)
            except (SessionError, OSError):
                oom = self.sandbox._killed_for_memory(self._process) if self._process else False
                result = CellResult("", crashed=True, restarted=True)
                if oom:
                    result.error = "MemoryError: the interpreter ran out of memory and was killed"
                return self._lose(result, start)
            return CellResult(
                output=str(reply.get("output", "")),
                error=reply.get("error"),
                truncated=bool(reply.get("truncated")),
                restarted=restarted,
                duration_s=time.monotonic() - start,
            )

    def _lose(self, result: CellResult, start: float) -> CellResult:
        """The interpreter is gone: kill what is left, so the next cell starts a fresh one."""
        self._kill()
        self.restarts += 1
        result.duration_s = time.monotonic() - start
        return result
