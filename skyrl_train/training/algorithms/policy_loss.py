"""Policy losses: PPO clip (with clip-higher), dual clip and GSPO, a registry for custom ones, and the full
policy objective (policy loss + KL loss - entropy bonus).

With ``ratio = exp(logp - old_logp)`` per token and ``A`` the advantage, clip bounds ``lo = eps_clip_low``,
``hi = eps_clip_high``:

- ``ppo`` (SkyRL's ``regular``): ``max(-A * ratio, -A * clip(ratio, 1 - lo, 1 + hi))``; ``hi > lo`` is
  clip-higher (DAPO), which leaves room for unlikely tokens to grow;
- ``dual_clip``: PPO, and for ``A < 0`` the loss is also capped at ``-A * clip_ratio_c`` (Ye et al., 2020),
  so a huge ratio on a bad token cannot blow the update up;
- ``gspo``: the ratio is the sequence's geometric mean ``s = exp(mean_t(logp - old_logp))`` over its response
  tokens, clipped like PPO (Zheng et al., 2025, "Group Sequence Policy Optimization"); every token of the
  sequence carries ``s``, and its gradient flows through each token's own log-prob. Use it with
  ``loss_reduction: seq_mean_token_mean`` (a sequence-level objective) and small clip bounds (~3e-4, 4e-4).

Each returns ``(loss, metrics)``: the loss reduced with ``cfg.loss_reduction`` and metrics ``clip_frac``
(share of tokens where the clipped term was the one taken) and ``ppo_kl`` (mean of ``old_logp - logp``).
"""

from __future__ import annotations

from typing import Any

import torch

from skyrl_train.training.algorithms.kl import kl_loss
from skyrl_train.training.algorithms.reductions import masked_mean, reduce_loss
from skyrl_train.training.algorithms.registry import get_policy_loss, register_policy_loss

__all__ = ["dual_clip_loss", "gspo_loss", "policy_objective", "ppo_loss"]

# exp() of a log ratio beyond this overflows; such a token is clipped anyway.
_MAX_LOG_RATIO = 20.0


def _reduce(
    loss_mat: torch.Tensor, mask: torch.Tensor, cfg: Any, reduce_kwargs: dict[str, Any]
) -> torch.Tensor:
    kwargs = {"max_seq_len": getattr(cfg, "max_seq_len", None), **reduce_kwargs}
    return reduce_loss(loss_mat, mask, cfg.loss_reduction, **kwargs)


def _clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, cfg: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO clip loss and whether the clipped term was taken."""
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - cfg.eps_clip_low, 1.0 + cfg.eps_clip_high)
    return torch.maximum(unclipped, clipped), clipped > unclipped


def _metrics(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, is_clipped: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    with torch.no_grad():
        return {
            "clip_frac": float(masked_mean(is_clipped.float(), mask)),
            "ppo_kl": float(masked_mean((old_log_probs - log_probs).float(), mask)),
        }


def _ratio(log_probs: torch.Tensor, old_log_probs: torch.Tensor) -> torch.Tensor:
    return torch.exp((log_probs - old_log_probs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))


@register_policy_loss("ppo")
@register_policy_loss("regular")
def ppo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    cfg: Any,
    **reduce_kwargs: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate with separate low/high bounds (``cfg.eps_clip_low``, ``cfg.eps_clip_high``)."""
    mask = response_mask.bool()
    loss_mat, is_clipped = _clipped_surrogate(_ratio(log_probs, old_log_probs), advantages, cfg)
    return _reduce(loss_mat, mask, cfg, reduce_kwargs), _metrics(log_probs, old_log_probs, is_clipped, mask)


@register_policy_loss("dual_clip")
def dual_clip_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    cfg: Any,
    **reduce_kwargs: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clip, and for negative advantages the loss is at most ``-A * cfg.clip_ratio_c`` (> 1)."""
    mask = response_mask.bool()
    loss_mat, is_clipped = _clipped_surrogate(_ratio(log_probs, old_log_probs), advantages, cfg)
    cap = -advantages * cfg.clip_ratio_c
    capped = (advantages < 0) & (cap < loss_mat)
    loss_mat = torch.where(capped, cap, loss_mat)
    loss = _reduce(loss_mat, mask, cfg, reduce_kwargs)
    metrics = _metrics(log_probs, old_log_probs, is_clipped, mask)
    metrics["dual_clip_frac"] = float(masked_mean(capped.float(), mask))
    return loss, metrics


@register_policy_loss("gspo")
def gspo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    cfg: Any,
    **reduce_kwargs: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO: PPO clip on the sequence-level ratio ``exp(mean over response tokens of logp - old_logp)``."""
    mask = response_mask.bool()
    log_ratio = torch.where(mask, log_probs - old_log_probs, torch.zeros_like(log_probs))
    seq_log_ratio = masked_mean(log_ratio, mask, dim=-1)
    # Value s_i at every token, gradient s_i * d logp_t: the token form of GSPO's sequence objective.
    token_log_ratio = log_probs - log_probs.detach() + seq_log_ratio.detach()[:, None]
    ratio = torch.exp(token_log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))
    loss_mat, is_clipped = _clipped_surrogate(ratio, advantages, cfg)
    return _reduce(loss_mat, mask, cfg, reduce_kwargs), _metrics(log_probs, old_log_probs, is_clipped, mask)


def policy_objective(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    cfg: Any,
    *,
    ref_log_probs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    **reduce_kwargs: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss a policy worker backpropagates, per the algorithm config ``cfg``:

    ``policy loss (cfg.policy_loss_type) + kl_loss_coef * KL loss (if use_kl_loss) - entropy_loss_coef *
    entropy (if use_entropy_loss)``, every term reduced with ``cfg.loss_reduction`` over ``response_mask``.
    ``ref_log_probs`` is required with ``use_kl_loss``; ``entropy [B,T]`` (from
    :func:`~skyrl_train.training.algorithms.logits.entropy_from_logits`) with ``use_entropy_loss``, and is logged
    when given. Metrics: ``policy_loss``, ``clip_frac``, ``ppo_kl``, and ``kl_loss``/``entropy`` when
    present. ``reduce_kwargs`` (``num_tokens``, ``num_sequences``) go to every reduction.
    """
    loss_fn = get_policy_loss(cfg.policy_loss_type)
    loss, metrics = loss_fn(log_probs, old_log_probs, advantages, response_mask, cfg, **reduce_kwargs)
    metrics["policy_loss"] = float(loss.detach())
    mask = response_mask.bool()
    reduce_all = {"max_seq_len": getattr(cfg, "max_seq_len", None), **reduce_kwargs}
    if cfg.use_kl_loss:
        if ref_log_probs is None:
            raise ValueError(
                "trainer.algorithm.use_kl_loss=true needs ref_log_probs from the reference model"
            )
        kl = kl_loss(log_probs, ref_log_probs, mask, cfg.kl_estimator_type, cfg.loss_reduction, **reduce_all)
        loss = loss + cfg.kl_loss_coef * kl
        metrics["kl_loss"] = float(kl.detach())
    if entropy is not None:
        entropy_term = reduce_loss(entropy, mask, cfg.loss_reduction, **reduce_all)
        metrics["entropy"] = float(entropy_term.detach())
        if cfg.use_entropy_loss:
            loss = loss - cfg.entropy_loss_coef * entropy_term
    elif cfg.use_entropy_loss:
        raise ValueError("trainer.algorithm.use_entropy_loss=true needs the entropy from the logits")
    return loss, metrics
