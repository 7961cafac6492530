"""Training batches as the workers see them: tensor dicts, row slices, micro-batches, padding and loss weights.

A batch is anything with the tensor fields of :class:`skyrl_train.training.batch.TrainingBatch` (a dataclass or a
plain dict): ``input_ids [B, L]`` (left-padded prompt followed by the right-padded response),
``attention_mask [B, L]`` and ``response_mask [B, T]``, where the response is the last ``T`` columns, so the
log-probability of token ``L - T + t`` comes from the logits at position ``L - T + t - 1``.

Nothing here knows about models or processes: a :class:`~skyrl_train.training.workers.group.WorkerGroup` uses the
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
    "balance_micro_batches",
    "batch_size",
    "batch_tensors",
    "iter_micro_batches",
    "iter_token_micro_batches",
    "micro_batch_weight",
    "PackedBatch",
    "num_sequences",
    "pack_micro_batch",
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


def iter_token_micro_batches(
    tensors: Mapping[str, torch.Tensor], micro_batch_size: int, max_tokens: int | None
) -> Iterator[dict]:
    """Consecutive slices of at most ``micro_batch_size`` rows and, past the first row of a slice, at most
    ``max_tokens`` tokens as :func:`pack_micro_batch` lays them out (a prompt already in the slice costs
    nothing again). Activation memory grows with those tokens, so this bounds it whatever the lengths.
    ``max_tokens=None``: rows only, as :func:`iter_micro_batches`.
    """
    if max_tokens is None:
        yield from iter_micro_batches(tensors, micro_batch_size)
        return
    input_ids, attention_mask = tensors["input_ids"], tensors["attention_mask"].bool()
    size = batch_size(tensors)
    prompt_width = input_ids.shape[1] - tensors["response_mask"].shape[1]
    start, used, prompts = 0, 0, set()
    for row in range(size):
        prompt = input_ids[row, :prompt_width][attention_mask[row, :prompt_width]].cpu().numpy().tobytes()
        cost = int(attention_mask[row, prompt_width:].sum()) + (
            0 if prompt in prompts else int(attention_mask[row, :prompt_width].sum())
        )
        if row > start and (row - start >= micro_batch_size or used + cost > max_tokens):
            yield slice_batch(tensors, start, row)
            start, used, prompts = row, 0, set()
            cost = int(attention_mask[row].sum())
        used += cost
        prompts.add(prompt)
    if size > start:
        yield slice_batch(tensors, start, size)


def balance_micro_batches(micro_batches: list[dict], count: int) -> list[tuple[dict, bool]]:
    """Exactly ``count`` micro-batches from ``micro_batches``, each with a flag that says it is padding.

    Under FSDP every rank must run the same number of forward and backward passes (each one all-gathers
    parameters and reduce-scatters gradients with the other ranks), but micro-batches cut by tokens differ
    in number between ranks. The micro-batch with the most rows is halved until there are ``count`` or
    every one is a single row; the rest is padding: copies of the one-row micro-batch with the fewest
    tokens, whose loss the caller weights by 0 and leaves out of its metrics, so the step is unchanged.
    """
    if count < len(micro_batches):
        raise ValueError(f"cannot fit {len(micro_batches)} micro-batches into {count}")
    if not micro_batches:
        raise ValueError("no micro-batch to pad from: the rank has no rows")
    out = list(micro_batches)
    while len(out) < count:
        index = max(range(len(out)), key=lambda i: batch_size(out[i]))
        rows = batch_size(out[index])
        if rows < 2:
            break
        half = rows // 2
        out[index : index + 1] = [slice_batch(out[index], 0, half), slice_batch(out[index], half, rows)]
    balanced = [(mb, False) for mb in out]
    if len(out) < count:
        tokens = [int(mb["attention_mask"].sum()) for mb in out]
        smallest = out[min(range(len(out)), key=tokens.__getitem__)]
        balanced += [(smallest, True)] * (count - len(out))
    return balanced


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


@dataclasses.dataclass
class PackedBatch:
    """A micro-batch laid out without padding, each shared prompt once.

    Rows whose prompts are the same tokens (the samples of one GRPO group) form one segment
    ``[prompt, response 1, response 2, ...]``; every other row is a segment of its own. Segments are packed
    first-fit into ``R`` rows of ``N`` tokens. ``attention_mask`` is ``[R, 1, N, N]`` (True: may attend):
    a prompt token sees the earlier tokens of its prompt, a response token its prompt and the earlier tokens
    of its own response, nothing of another segment or another response; each padding token sees only itself
    (so no softmax row is empty). ``position_ids`` restart at 0 with each prompt and continue from the
    prompt's length in each response, exactly as in the padded layout, so the model computes the same
    numbers up to floating-point order.
    """

    input_ids: torch.Tensor
    """[R, N] long."""
    position_ids: torch.Tensor
    """[R, N] long."""
    attention_mask: torch.Tensor
    """[R, 1, N, N] bool."""
    rows: torch.Tensor
    """[M] long: the packed row of the position whose output predicts each response token."""
    cols: torch.Tensor
    """[M] long: the packed column of that position."""
    labels: torch.Tensor
    """[M] long: the response token it predicts."""
    out_rows: torch.Tensor
    """[M] long: the micro-batch row of that response token."""
    out_cols: torch.Tensor
    """[M] long: its response column (0 .. T-1)."""
    shape: tuple[int, int]
    """``(b, T)``: the shape of the per-token outputs."""
    tokens: int
    """Real tokens in the packed rows (what the model computes, padding aside)."""
    attended: int
    """Query-key pairs the mask allows (the attention's share of the work)."""

    def scatter(self, values: torch.Tensor) -> torch.Tensor:
        """Per-prediction ``values [M]`` as a ``[b, T]`` float32 tensor, 0 where nothing was predicted."""
        out = values.new_zeros(self.shape, dtype=torch.float32)
        return out.index_put((self.out_rows, self.out_cols), values.float())


def pack_micro_batch(mb: Mapping[str, torch.Tensor], pad_id: int = 0) -> PackedBatch:
    """Lay a padded micro-batch (see the module docstring) out as a :class:`PackedBatch`.

    A row's prompt is its real tokens before column ``L - T``, its response the real tokens from there on
    (right-padded). Rows without a response token predict nothing and are left out.
    """
    input_ids, attention_mask = mb["input_ids"].cpu(), mb["attention_mask"].cpu().bool()
    rows_n, length = input_ids.shape
    response_len = mb["response_mask"].shape[1]
    prompt_width = length - response_len
    # segment key (the prompt's tokens) -> (prompt, [(row, response)])
    segments: dict[bytes, tuple[torch.Tensor, list[tuple[int, torch.Tensor]]]] = {}
    for row in range(rows_n):
        response = input_ids[row, prompt_width:][attention_mask[row, prompt_width:]]
        if response.numel() == 0:
            continue
        prompt = input_ids[row, :prompt_width][attention_mask[row, :prompt_width]]
        if prompt.numel() == 0:
            raise ValueError(
                f"row {row} has an empty prompt: there is no position to predict its first token"
            )
        key = prompt.numpy().tobytes()
        segments.setdefault(key, (prompt, []))[1].append((row, response))
    seg_list = list(segments.values())
    seg_lengths = [len(p) + sum(len(r) for _, r in rs) for p, rs in seg_list]
    # first-fit decreasing into rows as long as the longest segment: little padding, no row longer than needed
    capacity = max(seg_lengths, default=1)
    packed_rows: list[list[int]] = []
    room: list[int] = []
    for index in sorted(range(len(seg_list)), key=lambda i: -seg_lengths[i]):
        for r, free in enumerate(room):
            if seg_lengths[index] <= free:
                packed_rows[r].append(index)
                room[r] -= seg_lengths[index]
                break
        else:
            packed_rows.append([index])
            room.append(capacity - seg_lengths[index])
    n_rows, width = max(len(packed_rows), 1), capacity
    ids = torch.full((n_rows, width), pad_id, dtype=torch.long)
    pos = torch.zeros((n_rows, width), dtype=torch.long)
    # segment id and branch (0: prompt, j: response j) of every column; padding gets a segment of its own
    seg_id = -torch.arange(1, n_rows * width + 1, dtype=torch.long).view(n_rows, width)
    branch = torch.zeros((n_rows, width), dtype=torch.long)
    pred_rows, pred_cols, labels, out_rows, out_cols = [], [], [], [], []
    tokens = 0
    for r, members in enumerate(packed_rows):
        col = 0
        for index in members:
            prompt, responses = seg_list[index]
            n_prompt = len(prompt)
            ids[r, col : col + n_prompt] = prompt
            pos[r, col : col + n_prompt] = torch.arange(n_prompt)
            seg_id[r, col : col + n_prompt] = index
            last_prompt_col = col + n_prompt - 1
            col += n_prompt
            for j, (row, response) in enumerate(responses, start=1):
                n = len(response)
                ids[r, col : col + n] = response
                pos[r, col : col + n] = torch.arange(n_prompt, n_prompt + n)
                seg_id[r, col : col + n] = index
                branch[r, col : col + n] = j
                # token t is predicted by the output at the previous token: the prompt's last, then its own
                pred_cols.append(torch.cat([torch.tensor([last_prompt_col]), torch.arange(col, col + n - 1)]))
                pred_rows.append(torch.full((n,), r, dtype=torch.long))
                labels.append(response)
                out_rows.append(torch.full((n,), row, dtype=torch.long))
                out_cols.append(torch.arange(n))
                col += n
        tokens += col
    index = torch.arange(width)
    mask = (
        (seg_id[:, :, None] == seg_id[:, None, :])
        & (index[None, None, :] <= index[None, :, None])
        & ((branch[:, None, :] == 0) | (branch[:, None, :] == branch[:, :, None]))
    )

    def cat(parts: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(parts).long() if parts else torch.zeros(0, dtype=torch.long)

    real = seg_id >= 0
    return PackedBatch(
        input_ids=ids,
        position_ids=pos,
        attention_mask=mask[:, None],
        rows=cat(pred_rows),
        cols=cat(pred_cols),
        labels=cat(labels),
        out_rows=cat(out_rows),
        out_cols=cat(out_cols),
        shape=(rows_n, response_len),
        tokens=tokens,
        attended=int((mask & real[:, :, None]).sum()),
    )
