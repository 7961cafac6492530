"""``CodeEnv``: code generation judged by tests run in a sandbox.

The model answers with its program in a ```python code block (the last one counts; see :mod:`.extraction`).
Two kinds of task, named by the row's ``reward_spec.method``:

- ``humaneval``: complete a Python function; the program is judged by the problem's ``check`` (see
  :mod:`.humaneval` for which completions are accepted and how a pass is established);
- ``stdio``: a program that reads stdin and writes stdout, run on every public and hidden test (see
  :mod:`.stdio` for how outputs are compared).

The reward is 1.0 when every test passes and 0.0 otherwise. By default an episode is one answer. With
``max_turns > 1`` (``extras["max_turns"]`` or ``env_config.max_turns``) a failed answer gets feedback (the
results of the public tests only: the docstring's examples for HumanEval, the statement's examples for stdin/
stdout problems; never hidden test data) and the model tries again; when the last turn fails, the episode ends
as truncated by ``max_turns``. An answer without a code block is told what to write and earns 0.

Metadata of a judged step: ``source``, ``problem_id``, ``correct``, ``verdict``, ``tests_passed`` /
``tests_total``, ``first_failure`` (the test's index, whether it is public or hidden, the verdict, and the
input, expected and actual output, cut short), ``timed_out``, ``sandbox`` (the backend that ran it) and, for
HumanEval, the completion ``rule``. If the sandbox itself cannot run, the step raises and the episode ends in
error: an infrastructure failure is never scored as a wrong answer.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from skyrl_gym.budget import END_TRUNCATED
from skyrl_gym.core import Task
from skyrl_gym.envs.base_text_env import (
    BaseTextEnv,
    BaseTextEnvStepOutput,
    ConversationType,
    positive_int,
)
from skyrl_gym.envs.code.extraction import extract_program
from skyrl_gym.envs.code.humaneval import HumanEvalJudgement, HumanEvalProblem, judge_humaneval
from skyrl_gym.envs.code.judging import HOSTILE_PROGRAMS
from skyrl_gym.envs.code.stdio import StdioJudgement, judge_stdio
from skyrl_gym.envs.code.tasks import HUMANEVAL, STDIO, StdioProblem, task_for_seed
from skyrl_gym.settings import Count, Name, NonNegativeNumber, PositiveNumber, read_settings, settings

__all__ = ["CodeConfig", "CodeEnv", "shared_sandbox"]

_SANDBOXES: dict[str, Any] = {}
_SANDBOX_LOCK = threading.Lock()


def shared_sandbox(backend: str = "auto") -> Any:
    """One sandbox per backend name for the whole process (sandboxes are thread-safe and cheap to share)."""
    with _SANDBOX_LOCK:
        if backend not in _SANDBOXES:
            from skyrl_gym.runtime import make_sandbox

            _SANDBOXES[backend] = make_sandbox(backend)
        return _SANDBOXES[backend]


@settings(frozen=True)
class CodeConfig:
    """The environment's settings (``env_config``); every field has a default."""

    sandbox: Name = "auto"
    """The sandbox backend: ``"auto"`` (the strongest available), ``"bwrap"``, ``"process"``..."""
    max_turns: Count = 1
    """Answers per episode when the row does not say (``extras["max_turns"]`` wins)."""
    timeout_s: PositiveNumber = 5.0
    """Wall-clock limit of one HumanEval judgement (the program and all its tests)."""
    time_limit_s: PositiveNumber | None = None
    """Wall-clock limit of each stdin/stdout test; ``None``: the problem's own (2 s for the bundled ones)."""
    memory_mb: Count = 512
    """Memory limit of the program under test."""
    float_tol: NonNegativeNumber | None = None
    """Tolerance for numbers in stdin/stdout outputs; ``None``: the problem's own (exact for most)."""
    task_source: str = "mixed"
    """What ``reset(seed=...)`` draws: ``"mixed"`` (even seeds stdin/stdout, odd seeds HumanEval),
    ``"stdio"`` or ``"humaneval"``."""
    feedback_chars: Count = 600
    """Characters of each input, expected and actual output shown in feedback and kept in metadata."""

    def __post_init__(self) -> None:
        if self.task_source not in ("mixed", STDIO, HUMANEVAL):
            raise ValueError(
                f"env_config.task_source must be 'mixed', 'stdio' or 'humaneval', got {self.task_source!r}"
            )

    @classmethod
    def from_env_config(cls, env_config: Any) -> CodeConfig:
        """Read the fields from a dict, an OmegaConf ``DictConfig``, a dataclass or ``None``."""
        return read_settings(cls, env_config, "code")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"


def _block(text: str, limit: int) -> str:
    text = _cut(text, limit)
    return "```\n" + (text if text.endswith("\n") or not text else text + "\n") + "```"


def _turns_left(left: int) -> str:
    return "1 turn left" if left == 1 else f"{left} turns left"


_VERDICT_TEXT = {
    "wrong_answer": "wrong answer",
    "runtime_error": "runtime error",
    "time_limit_exceeded": "time limit exceeded",
    "memory_limit_exceeded": "memory limit exceeded",
    "not_run": "not run",
}


class CodeEnv(BaseTextEnv):
    """Code generation judged in a sandbox (SkyRL constructor: ``CodeEnv(env_config=None, extras=None)``).

    See the module docstring for the protocol, the reward and the metadata, and :class:`CodeConfig` for the
    settings. The task comes from ``extras["reward_spec"]`` (``method`` ``"humaneval"`` or ``"stdio"`` and the
    problem as ``ground_truth``); made without one, ``reset(seed=...)`` draws a bundled problem.
    """

    hostile_actions = tuple(
        f"```python\n{code}\n```"
        for code in (
            "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",  # kill the judge
            "import os, signal\nos.killpg(0, signal.SIGKILL)",  # and everything beside it
            "x = bytearray(10**10)",  # ten gigabytes
            "import sys\nsys.stdout.write('x' * 10**8)",  # a hundred megabytes of output
            "import os\nos.closerange(0, 256)",  # no pipes left to the judge
            'import os\nline = b\'{"ready": true, "stage": "tests", "passed": true, "index": 0}\\n\'\n'
            "for fd in range(1, 20):\n    try:\n        os.write(fd, line)\n    except OSError:\n        pass",
            "class Any:\n    __eq__ = lambda self, other: True\n\ndef answer(*args):\n    return Any()",
            *HOSTILE_PROGRAMS,  # planted modules, forged reports, descriptor tricks, patched builtins, a full folder
        )
    )
    """Programs a model might write that attack the judge; each must be judged a failure, never end in error."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.config = CodeConfig.from_env_config(env_config)
        max_turns = self.extras.get("max_turns")
        self.max_turns = positive_int(self.config.max_turns if max_turns is None else max_turns, "max_turns")
        self.source: str | None = None
        self.problem: HumanEvalProblem | StdioProblem | None = None
        reward_spec = self.extras.get("reward_spec")
        if isinstance(reward_spec, dict) and reward_spec.get("ground_truth") is not None:
            self.source, self.problem = _read_problem(reward_spec.get("method"), reward_spec["ground_truth"])
        self.solved = False
        self.attempts = 0
        self.format_valid = False
        self.judge_s = 0.0
        self.tests_passed_fraction = 0.0

    # -- tasks ---------------------------------------------------------------------------------------------
    def sample_task(self, seed: int | None = None) -> Task:
        """A bundled problem for ``seed`` (see ``CodeConfig.task_source``), the same one for the same seed."""
        return task_for_seed(seed, self.config.task_source)

    def reference_action(self) -> str | None:
        """The canonical (HumanEval) or reference (stdin/stdout) solution in a ```python block; it earns 1.0."""
        problem = self.problem
        code = None
        if isinstance(problem, HumanEvalProblem) and problem.canonical_solution is not None:
            code = problem.prompt + problem.canonical_solution
        elif isinstance(problem, StdioProblem):
            code = problem.reference_solution
        if code is None:
            return None
        return "```python\n" + code.rstrip("\n") + "\n```"

    def workspace(self) -> Any:
        """A scratch folder whose commands run in the environment's sandbox (write and try the program there);
        it is removed by ``close``."""
        workspace = getattr(self, "_workspace", None)
        if workspace is None:
            from skyrl_gym.tools.workspace import LocalDirWorkspace

            workspace = LocalDirWorkspace(
                sandbox=shared_sandbox(self.config.sandbox), memory_mb=self.config.memory_mb
            )
            self._workspace = workspace
        return workspace

    def reference_tool_calls(self) -> list[dict[str, Any]] | None:
        """The reference program handed to ``finish`` as OpenAI-style tool calls; it earns 1.0."""
        action = self.reference_action()
        return None if action is None else [{"name": "finish", "arguments": {"answer": action}}]

    def finish_action(self, answer: str) -> str:
        """The program in a ```python block (an answer that already holds a code block is passed as it is)."""
        if "```" in answer:
            return answer
        return "```python\n" + answer.rstrip("\n") + "\n```"

    def close(self) -> None:
        workspace, self._workspace = getattr(self, "_workspace", None), None
        if workspace is not None:
            workspace.close()
        super().close()

    # -- the episode ----------------------------------------------------------------------------------------
    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        if self.problem is None:
            raise ValueError(
                "CodeEnv needs a problem: make it with extras={'reward_spec': {'method': 'stdio', "
                "'ground_truth': {'public_tests': [...], 'hidden_tests': [...]}}} (or method 'humaneval' with "
                "{'prompt', 'test', 'entry_point'}), or start it with reset(seed=...) to draw a bundled problem"
            )
        return prompt, {"source": self.source, "problem_id": self._problem_id(), "max_turns": self.max_turns}

    def _problem_id(self) -> str:
        problem = self.problem
        return problem.task_id if isinstance(problem, HumanEvalProblem) else problem.id  # type: ignore[union-attr]

    def step(self, action: str) -> BaseTextEnvStepOutput:
        if self.problem is None:
            self.init([])  # raises, saying what the environment needs
        self.turns += 1
        left = self.max_turns - self.turns
        metadata: dict[str, Any] = {
            "turn": self.turns,
            "source": self.source,
            "problem_id": self._problem_id(),
        }
        extraction = extract_program(action)
        if extraction.code is None:
            self.format_valid = False
            metadata.update(action="none", correct=False, verdict="no_code")
            text = extraction.problem or "No code block found."
            return self._fail(text, left, metadata, judged=False)
        self.format_valid = True
        self.attempts += 1
        metadata["action"] = "code"
        start = time.monotonic()
        if isinstance(self.problem, HumanEvalProblem):
            passed, feedback = self._judge_humaneval(extraction.code, left > 0, metadata)
        else:
            passed, feedback = self._judge_stdio(extraction.code, metadata)
        self.judge_s += time.monotonic() - start
        metadata["correct"] = passed
        if passed:
            self.solved = True
            return BaseTextEnvStepOutput(observations=[], reward=1.0, done=True, metadata=metadata)
        return self._fail(feedback, left, metadata)

    def _fail(
        self, text: str, left: int, metadata: dict[str, Any], *, judged: bool = True
    ) -> BaseTextEnvStepOutput:
        done = left <= 0
        if done:
            if self.max_turns > 1:
                metadata.update(end=END_TRUNCATED, truncated_by="max_turns")
            text += "\nNo turns left."
        elif judged:
            whole = "function" if self.source == HUMANEVAL else "program"
            text += f"\nFix it and answer with the whole {whole} in a new ```python block ({_turns_left(self.turns_left())})."
        else:
            text += f" ({_turns_left(self.turns_left())}.)"
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": text}], reward=0.0, done=done, metadata=metadata
        )

    def get_metrics(self) -> dict[str, Any]:
        """``turns``, ``attempts`` (answers with a program), whether the episode was ``solved``,
        ``format_valid`` (the last answer held a program), ``tests_passed_fraction`` (of the last judged
        program) and ``judge_s`` (seconds spent judging)."""
        return {
            "turns": self.turns,
            "attempts": self.attempts,
            "solved": self.solved,
            "format_valid": self.format_valid,
            "tests_passed_fraction": self.tests_passed_fraction,
            "judge_s": round(self.judge_s, 4),
        }

    # -- HumanEval -------------------------------------------------------------------------------------------
    def _judge_humaneval(self, code: str, examples: bool, metadata: dict[str, Any]) -> tuple[bool, str]:
        problem = self.problem
        assert isinstance(problem, HumanEvalProblem)
        sandbox = shared_sandbox(self.config.sandbox)
        judgement = judge_humaneval(
            sandbox, problem, code, timeout_s=self.config.timeout_s, memory_mb=self.config.memory_mb,
            examples=examples,
        )  # fmt: skip
        limit = self.config.feedback_chars
        self.tests_passed_fraction = float(judgement.passed)
        metadata.update(
            rule=judgement.rule,
            verdict="accepted" if judgement.passed else _humaneval_verdict(judgement),
            tests_passed=int(judgement.passed),
            tests_total=1,
            timed_out=judgement.timed_out,
            sandbox=judgement.run.backend or sandbox.name,
        )
        if judgement.passed:
            return True, ""
        metadata["first_failure"] = {"stage": judgement.stage, "error": _cut(judgement.error or "", limit)}
        return False, _humaneval_feedback(judgement, problem, self.config.timeout_s, limit)

    # -- stdin/stdout ----------------------------------------------------------------------------------------
    def _judge_stdio(self, code: str, metadata: dict[str, Any]) -> tuple[bool, str]:
        problem = self.problem
        assert isinstance(problem, StdioProblem)
        config = self.config
        sandbox = shared_sandbox(config.sandbox)
        time_limit = config.time_limit_s if config.time_limit_s is not None else problem.time_limit_s
        float_tol = config.float_tol if config.float_tol is not None else problem.float_tol
        tests = problem.tests
        judgement = judge_stdio(
            sandbox, code, tests, time_limit_s=time_limit, memory_mb=config.memory_mb, float_tol=float_tol
        )
        self.tests_passed_fraction = judgement.tests_passed / len(tests)
        failed = judgement.first_failure()
        metadata.update(
            verdict="accepted" if failed is None else judgement.outcomes[failed].verdict,
            tests_passed=judgement.tests_passed,
            tests_total=len(tests),
            timed_out=judgement.timed_out,
            sandbox=judgement.run.backend or sandbox.name,
        )
        if failed is None:
            return True, ""
        limit = config.feedback_chars
        outcome = judgement.outcomes[failed]
        metadata["first_failure"] = {
            "index": failed,
            "kind": "public" if failed < len(problem.public_tests) else "hidden",
            "verdict": outcome.verdict,
            "input": _cut(tests[failed].input, limit),
            "expected": _cut(tests[failed].output, limit),
            "got": _cut(outcome.got, limit),
            "stderr": _cut(outcome.stderr, limit),
        }
        return False, _stdio_feedback(judgement, problem, time_limit, limit)


def _read_problem(method: Any, ground_truth: Any) -> tuple[str, HumanEvalProblem | StdioProblem]:
    """The source and the problem named by a row's reward spec (the method, else the ground truth's fields)."""
    if method not in (HUMANEVAL, STDIO):
        if isinstance(ground_truth, dict) and "entry_point" in ground_truth:
            method = HUMANEVAL
        elif isinstance(ground_truth, dict) and (
            "public_tests" in ground_truth or "hidden_tests" in ground_truth
        ):
            method = STDIO
        else:
            raise ValueError(
                f"reward_spec.method must be 'humaneval' or 'stdio' (got {method!r}), or the ground truth must "
                "hold a HumanEval problem ('entry_point', ...) or stdin/stdout tests ('public_tests', ...)"
            )
    if method == HUMANEVAL:
        return HUMANEVAL, HumanEvalProblem.from_dict(ground_truth)
    return STDIO, StdioProblem.from_dict(ground_truth)


def _humaneval_verdict(judgement: HumanEvalJudgement) -> str:
    if judgement.stage == "compile":
        return "compile_error"
    if judgement.stage == "load":
        return "runtime_error"
    if judgement.stage == "tests":
        return "wrong_answer" if judgement.error == "AssertionError" else "runtime_error"
    if judgement.run.timed_out:
        return "time_limit_exceeded"
    if judgement.run.oom:
        return "memory_limit_exceeded"
    return "runtime_error"


def _humaneval_feedback(
    judgement: HumanEvalJudgement, problem: HumanEvalProblem, timeout_s: float, limit: int
) -> str:
    """What the model is told after a failed HumanEval answer: its own errors, the docstring's examples, and
    of the hidden tests only the exception's type."""
    if judgement.stage == "compile":
        return f"Your code does not compile:\n{_block(judgement.error or '', limit)}"
    if judgement.stage == "load":
        return f"Running your code raised an error before the tests:\n{_block(judgement.error or '', limit)}"
    if judgement.stage == "run":
        if judgement.run.timed_out:
            return (
                f"Your code did not finish within {timeout_s:g} s and was stopped (an endless loop, or an "
                "algorithm too slow for the tests?)."
            )
        if judgement.run.oom:
            return "Your code ran out of memory and was stopped."
        return f"The tests did not finish: {judgement.error}."
    lines = [f"`{problem.entry_point}` failed the hidden tests ({judgement.error})."]
    if judgement.examples:
        failing = [e for e in judgement.examples if not e.get("passed")]
        lines.append(
            f"Examples from the docstring: {len(judgement.examples) - len(failing)} of {len(judgement.examples)} "
            "pass."
        )
        for example in failing[:3]:
            lines.append(
                f">>> {str(example.get('source', '')).rstrip()}\nexpected:\n{_block(str(example.get('want', '')), limit)}"
                f"\ngot:\n{_block(str(example.get('got', '')), limit)}"
            )
    return "\n".join(lines)


def _stdio_feedback(judgement: StdioJudgement, problem: StdioProblem, time_limit: float, limit: int) -> str:
    """What the model is told after a failed stdin/stdout answer: the public tests' results in full, of the
    hidden tests only the verdict of the first failure."""
    public = len(problem.public_tests)
    outcomes = judgement.outcomes
    passed_public = sum(o.passed for o in outcomes[:public])
    failed = judgement.first_failure()
    assert failed is not None
    outcome = outcomes[failed]
    verdict = _VERDICT_TEXT.get(outcome.verdict, outcome.verdict)
    if failed >= public:
        return (
            f"Your program passed all {public} example tests but failed a hidden test ({verdict}). The hidden "
            "tests check other cases, edge cases and larger inputs."
        )
    lines = [
        f"Your program passed {passed_public} of {public} example tests. Example {failed + 1}: {verdict}."
    ]
    test = problem.public_tests[failed]
    lines.append(f"Input:\n{_block(test.input, limit)}")
    if outcome.verdict == "time_limit_exceeded":
        lines.append(f"It did not finish within {time_limit:g} s.")
    elif outcome.verdict == "memory_limit_exceeded":
        lines.append("It ran out of memory.")
    else:
        lines.append(f"Expected output:\n{_block(test.output, limit)}")
        lines.append(f"Your output:\n{_block(outcome.got, limit)}")
        if outcome.verdict == "runtime_error" and outcome.stderr.strip():
            lines.append(f"Error (exit code {outcome.exit_code}):\n{_block(outcome.stderr.strip(), limit)}")
    return "\n".join(lines)
