"""Built-in arithmetic environments: ``math`` (one answer) and ``math_multi_turn`` (feedback and retries).

Problems come from a procedural generator (:mod:`.tasks`); answers are read by :mod:`.scoring`. Only the
standard library is used.
"""

from skyrl_gym.envs.math.env import MathEnv
from skyrl_gym.envs.math.multi_turn import MultiTurnMathEnv
from skyrl_gym.envs.math.scoring import extract_answer, grade, parse_number, score
from skyrl_gym.envs.math.tasks import MathProblem, build_rows, generate_problem, task_for_seed

__all__ = [
    "MathEnv",
    "MathProblem",
    "MultiTurnMathEnv",
    "build_rows",
    "extract_answer",
    "generate_problem",
    "grade",
    "parse_number",
    "score",
    "task_for_seed",
]
