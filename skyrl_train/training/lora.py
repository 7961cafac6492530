"""LoRA adapters with peft, for the Tinker service and the trainer's policy (``trainer.policy.lora``): which
layers get one, how they are made, and the merged weights an inference engine loads.

The settings are a rank and three switches: adapters on the attention projections
(``train_attn``), on the MLP projections (``train_mlp``) and on the output projection (``train_unembed``).
:func:`lora_targets` turns the switches into the full names of a model's linear layers, so any decoder
whose attention and MLP blocks are named the usual way (``self_attn`` / ``attention``, ``mlp`` /
``feed_forward``) works, not only Llama. peft initialises B to zero, so a fresh adapter leaves the model's
outputs unchanged; ``seed`` makes A reproducible.

A model with tied input and output embeddings shares one weight between them; an adapter on the output
projection, once merged into that weight, would change the input embeddings too, so such a model's output
projection gets its own (frozen) copy first (:func:`untie_output_embeddings`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

__all__ = [
    "DEFAULT_LORA_ALPHA",
    "apply_lora",
    "is_lora_state",
    "lora_targets",
    "merge_adapter",
    "merged_state_dict",
    "ties_output_embeddings",
    "untie_output_embeddings",
]

DEFAULT_LORA_ALPHA = 32
"""LoRA's alpha (the adapter's output is scaled by alpha / rank): the value the Tinker cookbook assumes."""

_ATTN_PARTS = ("self_attn", "attention", "attn")
_MLP_PARTS = ("mlp", "feed_forward", "ffn")


def lora_targets(model: Any, *, train_attn: bool, train_mlp: bool, train_unembed: bool) -> list[str]:
    """Full module names of the linear layers that get adapters under the three switches.

    ValueError when the switches select nothing (every one off, or a model without such layers).
    """
    import torch

    head = model.get_output_embeddings()
    targets = []
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        parts = name.split(".")
        if module is head:
            if train_unembed:
                targets.append(name)
        elif any(p in _ATTN_PARTS for p in parts):
            if train_attn:
                targets.append(name)
        elif any(p in _MLP_PARTS for p in parts) and train_mlp:
            targets.append(name)
    if not targets:
        raise ValueError(
            "the LoRA settings select no layer: set at least one of train_attn, train_mlp, train_unembed"
        )
    return targets


def ties_output_embeddings(model: Any) -> bool:
    """Whether the model's output projection and input embeddings share one weight."""
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    return head is not None and embed is not None and head.weight is embed.weight


def untie_output_embeddings(model: Any) -> None:
    """Give the output projection its own copy of a weight it shares with the input embeddings."""
    import torch

    if ties_output_embeddings(model):
        head, embed = model.get_output_embeddings(), model.get_input_embeddings()
        head.weight = torch.nn.Parameter(embed.weight.detach().clone(), requires_grad=False)
        if hasattr(model.config, "tie_word_embeddings"):
            model.config.tie_word_embeddings = False


def apply_lora(model: Any, *, rank: int, alpha: float, targets: list[str], seed: int) -> Any:
    """Wrap ``model`` in a peft LoRA model with adapters on ``targets`` (A drawn from ``seed``, B zero);
    only the adapters are trainable. Returns the ``PeftModel``."""
    import torch
    from peft import LoraConfig, get_peft_model

    from skyrl_train.distributed import fork_rng_devices

    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=targets, bias="none")
    # the caller's random state, the GPUs' too (torch.manual_seed reseeds them all), is left as it was
    with torch.random.fork_rng(devices=fork_rng_devices()), warnings.catch_warnings():
        # peft asks transformers through a name transformers has deprecated; nothing for a user to do
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        torch.manual_seed(seed)
        return get_peft_model(model, config)


_BASE, _A, _B = ".base_layer.", ".lora_A.default.weight", ".lora_B.default.weight"


def is_lora_state(state: Mapping[str, Any]) -> bool:
    """Whether a state dict holds peft LoRA layers (adapter tensors beside their base layers')."""
    return any(name.endswith(_A) for name in state)


def merge_adapter(weight: Any, a: Any, b: Any, *, scaling: float) -> Any:
    """One adapted weight merged as peft merges it: a new tensor ``W0 + (B @ A) * scaling`` (``scaling`` =
    alpha / rank), in the weight's dtype and on its device."""
    return weight + (b.to(weight.device, weight.dtype) @ a.to(weight.device, weight.dtype)) * scaling


def merged_state_dict(state: Mapping[str, Any], *, scaling: float) -> dict[str, Any]:
    """The plain model's state dict from that of a model with LoRA layers injected (peft's names inside
    the model: ``<layer>.base_layer.weight``, ``<layer>.lora_A.default.weight``, ...): each adapted weight
    is ``W0 + (B @ A) * scaling`` (``scaling`` = alpha / rank, as peft merges), the adapters themselves
    are left out and every other tensor is kept under its plain name. The model's own tensors are not
    changed (a merge and unmerge in place would add rounding to the base weights on every sync)."""
    out: dict[str, Any] = {}
    for name, tensor in state.items():
        if name.endswith((_A, _B)):
            continue
        plain = name.replace(_BASE, ".")
        if name.endswith(_BASE + "weight"):
            layer = name[: -len(_BASE + "weight")]
            a, b = state.get(layer + _A), state.get(layer + _B)
            if a is not None and b is not None:
                tensor = merge_adapter(tensor, a, b, scaling=scaling)
        out[plain] = tensor
    return out
