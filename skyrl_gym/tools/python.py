"""``PythonCodeExecutorToolGroup``: SkyRL's ``python`` tool, running each call in a sandbox.

SkyRL's tool runs ``python -c <code>`` and answers with what it printed. This one does the same inside a
:mod:`skyrl_gym.runtime` sandbox (bubblewrap where available: no network, a private work folder, memory and
process limits), never in the host interpreter, and answers with SkyRL's texts:

- the program's stdout, stripped (``""`` when it printed nothing);
- ``"Error executing Python code: <stderr, stripped>"`` when it wrote anything to stderr (a traceback reads
  ``File "<string>", line 1, in <module>``, as with ``python -c``);
- ``"Error executing Python code: Execution timed out after <timeout> seconds."`` when it ran out of time.

Code the interpreter cannot be handed (NUL characters, more than :data:`MAX_CODE_BYTES`) gets an
``Error executing Python code: ...`` answer saying so. A sandbox that cannot start Python at all raises
:class:`SandboxUnavailable`: that is an infrastructure failure, never the code's fault.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from skyrl_gym.tools.core import ToolGroup, tool

__all__ = ["ERROR_PREFIX", "MAX_CODE_BYTES", "PythonCodeExecutorToolGroup", "SandboxUnavailable"]

ERROR_PREFIX = "Error executing Python code: "
"""How every failed run's answer starts (SkyRL's text)."""

MAX_CODE_BYTES = 100_000
"""The longest code (UTF-8 bytes) handed to ``python -c``; Linux refuses a single argument past 128 KiB."""

_SANDBOXES: dict[str, Any] = {}
_SANDBOX_LOCK = threading.Lock()


class SandboxUnavailable(RuntimeError):
    """The sandbox could not start the interpreter (not the code's fault): the episode should end in error."""


def _shared_sandbox(backend: str) -> Any:
    """One sandbox per backend name for the process; sandboxes are thread-safe and run calls concurrently."""
    with _SANDBOX_LOCK:
        if backend not in _SANDBOXES:
            from skyrl_gym.runtime import make_sandbox

            _SANDBOXES[backend] = make_sandbox(backend)
        return _SANDBOXES[backend]


class PythonCodeExecutorToolGroup(ToolGroup):
    """SkyRL's Python tool group: one tool, ``python(code)``, each call a fresh ``python -c`` in a sandbox.

    Args:
        timeout: wall-clock seconds one call may run (SkyRL's argument and default).
        sandbox: a :class:`~skyrl_gym.runtime.Sandbox`, or the name of a backend (``"auto"``: the strongest
            available here, ``"bwrap"``, ``"process"``), shared by every group that names it.
        memory_mb: memory limit of the program and what it starts.
    """

    def __init__(self, timeout: float = 10.0, *, sandbox: Any = "auto", memory_mb: int = 512):
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb < 16:
            raise ValueError(f"memory_mb must be an integer of at least 16, got {memory_mb!r}")
        if not isinstance(sandbox, str) and not callable(getattr(sandbox, "run", None)):
            raise TypeError(f"sandbox must be a Sandbox or a backend name such as 'auto', got {sandbox!r}")
        self.timeout = timeout
        self.memory_mb = memory_mb
        self._sandbox = sandbox
        super().__init__(name="PythonCodeExecutorToolGroup")

    @property
    def sandbox(self) -> Any:
        """The sandbox the calls run in (made on first use when the group was given a backend name)."""
        if isinstance(self._sandbox, str):
            self._sandbox = _shared_sandbox(self._sandbox)
        return self._sandbox

    @tool
    def python(self, code: str) -> str:
        """Run Python code as a fresh program and return what it printed (or its error).

        Args:
            code: the program; print what you want to see.
        """
        if not isinstance(code, str):
            return f"{ERROR_PREFIX}the code must be a string, got {type(code).__name__}."
        if "\x00" in code:
            return f"{ERROR_PREFIX}the code contains a NUL character, which Python cannot run."
        # a lone surrogate cannot be passed as an argument; it becomes "?" (the code was not valid text anyway)
        code = code.encode("utf-8", "replace").decode("utf-8")
        size = len(code.encode("utf-8"))
        if size > MAX_CODE_BYTES:
            return f"{ERROR_PREFIX}the code is {size} bytes long; at most {MAX_CODE_BYTES} can be run."
        from skyrl_gym.runtime import Limits

        sandbox = self.sandbox
        limits = Limits(timeout_s=float(self.timeout), memory_mb=self.memory_mb)
        result = sandbox.run([sandbox.python, "-c", code], limits=limits)
        if result.exit_code is None:
            raise SandboxUnavailable(
                f"the {sandbox.name} sandbox could not start Python: {result.stderr.strip()}"
            )
        if result.timed_out:
            return f"{ERROR_PREFIX}Execution timed out after {self.timeout} seconds."
        if result.stderr:
            return f"{ERROR_PREFIX}{result.stderr.strip()}"
        if result.oom:
            return f"{ERROR_PREFIX}the program ran out of memory ({self.memory_mb} MB) and was killed."
        if result.exit_code < 0:  # killed by a signal (its own kill, or a limit) before it could say anything
            return f"{ERROR_PREFIX}the program was killed by signal {-result.exit_code}."
        output = result.stdout.strip()
        if result.output_truncated:
            output += f"\n[output cut: only the first {limits.max_output_bytes} bytes were kept]"
        return output
