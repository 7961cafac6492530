"""VLLMEngine on real vLLM with the embedded SmolLM2: on vLLM's CPU build (`make vllm-env`, CI) or a GPU.

Marked ``vllm``: `make test` runs these in .venv-vllm (vLLM's own environment); under CI=true a missing vLLM
fails them rather than skipping. One engine serves the module (a start takes 20-30 s on two cores); a test
that changes its weights puts the original ones back.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]  # an engine start: 20-150 s

torch = pytest.importorskip("torch")

from skyrl_train.inference import SamplingParams, make_engine  # noqa: E402
from skyrl_train.inference.weight_sync import gate  # noqa: E402
from skyrl_train.models import load_model  # noqa: E402

MODEL = "embedded:smollm2-135m"
FLOAT32_TOLERANCE = 1e-3
"""vLLM's float32 log-probabilities against the transformers forward (measured within 3e-5)."""


@pytest.fixture(autouse=True, scope="module")
def _vllm():
    """vLLM itself, imported when a test of this module runs (the main environment deselects them with
    -m "not vllm"; under CI=true a missing vLLM fails them)."""
    return pytest.importorskip("vllm")


@pytest.fixture(scope="module")
def engine():
    engine = make_engine("vllm", model_path=MODEL, dtype="float32", enforce_eager=True, max_model_len=1024)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def model():
    return load_model(MODEL)


@pytest.fixture(scope="module")
def base_state(model):
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


@pytest.fixture(scope="module")
def prompts(engine):
    questions = ["What is the capital of France?", "Write one SQL keyword.", "Name a colour."]
    return [
        engine.tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True, return_dict=True
        )["input_ids"]
        for q in questions
    ]


def perturbed(state: dict, scale: float = 0.02, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    return {
        name: t + scale * torch.randn(t.shape, generator=generator) * t.float().std().clamp(min=1e-3)
        if t.is_floating_point() and t.dim() == 2
        else t.clone()
        for name, t in state.items()
    }


def response_logprobs(model, prompt: list[int], response: list[int]) -> list[float]:
    """Log-probabilities of the response's tokens under ``model`` (float32 transformers forward)."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)[len(prompt) - 1 : -1]
    return logprobs.gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1).tolist()


@pytest.fixture
def restore(engine, model, base_state):
    """Puts the original weights back into the engine and the model after the test."""
    yield
    model.load_state_dict(base_state)
    asyncio.run(engine.update_weights(base_state.items()))


def test_generation_samples_seeds_stops_and_logprobs(engine, model, prompts):
    # n samples of one prompt: distinct; the same seed gives the same samples, another seed others
    group = [prompts[0]] * 4
    params = SamplingParams(temperature=1.0, max_tokens=16, seed=7)
    first = asyncio.run(engine.generate(group, params))
    again = asyncio.run(engine.generate(group, params))
    other = asyncio.run(engine.generate(group, SamplingParams(temperature=1.0, max_tokens=16, seed=8)))
    assert [o.token_ids for o in first] == [o.token_ids for o in again]
    assert len({tuple(o.token_ids) for o in first}) > 1
    assert [o.token_ids for o in first] != [o.token_ids for o in other]
    for out in first:
        assert out.stop_reason in ("stop", "length") and len(out.token_ids) == len(out.logprobs)
        assert out.policy_versions == [0] * len(out.token_ids)
    # sampled tokens' log-probabilities are the raw model's (temperature 1): equal to the trainer's forward
    for out in first:
        expected = response_logprobs(model, prompts[0], out.token_ids)
        assert max(abs(a - b) for a, b in zip(out.logprobs, expected, strict=True)) < FLOAT32_TOLERANCE
    # greedy decoding equals the transformers model's greedy continuation
    greedy = asyncio.run(engine.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=12)))[0]
    with torch.no_grad():
        reference = model.generate(
            torch.tensor([prompts[0]]), max_new_tokens=12, do_sample=False, attention_mask=None
        )[0, len(prompts[0]) :].tolist()
    assert greedy.token_ids == reference[: len(greedy.token_ids)]
    # a stop string ends the response and stays in it
    text = engine.tokenizer.decode(greedy.token_ids)
    word = next(w for w in text.split() if len(w) > 2)
    stopped = asyncio.run(
        engine.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=12, stop=[word]))
    )[0]
    assert stopped.stop_reason == "stop" and stopped.stop_string == word
    assert engine.tokenizer.decode(stopped.token_ids).endswith(word)


def test_weight_update_reaches_the_engine_and_passes_the_gate(engine, model, base_state, restore):
    probe = gate.probe_tokens(engine.tokenizer)
    before = asyncio.run(engine.prompt_logprobs(probe))
    new = perturbed(base_state)
    model.load_state_dict(new)
    version = engine.policy_version
    asyncio.run(engine.update_weights(new.items()))
    assert engine.policy_version == version + 1
    after = asyncio.run(engine.prompt_logprobs(probe))
    result = gate.compare_probe(gate.trainer_probe_logprobs(model, probe), after, tolerance=FLOAT32_TOLERANCE)
    assert result.max_diff < FLOAT32_TOLERANCE
    assert max(abs(a - b) for a, b in zip(before, after, strict=True)) > 10 * FLOAT32_TOLERANCE
    sync = engine.last_sync
    assert sync["tensors"] == len(new) and sync["chunks"] >= 2 and sync["bytes"] > 500e6


def test_bfloat16_tensors_are_cast_to_the_engine_dtype_on_the_sending_side(
    engine, model, base_state, restore
):
    new = perturbed(base_state, seed=3)
    halves = {name: t.to(torch.bfloat16) for name, t in new.items()}
    asyncio.run(engine.update_weights(halves.items()))
    probe = gate.probe_tokens(engine.tokenizer)
    model.load_state_dict({name: t.float() for name, t in halves.items()})
    expected = gate.trainer_probe_logprobs(model, probe)
    gate.compare_probe(expected, asyncio.run(engine.prompt_logprobs(probe)), tolerance=FLOAT32_TOLERANCE)


def test_a_tensor_damaged_in_transit_is_named_and_nothing_is_loaded(engine, model, base_state, monkeypatch):
    import skyrl_train.inference.vllm as vllm_engine

    probe = gate.probe_tokens(engine.tokenizer)
    before = asyncio.run(engine.prompt_logprobs(probe))
    victim = "model.layers.7.mlp.down_proj.weight"
    encode = vllm_engine.encode_tensor

    def damaging(name, tensor):
        name, dtype, shape, data = encode(name, tensor)
        if name == victim:
            data = data[:100] + bytes([data[100] ^ 0x40]) + data[101:]
        return name, dtype, shape, data

    monkeypatch.setattr(vllm_engine, "encode_tensor", damaging)
    version = engine.policy_version
    with pytest.raises(gate.WeightSyncError, match=victim.replace(".", r"\.")):
        asyncio.run(engine.update_weights(perturbed(base_state, seed=5).items()))
    assert engine.policy_version == version
    assert asyncio.run(engine.prompt_logprobs(probe)) == before  # the staged chunks were dropped


def test_in_flight_update_keeps_tokens_and_stamps_versions(engine, model, base_state, prompts, restore):
    params = SamplingParams(temperature=1.0, max_tokens=96, seed=11, ignore_eos=True)
    results: list = []
    worker = threading.Thread(target=lambda: results.extend(engine.generate_sync(prompts, params)))
    delivered = engine._delivered
    worker.start()
    deadline = time.monotonic() + 120
    while engine._delivered < delivered + 3 * len(prompts) and time.monotonic() < deadline:
        time.sleep(0.01)  # the requests are decoding: several tokens each have been delivered
    held = engine.pause()
    assert held == len(prompts)
    new = perturbed(base_state, seed=9)
    old_model = load_model(MODEL)
    model.load_state_dict(new)
    asyncio.run(engine.update_weights(new.items()))  # from another loop, while the requests are held
    engine.resume()
    worker.join(timeout=300)
    assert not worker.is_alive() and len(results) == len(prompts)
    version = engine.policy_version
    for prompt, out in zip(prompts, results, strict=True):
        assert len(out.token_ids) == 96 and out.stop_reason == "length"
        versions = out.policy_versions
        cut = versions.index(version)
        assert 0 < cut and set(versions[:cut]) == {version - 1} and set(versions[cut:]) == {version}
        # tokens before the update were sampled from the old weights, the rest from the new ones
        old = response_logprobs(old_model, prompt, out.token_ids)[:cut]
        fresh = response_logprobs(model, prompt, out.token_ids)[cut:]
        assert max(abs(a - b) for a, b in zip(out.logprobs[:cut], old, strict=True)) < FLOAT32_TOLERANCE
        assert max(abs(a - b) for a, b in zip(out.logprobs[cut:], fresh, strict=True)) < FLOAT32_TOLERANCE


def test_a_thousand_calls_from_sync_and_async_callers_do_not_hang(engine, prompts):
    params = SamplingParams(temperature=0.0, max_tokens=1)
    for _ in range(500):  # a new event loop per call
        assert len(engine.generate_sync(prompts[:1], params)[0].token_ids) == 1

    async def many() -> int:
        done = 0
        for _ in range(10):
            outs = await asyncio.gather(*(engine.generate(prompts[:1], params) for _ in range(50)))
            done += sum(len(o[0].token_ids) for o in outs)
        return done

    assert asyncio.run(many()) == 500
    # plain threads at once, each with its own loop
    counts: list[int] = []
    threads = [
        threading.Thread(target=lambda: counts.append(len(engine.generate_sync(prompts, params))))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert counts == [len(prompts)] * 4


def test_temperature_above_vllms_bound_is_refused_with_a_clear_message(engine, prompts):
    with pytest.raises(ValueError, match="temperature 2.5"):
        asyncio.run(engine.generate(prompts[:1], SamplingParams(temperature=2.5, max_tokens=4)))


def test_seeded_requests_whose_prompts_exceed_one_steps_token_budget(engine):
    """More prompt tokens than one engine step takes (8192 by default): the scheduler must not split a seeded
    request's prefill, which kills the CPU build's worker."""
    tokenizer = engine.tokenizer
    text = " ".join(f"row {i}: SELECT name FROM t{i} WHERE id = {i};" for i in range(60))
    base = tokenizer(text)["input_ids"][:700]
    prompts = [[*base[: 700 - i], i + 10] for i in range(14)]  # 14 x ~700 tokens, all different
    outs = asyncio.run(engine.generate(prompts, SamplingParams(temperature=1.0, max_tokens=4, seed=3)))
    assert [len(o.token_ids) for o in outs] == [4] * len(prompts)


def test_a_cuda_ipc_handle_travels_through_vllms_serializer_as_plain_data(monkeypatch):
    """The handle torch makes holds a function and classes, which vLLM's RPC serializer refuses; the plain
    data sent instead comes through it intact and rebuilds the same tensor arguments on the other side."""
    from torch.multiprocessing import reductions
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    from skyrl_train.inference.weight_sync import cuda_ipc

    args = (
        torch.Tensor,
        torch.Size([4, 8]),
        (8, 1),
        0,
        torch.UntypedStorage,
        torch.bfloat16,
        0,
        b"\x01storage-handle",
        64,
        0,
        False,
        b"\x02ref-counter",
        16,
        b"\x03event",
        True,
    )
    handle = (reductions.rebuild_cuda_tensor, args)
    with pytest.raises(Exception):  # noqa: B017 - the raw handle is refused, whatever vLLM calls the error
        MsgpackEncoder().encode(("skyrl_load_ipc", handle))
    data = cuda_ipc.handle_data(handle, device_uuid=None)
    received = MsgpackDecoder().decode(MsgpackEncoder().encode(data))
    rebuilt: list = []
    monkeypatch.setattr(reductions, "rebuild_cuda_tensor", lambda *a: rebuilt.append(a) or "tensor")
    assert cuda_ipc.open_handle(received) == "tensor"
    (got,) = rebuilt
    assert got[0] is torch.Tensor and got[4] is torch.UntypedStorage and got[5] is torch.bfloat16
    assert tuple(got[1]) == (4, 8) and tuple(got[2]) == (8, 1)
    assert list(got[6:]) == list(args[6:])
