"""Per-token quantities from a model's logits: log-probabilities of chosen tokens and entropies.

Both work on ``logits [B, T, V]`` already aligned with their targets (see
:meth:`skyrl_train.batch.TrainingBatch.response_logits`: the logits at position ``p`` predict token
``p + 1``). They compute in float32 whatever the logits' dtype, since bf16 log-softmax loses the precision
a PPO ratio needs.
"""

from __future__ import annotations

import torch

__all__ = ["entropy_from_logits", "log_probs_from_logits"]


def log_probs_from_logits(
    logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """``log softmax(logits / temperature)[..., labels]``: [B, T] log-probabilities of ``labels [B, T]``.

    Pass the sampling temperature so the trainer's log-probs match the ones the rollout was sampled with.
    Uses ``logit[label] - logsumexp(logits)`` rather than a full log-softmax (one [B, T, V] tensor less).
    """
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    chosen = torch.gather(logits, -1, labels.long().unsqueeze(-1)).squeeze(-1)
    return chosen - torch.logsumexp(logits, dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy [B, T] of the categorical distribution ``softmax(logits)`` at each position, in nats.

    ``H = logsumexp(z) - sum(softmax(z) * z)`` on ``z = logits - max(logits)`` (the same value; shifting
    keeps float32 precise when the logits are large).
    """
    logits = logits.float()
    logits = logits - logits.max(dim=-1, keepdim=True).values.detach()
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)
