"""KL penalties between the policy and the reference model, per token, as a loss term or in the reward.

With ``log_ratio = logp - ref_logp`` (log-probabilities of the sampled tokens under the policy and the
reference), the estimators of KL(policy || reference) from samples of the policy are (Schulman, "Approximating
KL divergence", 2020):

- ``k1``: ``log_ratio``: unbiased, high variance, can be negative per token;
- ``k2``: ``log_ratio ** 2 / 2``: biased, low variance, >= 0;
- ``k3``: ``exp(-log_ratio) - 1 + log_ratio``: unbiased, low variance, >= 0 (the GRPO paper's);
- ``abs``: ``|log_ratio|``.
"""

from __future__ import annotations

import torch

from skyrl_train.training.algorithms.reductions import masked_mean, reduce_loss

__all__ = ["KL_ESTIMATORS", "apply_kl_in_reward", "kl_loss", "kl_penalty"]

KL_ESTIMATORS = ("k1", "k2", "k3", "abs")

# exp() of a log ratio beyond this overflows float16/bfloat16 and means the policy has left the reference
# anyway; clamping keeps the penalty finite.
_MAX_LOG_RATIO = 20.0


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token KL estimate [B, T] of kind ``k1`` | ``k2`` | ``k3`` | ``abs`` (unmasked; mask it yourself)."""
    log_ratio = logp.float() - ref_logp.float()
    if kind == "k1":
        return log_ratio
    if kind == "k2":
        return 0.5 * log_ratio.square()
    if kind == "k3":
        log_ratio = log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
        return torch.exp(-log_ratio) - 1.0 + log_ratio
    if kind == "abs":
        return log_ratio.abs()
    raise ValueError(
        f"unknown KL estimator {kind!r} (trainer.algorithm.kl_estimator_type); one of {KL_ESTIMATORS}"
    )


def kl_loss(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    response_mask: torch.Tensor,
    kind: str = "k3",
    loss_reduction: str = "token_mean",
    **reduce_kwargs: object,
) -> torch.Tensor:
    """The KL loss term: :func:`kl_penalty` reduced over the response tokens like the policy loss."""
    return reduce_loss(kl_penalty(logp, ref_logp, kind), response_mask, loss_reduction, **reduce_kwargs)  # type: ignore[arg-type]


def apply_kl_in_reward(
    token_rewards: torch.Tensor,
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    coef: float,
    kind: str,
    response_mask: torch.Tensor,
) -> tuple[torch.Tensor, float]:
    """Token rewards with the KL penalty subtracted: ``r - coef * kl`` on response tokens, ``r`` elsewhere.

    ``logp`` are the rollout policy's log-probabilities (the old policy), ``ref_logp`` the reference's.
    Returns the new rewards and the mean KL over the response tokens (for the metrics).
    """
    kl = kl_penalty(logp, ref_logp, kind)
    mask = response_mask.bool()
    penalised = token_rewards - coef * torch.where(mask, kl, torch.zeros_like(kl)).to(token_rewards.dtype)
    return penalised, float(masked_mean(kl, mask))
