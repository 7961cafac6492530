"""Persistent Python sessions: an interpreter inside a sandbox whose state lives across cells.

    with PythonSession() as session:          # the strongest sandbox available
        session.run_cell("x = 6")
        session.run_cell("x * 7").output        # '42\\n'

A small driver program runs in the sandbox and executes each cell in one namespace, like a notebook kernel:
what the cell prints (also from child processes, since file descriptors 1 and 2 are redirected) and the
``repr`` of a final bare expression come back as ``output``, an exception as ``error`` (its traceback, from
the cell's own frames only). The driver talks to us over its original stdout, in length-prefixed JSON frames
(:mod:`skyrl_gym.runtime.frames`).

A cell that runs past its timeout, or kills the interpreter (a segfault, ``os._exit``, the memory limit), ends
that interpreter and everything it started; the next cell starts a fresh one, and the result says that the
state is gone (``restarted``). The session's :class:`~skyrl_gym.runtime.Limits` (memory, processes, file size)
apply to the interpreter as a whole for its life.

Code in a cell can reach the driver (it is the interpreter's ``__main__``) and its channel, so nothing that comes
back is trusted: each message is checked for its size, its JSON, the type of every field and the cell it
answers, every write to the interpreter has the cell's deadline, and anything wrong is that cell's failure
(a result saying what broke; the next cell gets a fresh interpreter), never an exception of ``run_cell``.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from skyrl_gym.runtime import frames
from skyrl_gym.runtime.base import FileMap, Limits, Sandbox, SandboxProcess, wait_readable

__all__ = ["CellResult", "ProtocolError", "PythonSession", "SessionError"]

DRIVER_FILE = ".skyrl_session.py"
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
    try:
        frames = traceback.extract_tb(exc.__traceback__)
        frames = [f for f in frames if f.filename.startswith("<cell ")]
        text = "Traceback (most recent call last):\n" if frames else ""
        text += "".join(traceback.format_list(frames))
        return text + "".join(traceback.format_exception_only(type(exc), exc))
    except BaseException:  # an exception whose traceback cannot be written out (a broken __str__, recursion)
        return "%s (its traceback could not be formatted)\n" % type(exc).__name__

def cut(text, limit):
    if len(text) <= limit:
        return text
    return text[: limit // 2] + "\n[... %d characters cut ...]\n" % (len(text) - limit) + text[-(limit // 2):]

def collect(limit):
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    try:
        size = os.fstat(1).st_size
        with open(CAPTURE, "rb") as handle:
            output = handle.read(limit)
    except BaseException:  # the cell closed or replaced the capture
        size, output = 0, b""
    os.dup2(null, 1)
    os.dup2(null, 2)
    return output.decode("utf-8", "replace"), size > limit

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
        error = cut(cell_traceback(exc), request["max_error"])
    output, truncated = collect(request["max_output"])
    send({"cell": request["cell"], "output": output, "error": error, "truncated": truncated})
"""


class SessionError(RuntimeError):
    """The interpreter could not be started, or the session is closed."""


class ProtocolError(SessionError):
    """What came back on the interpreter's channel is not a message of the session's protocol (code running in
    the interpreter can write there too); :meth:`PythonSession.run_cell` makes it that cell's failure."""


@dataclass
class CellResult:
    """What one cell did.

    ``output`` is what the cell printed (stdout and stderr as they were written) and the ``repr`` of a final
    bare expression; ``error`` the traceback of an exception it raised. ``timed_out`` and ``crashed`` say the
    interpreter was killed during the cell (``crashed`` also when the cell broke the session's protocol: then
    ``error`` says how); ``restarted`` that the interpreter this cell ran in (or the next one will run in) is a
    new one, so earlier state is gone.
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
        output, error = str(self.output), "" if self.error is None else str(self.error)
        parts = [output.rstrip("\n")] if output.strip() else []
        if self.truncated:
            parts.append("[output truncated]")
        if error:
            parts.append(error.rstrip("\n"))
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


MAX_ERROR_CHARS = 64 * 1024
"""Longest traceback a cell's result carries (the driver keeps its beginning and end)."""
HELLO_BYTES = 4096
"""Largest first message of a new interpreter."""
CLOSE_WAIT_S = 5.0
"""How long ``close()`` waits for a cell in flight to notice that its interpreter is gone."""


class PythonSession:
    """A persistent Python interpreter in a sandbox (started on the first cell).

    Every exchange with the interpreter has a deadline (the cell's timeout) and every message from it is
    checked (its size, its JSON, the type of each field, the cell it answers); a cell that breaks that (a
    replaced driver, a forged or oversized message, output written on the channel out of turn) gets a result
    saying so, and the next cell runs in a fresh interpreter. ``run_cell`` raises only when the interpreter
    cannot be started (:class:`SessionError`: the machinery failed, not the code) or the session is closed.

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
            from skyrl_gym.runtime.backends import make_sandbox

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
        self._max_error = min(self.limits.max_output_bytes, MAX_ERROR_CHARS)
        # JSON writes a byte of output as at most 6 (a \\u escape), a character of a traceback as at most 12
        self._max_reply = 6 * self.limits.max_output_bytes + 12 * self._max_error + 4096

    @property
    def backend(self) -> str:
        """The sandbox backend the interpreter runs in."""
        return self.sandbox.name

    # -- the interpreter ---------------------------------------------------------------------------------
    def _start(self) -> None:
        files = {**self.files, DRIVER_FILE: DRIVER}
        command = [self.sandbox.python, "-u", DRIVER_FILE]
        try:
            process = self.sandbox.spawn(command, files=files, limits=self.limits, stderr_to_stdout=True)
        except (OSError, ValueError) as exc:
            raise SessionError(
                f"the Python interpreter could not be started in the {self.backend} sandbox: {exc}"
            ) from None
        self._process = process
        os.set_blocking(process.stdin.fileno(), False)  # writes wait with a deadline, never for ever
        if self._closed:  # closed while the sandbox started
            self._kill()
            raise SessionError("the session is closed")
        try:
            hello = self._receive(time.monotonic() + self.startup_timeout_s, HELLO_BYTES)
            if hello.get("ready") is not True or not isinstance(hello.get("python"), str):
                raise ProtocolError(f"a first message that is not the driver's: {str(hello)[:80]}")
        except (SessionError, TimeoutError, OSError) as exc:
            process.stop()
            why = f"the sandbox itself did not start ({exc})" if process.started() is False else str(exc)
            self._kill()
            raise SessionError(
                f"the Python interpreter did not start in the {self.backend} sandbox: {why}"
            ) from None
        self.python_version = hello["python"]

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
        """Kill the interpreter and everything it started (idempotent). Returns within a bound even while a
        cell runs in another thread: that cell sees its interpreter end and returns a crashed result."""
        self._closed = True
        process = self._process
        if process is not None:
            process.stop()  # kills the sandbox; the pipes stay open for a reader still on them
        if self._lock.acquire(timeout=CLOSE_WAIT_S):
            try:
                self._kill()
            finally:
                self._lock.release()
        # otherwise the cell in flight closes the pipes when it returns (run_cell checks _closed)

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
    def _send(self, message: dict[str, Any], deadline: float) -> None:
        """Write one message; ``TimeoutError`` if the interpreter does not take it before ``deadline`` (its
        reader was replaced or blocked by a cell), ``OSError`` if it is gone."""
        assert self._process is not None
        frames.send(self._process.stdin.fileno(), message, deadline)

    def _receive(self, deadline: float, max_bytes: int) -> dict[str, Any]:
        """One message from the interpreter: a JSON object of at most ``max_bytes``, or :class:`ProtocolError`
        (:class:`SessionError` when it exited, ``TimeoutError`` past ``deadline``)."""
        assert self._process is not None
        try:
            return frames.receive(self._process.stdout.fileno(), deadline, max_bytes)
        except frames.FrameError as exc:
            raise ProtocolError(str(exc)) from None
        except frames.ChannelClosed:
            raise SessionError("the interpreter exited") from None

    @staticmethod
    def _check_reply(message: dict[str, Any], cell: int) -> tuple[str, str | None, bool]:
        """The reply's output, error and truncation flag, or :class:`ProtocolError` if it is not the driver's
        answer to ``cell``."""
        if set(message) != {"cell", "output", "error", "truncated"}:
            raise ProtocolError(f"a reply with the fields {sorted(map(str, message))[:8]}")
        if type(message["cell"]) is not int or message["cell"] != cell:
            raise ProtocolError(f"a reply to another cell ({str(message['cell'])[:20]}, not {cell})")
        output, error, truncated = message["output"], message["error"], message["truncated"]
        if not isinstance(output, str) or not (error is None or isinstance(error, str)):
            raise ProtocolError("a reply whose output or error is not text")
        if not isinstance(truncated, bool):
            raise ProtocolError("a reply whose 'truncated' is not true or false")
        return output, error, truncated

    def _stray_output(self) -> bool:
        """Whether the interpreter wrote on its channel since the last reply (or closed it): a cell's leftover
        (a thread, a child process) broke the protocol, and the interpreter must be replaced."""
        assert self._process is not None
        return wait_readable(self._process.stdout.fileno(), 0)

    # -- cells -------------------------------------------------------------------------------------------
    def run_cell(self, code: str, timeout_s: float | None = None) -> CellResult:
        """Run ``code`` in the session's namespace; see :class:`CellResult` for what comes back.

        Whatever the code does, this returns within about ``timeout_s`` (plus the time to start an
        interpreter when one is needed) with a result; it raises :class:`SessionError` only if no interpreter
        can be started or the session is closed.
        """
        timeout = self.cell_timeout_s if timeout_s is None else float(timeout_s)
        if not isinstance(code, str):
            raise TypeError(f"a cell is a str of Python code, got {type(code).__name__}")
        with self._lock:
            if self._closed:
                raise SessionError("the session is closed")
            restarted, self._lost_state = self._lost_state, False
            start = time.monotonic()
            if self._process is not None and (not self._process.alive() or self._stray_output()):
                restarted = True
                self._kill()
            if self._process is None:
                self._start()
            self.cells += 1
            try:
                return self._exchange(code, timeout, restarted, start)
            finally:
                if self._closed:  # closed from another thread while the cell ran
                    self._kill()

    def _exchange(self, code: str, timeout: float, restarted: bool, start: float) -> CellResult:
        """Send one cell and read its reply; every failure of the interpreter's side is the cell's result."""
        deadline = time.monotonic() + timeout
        request = {"code": code, "cell": self.cells, "max_output": self.limits.max_output_bytes}
        request["max_error"] = self._max_error
        try:
            self._send(request, deadline)
        except TimeoutError:
            why = "the interpreter stopped reading cells (an earlier cell replaced or blocked its input)"
            return self._lose(
                CellResult("", error=f"SessionError: {why}", crashed=True, restarted=True), start
            )
        except OSError:
            return self._lose(CellResult("", crashed=True, restarted=True), start)
        try:
            output, error, truncated = self._check_reply(self._receive(deadline, self._max_reply), self.cells)
        except TimeoutError:
            return self._lose(CellResult("", timed_out=True, restarted=True), start)
        except ProtocolError as exc:
            why = f"SessionError: the cell broke the session's protocol: the interpreter sent {exc}"
            return self._lose(CellResult("", error=why, crashed=True, restarted=True), start)
        except (SessionError, OSError):
            oom = self.sandbox._killed_for_memory(self._process) if self._process else False
            result = CellResult("", crashed=True, restarted=True)
            if oom:
                result.error = "MemoryError: the interpreter ran out of memory and was killed"
            return self._lose(result, start)
        return CellResult(
            output=output,
            error=error,
            truncated=truncated,
            restarted=restarted,
            duration_s=time.monotonic() - start,
        )

    def _lose(self, result: CellResult, start: float) -> CellResult:
        """The interpreter is gone: kill what is left, so the next cell starts a fresh one."""
        self._kill()
        self.restarts += 1
        result.duration_s = time.monotonic() - start
        return result
