"""The tensor batch that flows from the generator through the algorithms to the training workers.

Layout (``B`` trajectories, ``P`` = longest prompt, ``T`` = longest response, ``L = P + T``)::

    input_ids [B, L]   = [ pad .. pad  prompt tokens | response tokens  pad .. pad ]
                           <- prompts left-padded to P -><- responses right-padded to T ->

so every row's response starts at column ``P``: response token ``j`` of row ``i`` is
``input_ids[i, P + j]``. A causal LM's logits at position ``p`` predict the token at ``p + 1``, so the
logits that score the response are ``logits[:, P - 1 : P - 1 + T]`` (:meth:`TrainingBatch.response_logits`)
and their targets are ``input_ids[:, P:]`` (:attr:`TrainingBatch.response_ids`); the logits at the last
position ``L - 1`` predict nothing we train on. Every per-token tensor (``response_mask``, log-probs,
rewards, advantages, returns, values) is ``[B, T]`` over these response positions.

Because prompts are left-padded, pass ``position_ids`` to the model along with ``attention_mask``
(transformers otherwise numbers positions from the first column, padding included).

Error trajectories (``end == "error"``) stay in the batch, flagged in ``valid``, with an all-zero
``response_mask``: they keep their place in their group but contribute to no loss and no statistic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["TrainingBatch"]

_TENSOR_FIELDS = (
    "input_ids",
    "attention_mask",
    "position_ids",
    "response_mask",
    "token_level_rewards",
    "group_ids",
    "valid",
    "rollout_log_probs",
    "old_log_probs",
    "ref_log_probs",
    "values",
    "advantages",
    "returns",
)


@dataclasses.dataclass
class TrainingBatch:
    """Padded tensors of a batch of trajectories; see the module docstring for the layout."""

    input_ids: torch.Tensor
    """[B, L] long: left-padded prompts then right-padded responses."""
    attention_mask: torch.Tensor
    """[B, L] long: 1 on real tokens, 0 on padding."""
    position_ids: torch.Tensor
    """[B, L] long: position of each real token in its own sequence (0 on padding)."""
    response_mask: torch.Tensor
    """[B, T] float: 1 on model-generated response tokens (the loss mask), 0 on observations and padding."""
    token_level_rewards: torch.Tensor
    """[B, T] float: each turn's reward on the last token the model generated in that turn."""
    group_ids: torch.Tensor
    """[B] long: which prompt each trajectory is a sample of."""
    valid: torch.Tensor
    """[B] bool: False for trajectories that ended in error (left out of every statistic)."""
    prompt_width: int
    """P: the padded prompt width; the response starts at column P of input_ids."""
    rollout_log_probs: torch.Tensor | None = None
    """[B, T] float: the inference engine's log-probs of the response tokens (None if it reported none)."""
    old_log_probs: torch.Tensor | None = None
    """[B, T] float: the policy's log-probs before this update (filled by the policy worker)."""
    ref_log_probs: torch.Tensor | None = None
    """[B, T] float: the reference model's log-probs (filled when a KL term is on)."""
    values: torch.Tensor | None = None
    """[B, T] float: the critic's values before this update (gae)."""
    advantages: torch.Tensor | None = None
    """[B, T] float: filled by :func:`~skyrl_train.training.algorithms.compute_batch_advantages`."""
    returns: torch.Tensor | None = None
    """[B, T] float: the critic's targets (equal to the advantages for outcome estimators)."""

    # ------------------------------------------------------------------------------------ building

    @classmethod
    def from_trajectories(cls, trajectories: Sequence[Any], pad_id: int) -> TrainingBatch:
        """Pad a list of trajectories into a batch.

        Each trajectory needs ``prompt_ids``, ``response_ids``, ``loss_mask`` (one per response token) and
        ``group_id``; it may have ``logprobs`` (one per response token, or None), ``turn_spans`` and
        ``turn_rewards`` (each turn's reward goes on the last token of its span), ``reward`` (used, on the
        last model token, when there are no turn rewards) and ``end`` (``"error"`` makes it invalid).
        """
        if not trajectories:
            raise ValueError("cannot build a TrainingBatch from no trajectories")
        for i, traj in enumerate(trajectories):
            _check_trajectory(i, traj)
        # An error before the prompt was tokenised (the environment failed to start) leaves no prompt: one pad
        # token stands in, so that the masked row keeps its place in its group instead of failing the batch.
        prompts = [list(t.prompt_ids) or [pad_id] for t in trajectories]
        batch_size = len(trajectories)
        prompt_width = max(len(p) for p in prompts)
        response_width = max(max(len(t.response_ids) for t in trajectories), 1)
        width = prompt_width + response_width

        input_ids = torch.full((batch_size, width), pad_id, dtype=torch.long)
        attention_mask = torch.zeros((batch_size, width), dtype=torch.long)
        response_mask = torch.zeros((batch_size, response_width), dtype=torch.float32)
        rewards = torch.zeros((batch_size, response_width), dtype=torch.float32)
        have_logprobs = all(getattr(t, "logprobs", None) is not None for t in trajectories)
        log_probs = torch.zeros((batch_size, response_width), dtype=torch.float32) if have_logprobs else None
        valid = torch.tensor([getattr(t, "end", None) != "error" for t in trajectories], dtype=torch.bool)

        for i, traj in enumerate(trajectories):
            n_prompt, n_response = len(prompts[i]), len(traj.response_ids)
            start = prompt_width - n_prompt
            input_ids[i, start:prompt_width] = torch.tensor(prompts[i], dtype=torch.long)
            attention_mask[i, start : prompt_width + n_response] = 1
            if n_response:
                input_ids[i, prompt_width : prompt_width + n_response] = torch.tensor(
                    traj.response_ids, dtype=torch.long
                )
                if valid[i]:
                    response_mask[i, :n_response] = torch.tensor(traj.loss_mask, dtype=torch.float32)
                if log_probs is not None:
                    log_probs[i, :n_response] = torch.tensor(traj.logprobs, dtype=torch.float32)
            for position, reward in _reward_positions(traj):
                rewards[i, position] += reward
        if log_probs is not None:
            log_probs = log_probs * response_mask
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0) * attention_mask
        return cls(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            response_mask=response_mask,
            token_level_rewards=rewards * response_mask,
            group_ids=torch.tensor([int(t.group_id) for t in trajectories], dtype=torch.long),
            valid=valid,
            prompt_width=prompt_width,
            rollout_log_probs=log_probs,
        )

    # ------------------------------------------------------------------------------------ alignment

    @property
    def batch_size(self) -> int:
        """B: the number of trajectories."""
        return self.input_ids.shape[0]

    @property
    def response_width(self) -> int:
        """T: the padded response width."""
        return self.input_ids.shape[1] - self.prompt_width

    @property
    def response_ids(self) -> torch.Tensor:
        """[B, T]: the response tokens (the targets of :meth:`response_logits`), padding included."""
        return self.input_ids[:, self.prompt_width :]

    def response_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """The [B, T, V] slice of a model's ``logits [B, L, V]`` that predicts the response tokens.

        ``logits[:, p]`` predicts ``input_ids[:, p + 1]``, so response token ``j`` (at column ``P + j``) is
        scored by ``logits[:, P - 1 + j]``.
        """
        p = self.prompt_width
        return logits[:, p - 1 : p - 1 + self.response_width]

    @property
    def num_tokens(self) -> int:
        """Model-generated tokens in the batch (the token_mean denominator)."""
        return int(self.response_mask.sum().item())

    @property
    def num_sequences(self) -> int:
        """Rows with at least one model-generated token (the sequence-mean denominator)."""
        return int((self.response_mask.sum(-1) > 0).sum().item())

    # ------------------------------------------------------------------------------------ moving

    def __len__(self) -> int:
        return self.batch_size

    def _map(self, fn: Any) -> TrainingBatch:
        changes = {
            name: fn(getattr(self, name)) for name in _TENSOR_FIELDS if getattr(self, name) is not None
        }
        return dataclasses.replace(self, **changes)

    def select(self, rows: slice | Sequence[int] | torch.Tensor) -> TrainingBatch:
        """A batch of the given rows (same padded widths)."""
        if not isinstance(rows, slice):
            rows = torch.as_tensor(rows, dtype=torch.long)
        return self._map(lambda t: t[rows])

    def split(self, micro_batch_size: int) -> list[TrainingBatch]:
        """Consecutive micro-batches of ``micro_batch_size`` rows (the last one may be smaller).

        Keep groups together by making the size a multiple of the samples per prompt when it matters.
        """
        if micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
        return [
            self.select(slice(s, s + micro_batch_size)) for s in range(0, self.batch_size, micro_batch_size)
        ]

    def to(self, device: torch.device | str) -> TrainingBatch:
        """The same batch with every tensor on ``device``."""
        return self._map(lambda t: t.to(device))


def _check_trajectory(index: int, traj: Any) -> None:
    n = len(traj.response_ids)
    if len(traj.prompt_ids) == 0 and getattr(traj, "end", None) != "error":
        raise ValueError(
            f"trajectory {index} has an empty prompt: there is no position to predict its first token"
        )
    if len(traj.loss_mask) != n:
        raise ValueError(
            f"trajectory {index}: {len(traj.loss_mask)} loss_mask entries for {n} response tokens"
        )
    logprobs = getattr(traj, "logprobs", None)
    if logprobs is not None and len(logprobs) != n:
        raise ValueError(f"trajectory {index}: {len(logprobs)} logprobs for {n} response tokens")


def _model_token_runs(loss_mask: Sequence[int]) -> list[tuple[int, int]]:
    runs, start = [], None
    for j, m in enumerate(list(loss_mask) + [0]):
        if m and start is None:
            start = j
        elif not m and start is not None:
            runs.append((start, j))
            start = None
    return runs


def _reward_positions(traj: Any) -> list[tuple[int, float]]:
    """Where each reward goes: a turn's reward on the last model token of its turn.

    Turns come from ``turn_spans`` (or, without them, the runs of 1s in ``loss_mask``); when they do not
    line up with ``turn_rewards``, the whole ``reward`` goes on the last model token.
    """
    mask = list(traj.loss_mask)
    model_positions = [j for j, m in enumerate(mask) if m]
    if not model_positions:
        return []
    turn_rewards = list(getattr(traj, "turn_rewards", None) or [])
    spans = list(getattr(traj, "turn_spans", None) or []) or _model_token_runs(mask)
    if turn_rewards and len(spans) == len(turn_rewards):
        placed = []
        for (start, end), reward in zip(spans, turn_rewards, strict=True):
            inside = [j for j in range(start, min(end, len(mask))) if mask[j]]
            before = [j for j in model_positions if j < end]
            position = inside[-1] if inside else (before[-1] if before else model_positions[0])
            placed.append((position, float(reward)))
        return placed
    total = sum(turn_rewards) if turn_rewards else float(getattr(traj, "reward", 0.0))
    return [(model_positions[-1], float(total))]
