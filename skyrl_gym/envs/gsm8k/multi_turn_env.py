"""``GSM8kMultiTurnEnv`` (SkyRL's ``gsm8k_multi_turn``): the same problems, up to ``max_turns`` answers.

Each turn is scored with the strict rule: 1.0 for the right answer, which ends the episode;
``format_score / max_turns`` (0.2 in all by default) for a well-formed ``#### N`` that is wrong; 0.0 without
one. Until the last turn the model is asked again, in SkyRL's words:

- with more than one turn left: "Please provide your step-by-step reasoning, and also include a tentative
  numeric answer at the end in the exact format: '#### ANSWER'.";
- with one turn left: "Now provide only the final numeric answer in the exact format: '#### ANSWER'."

``max_turns`` comes from ``extras["max_turns"]``, else ``extras["extra_info"]["max_turns"]`` (SkyRL's two
places), else ``env_config.max_turns`` (5). An episode that runs out of turns without the right answer ends as
truncated by ``max_turns``. Metrics: ``steps``; aggregated: ``avg_steps``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field

from skyrl_gym.budget import END_TRUNCATED
from skyrl_gym.envs.base_text_env import BaseTextEnvStepOutput, positive_int
from skyrl_gym.envs.gsm8k import scoring
from skyrl_gym.envs.gsm8k.env import GSM8kConfig, GSM8kEnv
from skyrl_gym.settings import Count, Number, settings

__all__ = ["GSM8kMultiTurnConfig", "GSM8kMultiTurnEnv", "KEEP_GOING", "LAST_TURN"]

KEEP_GOING = (
    "Please provide your step-by-step reasoning, "
    "and also include a tentative numeric answer at the end in the exact format: '#### ANSWER'."
)
"""The observation after a turn that was not right, with more than one turn left (SkyRL's text)."""
LAST_TURN = "Now provide only the final numeric answer in the exact format: '#### ANSWER'."
"""The observation before the last turn (SkyRL's text)."""


@settings(frozen=True)
class GSM8kMultiTurnConfig(GSM8kConfig):
    """The settings of ``gsm8k_multi_turn``: those of ``gsm8k`` plus the turns and the format reward."""

    env_name: ClassVar[str] = "gsm8k_multi_turn"

    max_turns: Count = 5
    """Answers per episode when the row does not say (SkyRL's default)."""
    format_score: Annotated[Number, Field(ge=0, lt=1)] = 0.2
    """The reward for well-formed wrong answers over a whole episode, paid ``1/max_turns`` per turn."""

    def __post_init__(self) -> None:
        super().__post_init__()


def _row_max_turns(extras: dict[str, Any]) -> Any:
    if extras.get("max_turns") is not None:
        return extras["max_turns"]
    extra_info = extras.get("extra_info")
    if hasattr(extra_info, "get") and extra_info.get("max_turns") is not None:
        return extra_info["max_turns"]
    return None


class GSM8kMultiTurnEnv(GSM8kEnv):
    """SkyRL's multi-turn GSM8K environment with per-turn rewards (see the module docstring)."""

    config_class: type = GSM8kMultiTurnConfig

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        max_turns = _row_max_turns(self.extras)
        self.max_turns = positive_int(self.config.max_turns if max_turns is None else max_turns, "max_turns")
        self.format_score_per_turn: float = self.config.format_score / self.max_turns

    def _make_observation(self) -> list[dict[str, str]]:
        remaining = self.turns_left()
        if remaining <= 0:
            return []
        return [{"role": "user", "content": KEEP_GOING if remaining > 1 else LAST_TURN}]

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self._require_task()
        self.turns += 1
        self.last_answer = scoring.extract_solution(action, method=self.config.method)
        reward = scoring.compute_score(
            action,
            self.ground_truth,
            method=self.config.method,
            format_score=self.format_score_per_turn,
            score=1.0,
        )
        solved = reward == 1.0
        done = self.turns >= self.max_turns or solved
        metadata: dict[str, Any] = {"turn": self.turns, "answer": self.last_answer, "correct": solved}
        if done and not solved:
            metadata.update(end=END_TRUNCATED, truncated_by="max_turns")
        observations = [] if done else self._make_observation()
        return BaseTextEnvStepOutput(observations=observations, reward=reward, done=done, metadata=metadata)

    def get_metrics(self) -> dict[str, Any]:
        """``steps``: the turns the episode took."""
        return {"steps": self.turns}

    @staticmethod
    def aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, Any]:
        """``avg_steps`` over the episodes (``{}`` for none)."""
        if not metrics:
            return {}
        return {"avg_steps": sum(float(m.get("steps", 0)) for m in metrics) / len(metrics)}
