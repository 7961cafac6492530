"""Masked statistics and the loss reductions that turn a [B, T] matrix of token losses into one number.

Every function takes a ``mask`` of the same shape (1 on tokens that count, 0 on padding, prompt and
observation tokens); masked-out entries never contribute, whatever value they hold (even inf or nan).

Reductions (``trainer.algorithm.loss_reduction``), for token losses ``l[i, t]`` and mask ``m[i, t]``:

- ``token_mean``: ``sum(l * m) / sum(m)``: every token of the batch weighs the same (DAPO);
- ``seq_mean_token_sum``: ``mean_i sum_t l * m``: long sequences weigh more;
- ``seq_mean_token_mean``: ``mean_i (sum_t l * m / sum_t m)``: every sequence weighs the same (GRPO paper);
- ``seq_mean_token_sum_norm``: ``mean_i (sum_t l * m) / max_seq_len``: a constant divisor, no length bias
  (Dr.GRPO).

The sequence means run over the rows with at least one token (error trajectories have none). Under
gradient accumulation, pass the whole mini-batch's ``num_tokens`` / ``num_sequences`` so that micro-batch
losses add up to the mini-batch's loss exactly.
"""

from __future__ import annotations

import torch

__all__ = [
    "LOSS_REDUCTIONS",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "reduce_loss",
]

LOSS_REDUCTIONS = ("token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "seq_mean_token_sum_norm")


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` where ``mask`` is 1 (masked entries are replaced by 0 first, so nan/inf there are ignored)."""
    x = torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))
    return x.sum() if dim is None else x.sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over the entries where ``mask`` is 1; 0 where there are none."""
    count = mask.to(x.dtype).sum() if dim is None else mask.to(x.dtype).sum(dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``x`` over the masked entries (Bessel-corrected when ``unbiased``); 0 with < 2 entries."""
    count = mask.to(x.dtype).sum()
    mean = masked_mean(x, mask)
    sq = masked_sum((x - mean) ** 2, mask)
    denom = count - 1 if unbiased else count
    return torch.where(denom > 0, sq / denom.clamp(min=1), torch.zeros_like(sq))


def masked_whiten(
    x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8
) -> torch.Tensor:
    """``(x - mean) / (std + eps)`` over the masked entries (mean and unbiased std of those only); 0 elsewhere.

    With ``shift_mean=False`` the mean is added back (only the scale changes).
    """
    mean = masked_mean(x, mask)
    std = masked_var(x, mask).sqrt()
    out = (x - mean) / (std + eps)
    if not shift_mean:
        out = out + mean
    return torch.where(mask.bool(), out, torch.zeros_like(out))


def reduce_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    *,
    max_seq_len: int | None = None,
    num_tokens: float | None = None,
    num_sequences: float | None = None,
) -> torch.Tensor:
    """Reduce token losses ``loss_mat [B, T]`` under ``mask [B, T]`` to a scalar, by ``mode`` (see module doc).

    ``max_seq_len``: the constant divisor of ``seq_mean_token_sum_norm`` (default: T).
    ``num_tokens`` / ``num_sequences``: global denominators for token_mean / the sequence means, for
    gradient accumulation over micro-batches (default: this batch's own counts).
    """
    mask_f = mask.to(loss_mat.dtype)
    if mode == "token_mean":
        denom = mask_f.sum().clamp(min=1) if num_tokens is None else num_tokens
        return masked_sum(loss_mat, mask) / denom
    seq_tokens = mask_f.sum(-1)
    seq_sums = masked_sum(loss_mat, mask, dim=-1)
    if mode == "seq_mean_token_sum":
        per_seq = seq_sums
    elif mode == "seq_mean_token_mean":
        per_seq = seq_sums / seq_tokens.clamp(min=1)
    elif mode == "seq_mean_token_sum_norm":
        per_seq = seq_sums / (max_seq_len if max_seq_len is not None else loss_mat.shape[-1])
    else:
        raise ValueError(
            f"unknown loss reduction {mode!r} (trainer.algorithm.loss_reduction); one of {LOSS_REDUCTIONS}"
        )
    if num_sequences is None:
        num_sequences = (seq_tokens > 0).to(loss_mat.dtype).sum().clamp(min=1)
    return per_seq.sum() / num_sequences
