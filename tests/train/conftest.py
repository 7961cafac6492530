"""Shared fixtures of the trainer tests: the embedded tokenizer and a tiny random model, each built once.

Tests read them and never change them (a test that needs to change a tokenizer loads its own).
"""

from __future__ import annotations

import json

import pytest

from .tiny_models import EMBEDDED, save_tiny_llama


@pytest.fixture(scope="session")
def tokenizer():
    """The embedded SmolLM2 tokenizer (its real ChatML chat template)."""
    pytest.importorskip("transformers")
    from skyrl_train.models import load_tokenizer

    return load_tokenizer(EMBEDDED)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, tokenizer) -> str:
    """The folder of a 2-layer random Llama over the embedded tokenizer's vocabulary, saved with that
    tokenizer: a ``trainer.policy.model.path`` for whole runs."""
    pytest.importorskip("torch")
    return save_tiny_llama(tmp_path_factory.mktemp("tiny_model"), tokenizer)


@pytest.fixture(scope="module")
def math_rows(tmp_path_factory):
    """Eight multi-turn arithmetic rows (the real math_multi_turn environment)."""
    out = tmp_path_factory.mktemp("math_data") / "train.jsonl"
    with out.open("w") as handle:
        for i in range(8):
            row = {
                "prompt": [{"role": "user", "content": f"What is {i} + 2? End with '#### N'."}],
                "env_class": "math_multi_turn",
                "reward_spec": {"method": "rule", "ground_truth": str(i + 2)},
            }
            handle.write(json.dumps(row) + "\n")
    return out
