"""The weight-sync gate: after a sync, the engine proves it holds the weights the trainer just produced.

Two checks, each cheap next to a training step:

- **Fingerprints of what arrived.** The sender computes :func:`fingerprint` of every tensor it sends (after the
  cast to the engine's dtype); the engine's side computes it again from the bytes it received, before loading
  them. Any difference is a :class:`WeightSyncError` that names the tensor. This catches a payload damaged or
  reinterpreted in transport (a serializer that drops a tensor's data, a wrong dtype or shape, a short read).
- **A probe sequence.** The trainer's model and the engine both score a fixed token sequence; their per-token
  log-probabilities must agree within a tolerance that depends on the engine's dtype
  (:data:`PROBE_TOLERANCE`). This catches weights that arrived intact but did not take effect: a name the
  engine's loader skipped, a tensor loaded into the wrong place, a cache of the old weights still in use.

:func:`fingerprint` depends only on a tensor's bytes, so it is equal on both sides whenever the bytes are.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "GateSettings",
    "PROBE_TOLERANCE",
    "ProbeResult",
    "WeightSyncError",
    "compare_fingerprints",
    "compare_probe",
    "engine_probe_logprobs",
    "fingerprint",
    "fingerprints",
    "probe_tokens",
    "trainer_probe_logprobs",
]

PROBE_TOLERANCE = {"float32": 2e-3, "bfloat16": 0.25, "float16": 0.1}
"""Largest accepted difference of one probe token's log-probability between trainer and engine, by the
engine's dtype. At float32 the two agree within about 3e-5 (vLLM's CPU build against the transformers forward);
bfloat16 rounding of weights and activations moves single tokens by up to about 0.1. A weight that did not load
moves them by whole nats."""

_MODULUS = (1 << 61) - 1


class WeightSyncError(RuntimeError):
    """The engine does not hold the weights the trainer sent; the run stops rather than train on samples from
    other weights."""


def fingerprint(tensor: Any) -> int:
    """A digest of a tensor's bytes: CRC-32 for a tensor in host memory (no copy); for one on an accelerator,
    an integer digest computed there (sums of its 16-bit words, plain and weighted by position), so the
    tensor is not copied to the host. Both ends of a transfer digest where their tensors are, which is the
    same kind of device in every strategy. A changed byte or two swapped words change it."""
    import zlib

    import torch

    flat = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
    if flat.device.type == "cpu":
        return zlib.crc32(flat.numpy())
    if flat.numel() % 2:
        flat = torch.cat([flat, flat.new_zeros(1)])
    words = flat.view(torch.int16).to(torch.int64) & 0xFFFF
    positions = torch.arange(1, words.numel() + 1, device=words.device, dtype=torch.int64) % 65521 + 1
    plain = int(words.sum())
    weighted = int((words * positions).sum())
    return (plain * 1_000_003 + weighted + words.numel()) % _MODULUS


def compare_fingerprints(sent: dict[str, int], received: dict[str, int]) -> int:
    """Raise :class:`WeightSyncError` naming the first tensor whose digest differs or that did not arrive;
    returns how many were compared."""
    missing = sorted(set(sent) - set(received))
    if missing:
        raise WeightSyncError(
            f"weight sync: tensor {missing[0]!r} was sent but the engine did not receive it"
        )
    extra = sorted(set(received) - set(sent))
    if extra:
        raise WeightSyncError(f"weight sync: the engine received tensor {extra[0]!r}, which was not sent")
    for name, digest in sent.items():
        if received[name] != digest:
            raise WeightSyncError(
                f"weight sync: tensor {name!r} arrived different from what the trainer sent "
                f"(digest {received[name]:#x} != {digest:#x}): the transport damaged it"
            )
    return len(sent)


def probe_tokens(tokenizer: Any, length: int = 32) -> list[int]:
    """A fixed probe sequence: a short text in the tokenizer's own ids, cut or repeated to `length` tokens."""
    text = (
        "SELECT name, COUNT(*) FROM orders JOIN customers ON orders.customer_id = customers.id "
        "GROUP BY name ORDER BY 2 DESC; The quick brown fox jumps over the lazy dog."
    )
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    while len(ids) < length:
        ids = ids + ids
    return ids[:length]


@dataclasses.dataclass(frozen=True)
class GateSettings:
    """What the trainer's gate does after a push (``generator.weight_sync_check`` and its tolerance)."""

    enabled: bool
    tolerance: float

    @classmethod
    def from_config(cls, config: Any) -> GateSettings:
        gen = config.generator
        tolerance = gen.weight_sync_check_tolerance or PROBE_TOLERANCE[gen.model_dtype]
        return cls(bool(gen.weight_sync_check), float(tolerance))


@dataclasses.dataclass
class ProbeResult:
    """The probe's comparison: the largest and mean difference of per-token log-probabilities."""

    max_diff: float
    mean_diff: float
    worst_position: int
    tolerance: float


def compare_probe(
    trainer_logprobs: Sequence[float], engine_logprobs: Sequence[float], *, tolerance: float
) -> ProbeResult:
    """Compare per-token log-probabilities of the probe (positions 1.. of the sequence); raise
    :class:`WeightSyncError` when one differs by more than `tolerance` or the lengths differ."""
    if len(trainer_logprobs) != len(engine_logprobs):
        raise WeightSyncError(
            f"weight-sync probe: the trainer scored {len(trainer_logprobs)} tokens, the engine "
            f"{len(engine_logprobs)}"
        )
    diffs = [abs(float(a) - float(b)) for a, b in zip(trainer_logprobs, engine_logprobs, strict=True)]
    if not diffs:
        return ProbeResult(0.0, 0.0, -1, tolerance)
    worst = max(range(len(diffs)), key=lambda i: diffs[i] if math.isfinite(diffs[i]) else math.inf)
    result = ProbeResult(max(diffs), sum(diffs) / len(diffs), worst, tolerance)
    if not all(math.isfinite(d) for d in diffs) or result.max_diff > tolerance:
        raise WeightSyncError(
            f"weight-sync probe: the engine's log-probabilities differ from the trainer's by up to "
            f"{result.max_diff:.4g} (token {worst + 1} of the probe; mean {result.mean_diff:.4g}, tolerance "
            f"{tolerance:g}): the engine is not running the weights the trainer sent"
        )
    return result


def trainer_probe_logprobs(model: Any, token_ids: Sequence[int]) -> list[float]:
    """Per-token log-probabilities of ``token_ids[1:]`` under ``model`` (a transformers causal LM), in
    float32, without gradients and without changing the model's train/eval mode for good."""
    import torch

    device = next(model.parameters()).device
    ids = torch.tensor([list(token_ids)], dtype=torch.long, device=device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits[0]
    finally:
        model.train(was_training)
    logprobs = torch.log_softmax(logits.float(), dim=-1)[:-1]
    return logprobs.gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1).cpu().tolist()


def engine_probe_logprobs(engine: Any, token_ids: Sequence[int]) -> list[float]:
    """Per-token log-probabilities of ``token_ids[1:]`` under the engine's weights: vLLM's prompt
    log-probabilities, or the log-softmax of an hf engine's (or engine process's) logits."""
    import asyncio

    import torch

    if hasattr(engine, "prompt_logprobs"):
        return list(asyncio.run(engine.prompt_logprobs(list(token_ids))))
    if not hasattr(engine, "logits"):
        raise TypeError(
            f"{type(engine).__name__} cannot score the weight-sync probe (no prompt_logprobs/logits)"
        )
    logits = torch.as_tensor(engine.logits(list(token_ids))).float()
    logprobs = torch.log_softmax(logits, dim=-1)[:-1]
    ids = torch.tensor(list(token_ids)[1:], dtype=torch.long)
    return logprobs.gather(-1, ids.unsqueeze(-1)).squeeze(-1).tolist()


def fingerprints(named_tensors: Iterable[tuple[str, Any]]) -> dict[str, int]:
    """:func:`fingerprint` of every named tensor."""
    return {name: fingerprint(tensor) for name, tensor in named_tensors}
