"""Where the model's code runs: a persistent interpreter (a notebook) or a fresh program per block.

Both run in a sandbox from :mod:`skyrl_gym.runtime` and answer with a :class:`CellOutcome`: the text to show
the model and what went wrong. :class:`NotebookInterpreter` keeps one
:class:`~skyrl_gym.runtime.PythonSession` for the episode, so variables and imports live from one block to the
next, and a final bare expression is echoed as in a notebook; :class:`ScriptInterpreter` runs each block as
its own ``python main.py``, which shows only what it prints.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import Any

from skyrl_gym.runtime import Limits, Sandbox

__all__ = ["CellOutcome", "Interpreter", "NotebookInterpreter", "ScriptInterpreter"]


@dataclasses.dataclass(frozen=True)
class CellOutcome:
    """One block's run.

    Attributes:
        text: what to show the model: the output, then the error or the notice of a timeout or crash.
        error: the code raised an exception (or the program exited with a non-zero status).
        timed_out: it ran past the time limit and was stopped.
        crashed: the interpreter died (out of memory, a signal, ``os._exit``).
        restarted: the interpreter's earlier state is gone (after a timeout or crash, or before this block).
        truncated: the sandbox kept only the beginning of a very long output.
    """

    text: str
    error: bool = False
    timed_out: bool = False
    crashed: bool = False
    restarted: bool = False
    truncated: bool = False

    @property
    def ok(self) -> bool:
        """The block ran to its end without an error."""
        return not (self.error or self.timed_out or self.crashed)


class Interpreter(ABC):
    """Runs blocks of Python code for one episode in a sandbox."""

    persistent: bool = False

    def __init__(self, sandbox: Sandbox, limits: Limits, cell_timeout_s: float):
        self.sandbox = sandbox
        self.limits = limits
        self.cell_timeout_s = cell_timeout_s

    @property
    def backend(self) -> str:
        """The sandbox backend (``"bwrap"``, ``"process"``...)."""
        return self.sandbox.name

    @abstractmethod
    def run(self, code: str) -> CellOutcome:
        """Run one block of code."""

    def close(self) -> None:
        """Stop what is running and release the sandbox (idempotent)."""
        self.sandbox.close()


class NotebookInterpreter(Interpreter):
    """One persistent interpreter per episode (started on the first block)."""

    persistent = True

    def __init__(self, sandbox: Sandbox, limits: Limits, cell_timeout_s: float):
        super().__init__(sandbox, limits, cell_timeout_s)
        self._session: Any = None

    def run(self, code: str) -> CellOutcome:
        from skyrl_gym.runtime import PythonSession

        if self._session is None:
            self._session = PythonSession(
                self.sandbox, limits=self.limits, cell_timeout_s=self.cell_timeout_s
            )
        result = self._session.run_cell(code)
        return CellOutcome(
            text=result.render(),
            error=result.error is not None,
            timed_out=result.timed_out,
            crashed=result.crashed,
            restarted=result.restarted,
            truncated=result.truncated,
        )

    def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            session.close()
        super().close()


class ScriptInterpreter(Interpreter):
    """Each block is a fresh program: nothing carries over from one block to the next."""

    def run(self, code: str) -> CellOutcome:
        result = self.sandbox.run_python(code, limits=self.limits.replace(timeout_s=self.cell_timeout_s))
        if result.exit_code is None and not result.timed_out:
            raise RuntimeError(f"the {self.backend} sandbox could not start Python: {result.stderr.strip()}")
        parts = [text.rstrip("\n") for text in (result.stdout, result.stderr) if text.strip()]
        if result.output_truncated:
            parts.append("[output truncated]")
        crashed = False
        if result.timed_out:
            parts.append(
                f"TimeoutError: the code did not finish in {self.cell_timeout_s:g} s and was stopped."
            )
        elif result.oom:
            crashed = True
            parts.append(
                f"MemoryError: the program ran out of memory ({self.limits.memory_mb} MB) and was killed."
            )
        elif result.exit_code is not None and result.exit_code < 0:
            crashed = True
            parts.append(f"The program {result.explain()}.")
        elif result.exit_code and not result.stderr.strip():
            parts.append(f"(The program ended with exit code {result.exit_code}.)")
        return CellOutcome(
            text="\n".join(parts),
            error=bool(result.exit_code) and not (crashed or result.timed_out),
            timed_out=result.timed_out,
            crashed=crashed,
            truncated=result.output_truncated,
        )
