"""Off-policy correction of the policy loss with the behaviour log-probs the engine recorded per token.

In asynchronous training a token may come from weights several updates older than the policy a step starts
from (and even in synchronous training the engine's numerics differ a little from the trainer's). With ``mu``
the engine's probability of the sampled token (``TrainingBatch.rollout_log_probs``) and ``pi_old`` the
policy's before this step's update (the proximal policy: ``old_log_probs``, or the current ones detached in a
one-update step, which are the same numbers), the correction is a per-token weight ``w`` (no gradient):

- ``tis`` (truncated importance sampling, Yao et al. 2025): ``w = min(pi_old / mu, C)``;
- ``decoupled_ppo`` (Hilton et al. 2021, as AReaL runs it): ``w = pi_old / mu``, and a token whose weight
  passes ``C`` is left out (``w = 0``) instead of truncated; the PPO ratio is taken against the proximal
  policy, so the clip bounds how far one step moves the policy, whatever the behaviour policy was.

Every built-in loss (PPO clip, dual clip, GSPO) is positively homogeneous in the advantage token by token
(``loss(w * A) = w * loss(A)`` for ``w >= 0``), so weighting the advantages weights each token's loss
exactly, and any registered loss gets the correction without knowing about it. On-policy data
(``mu == pi_old``) gives ``w = 1`` exactly, so the corrected loss is the plain one bit for bit.
"""

from __future__ import annotations

from typing import Any

import torch

from skyrl_train.training.algorithms.reductions import masked_mean

__all__ = ["METHODS", "behaviour_weights", "corrected_advantages"]

METHODS = ("none", "tis", "decoupled_ppo")
"""The corrections ``trainer.algorithm.off_policy_correction.method`` chooses from."""

# exp() of a log ratio beyond this overflows; such a token is past any cap anyway.
_MAX_LOG_RATIO = 20.0


def behaviour_weights(
    old_log_probs: torch.Tensor,
    behaviour_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    method: str,
    cap: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token weights ``[B, T]`` (detached) of ``method`` and their metrics: ``off_policy/weight_mean``,
    ``off_policy/weight_max``, ``off_policy/capped_frac`` (share of tokens past ``cap``) and
    ``off_policy/behaviour_kl`` (mean of ``mu_logp - pi_old_logp``)."""
    if method not in METHODS:
        raise ValueError(f"unknown off-policy correction {method!r}; known: {', '.join(METHODS)}")
    mask = response_mask.bool()
    with torch.no_grad():
        log_ratio = (old_log_probs.detach() - behaviour_log_probs.detach()).clamp(
            -_MAX_LOG_RATIO, _MAX_LOG_RATIO
        )
        ratio = torch.exp(log_ratio)
        over = ratio > cap
        if method == "tis":
            weights = ratio.clamp(max=cap)
        elif method == "decoupled_ppo":
            weights = torch.where(over, torch.zeros_like(ratio), ratio)
        else:
            weights = torch.ones_like(ratio)
        weights = torch.where(mask, weights, torch.zeros_like(weights))
        metrics = {
            "off_policy/weight_mean": float(masked_mean(weights, mask)) if mask.any() else 1.0,
            "off_policy/weight_max": float(weights[mask].max()) if mask.any() else 1.0,
            "off_policy/capped_frac": float(masked_mean(over.float(), mask)) if mask.any() else 0.0,
            "off_policy/behaviour_kl": float(masked_mean(-log_ratio, mask)) if mask.any() else 0.0,
        }
    return weights, metrics


def corrected_advantages(
    advantages: torch.Tensor,
    old_log_probs: torch.Tensor,
    behaviour_log_probs: torch.Tensor | None,
    response_mask: torch.Tensor,
    cfg: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The advantages weighted by the correction ``cfg`` (an
    :class:`~skyrl_train.config.schema.OffPolicyCorrectionConfig`: ``method``, ``token_tis_ratio_clip_high``),
    and its metrics; ``method == "none"`` returns them as they are. A batch without behaviour log-probs was not
    sampled by an engine (the supervised warm-up's reference trajectories): nothing to correct, and the
    metric ``off_policy/uncorrected`` says so (the asynchronous loop refuses sampled rollouts without them)."""
    if cfg is None or cfg.method == "none":
        return advantages, {}
    if behaviour_log_probs is None:
        return advantages, {"off_policy/uncorrected": 1.0}
    weights, metrics = behaviour_weights(
        old_log_probs, behaviour_log_probs, response_mask, cfg.method, cfg.token_tis_ratio_clip_high
    )
    return advantages * weights, metrics
