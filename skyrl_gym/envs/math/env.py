"""``MathEnv``: one arithmetic word problem, one answer, reward 1.0 when it is right.

The model writes its reasoning and ends with ``#### N`` or ``\\boxed{N}``; see :mod:`.scoring` for what
counts as an answer. The ground truth comes from the dataset row (``extras["reward_spec"]["ground_truth"]``);
made without one, the environment draws its problems from :mod:`.tasks` through ``reset(seed=...)``.
"""

from __future__ import annotations

from typing import Any

from skyrl_gym.core import Task
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType
from skyrl_gym.envs.math import scoring, tasks

__all__ = ["MathEnv"]


def ground_truth_of(extras: dict[str, Any]) -> Any:
    """``extras["reward_spec"]["ground_truth"]``, or ``None`` when the row has none."""
    reward_spec = extras.get("reward_spec")
    if isinstance(reward_spec, dict):
        return reward_spec.get("ground_truth")
    return None


class MathEnv(BaseTextEnv):
    """A single-turn arithmetic problem (SkyRL constructor: ``MathEnv(env_config=None, extras=None)``).

    ``step(answer)`` ends the episode with reward 1.0 for a correct final answer and 0.0 otherwise; its
    metadata holds the ``parsed_answer``, whether the answer's ``format_valid`` and whether it is ``correct``.
    """

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.ground_truth = ground_truth_of(self.extras)
        self.max_turns = 1
        self.solved = False
        self.format_valid = False

    # -- tasks --------------------------------------------------------------------------------------
    def sample_task(self, seed: int | None = None) -> Task:
        """A generated problem, the same one for the same seed (from the train split)."""
        return tasks.task_for_seed(seed)

    def reference_action(self) -> str | None:
        """``"#### <ground truth>"``, which always earns 1.0."""
        return None if self.ground_truth is None else f"#### {self.ground_truth}"

    # -- the episode ----------------------------------------------------------------------------------
    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        if self.ground_truth is None:
            raise ValueError(
                f"{type(self).__name__} needs a ground truth: make it with "
                "extras={'reward_spec': {'method': 'rule', 'ground_truth': '42'}} "
                "or start it with reset(seed=...) to draw a generated problem"
            )
        return prompt, {}

    def _grade(self, action: Any) -> scoring.Grade:
        result = scoring.grade(action if isinstance(action, str) else "", self.ground_truth)
        self.solved = result.correct
        self.format_valid = result.format_valid
        return result

    @staticmethod
    def _metadata(result: scoring.Grade) -> dict[str, Any]:
        return {
            "parsed_answer": result.value,
            "format_valid": result.format_valid,
            "correct": result.correct,
        }

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        result = self._grade(action)
        return BaseTextEnvStepOutput(
            observations=[], reward=result.reward, done=True, metadata=self._metadata(result)
        )

    def get_metrics(self) -> dict[str, Any]:
        """``turns``, ``solved`` and ``format_valid`` (of the last answer)."""
        return {"turns": self.turns, "solved": self.solved, "format_valid": self.format_valid}
