"""Model loading: the embedded SmolLM2 (GGUF dequantised once into a cached checkpoint) and plain HF folders."""

from __future__ import annotations

import json
import threading

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from skyrl_train import models
from skyrl_train.models import (
    cache_root,
    embedded_gguf_file,
    embedded_model_path,
    load_model,
    load_tokenizer,
)


@pytest.mark.slow
def test_embedded_model_matches_the_gguf_and_answers_sensibly():
    """The cached checkpoint gives exactly the GGUF model's logits, and greedy decoding answers a question."""
    tokenizer = load_tokenizer("embedded:smollm2-135m")
    model = load_model("embedded:smollm2-135m")
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )
    ids = ids["input_ids"]
    assert tokenizer.decode(ids[0]).endswith("<|im_start|>assistant\n")  # ChatML
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert "Paris" in tokenizer.decode(out[0, ids.shape[1] :])

    gguf = embedded_gguf_file()
    quantised = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    with torch.inference_mode():
        assert torch.equal(model(ids).logits, quantised(ids).logits)


def test_embedded_cache_folder_holds_checkpoint_and_tokenizer():
    folder = embedded_model_path()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "skyrl_embedded.json"):
        assert (folder / name).is_file(), name
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    tokenizer = load_tokenizer("embedded:smollm2-135m")
    # A dedicated pad token, distinct from the end-of-turn EOS.
    assert tokenizer.pad_token == "<|endoftext|>" and tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    assert models.is_embedded("embedded:smollm2-135m") and not models.is_embedded("Qwen/Qwen2.5-0.5B")


def test_unknown_embedded_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="known: embedded:smollm2-135m"):
        load_model("embedded:gpt-9")


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SKYRL_TRAIN_CACHE", str(tmp_path))
    assert cache_root() == tmp_path
    monkeypatch.delenv("SKYRL_TRAIN_CACHE")
    assert cache_root().parts[-2:] == (".cache", "skyrl_train")


def test_cache_is_built_once_atomically_and_rebuilt_when_stale(monkeypatch, tmp_path):
    """Concurrent first uses build one folder once; a stale marker triggers a rebuild; no temp folders stay."""
    monkeypatch.setenv("SKYRL_TRAIN_CACHE", str(tmp_path))
    builds = []

    def fake_build(name, gguf, out):
        builds.append(out)
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(models, "_build_embedded", fake_build)
    results = []
    threads = [threading.Thread(target=lambda: results.append(embedded_model_path())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    folder = tmp_path / "models" / "smollm2-135m"
    assert results == [folder] * 4 and len(builds) == 1
    assert (folder / "config.json").is_file()
    (folder / "skyrl_embedded.json").write_text(json.dumps({"format": -1}))
    assert embedded_model_path() == folder and len(builds) == 2
    leftovers = [
        p.name
        for p in (tmp_path / "models").iterdir()
        if p.name != "smollm2-135m" and not p.name.endswith(".lock")
    ]
    assert leftovers == []


def test_load_model_and_tokenizer_from_a_local_folder(tmp_path):
    tokenizer = load_tokenizer("embedded:smollm2-135m")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    tokenizer.pad_token = None
    tokenizer.save_pretrained(tmp_path)

    model = load_model(tmp_path, dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16 and not model.training
    assert load_model(str(tmp_path), dtype=torch.float32).dtype == torch.float32
    reloaded = load_tokenizer(tmp_path)
    assert reloaded.pad_token == reloaded.eos_token  # filled in when the tokenizer has none
    with pytest.raises(ValueError, match="unknown dtype"):
        load_model(tmp_path, dtype="float33")
