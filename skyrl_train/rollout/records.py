"""What a generator hands to the trainer: trajectories (token ids, loss mask, rewards, how each ended).

A :class:`TrajectoryResult` is one sampled episode of one prompt. Its tokens are exactly what the inference engine
saw and produced: ``prompt_ids`` (the chat-templated prompt) followed by ``response_ids`` (the model's turns
and the environment's observations, in order). ``loss_mask`` is 1 on the tokens the model generated and 0 on
everything the chat template or the environment added, so a policy loss only ever trains what the model
wrote.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

__all__ = [
    "END_STATES",
    "EndState",
    "Generator",
    "GeneratorOutput",
    "TrajectoryResult",
]

EndState = Literal["terminated", "truncated", "context_exhausted", "error"]
END_STATES: tuple[EndState, ...] = ("terminated", "truncated", "context_exhausted", "error")
"""How a trajectory ends.

- ``terminated``: the environment ended the episode (a final answer, a solved task);
- ``truncated``: a turn budget ran out (the environment's ``max_turns`` or another of its budgets, or
  ``generator.max_turns``); ``truncated_by`` names it;
- ``context_exhausted``: a token budget left no room for another model turn while the environment still
  wanted one: the next input would pass ``generator.max_input_length``, or the model has generated
  ``generator.max_tokens_per_trajectory`` tokens; ``truncated_by`` names which;
- ``error``: the environment or its infrastructure failed (an error end of the environment, or an exception
  in ``make``, ``init``, ``step`` or generation). ``error`` says what happened. Not a score: trainers leave
  these trajectories out of their advantage statistics and count them instead.
"""


@dataclasses.dataclass
class TrajectoryResult:
    """One multi-turn episode, token in, token out (what a :class:`skyrl_train.rollout.Trajectory` produces).

    Token lists: ``response_ids``, ``loss_mask`` and ``logprobs`` have one entry per response token.
    ``turn_spans[i] = (start, end)`` are the positions in ``response_ids`` of the tokens the model generated
    in turn ``i`` (end exclusive); ``turn_rewards[i]`` is the reward the environment gave for that turn, so
    a token-level reward belongs at ``response_ids[end - 1]``.
    """

    prompt_ids: list[int]
    """The chat-templated prompt, with the generation prompt (``<|im_start|>assistant\\n`` for ChatML)."""
    response_ids: list[int] = dataclasses.field(default_factory=list)
    """Model tokens and observation tokens after the prompt."""
    loss_mask: list[int] = dataclasses.field(default_factory=list)
    """1 on model-generated tokens, 0 on template and observation tokens."""
    logprobs: list[float] | None = dataclasses.field(default_factory=list)
    """The engine's log-probability of each response token (0.0 on non-model tokens); ``None`` if the
    engine did not report them."""
    policy_versions: list[int] | None = dataclasses.field(default_factory=list)
    """The engine's policy version that produced each response token (-1 on non-model tokens); a turn that ran
    across an in-flight weight update holds two. ``None`` if the engine does not report them."""
    turn_spans: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    """``(start, end)`` of each model turn in ``response_ids``."""
    turn_rewards: list[float] = dataclasses.field(default_factory=list)
    """The environment's reward for each model turn."""
    reward: float = 0.0
    """The trajectory's reward: the sum of ``turn_rewards`` (a deferred verification's reward is in the last)."""
    end: EndState = "error"
    """How the trajectory ended; see :data:`END_STATES`."""
    truncated_by: str | None = None
    """For ``truncated``/``context_exhausted``: which budget ended it (``max_turns``, ``max_input_length``...)."""
    error: str | None = None
    """For ``error``: what went wrong."""
    stop_reason: str | None = None
    """The engine's stop reason for the last model turn (``stop``, ``length``, ``abort``)."""
    num_turns: int = 0
    """Model turns played."""
    messages: list[dict[str, str]] = dataclasses.field(default_factory=list)
    """The visible conversation the tokens encode: prompt, then each assistant turn and the observations
    that followed it (observations that came with the end of the episode are not part of it)."""
    actions: list[str] = dataclasses.field(default_factory=list)
    """The text each model turn gave ``env.step`` (its message without an end-of-sequence token the template
    does not end turns with): what a replay of the episode steps the environment with."""
    final_observations: list[dict[str, str]] = dataclasses.field(default_factory=list)
    """The observations of the episode's last step (its end, or the step after which a budget ended it): no
    model turn followed them, so they are not in ``messages`` nor in the tokens."""
    env_class: str = ""
    """The environment's registered id."""
    env_metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    """``env.get_metrics()`` at the end of the episode."""
    verification: dict[str, Any] | None = None
    """What the environment's deferred verification (``env.evaluate()``) returned, its ``reward`` already added
    to the last turn's; ``None`` when the environment verified in its last step (or has nothing to verify)."""
    group_id: int = 0
    """Which prompt this is a sample of (``group_offset`` + the row's position in the batch)."""
    sample_index: int = 0
    """Which of the prompt's ``n_samples`` this is."""
    data_source: str | None = None
    """The row's ``data_source`` column, for per-source evaluation metrics."""
    generate_s: float = 0.0
    """Seconds spent waiting for the inference engine."""
    env_s: float = 0.0
    """Seconds spent in the environment (make, init, steps, close)."""

    @property
    def is_error(self) -> bool:
        """Whether the trajectory ended in error (to leave out of advantage statistics)."""
        return self.end == "error"

    @property
    def num_model_tokens(self) -> int:
        """How many response tokens the model generated (``sum(loss_mask)``)."""
        return sum(self.loss_mask)

    @property
    def input_ids(self) -> list[int]:
        """``prompt_ids + response_ids``."""
        return self.prompt_ids + self.response_ids

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (for sample dumps)."""
        return dataclasses.asdict(self)


@dataclasses.dataclass
class GeneratorOutput:
    """A batch of trajectories, ordered by prompt then sample, and the batch's metrics."""

    trajectories: list[TrajectoryResult]
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)

    def groups(self) -> dict[int, list[TrajectoryResult]]:
        """The trajectories by ``group_id`` (one list per prompt), in order."""
        grouped: dict[int, list[TrajectoryResult]] = {}
        for trajectory in self.trajectories:
            grouped.setdefault(trajectory.group_id, []).append(trajectory)
        return grouped


class Generator(abc.ABC):
    """Turns dataset rows into trajectories by playing them out with a model and environments."""

    @abc.abstractmethod
    async def generate(
        self,
        rows: Sequence[dict[str, Any]],
        n_samples: int,
        sampling_params: Any,
        *,
        group_offset: int = 0,
    ) -> GeneratorOutput:
        """Play ``n_samples`` trajectories of every row; ``group_id`` of row ``i`` is ``group_offset + i``."""
