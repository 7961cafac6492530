"""Per-token quantities from a model's logits: log-probabilities of chosen tokens and entropies.

Both work on ``logits [B, T, V]`` already aligned with their targets (see
:meth:`skyrl_train.training.batch.TrainingBatch.response_logits`: the logits at position ``p`` predict token
``p + 1``). They compute in float32 whatever the logits' dtype, since bf16 log-softmax loses the precision
a PPO ratio needs.
"""

from __future__ import annotations

import torch

__all__ = ["chunked_token_scores", "entropy_from_logits", "log_probs_from_logits"]


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


def _chunk_scores(
    logits: torch.Tensor, labels: torch.Tensor, temperature: float, with_entropy: bool, entropy_grad: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    log_probs = log_probs_from_logits(logits, labels)
    if not with_entropy:
        return log_probs, log_probs.new_zeros(())
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        return log_probs, entropy_from_logits(logits)


def _head_chunk_scores(
    hidden: torch.Tensor,
    labels: torch.Tensor,
    head: torch.nn.Module,
    temperature: float,
    with_entropy: bool,
    entropy_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    return _chunk_scores(head(hidden), labels, temperature, with_entropy, entropy_grad)


def chunked_token_scores(
    inputs: torch.Tensor,
    labels: torch.Tensor,
    *,
    head: torch.nn.Module | None = None,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    chunk_size: int = 256,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities of ``labels [N]`` and, optionally, entropies, ``chunk_size`` positions at a time.

    ``inputs`` is ``[N, V]`` logits, or ``[N, H]`` hidden states when ``head`` (the output projection) is
    given: then the logits of a chunk exist only while that chunk is scored. With gradients on, each chunk is
    checkpointed: the backward recomputes its ``[chunk, V]`` logits instead of keeping every chunk's softmax,
    so the full-vocabulary logits of a batch are never held at once (one extra head forward per chunk).
    The numbers equal :func:`log_probs_from_logits` and :func:`entropy_from_logits` on the whole tensor.
    Returns ``(log_probs [N], entropy [N] or None)``; the entropy carries gradients only with
    ``entropy_grad``.
    """
    from torch.utils.checkpoint import checkpoint

    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    grad = torch.is_grad_enabled() and (inputs.requires_grad or head is not None)
    log_probs, entropies = [], []
    for start in range(0, inputs.shape[0], chunk_size):
        piece, target = inputs[start : start + chunk_size], labels[start : start + chunk_size]
        if head is None:
            args = (_chunk_scores, piece, target, temperature, with_entropy, entropy_grad)
        else:
            args = (_head_chunk_scores, piece, target, head, temperature, with_entropy, entropy_grad)
        if grad:
            lp, ent = checkpoint(*args, use_reentrant=False)
        else:
            lp, ent = args[0](*args[1:])
        log_probs.append(lp)
        entropies.append(ent)
    if not log_probs:
        empty = inputs.new_zeros((0,), dtype=torch.float32)
        return empty, (empty if with_entropy else None)
    return torch.cat(log_probs), (torch.cat(entropies) if with_entropy else None)
