"""``PersistentREPL``: the RLM's Python REPL, run in a sandbox, with language-model calls back to the host.

SkyRL's RLM environment gives the model a REPL whose namespace holds a long ``context`` and the functions
``llm_query(prompt)``, ``llm_query_batched(prompts)``, ``rlm_query(prompt, context=None)`` and
``rlm_query_batched(prompts, context_list=None)``, which reach a language model through callables the
trainer supplies (``lm_callback(list[str]) -> list[str]`` and ``subcall_fn(prompt, context=None) -> str``).
The names, signatures and answers are SkyRL's; where the code runs is not:

- SkyRL ``exec``\\ s the model's code in the trainer's own interpreter, behind a table of allowed builtins.
  Here it runs in a sandbox from :mod:`skyrl_gym.runtime` (bubblewrap where available: no network, no host
  files, memory and process limits), in a driver program (:mod:`.sandbox_driver`) that keeps one namespace
  for the REPL's life. By default the driver applies SkyRL's builtins table too, so code behaves as it does
  in SkyRL (no ``import``, no ``open``); ``restricted_builtins=False`` gives the sandboxed code all of Python.
- Each LM function in the sandbox is a proxy: it sends its arguments (as JSON) to the host, where
  :meth:`PersistentREPL.execute` runs the real callable and sends the answer back. Custom callable tools
  (``custom_tools``) run on the host the same way; custom values are copied into the namespace.
- :attr:`PersistentREPL.globals` is therefore a host-side view, not the sandbox's namespace: the scaffold's
  names mapped to the host callables the proxies reach (``repl.globals["llm_query"] == repl._llm_query``).
  Code that overwrites a scaffold name changes nothing on the host, and the driver puts the name back after
  every cell. Results carry the variables' names and types (``REPLResult.locals``), not their values.

Nothing the code does can hang or crash the host: every read and write has the cell's deadline, every frame
from the sandbox is validated (a malformed or forged one, a crash, running out of memory are the cell's own
failure: the interpreter is replaced, the context and tools are bound again, and the result says that earlier
variables are gone), and the number of LM prompts per REPL is capped (``max_lm_calls``). Only a sandbox that
cannot start raises (:class:`RLMSandboxError`): that is the environment's failure, not the model's.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import dataclasses
import math
import os
import pickle
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from skyrl_gym.runtime import frames

__all__ = [
    "RESERVED_TOOL_NAMES",
    "PersistentREPL",
    "REPLResult",
    "RLMSandboxError",
]

RESERVED_TOOL_NAMES: frozenset[str] = frozenset(
    {"FINAL_VAR", "SHOW_VARS", "context", "llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched"}
)
"""Names a custom tool may not take: the scaffold puts them back after every cell."""
LM_FUNCTIONS = ("llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched")

DRIVER_FILE = ".skyrl_rlm.py"
DRIVER_SOURCE = Path(__file__).with_name("sandbox_driver.py")
MAX_FRAME_BYTES = 32 * 1024 * 1024
"""The largest frame the host reads from the sandbox (a call's arguments or a cell's result)."""
MAX_VARIABLES = 1000
GRACE_S = 2.0
"""How long past its timeout a cell may take to report before the sandbox is killed."""
STARTUP_TIMEOUT_S = 30.0
LIFETIME_CPU_S = 24 * 3600.0
"""CPU seconds of the interpreter's whole life (cells have their own wall-clock timeout)."""
RLM_QUERY_WORKERS = 4
"""Child agents ``rlm_query_batched`` runs at once."""
MAX_NESTING = 100


class RLMSandboxError(RuntimeError):
    """The REPL's sandbox could not be started: a failure of the environment, not of the model's code."""


class _ProtocolBroken(Exception):
    """The sandbox sent something outside the protocol (the code wrote to the channel, or died)."""


@dataclasses.dataclass
class REPLResult:
    """What one ``execute`` did.

    Attributes:
        stdout: what the code printed.
        stderr: what it wrote to stderr, then the traceback of an exception it raised, or a timeout notice.
        locals: the REPL's variables after the cell (the context, custom values and the code's own
            variables), by name, with the name of their type (values stay in the sandbox).
        final_answer: the answer ``FINAL_VAR`` set during the cell, if it was called.
        variables: the names SkyRL's observation lists as "REPL variables" (those holding a str, int,
            float, bool, list, dict or tuple).
        timed_out: the cell ran out of time.
        restarted: the interpreter was replaced (after a hard timeout, a crash or a broken protocol), so
            variables from earlier cells are gone; the context and tools are bound again.
        crashed: the interpreter died or broke the protocol during the cell.
    """

    stdout: str
    stderr: str
    locals: dict[str, str]
    final_answer: str | None
    variables: list[str] = dataclasses.field(default_factory=list)
    timed_out: bool = False
    restarted: bool = False
    crashed: bool = False


def _iter_tool_entries(custom_tools: Mapping[str, Any] | None) -> Iterator[tuple[str, Any, str | None]]:
    """``(name, value, description)`` for each custom tool, given as ``{name: value}`` or
    ``{name: {"tool": value, "description": "..."}}``."""
    for name, entry in (custom_tools or {}).items():
        if isinstance(entry, Mapping) and "tool" in entry:
            description = entry.get("description")
            yield name, entry["tool"], description if isinstance(description, str) else None
        else:
            yield name, entry, None


def plain(value: Any, what: str = "value", depth: int = 0) -> Any:
    """``value`` as built-in data that can cross into the sandbox: None, bool, int, float, complex, str, bytes
    and lists, tuples, dicts, sets of them (subclasses and objects with ``tolist()``, such as numpy arrays,
    are converted); anything else is a ``TypeError`` naming its type."""
    if depth > MAX_NESTING:
        raise ValueError(f"{what} is nested more than {MAX_NESTING} levels deep")
    if value is None or type(value) in (bool, int, float, complex, str, bytes):
        return value
    if isinstance(value, bool):
        return bool(value)
    for kind in (int, float, complex, str, bytes):
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, Mapping):
        return {plain(k, what, depth + 1): plain(v, what, depth + 1) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(plain(v, what, depth + 1) for v in value)
    if isinstance(value, list):
        return [plain(v, what, depth + 1) for v in value]
    if isinstance(value, frozenset):
        return frozenset(plain(v, what, depth + 1) for v in value)
    if isinstance(value, set):
        return {plain(v, what, depth + 1) for v in value}
    if callable(getattr(value, "tolist", None)):
        return plain(value.tolist(), what, depth + 1)
    raise TypeError(
        f"{what} is a {type(value).__name__}, which cannot enter the sandboxed REPL "
        "(only str, bytes, numbers, None, bool and lists, tuples, dicts and sets of them)"
    )


def _pack(value: Any) -> str:
    return base64.b64encode(pickle.dumps(value, protocol=4)).decode("ascii")


class PersistentREPL:
    """A Python REPL whose namespace lives across ``execute`` calls, in a sandbox (SkyRL's public names).

    Args:
        timeout: wall-clock seconds one cell may run (SkyRL's default, 15).
        custom_tools: ``{name: callable or value}`` (or ``{name: {"tool": ..., "description": ...}}``); a
            callable runs on the host when the code calls it (its arguments arrive as JSON data), a value is
            copied into the namespace.
        lm_callback: ``prompts -> answers``; when given, the LM functions exist in the REPL.
        subcall_fn: ``(prompt, context=None) -> str``, a child agent for ``rlm_query`` (without it,
            ``rlm_query`` falls back to ``llm_query``).
        sandbox: a :class:`~skyrl_gym.runtime.Sandbox` or a backend name (``"auto"``: the strongest here).
        memory_mb: memory of the interpreter and everything it starts.
        restricted_builtins: SkyRL's builtins table (no import, open, eval...); ``False``: all of Python.
        max_lm_calls: prompts the REPL may send to the LM over its life (``None``: no limit); past it the
            LM functions answer with an error string.
        max_output_bytes: stdout and stderr kept per cell, each.

    The interpreter starts on the first ``execute``; ``cleanup()`` (or ``close()``) stops it.
    """

    def __init__(
        self,
        timeout: float = 15.0,
        custom_tools: Mapping[str, Any] | None = None,
        lm_callback: Callable[[list[str]], list[str]] | None = None,
        subcall_fn: Callable[..., Any] | None = None,
        *,
        sandbox: Any = "auto",
        memory_mb: int = 1024,
        restricted_builtins: bool = True,
        max_lm_calls: int | None = 1024,
        max_output_bytes: int = 256 * 1024,
    ):
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if max_lm_calls is not None and (
            isinstance(max_lm_calls, bool) or not isinstance(max_lm_calls, int) or max_lm_calls < 0
        ):
            raise ValueError(f"max_lm_calls must be a non-negative integer or None, got {max_lm_calls!r}")
        self.timeout = float(timeout)
        self.custom_tools: dict[str, Any] = dict(custom_tools or {})
        self.lm_callback = lm_callback
        self.subcall_fn = subcall_fn
        self.memory_mb = memory_mb
        self.restricted_builtins = bool(restricted_builtins)
        self.max_lm_calls = max_lm_calls
        self.max_output_bytes = max_output_bytes
        self._sandbox_choice = sandbox
        self._sandbox: Any = None
        self._owns_sandbox = False
        self._process: Any = None
        self._lock = threading.Lock()
        self._owner: int | None = None
        self._spend_lock = threading.Lock()
        self._closed = False
        self._seq = 0
        self._lost_state = False
        self.lm_calls = 0
        """Prompts sent to the LM so far (each ``rlm_query`` counts one)."""
        self.cells = 0
        self.restarts = 0
        self.timeouts = 0
        self._validate_custom_tools()
        self.setup()

    # -- the host-side view ----------------------------------------------------------------------------
    def setup(self) -> None:
        """Build the host view of the scaffold and forget the interpreter (the next cell starts a fresh one
        with the context and tools bound)."""
        self._kill()
        self._tools: dict[str, Callable[..., Any]] = {}
        self._bindings: dict[str, Any] = {}
        self.globals: dict[str, Any] = {
            "__name__": "__main__",
            "FINAL_VAR": self._final_var,
            "SHOW_VARS": self._show_vars,
        }
        if self.lm_callback is not None:
            self.globals.update(
                llm_query=self._llm_query,
                llm_query_batched=self._llm_query_batched,
                rlm_query=self._rlm_query,
                rlm_query_batched=self._rlm_query_batched,
            )
        for name, value, _ in _iter_tool_entries(self.custom_tools):
            if callable(value):
                self._tools[name] = value
                self.globals[name] = value
            else:
                self._bindings[name] = plain(value, f"custom tool {name!r}")

    def _validate_custom_tools(self) -> None:
        names = set(self.custom_tools)
        conflicts = sorted(names & RESERVED_TOOL_NAMES)
        if conflicts:
            raise ValueError(
                f"Custom tools cannot override reserved REPL names: {conflicts}. "
                f"Reserved: {sorted(RESERVED_TOOL_NAMES)}"
            )
        bad = sorted(n for n in names if not isinstance(n, str) or not n.isidentifier() or n.startswith("__"))
        if bad:
            raise ValueError(f"custom tool names must be Python identifiers not starting with '__': {bad}")

    def add_context(self, context_payload: Any, context_index: int = 0) -> None:
        """Bind ``context_payload`` as ``context_<index>`` (and as ``context`` for index 0)."""
        if isinstance(context_index, bool) or not isinstance(context_index, int) or context_index < 0:
            raise ValueError(f"context_index must be a non-negative integer, got {context_index!r}")
        value = plain(context_payload, "the context")
        names = [f"context_{context_index}"] + (["context"] if context_index == 0 else [])
        for name in names:
            self._bindings[name] = value
        with self._held():
            if self._process is not None and self._process.alive():
                try:
                    self._request({"op": "bind", "values": [[n, _pack(value)] for n in names]})
                except (_ProtocolBroken, TimeoutError, OSError, ValueError):
                    self._lose()  # the next cell starts a fresh interpreter with every binding

    # -- the interpreter -------------------------------------------------------------------------------
    def _sandbox_for_start(self) -> Any:
        if self._sandbox is None:
            choice = self._sandbox_choice
            if isinstance(choice, str):
                from skyrl_gym.runtime import make_sandbox

                self._sandbox, self._owns_sandbox = make_sandbox(choice), True
            else:
                self._sandbox = choice
        return self._sandbox

    @property
    def backend(self) -> str:
        """The sandbox backend cells run in (``"bwrap"``, ``"process"``), once one is chosen."""
        return getattr(self._sandbox, "name", "") or (
            self._sandbox_choice if isinstance(self._sandbox_choice, str) else ""
        )

    def _start(self) -> None:
        from skyrl_gym.runtime import Limits

        sandbox = self._sandbox_for_start()
        limits = Limits(
            timeout_s=self.timeout,
            memory_mb=self.memory_mb,
            cpu_s=LIFETIME_CPU_S,
            max_output_bytes=self.max_output_bytes,
        )
        try:
            self._process = sandbox.spawn(
                [sandbox.python, "-u", DRIVER_FILE],
                files={DRIVER_FILE: DRIVER_SOURCE.read_text()},
                limits=limits,
                stderr_to_stdout=True,
            )
            os.set_blocking(self._process.stdin.fileno(), False)
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            hello = self._receive(deadline)
            if hello.get("op") != "ready":
                raise _ProtocolBroken(f"the REPL driver said {str(hello)[:200]!r} instead of hello")
            setup = {
                "op": "setup",
                "restricted": self.restricted_builtins,
                "lm": self.lm_callback is not None,
                "tools": sorted(self._tools),
                "values": [[name, _pack(value)] for name, value in self._bindings.items()],
            }
            self._request(setup, deadline)
        except (_ProtocolBroken, TimeoutError, OSError, ValueError) as exc:
            self._kill()
            raise RLMSandboxError(
                f"the RLM REPL could not start in the {getattr(sandbox, 'name', '?')} sandbox: {exc}"
            ) from None

    def _request(self, message: dict[str, Any], deadline: float | None = None) -> None:
        """Send a setup or bind request and wait for its ``ok``."""
        self._seq += 1
        message = {**message, "seq": self._seq}
        deadline = deadline if deadline is not None else time.monotonic() + STARTUP_TIMEOUT_S
        self._send(message, deadline)
        reply = self._receive(deadline)
        if reply.get("op") != "ok" or reply.get("seq") != self._seq:
            raise _ProtocolBroken("the REPL driver did not acknowledge")

    def _kill(self) -> None:
        process, self._process = getattr(self, "_process", None), None
        if process is not None:
            process.kill()

    def _lose(self) -> None:
        """The interpreter is gone or out of step: kill it; the next cell starts a fresh one."""
        self._kill()
        self.restarts += 1
        self._lost_state = True

    def cleanup(self) -> None:
        """Stop the interpreter and everything it started (idempotent; never waits for a running cell)."""
        self._closed = True
        process = self._process
        if process is not None and self._lock.locked():
            # a cell is running in another thread: end the sandbox but leave the pipes to that thread, which
            # reads the end of file and closes them (closing them here could hand their numbers to new files
            # while it still selects on them)
            process.stop()
        else:
            self._kill()
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None and self._owns_sandbox:
            sandbox.close()

    close = cleanup

    def abandon(self) -> None:
        """End the interpreter now, from any thread, without waiting for a running cell: the cell returns
        soon as crashed, and the next one starts a fresh interpreter."""
        process = self._process
        if process is not None:
            process.stop()

    def __enter__(self) -> PersistentREPL:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def __del__(self) -> None:
        try:
            self._kill()
        except Exception:
            pass

    # -- frames (:mod:`skyrl_gym.runtime.frames`) --------------------------------------------------------
    def _send(self, message: dict[str, Any], deadline: float) -> None:
        process = self._process
        if process is None:
            raise _ProtocolBroken("the interpreter is gone")
        try:
            frames.send(process.stdin.fileno(), message, deadline)
        except frames.ChannelClosed:
            raise _ProtocolBroken("the interpreter exited") from None

    def _receive(self, deadline: float) -> dict[str, Any]:
        process = self._process
        if process is None:
            raise _ProtocolBroken("the interpreter is gone")
        try:
            return frames.receive(process.stdout.fileno(), deadline, MAX_FRAME_BYTES)
        except frames.FrameError as exc:
            raise _ProtocolBroken(f"{exc} on the REPL's channel") from None
        except frames.ChannelClosed:
            raise _ProtocolBroken("the interpreter exited") from None

    # -- cells -----------------------------------------------------------------------------------------
    def execute(self, code: str) -> REPLResult:
        """Run ``code`` in the REPL's namespace; see :class:`REPLResult`. Never raises for anything the code
        does; raises :class:`RLMSandboxError` if the sandbox cannot start."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, got {type(code).__name__}")
        with self._held():
            return self._execute(code)

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        """The REPL's lock; a callback that re-enters the REPL (which waits for that callback) is refused."""
        if self._owner == threading.get_ident():
            raise RuntimeError("the REPL was called from inside one of its own callbacks")
        with self._lock:
            self._owner = threading.get_ident()
            try:
                yield
            finally:
                self._owner = None

    def _execute(self, code: str) -> REPLResult:
        if self._closed:
            raise RuntimeError("the REPL is closed")
        restarted, self._lost_state = self._lost_state, False
        if self._process is None or not self._process.alive():
            if self._process is not None:
                restarted = True
                self._kill()
            self._start()
        self.cells += 1
        self._seq += 1
        seq = self._seq
        deadline = time.monotonic() + self.timeout + GRACE_S
        request = {"op": "run", "seq": seq, "code": code, "timeout": self.timeout}
        request["max_output"] = self.max_output_bytes
        process = self._process
        try:
            self._send(request, deadline)
            while True:
                frame = self._receive(deadline)
                op = frame.get("op")
                if op == "call" and frame.get("seq") == seq:
                    reply = self._answer(frame)
                    if time.monotonic() > deadline:
                        raise TimeoutError("the cell's time ran out during a call")
                    self._send(reply, deadline)
                elif op == "done" and frame.get("seq") == seq:
                    return self._result(frame, restarted)
                else:
                    raise _ProtocolBroken(f"an unexpected message ({str(op)[:40]!r}) on the REPL's channel")
        except TimeoutError:
            self._lose()
            self.timeouts += 1
            return REPLResult(
                stdout="",
                stderr=f"Timeout after {int(self.timeout)} seconds\n"
                "The REPL was restarted: variables from earlier cells are gone "
                "(the context and tools are bound again).\n",
                locals=self._bound_locals(),
                final_answer=None,
                variables=self._bound_variables(),
                timed_out=True,
                restarted=True,
            )
        except (_ProtocolBroken, OSError, ValueError) as exc:
            sandbox = self._sandbox
            oom = bool(process is not None and sandbox is not None and sandbox._killed_for_memory(process))
            self._lose()
            if self._closed:
                raise RuntimeError("the REPL was closed while a cell ran") from None
            why = (
                f"MemoryError: the REPL ran out of memory ({self.memory_mb} MB) and was killed."
                if oom
                else f"The REPL's interpreter stopped: {exc}."
            )
            return REPLResult(
                stdout="",
                stderr=f"{why}\nThe REPL was restarted: variables from earlier cells are gone "
                "(the context and tools are bound again).\n",
                locals=self._bound_locals(),
                final_answer=None,
                variables=self._bound_variables(),
                restarted=True,
                crashed=True,
            )

    def _bound_locals(self) -> dict[str, str]:
        return {name: type(value).__name__ for name, value in self._bindings.items()}

    def _bound_variables(self) -> list[str]:
        shown = (str, int, float, bool, list, dict, tuple)
        return [name for name, value in self._bindings.items() if isinstance(value, shown)]

    def _result(self, frame: dict[str, Any], restarted: bool) -> REPLResult:
        """A ``done`` frame, checked field by field, as a :class:`REPLResult`."""
        fields = {
            "stdout": str,
            "stderr": str,
            "error": (str, type(None)),
            "final": (str, type(None)),
            "timed_out": bool,
            "variables": list,
        }
        for name, kind in fields.items():
            if not isinstance(frame.get(name), kind):
                raise _ProtocolBroken(f"a result with a malformed {name!r}")
        variables = frame["variables"]
        if len(variables) > MAX_VARIABLES or not all(
            isinstance(v, list)
            and len(v) == 3
            and isinstance(v[0], str)
            and isinstance(v[1], str)
            and isinstance(v[2], bool)
            for v in variables
        ):
            raise _ProtocolBroken("a result with malformed variables")
        stdout, stderr = frame["stdout"], frame["stderr"]
        stderr_extra = ""
        if frame["timed_out"]:
            self.timeouts += 1
            stderr_extra = f"Timeout after {int(self.timeout)} seconds\n"
        elif frame["error"] is not None:
            stderr_extra = frame["error"]
        if restarted:
            stderr_extra += (
                "(This cell ran in a new interpreter: variables from earlier cells are gone; "
                "the context and tools are bound again.)\n"
            )
        return REPLResult(
            stdout=stdout,
            stderr=stderr + stderr_extra,
            locals={name: kind for name, kind, _ in variables},
            final_answer=frame["final"],
            variables=[name for name, _, shown in variables if shown],
            timed_out=frame["timed_out"],
            restarted=restarted,
        )

    def _answer(self, frame: dict[str, Any]) -> dict[str, Any]:
        """Run the host callable a ``call`` frame names; the reply frame with its value or its error."""
        call_id, name, args, kwargs = frame.get("id"), frame.get("fn"), frame.get("args"), frame.get("kwargs")
        if type(call_id) is not int or not isinstance(args, list) or not isinstance(kwargs, dict):
            raise _ProtocolBroken("a malformed call")
        target = None
        if isinstance(name, str):
            target = self.globals.get(name) if name in LM_FUNCTIONS else self._tools.get(name)
        if target is None:
            raise _ProtocolBroken(f"a call of an unknown function {str(name)[:40]!r}")
        try:
            value = target(*args, **kwargs)
        except Exception as exc:
            return {"op": "reply", "id": call_id, "error": f"{name}() raised {type(exc).__name__}: {exc}"}
        try:
            return {"op": "reply", "id": call_id, "value": _pack(plain(value, f"the result of {name}()"))}
        except (TypeError, ValueError, RecursionError, pickle.PicklingError) as exc:
            return {"op": "reply", "id": call_id, "error": str(exc)}

    # -- the LM functions (host side) ----------------------------------------------------------------
    def _spend(self, prompts: int) -> None:
        with self._spend_lock:  # children of rlm_query_batched spend from several threads
            if self.max_lm_calls is not None and self.lm_calls + prompts > self.max_lm_calls:
                raise RuntimeError(
                    f"the REPL's budget of {self.max_lm_calls} LM queries is used up ({self.lm_calls} sent)"
                )
            self.lm_calls += prompts

    def _ask(self, prompts: list[Any]) -> list[str]:
        if self.lm_callback is None:
            raise RuntimeError("no lm_callback is configured")
        prompts = [p if isinstance(p, str) else str(p) for p in prompts]
        self._spend(len(prompts))
        answers = self.lm_callback(prompts)
        if not isinstance(answers, (list, tuple)) or len(answers) != len(prompts):
            raise RuntimeError(f"lm_callback returned {type(answers).__name__}, not {len(prompts)} answers")
        return [a if isinstance(a, str) else str(a) for a in answers]

    def _llm_query(self, prompt: str, model: str | None = None) -> str:
        """One prompt to the LM; an error comes back as ``"Error: LM query failed - ..."``."""
        try:
            return self._ask([prompt])[0]
        except Exception as exc:
            return f"Error: LM query failed - {exc}"

    def _llm_query_batched(self, prompts: list[str], model: str | None = None) -> list[str]:
        """Several prompts to the LM in one call; the answers in the prompts' order."""
        if not isinstance(prompts, (list, tuple)):
            return [f"Error: LM query failed - prompts must be a list of str, got {type(prompts).__name__}"]
        try:
            return self._ask(list(prompts))
        except Exception as exc:
            return [f"Error: LM query failed - {exc}"] * len(prompts)

    @staticmethod
    def _parse_child_result(result: Any) -> Any:
        """A child's answer, read as a Python literal when it is one (a list stays a list), else the text."""
        if not isinstance(result, str):
            return result
        try:
            return ast.literal_eval(result)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return result

    def _child(self, prompt: Any, context: Any) -> Any:
        assert self.subcall_fn is not None
        self._spend(1)
        return self._parse_child_result(self.subcall_fn(prompt, context=context))

    def _rlm_query(self, prompt: str, model: str | None = None, context: Any = None) -> Any:
        """A sub-task for a child agent with its own REPL (``subcall_fn``); ``llm_query`` without one."""
        if self.subcall_fn is None:
            return self._llm_query(prompt, model)
        try:
            return self._child(prompt, context)
        except Exception as exc:
            return f"Error: RLM query failed - {exc}"

    def _rlm_query_batched(
        self, prompts: list[str], model: str | None = None, context_list: list[Any] | None = None
    ) -> list[Any]:
        """Sub-tasks for child agents, run in parallel; answers in the prompts' order, a failure per item."""
        if self.subcall_fn is None:
            return self._llm_query_batched(prompts, model)
        if not isinstance(prompts, (list, tuple)):
            return [f"Error: RLM query failed - prompts must be a list of str, got {type(prompts).__name__}"]
        contexts = list(context_list) if context_list else [None] * len(prompts)
        if len(contexts) != len(prompts):
            why = f"context_list has {len(contexts)} entries for {len(prompts)} prompts"
            return [f"Error: RLM query failed - {why}"] * len(prompts)

        def one(item: tuple[Any, Any]) -> Any:
            try:
                return self._child(*item)
            except Exception as exc:
                return f"Error: RLM query failed - {exc}"

        if len(prompts) <= 1:
            return [one(item) for item in zip(prompts, contexts, strict=True)]
        with ThreadPoolExecutor(max_workers=min(RLM_QUERY_WORKERS, len(prompts))) as pool:
            return list(pool.map(one, zip(prompts, contexts, strict=True)))

    # -- FINAL_VAR and SHOW_VARS from the host ------------------------------------------------------
    def _final_var(self, variable_name: Any) -> str:
        """What ``FINAL_VAR(variable_name)`` answers in the REPL (runs it there)."""
        result = self.execute(f"FINAL_VAR({variable_name!r})")
        return result.final_answer if result.final_answer is not None else result.stdout.strip()

    def _show_vars(self) -> str:
        """What ``SHOW_VARS()`` answers in the REPL (runs it there)."""
        return self.execute("print(SHOW_VARS())").stdout.rstrip("\n")
