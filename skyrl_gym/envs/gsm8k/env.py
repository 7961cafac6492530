"""``GSM8kEnv`` (SkyRL's ``gsm8k``): one grade-school word problem, one answer, SkyRL's strict rule.

The model ends its answer with ``#### N``. The reward is 1.0 when the number after the first ``"#### "``
equals the ground truth as text (see :mod:`.scoring`), else 0.0; the episode is one turn and there is no
observation. ``env_config.method = "flexible"`` reads the last number in the text instead.

The ground truth is the dataset row's ``extras["reward_spec"]["ground_truth"]``; a row without it is refused
when the environment is made, as in SkyRL. Made without extras, ``reset(seed=...)`` draws a problem from the
offline task set (:mod:`.tasks`). Metadata: the ``answer`` read (``None`` when there is none) and whether it
is ``correct``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from skyrl_gym.core import Task
from skyrl_gym.envs.base_text_env import (
    BaseTextEnv,
    BaseTextEnvStepOutput,
    ConversationType,
    task_ground_truth,
)
from skyrl_gym.envs.gsm8k import scoring, tasks
from skyrl_gym.settings import read_settings, settings

__all__ = ["GSM8kConfig", "GSM8kEnv"]


@settings(frozen=True)
class GSM8kConfig:
    """The settings of ``gsm8k`` (``env_config``); every field has a default."""

    env_name: ClassVar[str] = "gsm8k"

    method: str = "strict"
    """How the answer is read: ``"strict"`` (after ``"#### "``, SkyRL's default) or ``"flexible"``."""
    tasks: str = "auto"
    """What ``reset(seed=...)`` draws: ``"auto"``, ``"gsm_symbolic"`` or ``"procedural"`` (see :mod:`.tasks`)."""

    def __post_init__(self) -> None:
        if self.method not in scoring.METHODS:
            raise ValueError(f"env_config.method must be 'strict' or 'flexible', got {self.method!r}")
        if self.tasks not in tasks.TASK_SOURCES:
            raise ValueError(
                f"env_config.tasks must be one of {', '.join(tasks.TASK_SOURCES)}, got {self.tasks!r}"
            )

    @classmethod
    def from_env_config(cls, env_config: Any) -> Any:
        """Read the fields from a dict, an OmegaConf ``DictConfig``, a dataclass or ``None``."""
        return read_settings(cls, env_config, cls.env_name)


class GSM8kEnv(BaseTextEnv):
    """SkyRL's single-turn GSM8K environment (constructor: ``GSM8kEnv(env_config=None, extras=None)``)."""

    config_class: type = GSM8kConfig

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.config = self.config_class.from_env_config(env_config)
        self.ground_truth = task_ground_truth(extras, type(self).__name__)
        self.max_turns = 1
        self.last_answer: str | None = None

    # -- tasks ----------------------------------------------------------------------------------------
    def sample_task(self, seed: int | None = None) -> Task:
        """A word problem from the offline task set, the same one for the same seed."""
        return tasks.task_for_seed(seed, self.config.tasks)

    def reference_action(self) -> str | None:
        """``"#### <ground truth>"``, which earns 1.0."""
        return None if self.ground_truth is None else f"#### {self.ground_truth}"

    # -- the episode ----------------------------------------------------------------------------------
    def _require_task(self) -> None:
        if self.ground_truth is None:
            raise ValueError(
                f"{type(self).__name__} needs a ground truth: make it with "
                "extras={'reward_spec': {'method': 'rule', 'ground_truth': '42'}}, "
                "or start it with reset(seed=...) to draw a problem from the offline task set"
            )

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        self._require_task()
        return prompt, {}

    def _get_reward(self, action: str) -> float:
        return scoring.compute_score(action, self.ground_truth, method=self.config.method)

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self._require_task()
        self.turns += 1
        self.last_answer = scoring.extract_solution(action, method=self.config.method)
        reward = self._get_reward(action)
        return BaseTextEnvStepOutput(
            observations=[],
            reward=reward,
            done=True,
            metadata={"answer": self.last_answer, "correct": reward == 1.0},
        )
