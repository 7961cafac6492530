"""The tiny random models of the trainer tests, in one place.

Module-level functions, so that spawned training workers can unpickle them as model factories. The shared
fixtures over them (the embedded tokenizer, a saved tiny model folder) are in ``conftest.py``.
"""

from __future__ import annotations

from typing import Any

EMBEDDED = "embedded:smollm2-135m"
"""The embedded model whose tokenizer (and chat template) the tests use."""

VOCAB = 128
"""Vocabulary of the models whose batches are drawn by hand (token ids below it)."""


def tiny_llama_config(vocab_size: int = VOCAB, **overrides: Any) -> Any:
    """A 2-layer Llama config small enough for many steps on a busy CPU; ``overrides`` win."""
    from transformers import LlamaConfig

    settings = {
        "vocab_size": vocab_size,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        **overrides,
    }
    return LlamaConfig(**settings)


def tiny_llama(**overrides: Any) -> Any:
    """A fresh random :func:`tiny_llama_config` Llama (the caller's torch seed decides its weights)."""
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM(tiny_llama_config(**overrides))


def special_ids(tokenizer: Any) -> dict[str, Any]:
    """A model config's bos/eos/pad ids for ``tokenizer``."""
    return {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


def save_tiny_llama(path: Any, tokenizer: Any, **overrides: Any) -> str:
    """Save a :func:`tiny_llama` over ``tokenizer``'s vocabulary (seed 0, the caller's RNG untouched) with
    that tokenizer in ``path``: a ``trainer.policy.model.path`` for whole runs."""
    import torch

    tokenizer.save_pretrained(path)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        settings = {"vocab_size": len(tokenizer), "max_position_embeddings": 2048, **special_ids(tokenizer)}
        model = tiny_llama(**{**settings, **overrides})
    model.save_pretrained(path)
    return str(path)
