"""``MultiTurnMathEnv``: the same problems, with feedback and another try after a wrong answer.

A correct answer ends the episode with reward 1.0. A wrong or unreadable one gets a user message saying so
(without hinting at the answer) and the model tries again, until ``max_turns`` answers have been given; the
episode then ends as truncated by ``max_turns``, with reward 0.0.
"""

from __future__ import annotations

from typing import Any

from skyrl_gym.budget import END_TRUNCATED
from skyrl_gym.core import Task
from skyrl_gym.envs.base_text_env import BaseTextEnvStepOutput, positive_int
from skyrl_gym.envs.math import tasks
from skyrl_gym.envs.math.env import MathEnv

__all__ = ["MultiTurnMathEnv", "DEFAULT_MAX_TURNS"]

DEFAULT_MAX_TURNS = 3


def _config_value(env_config: Any, key: str) -> Any:
    if env_config is None:
        return None
    getter = getattr(env_config, "get", None)
    return getter(key) if callable(getter) else getattr(env_config, key, None)


def _turns_left(n: int) -> str:
    return f"{n} turn left." if n == 1 else f"{n} turns left."


class MultiTurnMathEnv(MathEnv):
    """An arithmetic problem with up to ``max_turns`` answers.

    ``max_turns`` comes from ``extras["max_turns"]`` (the dataset row), else ``env_config.max_turns``, else
    :data:`DEFAULT_MAX_TURNS`.
    """

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        max_turns = self.extras.get("max_turns")
        if max_turns is None:
            max_turns = _config_value(env_config, "max_turns")
        if max_turns is None:
            max_turns = DEFAULT_MAX_TURNS
        self.max_turns = positive_int(max_turns, "max_turns")
        self.answers: list[Any] = []

    def sample_task(self, seed: int | None = None) -> Task:
        return tasks.task_for_seed(seed, multi_turn=True)

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        result = self._grade(action)
        self.answers.append(result.value)
        metadata = self._metadata(result)
        metadata["turn"] = self.turns
        if result.correct:
            return BaseTextEnvStepOutput(observations=[], reward=1.0, done=True, metadata=metadata)
        left = self.max_turns - self.turns
        if left <= 0:
            metadata.update(end=END_TRUNCATED, truncated_by="max_turns")
            return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, metadata=metadata)
        if result.format_valid:
            feedback = f"Your answer {result.value} is incorrect. {_turns_left(self.turns_left())} Try again."
        else:
            feedback = (
                "I could not find a final answer. End your reply with the answer, a whole number, on its "
                f"own line as '#### N' (for example '#### 42'). {_turns_left(self.turns_left())}"
            )
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": feedback}], reward=0.0, done=False, metadata=metadata
        )

    def get_metrics(self) -> dict[str, Any]:
        """``turns``, ``solved``, ``format_valid`` (of the last answer) and ``distinct_answers`` tried."""
        metrics = super().get_metrics()
        metrics["distinct_answers"] = len({a for a in self.answers if a is not None})
        return metrics
