"""``AIMEEnv`` (SkyRL's ``aime``): one competition problem, one answer, reward 1.0 or -1.0.

The model ends with a line ``Answer: N`` (``Answer: \\boxed{N}`` works too). The reward is 1.0 when that
answer equals the ground truth after Minerva's normalisation and -1.0 otherwise, a missing answer included;
see :mod:`.scoring` (an end-of-turn token such as ``<|im_end|>`` right after the answer is not part of it).
The episode is one turn, without observation; the metadata holds SkyRL's ``acc`` (bool) and ``pred`` (the
normalised prediction).

The ground truth is ``extras["reward_model"]["ground_truth"]`` (SkyRL's key for this environment) or, for
rows in the format of the other environments, ``extras["reward_spec"]["ground_truth"]``; extras with neither
are refused when the environment is made. Made without extras, ``reset(seed=...)`` draws a generated problem
(:mod:`.tasks`).
"""

from __future__ import annotations

from typing import Any

from skyrl_gym.core import Task
from skyrl_gym.envs.aime import scoring, tasks
from skyrl_gym.envs.base_text_env import (
    BaseTextEnv,
    BaseTextEnvStepOutput,
    ConversationType,
    MissingGroundTruthError,
    task_ground_truth,
)

__all__ = ["AIMEEnv", "GROUND_TRUTH_KEYS"]

GROUND_TRUTH_KEYS = ("reward_model", "reward_spec")
"""Where a row's ground truth is looked for, in order: SkyRL's AIME key, then the usual one."""


def aime_ground_truth(extras: dict[str, Any] | None) -> Any:
    """The row's ground truth under ``reward_model`` or ``reward_spec``; ``None`` without extras."""
    if extras is None:
        return None
    for key in GROUND_TRUTH_KEYS:
        if key in extras:
            return task_ground_truth(extras, "AIMEEnv", key=key)
    raise MissingGroundTruthError(
        "reward_model field is required: AIMEEnv needs extras['reward_model'] (or extras['reward_spec']) = "
        f"{{'method': 'rule', 'ground_truth': ...}}; the extras given have keys {sorted(extras)}"
    )


class AIMEEnv(BaseTextEnv):
    """SkyRL's AIME environment (constructor: ``AIMEEnv(env_config=None, extras=None)``; no settings)."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.ground_truth = aime_ground_truth(extras)
        self.max_turns = 1

    def sample_task(self, seed: int | None = None) -> Task:
        """A generated problem with a verified answer, the same one for the same seed."""
        return tasks.task_for_seed(seed)

    def reference_action(self) -> str | None:
        """``"Answer: <ground truth>"``, which earns 1.0."""
        return None if self.ground_truth is None else f"Answer: {self.ground_truth}"

    def _require_task(self) -> None:
        if self.ground_truth is None:
            raise ValueError(
                "AIMEEnv needs a ground truth: make it with extras={'reward_model': {'method': 'rule', "
                "'ground_truth': '42'}}, or start it with reset(seed=...) to draw a generated problem"
            )

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        self._require_task()
        return prompt, {}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self._require_task()
        self.turns += 1
        score = scoring.compute_score(action, self.ground_truth)
        return BaseTextEnvStepOutput(
            observations=[],
            reward=score["score"],
            done=True,
            metadata={"acc": score["acc"], "pred": score["pred"]},
        )
