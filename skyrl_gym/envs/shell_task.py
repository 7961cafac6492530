"""``ShellTaskEnv``: the episode protocol of environments where a model runs shell commands until it submits.

A reply holds shell commands as ``<bash>...</bash>`` blocks or ``bash`` tool calls; they run in text order (at
most ``config.max_commands_per_turn``), and the observation shows each one's output (its beginning and end kept
past ``config.max_output_chars``) with a status line (exit code, and with ``config.timings`` its duration).
``<submit/>`` or a submit tool call ends the episode (terminated); so do ``max_turns`` replies and the
environment's time budget (truncated). When it ends the work is verified (:meth:`ShellTaskEnv.verify`), or,
after ``defer_verification()``, in :meth:`ShellTaskEnv.evaluate`, which also verifies an episode its runner
stopped before it ended.

A subclass brings the set-up (``_start``), how one command runs (``_execute``) and what its status line adds,
the time budget, the verification and the prompts; see :class:`~skyrl_gym.envs.terminal.env.TerminalEnv` and
:class:`~skyrl_gym.envs.swe.env.SWEEnv`.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from typing import Any

from skyrl_gym.budget import END_ERROR, END_TERMINATED, END_TRUNCATED
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, positive_int
from skyrl_gym.tools.parsing import ToolCall, ToolCallParseError, parse_tag_calls, parse_tool_calls

__all__ = ["CommandRun", "ShellTaskEnv"]

_SUBMIT = re.compile(r"<submit\s*/?>", re.IGNORECASE)


@dataclasses.dataclass
class CommandRun:
    """What running one command gave, as :meth:`ShellTaskEnv._execute` reports it."""

    record: dict[str, Any]
    """The command's entry in the step's ``metadata["commands"]``."""
    output: str = ""
    """Its output (stdout and stderr together), before it is shortened."""
    exit_code: int | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    result: Any = None
    """The runner's own result, for :meth:`ShellTaskEnv._status_notes`."""
    message: str | None = None
    """When set, the whole observation of a command whose run could not be reported (no status line)."""


class ShellTaskEnv(BaseTextEnv):
    """Shell commands each turn until ``<submit/>``, then verification (see the module's docstring).

    A subclass sets ``self.config`` (with ``max_turns``, ``max_commands_per_turn``, ``max_output_chars``,
    ``command_timeout_s`` and ``timings``) before calling :meth:`_episode_max_turns`, and implements
    ``_start``, ``_execute``, ``_time_budget`` and ``verify``.
    """

    protocol_tags = ("bash", "submit")
    supports_deferred_verification = True
    stop_strings = ("</bash>", "</tool_call>", "<submit/>")
    """Where a turn's generation should stop: after a command, a tool call, or the submission."""
    submit_tools: tuple[str, ...] = ("submit",)
    """Tool call names that end the episode as ``<submit/>`` does."""
    work_noun = "task"
    """What the reminder says to submit when done ("when the task is done")."""
    timeout_verb = "interrupted"
    """What became of a command past ``command_timeout_s`` ("timed out after 30 s and was interrupted")."""
    newline_after_cut = True
    """Whether a shortened output always ends in a newline of its own (an empty line when its tail ended
    in one); otherwise one is added only where it is missing, as for outputs left whole."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.verification: dict[str, Any] | None = None
        self.submitted = False
        self.commands = 0
        self.command_timeouts = 0
        self._started_at = 0.0
        self._lock = threading.Lock()
        # Kept when reset() runs the constructor again: deferral is asked for once, before the first episode.
        self._defer_verification: bool = getattr(self, "_defer_verification", False)
        self._verification_pending = False

    def _episode_max_turns(self) -> int:
        """Replies per episode: ``extras["max_turns"]``, else ``config.max_turns``."""
        max_turns = self.extras.get("max_turns")
        return positive_int(self.config.max_turns if max_turns is None else max_turns, "max_turns")

    def finish_action(self, answer: str) -> str:
        """``<submit/>``: the task's tests decide, whatever the answer says."""
        return "<submit/>"

    # -- what a subclass brings -----------------------------------------------------------------------------
    def _start(self) -> None:
        """Set the episode up (once), then set ``self._started_at``."""
        raise NotImplementedError

    def _execute(self, command: str) -> CommandRun:
        """Run one non-empty command."""
        raise NotImplementedError

    def _status_notes(self, run: CommandRun, cut: bool) -> list[str]:
        """What the status line adds after the exit code (``cut``: the output was shortened here)."""
        return []

    def _time_budget(self) -> tuple[float, str] | None:
        """The episode's wall-clock seconds and the ``truncated_by`` name past them; ``None`` for none."""
        raise NotImplementedError

    def verify(self) -> dict[str, Any]:
        """Verify the episode's work once: a dict with ``reward``."""
        raise NotImplementedError

    def _infra_failure(self, verification: dict[str, Any]) -> str | None:
        """Why the verification's machinery failed (the last step then ends in error), or ``None``."""
        return None

    # -- the episode ----------------------------------------------------------------------------------------
    def _parse(self, action: str) -> tuple[list[str], list[str], bool]:
        """The commands of a reply (tag blocks and tool calls, in text order), notes on malformed ones, and
        whether it submits."""
        found: list[tuple[int, str]] = []
        notes: list[str] = []
        for item in parse_tag_calls(action, "bash"):
            if isinstance(item, ToolCall):
                found.append((action.find(item.raw), item.arguments["input"]))
            else:
                notes.append(item.message)
        submit = bool(_SUBMIT.search(action))
        for item in parse_tool_calls(action):
            if isinstance(item, ToolCallParseError):
                notes.append(item.message)
            elif item.name in self.submit_tools:
                submit = True
            elif item.name == "bash":
                command = item.arguments.get("command", item.arguments.get("cmd"))
                if isinstance(command, str):
                    found.append((action.find(item.raw), command))
                else:
                    notes.append('Error: the bash tool takes {"command": "<shell command>"} (a string).')
            else:
                notes.append(f"Error: unknown tool {item.name[:100]!r}; the tools are bash and submit.")
        found.sort(key=lambda pair: pair[0])
        return [command for _, command in found], notes, submit

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self._start()
        self.turns += 1
        text = action if isinstance(action, str) else ""
        commands, notes, submit = self._parse(text)
        metadata: dict[str, Any] = {"turn": self.turns, "commands": [], "submitted": False}
        sections: list[str] = []
        limit = self.config.max_commands_per_turn
        for number, command in enumerate(commands):
            if number == limit:
                sections.append(
                    f"[{len(commands) - limit} more command(s) not run: at most {limit} per reply.]"
                )
                break
            sections.append(self._run_command(command, metadata))
        sections += notes
        if submit:
            self.submitted = True
            metadata["submitted"] = True
            return self._finish(metadata, END_TERMINATED, sections)
        budget = self._time_budget()
        if budget is not None and time.monotonic() - self._started_at > budget[0]:
            metadata["truncated_by"] = budget[1]
            return self._finish(metadata, END_TRUNCATED, sections)
        if self.turns >= self.max_turns:
            metadata["truncated_by"] = "max_turns"
            return self._finish(metadata, END_TRUNCATED, sections)
        if not commands and not notes:
            sections.append(
                "No command found. Write a shell command as <bash>...</bash> (or a bash tool call), "
                f"or <submit/> when the {self.work_noun} is done."
            )
        sections.append(f"[{self.turns_left()} turn(s) left]")
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": "\n".join(sections)}],
            reward=0.0,
            done=False,
            metadata=metadata,
        )

    def _run_command(self, command: str, metadata: dict[str, Any]) -> str:
        if not command.strip():
            return "(empty command: nothing to run)"
        run = self._execute(command)
        self.commands += 1
        metadata["commands"].append(run.record)
        if run.message is not None:
            return run.message
        self.command_timeouts += int(run.timed_out)
        output, cut = self._cap(run.output)
        if run.timed_out:
            status = f"timed out after {self.config.command_timeout_s:g} s and was {self.timeout_verb}"
        elif run.exit_code is None:
            status = "no exit code"
        else:
            status = f"exit code {run.exit_code}"
        status += "".join(f"; {note}" for note in self._status_notes(run, cut))
        took = f", {run.duration_s:.2f} s" if self.config.timings else ""
        return f"<output>\n{output}</output>\n[{status}{took}]"

    def _cap(self, text: str) -> tuple[str, bool]:
        """``text`` cut to about ``config.max_output_chars`` characters (its beginning and end kept), ending in
        a newline unless empty; and whether it was cut."""
        limit = self.config.max_output_chars
        cut = len(text) > limit
        if cut:
            head, tail = text[: limit * 3 // 4], text[-(limit // 4) :]
            text = f"{head}\n[... {len(text) - len(head) - len(tail)} characters not shown ...]\n{tail}"
            if self.newline_after_cut:
                text += "\n"
        if text and not text.endswith("\n"):
            text += "\n"
        return text, cut

    def _finish(self, metadata: dict[str, Any], end: str, sections: list[str]) -> BaseTextEnvStepOutput:
        metadata["end"] = end
        reward = 0.0
        if self._defer_verification:
            self._verification_pending = True
            metadata["verification"] = "deferred"
        else:
            verification = self.verify()
            metadata["verification"] = verification
            reward = float(verification["reward"])
            failure = self._infra_failure(verification)
            if failure is not None:
                metadata["end"] = END_ERROR
                metadata["error"] = failure
        observations = [{"role": "user", "content": "\n".join(sections)}] if sections else []
        return BaseTextEnvStepOutput(observations=observations, reward=reward, done=True, metadata=metadata)

    # -- verification -----------------------------------------------------------------------------------------
    def defer_verification(self) -> None:
        """Verify in :meth:`evaluate` instead of in the last step (ask before ``init``)."""
        self._defer_verification = True

    def evaluate(self) -> dict[str, Any] | None:
        """The deferred verification (:meth:`verify`) of the episode that just ended, as a new dict.

        An episode its caller stopped before it ended on its own (a runner's turn or context budget) is
        verified as it stands. ``None`` when verification was not deferred (the last step already verified),
        when the episode has not started, or once it was verified.
        """
        stopped_early = self._defer_verification and self._started_at > 0 and self.verification is None
        if not (self._verification_pending or stopped_early):
            return None
        verification = self.verify()
        self._verification_pending = False
        return dict(verification)
