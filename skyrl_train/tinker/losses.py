"""The Tinker API's built-in losses, token by token, under the client's names and semantics.

Every loss reads the model's log-probabilities of the datum's ``target_tokens`` (``target_logprobs``, one
per position of the datum, or ``[N, K]`` for cross-entropy over K candidates) and the datum's other
``loss_fn_inputs``, and returns an elementwise loss of the same shape; the datum's loss is its sum, and a
batch's ``loss:sum`` metric and the gradient are those of the sum over its data (no mean: Tinker's
reduction, so a client that splits a batch in chunks gets the same gradient).

- ``cross_entropy`` (``target_tokens``, optional ``weights``, default 1): ``-target_logprobs * weights``.
  Weights may be any real numbers: the client's custom losses send ``-dC/dlogprobs`` as weights.
- ``importance_sampling`` (``target_tokens``, ``logprobs`` of the sampler, ``advantages``):
  ``-exp(target_logprobs - logprobs) * advantages``.
- ``ppo``: ``-min(ratio * A, clip(ratio, low, high) * A)``, the ratio's thresholds from ``loss_fn_config``
  (``clip_low_threshold``, default 0.8; ``clip_high_threshold``, default 1.2) or per token from inputs of
  the same names.
- ``cispo``: ``-sg(clip(ratio, low, high)) * target_logprobs * A``, the same thresholds.
- ``gspo`` (also ``sequence_ratio_mask``): PPO's clipped objective on the sequence ratio (the geometric
  mean of the token ratios over the masked tokens), each token carrying that value with its own
  log-probability's gradient (GSPO-token).
- ``dro``: ``-(target_logprobs * A - beta / 2 * (target_logprobs - logprobs) ** 2)``, ``beta`` from
  ``loss_fn_config`` (default 0.05).

Nothing here knows a model: :func:`validate` checks a datum's inputs against a loss's signature and
:func:`elementwise_loss` computes the loss from torch tensors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["LOSSES", "LossSpec", "elementwise_loss", "loss_config", "validate"]

_INTEGER_INPUTS = frozenset({"target_tokens"})


@dataclass(frozen=True)
class LossSpec:
    """What a loss reads: the inputs it needs, those it may take, and its ``loss_fn_config`` keys with
    their defaults."""

    required: tuple[str, ...]
    optional: tuple[str, ...] = ()
    config: Mapping[str, float] = field(default_factory=dict)
    allows_candidates: bool = False
    """Whether ``target_tokens`` (and ``weights``) may be ``[N, K]``: K candidate tokens per position."""

    @property
    def inputs(self) -> tuple[str, ...]:
        """Every input name this loss accepts."""
        return self.required + self.optional


_POLICY = ("target_tokens", "logprobs", "advantages")
_CLIP = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
_CLIP_INPUTS = ("clip_low_threshold", "clip_high_threshold")

LOSSES: dict[str, LossSpec] = {
    "cross_entropy": LossSpec(("target_tokens",), ("weights",), allows_candidates=True),
    "importance_sampling": LossSpec(_POLICY),
    "ppo": LossSpec(_POLICY, _CLIP_INPUTS, _CLIP),
    "cispo": LossSpec(_POLICY, _CLIP_INPUTS, _CLIP),
    "gspo": LossSpec((*_POLICY, "sequence_ratio_mask"), _CLIP_INPUTS, _CLIP),
    "dro": LossSpec(_POLICY, (), {"beta": 0.05}),
}
"""The supported losses by their client names."""


def loss_config(name: str, config: Mapping[str, Any] | None) -> dict[str, float]:
    """The loss's ``loss_fn_config`` with defaults filled in; ValueError names an unknown or non-numeric key."""
    spec = LOSSES[name]
    values = dict(spec.config)
    for key, value in (config or {}).items():
        if key not in spec.config:
            known = ", ".join(sorted(spec.config)) or "none"
            raise ValueError(f"loss_fn_config key '{key}' is not read by loss '{name}' (it reads: {known})")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"loss_fn_config['{key}'] must be a number, got {value!r}") from None
        if not np.isfinite(number):
            raise ValueError(f"loss_fn_config['{key}'] must be finite, got {value!r}")
        values[key] = number
    if "clip_low_threshold" in values and values["clip_low_threshold"] > values["clip_high_threshold"]:
        raise ValueError(
            f"clip_low_threshold ({values['clip_low_threshold']}) is above clip_high_threshold "
            f"({values['clip_high_threshold']}); both bound the probability ratio, e.g. 0.8 and 1.2"
        )
    return values


def validate(
    name: str, inputs: Mapping[str, np.ndarray], length: int, vocab_size: int, where: str
) -> dict[str, np.ndarray]:
    """Check one datum's ``loss_fn_inputs`` for loss ``name``; returns them as contiguous numpy arrays.

    Every input's first dimension is ``length`` (the datum's token count); ``target_tokens`` are integer
    ids inside the vocabulary; float inputs are finite. ValueError names the input (and ``where``, e.g.
    ``"datum 3"``) and what was expected.
    """
    spec = LOSSES[name]
    unknown = sorted(set(inputs) - set(spec.inputs))
    if unknown:
        raise ValueError(
            f"{where}: loss '{name}' does not read input '{unknown[0]}' (it reads: {', '.join(spec.inputs)})"
        )
    missing = [key for key in spec.required if key not in inputs]
    if missing:
        raise ValueError(
            f"{where}: loss '{name}' needs input '{missing[0]}' (it needs: {', '.join(spec.required)})"
        )
    checked: dict[str, np.ndarray] = {}
    for key, value in inputs.items():
        array = np.asarray(value)
        candidates = spec.allows_candidates and key in ("target_tokens", "weights")
        if array.ndim not in ((1, 2) if candidates else (1,)) or array.shape[0] != length:
            shape = f"({length},) or ({length}, K)" if candidates else f"({length},)"
            raise ValueError(
                f"{where}: input '{key}' has shape {tuple(array.shape)}, expected {shape} "
                f"(one value per input token)"
            )
        if key in _INTEGER_INPUTS:
            if array.dtype.kind not in "iu":
                if (
                    array.dtype.kind != "f"
                    or not np.all(np.isfinite(array))
                    or np.any(array != np.round(array))
                ):
                    raise ValueError(
                        f"{where}: input '{key}' must hold integer token ids, got dtype {array.dtype}"
                    )
            array = array.astype(np.int64)
            bad = array[(array < 0) | (array >= vocab_size)]
            if bad.size:
                raise ValueError(
                    f"{where}: input '{key}' holds token id {int(bad[0])}, outside the vocabulary of {vocab_size}"
                )
        else:
            if array.dtype.kind not in "iuf" and array.dtype != np.bool_:
                raise ValueError(f"{where}: input '{key}' must be numeric, got dtype {array.dtype}")
            array = array.astype(np.float32)
            if not np.all(np.isfinite(array)):
                raise ValueError(f"{where}: input '{key}' holds a NaN or infinite value")
        checked[key] = np.ascontiguousarray(array)
    if "weights" in checked and checked["weights"].shape != checked["target_tokens"].shape:
        raise ValueError(
            f"{where}: input 'weights' has shape {checked['weights'].shape}, 'target_tokens' has "
            f"{checked['target_tokens'].shape}; they must match"
        )
    return checked


def elementwise_loss(
    name: str, target_logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, float]
) -> torch.Tensor:
    """The per-token loss of one datum (same shape as ``target_logprobs``); its sum is the datum's loss.

    ``inputs`` are the datum's validated inputs as float32 tensors (``target_tokens`` excepted: it was
    used to pick ``target_logprobs``), ``config`` the filled-in :func:`loss_config`.
    """
    import torch

    if name == "cross_entropy":
        weights = inputs.get("weights")
        return -target_logprobs if weights is None else -target_logprobs * weights
    sampling = inputs["logprobs"]
    advantages = inputs["advantages"]
    if name == "importance_sampling":
        return -torch.exp(target_logprobs - sampling) * advantages
    if name == "dro":
        return -(target_logprobs * advantages - 0.5 * config["beta"] * (target_logprobs - sampling) ** 2)
    # Per-token thresholds (inputs) win over the config's; clamp takes two tensors or two numbers.
    low = torch.as_tensor(inputs.get("clip_low_threshold", config["clip_low_threshold"]), dtype=torch.float32)
    high = torch.as_tensor(
        inputs.get("clip_high_threshold", config["clip_high_threshold"]), dtype=torch.float32
    )
    if name == "gspo":
        in_ratio = inputs["sequence_ratio_mask"] != 0
        log_gap = (target_logprobs.detach() - sampling)[in_ratio]
        sequence_log_ratio = log_gap.mean() if log_gap.numel() else target_logprobs.new_zeros(())
        # Each token: the sequence ratio's value, the gradient of its own log-probability.
        ratio = torch.exp(sequence_log_ratio + target_logprobs - target_logprobs.detach())
    else:
        ratio = torch.exp(target_logprobs - sampling)
    clipped = torch.clamp(ratio, low, high)
    if name == "cispo":
        return -(clipped.detach() * target_logprobs * advantages)
    return -torch.minimum(ratio * advantages, clipped * advantages)
