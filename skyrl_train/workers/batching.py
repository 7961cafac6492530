"""Training batches as the workers see them: tensor dicts, row slices, micro-batches, padding and loss weights.

A batch is anything with the tensor fields of :class:`skyrl_train.batch.TrainingBatch` (a dataclass or a
plain dict): ``input_ids [B, L]`` (left-padded prompt followed by the right-padded response),
``attention_mask [B, L]`` and ``response_mask [B, T]``, where the response is the last ``T`` columns, so the
log-probability of token ``L - T + t`` comes from the logits at position ``L - T + t - 1``.

Nothing here knows about models or processes: a :class:`~skyrl_train.workers.group.WorkerGroup` uses the
same functions to cut a batch into one slice per rank.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import torch

__all__ = [
    "TOKEN_MEAN",
    "Batch",
    "batch_size",
    "batch_tensors",
    "iter_micro_batches",
    "micro_batch_weight",
    "num_sequences",
    "pad_right",
    "position_ids",
    "run_mini_batches",
    "slice_batch",
    "trim_padding",
]

Batch = Any
"""A ``TrainingBatch``, or a dict of tensors with the same field names."""

TOKEN_MEAN = "token_mean"
"""The loss reduction that weighs every response token alike (the others weigh sequences)."""


def batch_tensors(batch: Batch) -> dict[str, torch.Tensor]:
    """The tensor fields of a batch (a dataclass, a mapping or any object) as a plain dict."""
    if isinstance(batch, Mapping):
        items = batch.items()
    elif dataclasses.is_dataclass(batch):
        items = ((f.name, getattr(batch, f.name)) for f in dataclasses.fields(batch))
    else:
        items = vars(batch).items()
    return {key: value for key, value in items if isinstance(value, torch.Tensor)}


def batch_size(tensors: Mapping[str, torch.Tensor]) -> int:
    """Number of rows of a tensor dict (the first dimension of ``input_ids``)."""
    if "input_ids" not in tensors:
        raise KeyError(f"a training batch needs 'input_ids'; it has {sorted(tensors)}")
    return int(tensors["input_ids"].shape[0])


def slice_batch(tensors: Mapping[str, torch.Tensor], start: int, end: int) -> dict[str, torch.Tensor]:
    """Rows ``start:end`` of every per-row tensor (tensors whose first dimension is the batch size)."""
    size = batch_size(tensors)
    return {
        key: (value[start:end] if value.dim() > 0 and value.shape[0] == size else value)
        for key, value in tensors.items()
    }


def iter_micro_batches(tensors: Mapping[str, torch.Tensor], micro_batch_size: int) -> Iterator[dict]:
    """Consecutive slices of at most ``micro_batch_size`` rows."""
    size = batch_size(tensors)
    for start in range(0, size, micro_batch_size):
        yield slice_batch(tensors, start, min(start + micro_batch_size, size))


def run_mini_batches(worker: Any, batch: Batch, mini_batch_size: int, update_epochs: int, role: str):
    """Call ``worker.train_step`` on consecutive mini-batches and average the metrics.

    ``update_epochs`` passes over the batch; the result carries ``<role>/num_updates`` too.
    """
    tensors = batch_tensors(batch)
    size = batch_size(tensors)
    if mini_batch_size < 1 or size % mini_batch_size:
        raise ValueError(f"the batch of {size} rows does not split into mini-batches of {mini_batch_size}")
    totals: dict[str, float] = {}
    steps = 0
    for _ in range(update_epochs):
        for start in range(0, size, mini_batch_size):
            metrics = worker.train_step(slice_batch(tensors, start, start + mini_batch_size))
            for key, value in metrics.items():
                totals[key] = totals.get(key, 0.0) + value
            steps += 1
    out = {key: value / steps for key, value in totals.items()}
    out[f"{role}/num_updates"] = float(steps)
    return out


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position of every token among its row's real tokens (left-padded prompts count from their first
    real token, as during generation)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def trim_padding(mb: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """Drop columns that are padding in every row of a micro-batch.

    Returns the trimmed ``input_ids``/``attention_mask``, the number of response columns kept (the response
    stays the last columns) and the full response length ``T``.
    """
    input_ids, attention_mask = mb["input_ids"], mb["attention_mask"]
    length, response_len = input_ids.shape[1], mb["response_mask"].shape[1]
    used = attention_mask.bool().any(dim=0).nonzero()
    if used.numel() == 0:
        return input_ids, attention_mask, response_len, response_len
    first = min(int(used[0]), length - response_len - 1)  # keep the last prompt token: it predicts token 0
    first = max(first, 0)
    last = max(int(used[-1]) + 1, length - response_len + 1)
    kept_response = last - (length - response_len)
    return input_ids[:, first:last], attention_mask[:, first:last], kept_response, response_len


def pad_right(values: torch.Tensor, length: int) -> torch.Tensor:
    """``values [b, n]`` padded with zeros on the right to ``[b, length]``."""
    if values.shape[1] == length:
        return values
    return torch.nn.functional.pad(values, (0, length - values.shape[1]))


def num_sequences(response_mask: torch.Tensor) -> float:
    """Rows with at least one response token (what the sequence-mean reductions average over)."""
    return float((response_mask.sum(-1) > 0).sum())


def micro_batch_weight(
    response_mask: torch.Tensor, reduction: str, tokens: float, sequences: float, world_size: int
) -> float:
    """Factor on a micro-batch's reduced loss so that the accumulated gradient equals the gradient of the
    loss reduced over the whole (all-rank) mini-batch of ``tokens`` response tokens in ``sequences`` rows.

    FSDP averages gradients over ranks, hence the ``world_size`` factor.
    """
    if reduction == TOKEN_MEAN:
        share = float(response_mask.sum()) / max(tokens, 1.0)
    else:
        share = num_sequences(response_mask) / max(sequences, 1.0)
    return share * world_size
