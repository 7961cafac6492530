"""The critic's loss: PPO's clipped value loss."""

from __future__ import annotations

import torch

from skyrl_train.training.algorithms.reductions import masked_mean, reduce_loss

__all__ = ["value_loss"]


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    value_clip: float | None = 0.2,
    loss_reduction: str = "token_mean",
    **reduce_kwargs: object,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``0.5 * max((V - R)^2, (V_clip - R)^2)`` with ``V_clip = V_old + clip(V - V_old, -c, c)``.

    ``values`` are the critic's current predictions, ``old_values`` the ones from before this update
    (what GAE used), ``returns`` the targets; ``value_clip=None`` gives the plain ``0.5 * (V - R)^2``.
    Metrics: ``vf_loss`` and ``vf_clip_frac`` (share of tokens where the clipped error was the larger).
    """
    mask = response_mask.bool()
    unclipped = (values - returns).square()
    if value_clip is None:
        loss_mat, is_clipped = unclipped, torch.zeros_like(mask)
    else:
        clipped_values = old_values + (values - old_values).clamp(-value_clip, value_clip)
        clipped = (clipped_values - returns).square()
        loss_mat, is_clipped = torch.maximum(unclipped, clipped), clipped > unclipped
    loss = 0.5 * reduce_loss(loss_mat, mask, loss_reduction, **reduce_kwargs)  # type: ignore[arg-type]
    metrics = {"vf_loss": float(loss.detach()), "vf_clip_frac": float(masked_mean(is_clipped.float(), mask))}
    return loss, metrics
