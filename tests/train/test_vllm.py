"""VLLMEngine on a real GPU with the embedded SmolLM2 (skipped where there is no CUDA GPU or no vLLM)."""

from __future__ import annotations

import asyncio

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
pytest.importorskip("vllm")

from skyrl_train.inference import SamplingParams, make_engine  # noqa: E402
from skyrl_train.models import load_model, load_tokenizer  # noqa: E402

MODEL = "embedded:smollm2-135m"


@pytest.fixture(scope="module")
def engine():
    engine = make_engine(
        "vllm",
        model_path=MODEL,
        dtype="float32",
        gpu_memory_utilization=0.3,
        enforce_eager=True,
        enable_sleep_mode=True,
    )
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def prompts():
    tokenizer = load_tokenizer(MODEL)
    questions = ["What is the capital of France?", "Write one SQL keyword.", "Name a colour."]
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, return_dict=True
        )["input_ids"]
        for q in questions
    ]


def test_generate_tokens_logprobs_and_stops(engine, prompts):
    tokenizer = engine.tokenizer
    outs = asyncio.run(engine.generate(prompts, SamplingParams(temperature=0.0, max_tokens=24)))
    assert "Paris" in tokenizer.decode(outs[0].token_ids)
    model = load_model(MODEL, device="cuda")
    for prompt, out in zip(prompts, outs, strict=True):
        assert out.stop_reason in ("stop", "length") and len(out.logprobs) == len(out.token_ids)
        with torch.no_grad():
            logits = model(torch.tensor([prompt + out.token_ids], device="cuda")).logits[0].float()
        expected = torch.log_softmax(logits[len(prompt) - 1 : -1], -1).gather(
            1, torch.tensor(out.token_ids, device="cuda")[:, None]
        )
        assert torch.allclose(torch.tensor(out.logprobs), expected.squeeze(1).cpu(), atol=2e-2)
    stop = tokenizer.decode(outs[0].token_ids)[4:8]
    stopped = asyncio.run(
        engine.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=24, stop=[stop]))
    )
    assert stopped[0].stop_reason == "stop" and stopped[0].stop_string == stop
    assert stop in tokenizer.decode(stopped[0].token_ids)


def test_seeded_sampling_is_reproducible(engine, prompts):
    params = SamplingParams(temperature=1.0, max_tokens=16, seed=3)
    first = asyncio.run(engine.generate(prompts, params))
    again = asyncio.run(engine.generate(prompts, params))
    assert [o.token_ids for o in first] == [o.token_ids for o in again]


def test_update_weights_and_sleep(engine, prompts):
    greedy = SamplingParams(temperature=0.0, max_tokens=8)
    before = asyncio.run(engine.generate(prompts, greedy))
    model = load_model(MODEL)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(-1.0)
    asyncio.run(engine.update_weights(model.state_dict().items()))
    changed = asyncio.run(engine.generate(prompts, greedy))
    assert [o.token_ids for o in changed] != [o.token_ids for o in before]
    asyncio.run(engine.sleep())
    asyncio.run(engine.wake_up())
    asyncio.run(engine.update_weights(load_model(MODEL).state_dict().items()))
    restored = asyncio.run(engine.generate(prompts, greedy))
    assert [o.token_ids for o in restored] == [o.token_ids for o in before]
