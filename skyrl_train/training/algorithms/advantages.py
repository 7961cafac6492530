"""Advantage estimators: GRPO, Dr.GRPO, RLOO, RAFT, REINFORCE++ and GAE, and a registry for custom ones.

All share one signature (see :func:`~skyrl_train.training.algorithms.registry.register_advantage_estimator`)::

    fn(token_level_rewards [B,T], response_mask [B,T], group_ids [B], values [B,T] | None = None,
       gamma=1.0, lambd=1.0, *, valid [B] | None = None, **kwargs) -> (advantages [B,T], returns [B,T])

``group_ids[i]`` says which prompt row ``i`` is a sample of. ``valid[i]`` is False for a trajectory that
ended in error: it is left out of every statistic (group means, standard deviations, batch whitening) and
gets advantage and return 0, so a broken environment is never scored as a wrong answer. Outputs are 0
outside ``response_mask``.

Outcome estimators (GRPO, Dr.GRPO, RLOO) score a trajectory by the sum of its masked token rewards and give
that one advantage to every response token. REINFORCE++ and GAE work per token; in a multi-turn
trajectory they step over the model's tokens only, skipping the observation tokens between turns (which
carry no action), so a later turn's reward reaches the earlier turns discounted per model token.
"""

from __future__ import annotations

from typing import Any

import torch

from skyrl_train.training.algorithms.reductions import masked_whiten
from skyrl_train.training.algorithms.registry import register_advantage_estimator

__all__ = [
    "compute_batch_advantages",
    "dr_grpo",
    "gae",
    "grpo",
    "raft",
    "reinforce_plus_plus",
    "rloo",
]

EPS = 1e-6
"""Added to a standard deviation before dividing by it."""


def _valid_rows(response_mask: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    if valid is None:
        return torch.ones(response_mask.shape[0], dtype=torch.bool, device=response_mask.device)
    return valid.to(device=response_mask.device, dtype=torch.bool)


def _outcome_scores(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    mask = response_mask.bool()
    return torch.where(mask, token_level_rewards, torch.zeros_like(token_level_rewards)).sum(-1).float()


def _group_stats(
    scores: torch.Tensor, group_ids: torch.Tensor, valid: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row: the number of valid rows in its group, their reward sum and their unbiased variance."""
    _, inverse = torch.unique(group_ids.to(scores.device), return_inverse=True)
    num_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    weight = valid.to(scores.dtype)
    count = torch.zeros(num_groups, dtype=scores.dtype, device=scores.device).index_add_(0, inverse, weight)
    total = torch.zeros_like(count).index_add_(0, inverse, scores * weight)
    mean = total / count.clamp(min=1)
    sq = torch.zeros_like(count).index_add_(0, inverse, (scores - mean[inverse]) ** 2 * weight)
    var = sq / (count - 1).clamp(min=1)
    return count[inverse], total[inverse], var[inverse]


def _broadcast(
    row_advantages: torch.Tensor, response_mask: torch.Tensor, valid: torch.Tensor
) -> torch.Tensor:
    row_advantages = torch.where(valid, row_advantages, torch.zeros_like(row_advantages))
    return row_advantages[:, None] * response_mask.to(row_advantages.dtype)


@register_advantage_estimator("grpo")
def grpo(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor,
    values: torch.Tensor | None = None,
    gamma: float = 1.0,
    lambd: float = 1.0,
    *,
    valid: torch.Tensor | None = None,
    norm_by_std: bool = True,
    epsilon: float = EPS,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO: ``(score - group mean) / (group std + epsilon)``, the same for every token of a trajectory.

    The standard deviation is the unbiased one (Bessel); ``norm_by_std=False`` skips the division
    (``trainer.algorithm.grpo_norm_by_std``). A group whose rewards are all equal gives 0 everywhere; a
    group with a single valid trajectory gives it 0 (nothing to compare with). Returns equal advantages.
    """
    ok = _valid_rows(response_mask, valid)
    scores = _outcome_scores(token_level_rewards, response_mask)
    count, total, var = _group_stats(scores, group_ids, ok)
    centred = scores - total / count.clamp(min=1)
    if norm_by_std:
        centred = centred / (var.sqrt() + epsilon)
    centred = torch.where(count >= 2, centred, torch.zeros_like(centred))
    advantages = _broadcast(centred, response_mask, ok)
    return advantages, advantages.clone()


@register_advantage_estimator("dr_grpo")
def dr_grpo(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor,
    values: torch.Tensor | None = None,
    gamma: float = 1.0,
    lambd: float = 1.0,
    *,
    valid: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dr.GRPO ("Understanding R1-Zero-Like Training", 2025): ``score - group mean``, no std division.

    The paper pairs it with a constant length normaliser in the loss: ``loss_reduction:
    seq_mean_token_sum_norm`` (sum of token losses / ``max_seq_len``, averaged over sequences).
    """
    kwargs.pop("norm_by_std", None)
    return grpo(
        token_level_rewards,
        response_mask,
        group_ids,
        values,
        gamma,
        lambd,
        valid=valid,
        norm_by_std=False,
        **kwargs,
    )


@register_advantage_estimator("rloo")
def rloo(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor,
    values: torch.Tensor | None = None,
    gamma: float = 1.0,
    lambd: float = 1.0,
    *,
    valid: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO: ``score - mean of the other valid samples of the same prompt`` (leave-one-out baseline).

    Equals ``n / (n - 1) * (score - group mean)`` for a group of ``n`` valid samples; 0 when ``n < 2``.
    """
    ok = _valid_rows(response_mask, valid)
    scores = _outcome_scores(token_level_rewards, response_mask)
    count, total, _ = _group_stats(scores, group_ids, ok)
    baseline = (total - scores) / (count - 1).clamp(min=1)
    row = torch.where(count >= 2, scores - baseline, torch.zeros_like(scores))
    advantages = _broadcast(row, response_mask, ok)
    return advantages, advantages.clone()


@register_advantage_estimator("raft")
def raft(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor,
    values: torch.Tensor | None = None,
    gamma: float = 1.0,
    lambd: float = 1.0,
    *,
    valid: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RAFT (reward-ranked fine-tuning, Dong et al. 2023): advantage 1 for the samples that earned their
    group's highest score, when that score is positive and above the group's lowest; 0 for the others.

    With one update epoch the policy loss's gradient is then that of the negative log-likelihood of the
    model's own best answers (a supervised step on them), and nothing pushes the other samples down. A group
    whose samples all scored the same, or whose best is not positive (a wrong answer that only beat a
    format failure), teaches nothing.
    """
    ok = _valid_rows(response_mask, valid)
    scores = _outcome_scores(token_level_rewards, response_mask)
    _, _, var = _group_stats(scores, group_ids, ok)  # var > 0: the group's valid rewards differ
    _, inverse = torch.unique(group_ids.to(scores.device), return_inverse=True)
    groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    valid_scores = torch.where(ok, scores, torch.full_like(scores, -torch.inf))
    high = torch.full((groups,), -torch.inf, device=scores.device)
    high = high.scatter_reduce(0, inverse, valid_scores, "amax")[inverse]
    best = (scores == high) & (var > 0) & (high > 0)
    advantages = _broadcast(best.to(scores.dtype), response_mask, ok)
    return advantages, advantages.clone()


def _discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """``G_t = r_t + gamma * G_next`` stepping over masked-in positions only (0 at masked-out ones)."""
    returns = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
    for t in reversed(range(rewards.shape[1])):
        step = mask[:, t]
        running = torch.where(step, rewards[:, t] + gamma * running, running)
        returns[:, t] = torch.where(step, running, torch.zeros_like(running))
    return returns


@register_advantage_estimator("reinforce++")
def reinforce_plus_plus(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor,
    values: torch.Tensor | None = None,
    gamma: float = 1.0,
    lambd: float = 1.0,
    *,
    valid: torch.Tensor | None = None,
    epsilon: float = 1e-8,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: per-token discounted returns, whitened over all response tokens of the valid rows.

    Returns are ``G_t = r_t + gamma * G_{t+1}`` over the model's tokens; advantages are
    ``(G - mean) / (std + epsilon)`` with the mean and unbiased std of every masked token of the batch
    (a global baseline, no critic and no groups).
    """
    ok = _valid_rows(response_mask, valid)
    mask = response_mask.bool() & ok[:, None]
    returns = _discounted_returns(token_level_rewards.float(), mask, gamma)
    advantages = masked_whiten(returns, mask, eps=epsilon)
    return advantages, returns


@register_advantage_estimator("gae")
def gae(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor,
    values: torch.Tensor | None = None,
    gamma: float = 1.0,
    lambd: float = 1.0,
    *,
    valid: torch.Tensor | None = None,
    whiten: bool = True,
    epsilon: float = 1e-8,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (PPO with a critic): needs ``values [B,T]``.

    Over the model's tokens, backwards: ``delta_t = r_t + gamma * V_next - V_t`` (``V_next = 0`` after the
    last one), ``A_t = delta_t + gamma * lambd * A_next``. ``returns = A + V`` (the critic's targets) are
    taken before the advantages are whitened over the batch's valid response tokens (``whiten=False``
    keeps them raw).
    """
    if values is None:
        raise ValueError(
            "the gae advantage estimator needs values from a critic (set trainer.critic.model.path)"
        )
    ok = _valid_rows(response_mask, valid)
    mask = response_mask.bool() & ok[:, None]
    rewards, values = token_level_rewards.float(), values.float()
    zeros = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
    advantages = torch.zeros_like(rewards)
    last_advantage, next_value = zeros, zeros
    for t in reversed(range(rewards.shape[1])):
        step = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        current = delta + gamma * lambd * last_advantage
        last_advantage = torch.where(step, current, last_advantage)
        next_value = torch.where(step, values[:, t], next_value)
        advantages[:, t] = torch.where(step, current, zeros)
    returns = torch.where(mask, advantages + values, torch.zeros_like(values))
    if whiten:
        advantages = masked_whiten(advantages, mask, eps=epsilon)
    return advantages, returns


def compute_batch_advantages(batch: Any, cfg: Any) -> dict[str, float]:
    """Fill ``batch.advantages`` and ``batch.returns`` per the algorithm config; return metrics.

    ``batch`` is a :class:`~skyrl_train.training.batch.TrainingBatch` (``token_level_rewards``, ``response_mask``,
    ``group_ids``, ``valid``, and ``values`` for gae; ``old_log_probs`` and ``ref_log_probs`` when
    ``cfg.use_kl_in_reward``), ``cfg`` an :class:`~skyrl_train.config.AlgorithmConfig`. With
    ``use_kl_in_reward`` the token rewards are replaced by the KL-penalised ones first. With
    ``advantage_batch_normalize`` the advantages are whitened over the batch afterwards.
    """
    from skyrl_train.training.algorithms.kl import apply_kl_in_reward
    from skyrl_train.training.algorithms.registry import get_advantage_estimator

    metrics: dict[str, float] = {}
    mask = batch.response_mask.bool() & batch.valid.bool()[:, None]
    if cfg.use_kl_in_reward:
        old = batch.old_log_probs if batch.old_log_probs is not None else batch.rollout_log_probs
        if old is None or batch.ref_log_probs is None:
            raise ValueError(
                "use_kl_in_reward needs batch.old_log_probs (or rollout_log_probs) and ref_log_probs"
            )
        batch.token_level_rewards, kl = apply_kl_in_reward(
            batch.token_level_rewards, old, batch.ref_log_probs, cfg.init_kl_coef, cfg.kl_estimator_type, mask
        )
        metrics["kl_in_reward"] = kl
    estimator = get_advantage_estimator(cfg.advantage_estimator)
    advantages, returns = estimator(
        batch.token_level_rewards,
        batch.response_mask,
        batch.group_ids,
        batch.values,
        cfg.gamma,
        cfg.lambd,
        valid=batch.valid,
        norm_by_std=cfg.grpo_norm_by_std,
    )
    if cfg.advantage_batch_normalize:
        advantages = masked_whiten(advantages, mask)
    batch.advantages, batch.returns = advantages, returns
    if mask.any():
        metrics["advantage_mean"] = float(advantages[mask].mean())
        metrics["advantage_abs_mean"] = float(advantages[mask].abs().mean())
    return metrics
