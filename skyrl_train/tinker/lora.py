"""LoRA adapters for the Tinker path, with peft: which layers get one, how they are made and merged.

Tinker's LoRA settings are a rank and three switches: adapters on the attention projections
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
from typing import Any

__all__ = ["DEFAULT_LORA_ALPHA", "apply_lora", "lora_targets", "untie_output_embeddings"]

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


def untie_output_embeddings(model: Any) -> None:
    """Give the output projection its own copy of a weight it shares with the input embeddings."""
    import torch

    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    if head is not None and embed is not None and head.weight is embed.weight:
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
