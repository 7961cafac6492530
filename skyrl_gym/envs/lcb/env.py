"""``LCBEnv`` (SkyRL's ``lcb``): LiveCodeBench-style code generation, one answer, judged in the sandbox.

The model answers with its program in a fenced code block; the program runs on every test of the row (a JSON
list of stdin/stdout or functional tests, SkyRL's ground truth) with SkyRL's extraction and comparison rules
(see :mod:`.scoring`). Reward 1.0 when every test passes, else 0.0; the episode is one turn without an
observation. Metadata: SkyRL's ``parsed_code`` (``None`` without a code block), plus the ``verdict``
(``accepted``, ``no_code`` or the first failed test's), ``tests_passed``/``tests_total`` and the ``sandbox``
backend. A sandbox that cannot run the judge raises, so the episode ends in error, not as a wrong answer.

Settings (``env_config``): :class:`LCBConfig`. Made without extras, ``reset(seed=...)`` draws one of the
bundled problems (:mod:`.tasks`), whose reference solution is the oracle's answer.
"""

from __future__ import annotations

from typing import Any

from skyrl_gym.core import Task
from skyrl_gym.envs.base_text_env import (
    BaseTextEnv,
    BaseTextEnvStepOutput,
    ConversationType,
    task_ground_truth,
)
from skyrl_gym.envs.code.env import shared_sandbox
from skyrl_gym.envs.code.judging import HOSTILE_PROGRAMS
from skyrl_gym.envs.lcb import scoring, tasks
from skyrl_gym.settings import Flag, Megabytes, Name, PositiveNumber, read_settings, settings

__all__ = ["LCBConfig", "LCBEnv"]


@settings(frozen=True)
class LCBConfig:
    """The settings of ``lcb`` (``env_config``); every field has a default."""

    sandbox: Name = "auto"
    """The sandbox backend: ``"auto"`` (the strongest available), ``"bwrap"`` or ``"process"``."""
    time_limit_s: PositiveNumber = scoring.DEFAULT_TIME_LIMIT_S
    """Wall-clock seconds each test may run (SkyRL's 6)."""
    memory_mb: Megabytes = 512
    """Memory limit of the program under test."""
    prelude: Flag = True
    """Make SkyRL's runner's names (``Counter``, ``deque``, ``sys``, ``np``...) available without an import."""

    @classmethod
    def from_env_config(cls, env_config: Any) -> LCBConfig:
        """Read the fields from a dict, an OmegaConf ``DictConfig``, a dataclass or ``None``."""
        return read_settings(cls, env_config, "lcb")


class LCBEnv(BaseTextEnv):
    """SkyRL's LiveCodeBench environment (constructor: ``LCBEnv(env_config=None, extras=None)``).

    ``tests`` holds the row's tests (:class:`~skyrl_gym.envs.lcb.scoring.LCBTests`), read and checked
    when the environment is made: malformed tests are a ``ValueError`` then, not a failure at the first step.
    """

    hostile_actions = tuple(
        f"```python\n{code}\n```"
        for code in (
            # no fork bomb: the process backend (no bwrap) would not contain one run as root
            "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",  # kill the judge
            "import os, signal\nos.killpg(0, signal.SIGKILL)",  # and everything beside it
            "x = bytearray(10**10)",  # ten gigabytes
            "import sys\nsys.stdout.write('x' * 10**8)",  # a hundred megabytes of output
            "import os\nos.close(0)\nos.close(1)\nos.close(2)",  # no pipes left to the judge
            'print(\'{"index": 0, "stdout": "1\\\\n", "exit": 0, "timed_out": false}\')',  # a forged report
            *HOSTILE_PROGRAMS,  # planted modules, forged reports, descriptor tricks, patched builtins, a full folder
        )
    )
    """Programs a model might write that attack the judge; each must be judged a failure, never end in error."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.config = LCBConfig.from_env_config(env_config)
        ground_truth = task_ground_truth(extras, "LCBEnv")
        self.tests = None if ground_truth is None else scoring.LCBTests.parse(ground_truth)
        self.max_turns = 1
        self.solved = False

    # -- tasks ----------------------------------------------------------------------------------------
    def sample_task(self, seed: int | None = None) -> Task:
        """A bundled stdin/stdout problem, the same one for the same seed."""
        return tasks.task_for_seed(seed)

    def reference_action(self) -> str | None:
        """The bundled problem's reference solution in a ```python block (``None`` for other rows)."""
        extra_info = self.extras.get("extra_info")
        solution = extra_info.get("reference_solution") if isinstance(extra_info, dict) else None
        if not isinstance(solution, str):
            return None
        return "```python\n" + solution.strip("\n") + "\n```"

    # -- the episode ----------------------------------------------------------------------------------
    def _require_task(self) -> scoring.LCBTests:
        if self.tests is None:
            raise ValueError(
                "LCBEnv needs tests: make it with extras={'reward_spec': {'method': 'rule', 'ground_truth': "
                "json.dumps([{'input': '1 2\\n', 'output': '3\\n', 'testtype': 'stdin'}])}}, or start it with "
                "reset(seed=...) to draw a bundled problem"
            )
        return self.tests

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        tests = self._require_task()
        return prompt, {"tests": len(tests), "kind": tests.kind}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        tests = self._require_task()
        self.turns += 1
        code = scoring.extract_code_from_model(action)
        metadata: dict[str, Any] = {"parsed_code": code, "tests_total": len(tests)}
        if code is None:
            metadata.update(verdict="no_code", tests_passed=0)
            return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, metadata=metadata)
        config = self.config
        judgement = scoring.judge(
            shared_sandbox(config.sandbox),
            code,
            tests,
            time_limit_s=config.time_limit_s,
            memory_mb=config.memory_mb,
            prelude=config.prelude,
        )
        self.solved = judgement.passed
        metadata.update(
            verdict=judgement.verdict, tests_passed=judgement.tests_passed, sandbox=judgement.sandbox
        )
        reward = 1.0 if judgement.passed else 0.0
        return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata=metadata)

    def get_metrics(self) -> dict[str, Any]:
        """``solved``: whether the program passed every test."""
        return {"solved": self.solved}
