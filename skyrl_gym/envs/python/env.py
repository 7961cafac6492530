"""``PythonEnv``: math with a sandboxed Python interpreter, ToRL style.

Each turn the model writes its reasoning with code in ```` ```python ```` blocks (or ``<python>`` tags), or
gives its final answer as ``\\boxed{...}`` outside code (see :mod:`.protocol`):

- a reply with code and no answer: every block runs, in order, in the episode's interpreter (at most
  ``max_blocks_per_turn``); the observation is a user message with one ```` ```output ```` block per code
  block (what it printed, the traceback, or a timeout notice) and the turns left;
- a reply with an answer ends the episode (code in it is not run) with the score of :mod:`.scoring`: the
  reasoning-gym generator's own scorer for its task (1.0 when right, partial credit where the generator
  gives it), or the number/text match of a ``{"method": "rule"}`` row;
- a reply with neither gets a reminder of the protocol;
- past ``max_turns`` replies without an answer the episode ends as truncated by ``max_turns``, reward 0.

By default the interpreter persists across the episode like a notebook (variables and imports stay; after a
timeout or crash it restarts and says that the state is gone); ``env_config.persistent: false`` runs each
block as a fresh program instead. A trainer should stop generation at :attr:`PythonEnv.stop_strings`.

Made without a task, ``reset(seed=...)`` draws one from the test split of :mod:`.tasks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skyrl_gym.budget import END_TRUNCATED
from skyrl_gym.core import Task
from skyrl_gym.envs.base_text_env import (
    BaseTextEnv,
    BaseTextEnvStepOutput,
    ConversationType,
    positive_int,
)
from skyrl_gym.envs.python import scoring, tasks
from skyrl_gym.envs.python.interpreter import (
    CellOutcome,
    Interpreter,
    NotebookInterpreter,
    ScriptInterpreter,
)
from skyrl_gym.envs.python.protocol import (
    CodeBlock,
    cap_output,
    output_block,
    parse_action,
    protocol_reminder,
    turns_left_note,
)
from skyrl_gym.settings import Count, Flag, Name, PositiveNumber, read_settings, settings
from skyrl_gym.tools import ToolGroup, tool

__all__ = ["PythonEnv", "PythonEnvConfig", "PythonToolGroup"]

MAX_CODE_CHARS = 100_000
"""A longer code block is not run (the observation says so)."""
TOOL_GROUP = "PythonCodeExecutorToolGroup"


@settings(frozen=True)
class PythonEnvConfig:
    """The environment's settings (``env_config``); every field has a default."""

    max_turns: Count = tasks.DEFAULT_MAX_TURNS
    """Replies per episode when the task's ``extras`` do not say (``extras["max_turns"]`` wins)."""
    persistent: Flag = True
    """One interpreter for the whole episode (notebook); ``False``: each block runs as a fresh program."""
    sandbox: Name = "auto"
    """The sandbox backend: ``"auto"`` (the strongest available), ``"bwrap"`` or ``"process"``."""
    cell_timeout_s: PositiveNumber = 10.0
    """Wall-clock seconds one code block may run. The blocks of one reply together must fit the registered
    step budget (60 s for ``python``), so keep ``cell_timeout_s * max_blocks_per_turn`` below it."""
    memory_mb: Count = 512
    """Memory of the interpreter (and what it starts)."""
    max_output_chars: Count = 2000
    """Characters of one block's output shown to the model (its beginning and end are kept)."""
    max_blocks_per_turn: Count = 4
    """Code blocks run per reply; later ones are skipped with a note."""
    partial_credit: Flag = False
    """Pay reasoning-gym's partial scores (some generators give a little for a well-formed wrong answer, or
    a share when the right number appears inside a longer answer); ``False`` (the default, as in ToRL):
    1.0 for a fully correct answer, else 0.0, which leaves the policy nothing to farm."""

    @classmethod
    def from_env_config(cls, env_config: Any) -> PythonEnvConfig:
        """Read the fields from a dict, an OmegaConf ``DictConfig``, a dataclass or ``None``."""
        return read_settings(cls, env_config, "python")


class PythonToolGroup(ToolGroup):
    """The ``python`` tool: run a block of code in the episode's interpreter.

    ``last`` holds the :class:`~skyrl_gym.envs.python.interpreter.CellOutcome` of the last call.
    """

    def __init__(self, interpreter: Interpreter):
        super().__init__(name=TOOL_GROUP)
        self.interpreter = interpreter
        self.last: CellOutcome | None = None

    @tool
    def python(self, code: str) -> str:
        """Run Python code and return what it printed, and the error if it raised one.

        Args:
            code: the Python code to run.
        """
        self.last = self.interpreter.run(code)
        return self.last.text


class PythonEnv(BaseTextEnv):
    """Math with a Python interpreter in a sandbox (SkyRL constructor: ``PythonEnv(env_config, extras)``).

    See the module docstring for the protocol and :class:`PythonEnvConfig` for the settings. ``step``
    metadata holds the ``turn``, the ``action`` (``code``, ``answer`` or ``none``), ``code_blocks`` run (of
    ``code_blocks_found``), the ``sandbox`` backend, ``persistent``, ``errors`` (blocks that raised),
    ``timed_out``, ``crashed``, ``restarted`` (earlier state lost), ``output_truncated``, and for an answer
    the ``parsed_answer``, its ``score`` and whether it is ``correct``.
    """

    hostile_actions = tuple(
        f"```python\n{code}\n```"
        for code in (
            "import os\nos._exit(3)",  # the interpreter dies
            "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
            "import os\nos.closerange(0, 256)",  # no channel left to the host
            # the driver's module is the cell's __main__: write on its channel as the driver would
            "import os, sys\nm = sys.modules['__main__']\nos.write(m.PROTOCOL, b'not a frame at all')",
            "import os, sys\nm = sys.modules['__main__']\nbody = b'[' * 200000\n"
            "os.write(m.PROTOCOL, b'SKYRL%010d\\n' % len(body) + body)",  # JSON nested 200,000 deep
            "import os, sys\nm = sys.modules['__main__']\nos.write(m.PROTOCOL, b'SKYRL9999999999\\n')",
            "import sys\nm = sys.modules['__main__']\n"
            "m.send({'cell': m.request['cell'], 'output': 5, 'error': ['x'], 'truncated': 'no'})",
            "import sys\nm = sys.modules['__main__']\nm.receive = lambda: {'code': '', 'cell': 0}",  # no reader
            "x = bytearray(8 * 1024 ** 3)",  # past the memory limit
            # modules planted in the work folder for the driver's next import, then a crash and a restart
            "import os\nfor name in ('json', 'ast', 'traceback', 'signal', 'os', 'sys', 'site', 'sitecustomize'):\n"
            "    with open(name + '.py', 'w') as handle:\n"
            "        handle.write('import os\\nos._exit(0)\\n')\n"
            "os._exit(1)",
            # the driver's capture file replaced by a pipe that never ends, its folder made read-only
            "import os, sys\nm = sys.modules['__main__']\nos.unlink(m.CAPTURE)\nos.mkfifo(m.CAPTURE)\n"
            "os.chmod(os.path.dirname(m.CAPTURE), 0o500)",
            # frames forged on every descriptor in reach, and what they hold read (the host's pipes, the start
            # byte); /proc/1 only inside a sandbox of its own (under the process backend it is the host's init)
            "import os\nsandbox = b'sandbox-init' in open('/proc/1/cmdline', 'rb').read()\n"
            'frame = b\'{"cell": 1, "output": "\\\\boxed{1}", "error": null, "truncated": false}\'\n'
            "frame = b'SKYRL%010d\\n' % len(frame) + frame\n"
            "for pid in ['self'] + (['1'] if sandbox else []):\n"
            "    for n in range(32):\n"
            "        for mode in (os.O_WRONLY, os.O_RDONLY):\n"
            "            try:\n"
            "                fd = os.open('/proc/%s/fd/%d' % (pid, n), mode | os.O_NONBLOCK)\n"
            "                os.write(fd, frame) if mode == os.O_WRONLY else os.read(fd, 1 << 16)\n"
            "            except OSError:\n"
            "                pass",
            # the driver's own functions and builtins patched, then the interpreter's channel closed
            "import builtins, json, os, sys\nm = sys.modules['__main__']\n"
            "json.dumps = lambda *args, **kwargs: '{\"cell\": 0}'\nm.send = lambda message: None\n"
            "builtins.repr = lambda value: 'x' * 10 ** 7\nos.close(m.PROTOCOL)\nraise SystemExit(0)",
        )
    )
    """Code a model might write that breaks the interpreter or the session's protocol from inside; each must end
    as the model's failure (an observation saying the interpreter was restarted), never as an environment
    error."""
    protocol_tags = ("python",)
    stop_strings = ("</python>", "```output")
    """Where a turn's generation should stop: after a tagged block, or where a model trained on ToRL-style
    transcripts starts writing the output itself."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.config = PythonEnvConfig.from_env_config(env_config)
        reward_spec = self.extras.get("reward_spec")
        self.reward_spec: dict[str, Any] | None = (
            dict(reward_spec) if isinstance(reward_spec, Mapping) else None
        )
        if self.reward_spec is not None:
            scoring.check_reward_spec(self.reward_spec)
        self.ground_truth = None if self.reward_spec is None else self.reward_spec["ground_truth"]
        max_turns = self.extras.get("max_turns")
        self.max_turns = positive_int(self.config.max_turns if max_turns is None else max_turns, "max_turns")
        self.interpreter = self._make_interpreter()
        self.init_tool_groups([PythonToolGroup(self.interpreter)])
        self.code_blocks = 0
        self.code_errors = 0
        self.timeouts = 0
        self.answered = False
        self.score = 0.0

    def _make_interpreter(self) -> Interpreter:
        from skyrl_gym.runtime import Limits, make_sandbox

        config = self.config
        sandbox = make_sandbox(config.sandbox)
        limits = Limits(timeout_s=config.cell_timeout_s, memory_mb=config.memory_mb)
        if config.persistent:
            # The CPU-time limit holds for the interpreter's whole life: allow every block its full time.
            cells = self.max_turns * config.max_blocks_per_turn
            limits = limits.replace(cpu_s=config.cell_timeout_s * cells + 1)
            return NotebookInterpreter(sandbox, limits, config.cell_timeout_s)
        return ScriptInterpreter(sandbox, limits, config.cell_timeout_s)

    # -- tasks --------------------------------------------------------------------------------------------
    def sample_task(self, seed: int | None = None) -> Task:
        """A reasoning-gym task of the test split, the same one for the same seed."""
        return tasks.default_task(seed, max_turns=self.config.max_turns, persistent=self.config.persistent)

    def reference_action(self) -> str | None:
        """``\\boxed{<ground truth>}``, which earns 1.0."""
        return None if self.ground_truth is None else f"\\boxed{{{self.ground_truth}}}"

    def workspace(self) -> Any:
        """The episode's interpreter as the ``python`` capability (each call limited by ``cell_timeout_s``)."""
        from skyrl_gym.tools.workspace import FunctionWorkspace

        return FunctionWorkspace(python=self._workspace_python)

    def _workspace_python(self, code: str, timeout_s: float) -> str:
        outcome = self.interpreter.run(code)
        self.code_blocks += 1
        self.code_errors += int(outcome.error)
        self.timeouts += int(outcome.timed_out)
        return cap_output(outcome.text or "(no output)", self.config.max_output_chars)[0]

    def finish_action(self, answer: str) -> str:
        """``\\boxed{answer}``, the protocol's final answer."""
        return f"\\boxed{{{answer}}}"

    # -- the episode ----------------------------------------------------------------------------------------
    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        if self.reward_spec is None:
            raise ValueError(
                "PythonEnv needs a reward_spec: make it with extras={'reward_spec': {'method': 'rule', "
                "'ground_truth': '42'}} (or a reasoning_gym row from datasets/python/build.py), "
                "or start it with reset(seed=...) to draw a generated task"
            )
        info = {
            "max_turns": self.max_turns,
            "sandbox": self.interpreter.backend,
            "persistent": self.interpreter.persistent,
            "task": self.reward_spec.get("task"),
        }
        return prompt, info

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        parsed = parse_action(action if isinstance(action, str) else "")
        metadata: dict[str, Any] = {
            "turn": self.turns,
            "action": "none",
            "code_blocks": 0,
            "code_blocks_found": len(parsed.blocks),
            "sandbox": self.interpreter.backend,
            "persistent": self.interpreter.persistent,
            "errors": 0,
            "timed_out": False,
            "crashed": False,
            "restarted": False,
            "output_truncated": False,
            "parsed_answer": None,
            "score": None,
            "correct": False,
        }
        if parsed.answer is not None:
            return self._answer(parsed.answer, metadata)
        if self.turns >= self.max_turns:
            metadata.update(end=END_TRUNCATED, truncated_by="max_turns")
            return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, metadata=metadata)
        if parsed.blocks:
            metadata["action"] = "code"
            body = self._run_blocks(parsed.blocks, metadata)
        else:
            body = protocol_reminder(parsed)
        content = f"{body}\n{turns_left_note(self.turns_left())}"
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": content}], reward=0.0, done=False, metadata=metadata
        )

    def _run_blocks(self, blocks: list[CodeBlock], metadata: dict[str, Any]) -> str:
        sections: list[str] = []
        limit = self.config.max_blocks_per_turn
        for number, block in enumerate(blocks):
            if number == limit:
                sections.append(
                    f"[{len(blocks) - limit} more code block(s) not run: at most {limit} run per reply.]"
                )
                break
            if not block.code.strip():
                sections.append(output_block("(empty code block: nothing to run)"))
                continue
            if len(block.code) > MAX_CODE_CHARS:
                text = f"(the code block has {len(block.code)} characters; at most {MAX_CODE_CHARS} are run)"
                sections.append(output_block(text))
                continue
            self._execute_tool(TOOL_GROUP, "python", [block.code])
            outcome = self.tool_groups[0].last
            assert outcome is not None
            self.code_blocks += 1
            metadata["code_blocks"] += 1
            metadata["errors"] += int(outcome.error)
            self.code_errors += int(outcome.error)
            self.timeouts += int(outcome.timed_out)
            for flag in ("timed_out", "crashed", "restarted"):
                metadata[flag] = metadata[flag] or getattr(outcome, flag)
            text, cut = cap_output(outcome.text or "(no output)", self.config.max_output_chars)
            metadata["output_truncated"] = metadata["output_truncated"] or cut or outcome.truncated
            sections.append(output_block(text))
            left = len(blocks) - number - 1
            if left and (outcome.timed_out or outcome.crashed):
                why = "the timeout" if outcome.timed_out else "the crash"
                sections.append(f"[{left} more code block(s) not run after {why}.]")
                break
        return "\n".join(sections)

    def _answer(self, answer: str, metadata: dict[str, Any]) -> BaseTextEnvStepOutput:
        assert self.reward_spec is not None
        score = scoring.score_answer(answer, self.reward_spec)
        correct = score >= 1.0
        reward = score if self.config.partial_credit else float(correct)
        self.answered, self.score = True, score
        metadata.update(action="answer", parsed_answer=answer, score=score, correct=correct)
        return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata=metadata)

    def close(self) -> None:
        interpreter = getattr(self, "interpreter", None)
        if interpreter is not None:
            interpreter.close()

    # -- metrics --------------------------------------------------------------------------------------------
    def get_metrics(self) -> dict[str, Any]:
        """``turns``, ``code_blocks`` run, ``code_errors``, ``timeouts``, ``answered``, ``solved`` and the
        ``score`` of the answer (0.0 without one)."""
        return {
            "turns": self.turns,
            "code_blocks": self.code_blocks,
            "code_errors": self.code_errors,
            "timeouts": self.timeouts,
            "answered": self.answered,
            "solved": self.score >= 1.0,
            "score": self.score,
        }
