"""Inference engines: HFEngine on a tiny random Llama with the real SmolLM2 tokenizer, and RemoteEngine against
a real HTTP server (started here) that answers in vLLM's /v1/completions format through an HFEngine."""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
import torch

from skyrl_gym.registries import Registry, UnknownNameError
from skyrl_train.inference import ENGINES, GenerationOutput, SamplingParams, make_engine, register_engine
from skyrl_train.inference.hf import HFEngine
from skyrl_train.inference.hf.sampling import sample_tokens
from skyrl_train.inference.remote import RemoteEngine, RemoteEngineError
from skyrl_train.inference.scripted import ScriptedEngine

from .tiny_models import special_ids, tiny_llama

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


def tiny_model(tokenizer, seed: int = 0):
    """A 2-layer Llama with large random weights, so that logits are far apart and argmax is stable."""
    torch.manual_seed(seed)
    return tiny_llama(
        vocab_size=len(tokenizer),
        max_position_embeddings=256,
        initializer_range=0.5,
        tie_word_embeddings=True,
        **special_ids(tokenizer),
    ).eval()


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_model(tokenizer)


@pytest.fixture(scope="module")
def prompts(tokenizer):
    texts = ["SELECT", "Hello there, how are you today?", "The quick brown fox jumps over the lazy dog and"]
    return [tokenizer.encode(t) for t in texts]


@pytest.fixture
def engine(model, tokenizer):
    engine = HFEngine(model, tokenizer, seed=0)
    yield engine
    engine.close()


def forward_logprobs(model, prompt: list[int], output: list[int]) -> torch.Tensor:
    """Log-probabilities of `output` after `prompt`, from one plain forward pass at temperature 1."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + output])).logits[0].float()
    logprobs = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return logprobs.gather(1, torch.tensor(output)[:, None]).squeeze(1)


def test_sampling_params_validation():
    assert SamplingParams(stop="</sql>").stop == ["</sql>"]
    for bad in (
        {"temperature": -1},
        {"top_p": 0},
        {"top_k": -2},
        {"max_tokens": 0},
        {"stop": [""]},
        {"min_p": 2},
    ):
        with pytest.raises(ValueError, match="SamplingParams"):
            SamplingParams(**bad)


def test_batch_of_different_lengths_matches_one_by_one(model, tokenizer, prompts):
    assert len({len(p) for p in prompts}) == 3
    with HFEngine(model, tokenizer, prefix_cache_tokens=0) as batched:
        together = batched.generate_sync(prompts, GREEDY)
    with HFEngine(model, tokenizer, prefix_cache_tokens=0) as single:
        alone = [single.generate_sync([p], GREEDY)[0] for p in prompts]
    for a, b in zip(together, alone, strict=True):
        assert a.token_ids == b.token_ids
        assert a.stop_reason == b.stop_reason == "length"
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)


def test_concurrent_calls_share_forward_passes(engine, prompts):
    expected = [engine.generate_sync([p], GREEDY)[0].token_ids for p in prompts]
    steps_before = engine.stats["steps"]

    async def many():
        return await asyncio.gather(*(engine.generate([p], GREEDY) for p in prompts * 4))

    results = asyncio.run(many())
    assert [r[0].token_ids for r in results] == expected * 4
    # 12 sequences of 12 tokens: one by one that is 12 * 11 decode steps; batched about 11.
    assert engine.stats["steps"] - steps_before < 3 * 11


def test_logprobs_match_a_forward_pass(engine, model, prompts):
    params = SamplingParams(temperature=0.8, top_k=40, top_p=0.9, max_tokens=10, seed=5)
    for prompt, out in zip(prompts, engine.generate_sync(prompts, params), strict=True):
        assert len(out.logprobs) == len(out.token_ids) == 10
        expected = forward_logprobs(model, prompt, out.token_ids)
        assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4)


def test_seed_makes_sampling_deterministic(engine, prompts):
    params = SamplingParams(temperature=1.0, max_tokens=16, seed=7)
    first = engine.generate_sync(prompts, params)
    engine.reset_prefix_cache()
    again = engine.generate_sync(prompts, params)
    assert [o.token_ids for o in first] == [o.token_ids for o in again]
    other = engine.generate_sync(prompts, SamplingParams(temperature=1.0, max_tokens=16, seed=8))
    assert [o.token_ids for o in first] != [o.token_ids for o in other]
    # The same prompt twice in one call: distinct random streams, so distinct samples.
    twins = engine.generate_sync([prompts[0], prompts[0]], params)
    assert twins[0].token_ids != twins[1].token_ids


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, [0.5, 0.3, 0.2, 0.0]),
        ({"temperature": 0.5}, [25 / 38, 9 / 38, 4 / 38, 0.0]),  # p ** 2, renormalised
        ({"top_k": 2}, [0.625, 0.375, 0.0, 0.0]),
        ({"top_p": 0.6}, [0.625, 0.375, 0.0, 0.0]),  # smallest set reaching 0.6: the first two
        ({"min_p": 0.5}, [0.625, 0.375, 0.0, 0.0]),  # at least half the top probability
    ],
)
def test_sampling_follows_the_filtered_distribution(engine, options, expected):
    probs = torch.tensor([0.5, 0.3, 0.2, 0.0] + [0.0] * 12)
    logits = torch.log(probs).clamp(min=-1e4).expand(20000, -1).contiguous()
    params = SamplingParams(**{"temperature": 1.0, **options})
    rows = [SimpleNamespace(params=params, generator=None)] * logits.shape[0]
    tokens, logprobs = sample_tokens(logits, rows, engine._rng)
    frequencies = torch.bincount(tokens, minlength=16)[:4].float() / tokens.numel()
    assert torch.allclose(frequencies, torch.tensor(expected), atol=0.015)
    # Logprobs are always those of the raw distribution (temperature 1, no filtering).
    assert torch.allclose(logprobs, torch.log(probs)[tokens], atol=1e-5)


def test_top_k_one_and_tiny_top_p_are_greedy(engine, prompts):
    greedy = [o.token_ids for o in engine.generate_sync(prompts, GREEDY)]
    top_k = SamplingParams(temperature=1.0, top_k=1, max_tokens=12, seed=1)
    top_p = SamplingParams(temperature=1.0, top_p=1e-6, max_tokens=12, seed=1)
    assert [o.token_ids for o in engine.generate_sync(prompts, top_k)] == greedy
    assert [o.token_ids for o in engine.generate_sync(prompts, top_p)] == greedy


def test_stop_strings_end_at_the_completing_token(engine, tokenizer, prompts):
    free = engine.generate_sync(prompts[1:2], SamplingParams(temperature=0.0, max_tokens=30))[0].token_ids
    text = tokenizer.decode(free)
    # A stop string spanning two tokens, taken from the middle of the free-running output.
    stop = tokenizer.decode(free[8:10])[-4:]
    assert stop and stop in text
    first_hit = next(j for j in range(len(free)) if stop in tokenizer.decode(free[: j + 1]))
    out = engine.generate_sync(
        prompts[1:2], SamplingParams(temperature=0.0, max_tokens=30, stop=["@@never@@", stop])
    )
    assert out[0].token_ids == free[: first_hit + 1]
    assert out[0].stop_reason == "stop" and out[0].stop_string == stop
    assert len(out[0].logprobs) == len(out[0].token_ids)


def test_max_tokens_stop_tokens_and_eos(model, tokenizer, engine, prompts):
    out = engine.generate_sync(prompts, SamplingParams(temperature=0.0, max_tokens=5))
    assert [len(o.token_ids) for o in out] == [5, 5, 5]
    assert {o.stop_reason for o in out} == {"length"}
    free = engine.generate_sync(prompts[:1], GREEDY)[0].token_ids
    stop_id = free[3]
    expected = free[: free.index(stop_id) + 1]
    by_id = engine.generate_sync(
        prompts[:1], SamplingParams(temperature=0.0, max_tokens=12, stop_token_ids=[stop_id])
    )
    assert by_id[0].token_ids == expected and by_id[0].stop_reason == "stop"
    # The model's own EOS (read from its generation config) stops it the same way.
    eos_model = copy.deepcopy(model)
    eos_model.generation_config.eos_token_id = stop_id
    with HFEngine(eos_model, tokenizer) as eos_engine:
        by_eos = eos_engine.generate_sync(prompts[:1], GREEDY)
    assert by_eos[0].token_ids == expected and by_eos[0].stop_reason == "stop"
    assert by_eos[0].stop_string is None


def test_context_length_ends_with_length(model, tokenizer):
    with HFEngine(model, tokenizer, max_model_len=20) as engine:
        prompt = list(range(100, 115))
        out = engine.generate_sync([prompt], SamplingParams(temperature=0.0, max_tokens=50))[0]
        assert len(out.token_ids) == 5 and out.stop_reason == "length"
        with pytest.raises(ValueError, match="no room"):
            engine.generate_sync([list(range(100, 120))], GREEDY)


def test_bad_prompts_are_refused_with_a_clear_error(engine):
    with pytest.raises(ValueError, match="empty"):
        engine.generate_sync([[]], GREEDY)
    with pytest.raises(ValueError, match="vocabulary"):
        engine.generate_sync([[10**7]], GREEDY)
    assert engine.generate_sync([], GREEDY) == []


def test_prefix_cache_reuses_history_and_changes_nothing(model, tokenizer, prompts):
    """A second turn (prompt + response + observation) prefills only its new tokens, with the same result."""
    observation = tokenizer.encode("<observation>3 rows</observation>")
    with HFEngine(model, tokenizer, prefix_cache_tokens=0) as plain:
        turn1 = plain.generate_sync(prompts, GREEDY)
        turn2_prompts = [p + o.token_ids + observation for p, o in zip(prompts, turn1, strict=True)]
        expected = plain.generate_sync(turn2_prompts, GREEDY)
    with HFEngine(model, tokenizer) as cached:
        assert [o.token_ids for o in cached.generate_sync(prompts, GREEDY)] == [o.token_ids for o in turn1]
        reused_before = cached.stats["reused_tokens"]
        # Mixed chunk: two prompts extend cached sequences, one is new (holes and left padding in one batch).
        mixed = turn2_prompts[:2] + [tokenizer.encode("A completely different prompt")]
        got = cached.generate_sync(mixed, GREEDY)
        assert cached.stats["reused_tokens"] - reused_before >= sum(len(p) + 11 for p in prompts[:2])
    with HFEngine(model, tokenizer, prefix_cache_tokens=0) as plain:
        expected_new = plain.generate_sync(mixed[2:], GREEDY)
    for a, b in zip(got, expected[:2] + expected_new, strict=True):
        assert a.token_ids == b.token_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)


def test_update_weights_changes_outputs_and_shared_weights_cost_nothing(model, tokenizer, prompts):
    other = tiny_model(tokenizer, seed=1)
    with HFEngine(other, tokenizer) as reference:
        target = [o.token_ids for o in reference.generate_sync(prompts, GREEDY)]
    with HFEngine(copy.deepcopy(model), tokenizer) as engine:
        before = [o.token_ids for o in engine.generate_sync(prompts, GREEDY)]
        assert before != target
        asyncio.run(engine.update_weights(other.state_dict().items()))
        assert [o.token_ids for o in engine.generate_sync(prompts, GREEDY)] == target
        # The engine's own tensors (a shared policy model) are recognised and not copied.
        assert engine.load_weights(engine.model.state_dict().items()) == 0
        with pytest.raises(KeyError, match="not in the engine's model"):
            engine.load_weights([("no.such.weight", torch.zeros(1))])


def test_in_place_training_step_is_seen_by_a_shared_engine(model, tokenizer, prompts):
    shared = copy.deepcopy(model)
    other = tiny_model(tokenizer, seed=2)
    with HFEngine(shared, tokenizer) as engine:
        engine.generate_sync(prompts, GREEDY)  # fills the prefix cache with the old weights
        with torch.no_grad():  # what an optimizer step does: in-place updates of the parameters
            for p, q in zip(shared.parameters(), other.parameters(), strict=True):
                p.copy_(q)
        with HFEngine(other, tokenizer) as reference:
            got = [o.token_ids for o in engine.generate_sync(prompts, GREEDY)]
            assert got == [o.token_ids for o in reference.generate_sync(prompts, GREEDY)]


def test_close_aborts_work_in_flight(model, tokenizer, prompts):
    engine = HFEngine(model, tokenizer)
    results: list = []
    worker = threading.Thread(
        target=lambda: results.extend(
            engine.generate_sync(prompts[:1], SamplingParams(temperature=0, max_tokens=250))
        )
    )
    worker.start()
    while engine.stats["steps"] < 3:
        time.sleep(0.01)
    engine.close()
    worker.join(timeout=30)
    assert results and results[0].stop_reason == "abort" and 0 < len(results[0].token_ids) < 250
    with pytest.raises(RuntimeError, match="closed"):
        engine.generate_sync(prompts, GREEDY)


def test_cancelled_request_leaves_the_batch(engine, prompts):
    async def scenario():
        slow = asyncio.ensure_future(
            engine.generate(prompts[:1], SamplingParams(temperature=0, max_tokens=200))
        )
        await asyncio.sleep(0.05)
        slow.cancel()
        return await engine.generate(prompts[1:], GREEDY)

    outs = asyncio.run(scenario())
    assert [len(o.token_ids) for o in outs] == [12, 12]
    assert engine.stats["steps"] < 150


def test_make_engine_by_name(model, tokenizer):
    engine = make_engine("hf", model=model, tokenizer=tokenizer, max_batch_size=4)
    assert isinstance(engine, HFEngine) and engine.max_batch_size == 4
    engine.close()
    assert isinstance(ENGINES, Registry) and {"hf", "vllm", "remote"} <= set(ENGINES)
    with pytest.raises(UnknownNameError, match=r"'hff' \(generator.backend\); did you mean 'hf'"):
        make_engine("hff", model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="base_url"):
        make_engine("remote", tokenizer=tokenizer)


def test_a_registered_engine_is_built_by_its_create(model, tokenizer):
    class Echo(ScriptedEngine):
        """Answers every prompt with the text it was built with."""

        @classmethod
        def create(cls, *, model_path=None, model=None, tokenizer=None, text="", **options):
            return cls(tokenizer, lambda conversation: text, **options)

    register_engine("echo_for_test", Echo)
    try:
        engine = make_engine("echo_for_test", tokenizer=tokenizer, text="hi")
        (out,) = engine.generate_sync([[1, 2]], GREEDY)
        assert tokenizer.decode(out.token_ids[:-1]) == "hi" and not Echo.runs_shared_model
        with pytest.raises(ValueError, match="already registered"):
            register_engine("echo_for_test", "somewhere.else:Engine")
    finally:
        ENGINES.unregister("echo_for_test")


def test_importing_the_package_stays_light():
    code = "import sys, skyrl_train.inference; print(sorted(m for m in ('torch', 'transformers', 'vllm') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------------------ remote engine, real HTTP


class _CompletionsServer(ThreadingHTTPServer):
    """A small vLLM-style /v1/completions server backed by an HFEngine."""

    daemon_threads = True

    def __init__(self, engine: HFEngine, *, ids_field: str):
        super().__init__(("127.0.0.1", 0), _CompletionsHandler)
        self.engine = engine
        self.ids_field = ids_field  # "token_ids" (return_token_ids) or "tokens" (return_tokens_as_token_ids)
        self.requests: list[dict] = []


class _CompletionsHandler(BaseHTTPRequestHandler):
    server: _CompletionsServer

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def _reply(self, code: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        if self.path != "/v1/completions":
            return self._reply(404, {"error": {"message": f"no route {self.path}"}})
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(request)
        try:
            params = SamplingParams(
                temperature=request.get("temperature", 1.0),
                top_p=request.get("top_p", 1.0),
                top_k=request.get("top_k", -1),
                max_tokens=request.get("max_tokens", 16),
                stop=request.get("stop"),
                seed=request.get("seed"),
                stop_token_ids=request.get("stop_token_ids"),
            )
        except ValueError as error:
            return self._reply(400, {"error": {"message": str(error), "type": "BadRequestError"}})
        out = self.server.engine.generate_sync([request["prompt"]], params)[0]
        choice = {
            "index": 0,
            "text": self.server.engine.tokenizer.decode(out.token_ids),
            "finish_reason": out.stop_reason,
            "stop_reason": out.stop_string,
            "logprobs": {"token_logprobs": out.logprobs, "top_logprobs": None, "text_offset": []},
        }
        if self.server.ids_field == "token_ids":
            choice["token_ids"] = out.token_ids
            choice["logprobs"]["tokens"] = [self.server.engine.tokenizer.decode([t]) for t in out.token_ids]
        else:
            choice["logprobs"]["tokens"] = [f"token_id:{t}" for t in out.token_ids]
        self._reply(
            200, {"id": "cmpl-test", "object": "text_completion", "model": "tiny", "choices": [choice]}
        )


@pytest.fixture(params=["token_ids", "tokens"])
def server(request, model, tokenizer):
    engine = HFEngine(model, tokenizer)
    httpd = _CompletionsServer(engine, ids_field=request.param)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    engine.close()


def test_remote_round_trip_matches_the_local_engine(server, tokenizer, prompts, engine):
    host, port = server.server_address
    remote = RemoteEngine(f"{host}:{port}", tokenizer=tokenizer, model_name="tiny")
    params = SamplingParams(temperature=0.0, max_tokens=12)
    got = asyncio.run(remote.generate(prompts, params))
    expected = engine.generate_sync(prompts, params)
    for a, b in zip(got, expected, strict=True):
        assert isinstance(a, GenerationOutput)
        assert a.token_ids == b.token_ids and a.stop_reason == b.stop_reason == "length"
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
    assert sorted(r["prompt"] for r in server.requests) == sorted(prompts)  # one request per prompt
    sent = server.requests[0]
    assert sent["logprobs"] == 0 and sent["model"] == "tiny"
    assert sent["include_stop_str_in_output"] is True
    # Stop strings travel and come back as a stop reason.
    free = expected[1].token_ids
    stop = tokenizer.decode(free[4:6])[-3:]
    out = asyncio.run(
        remote.generate(prompts[1:2], SamplingParams(temperature=0.0, max_tokens=12, stop=[stop]))
    )[0]
    assert out.stop_reason == "stop" and out.stop_string == stop and stop in tokenizer.decode(out.token_ids)
    remote.close()


def test_remote_errors_are_clear(server, tokenizer, prompts):
    host, port = server.server_address
    remote = RemoteEngine(f"http://{host}:{port}/v1", tokenizer=tokenizer, max_retries=0)
    bad = SamplingParams(max_tokens=4)
    bad.top_p = 5.0  # slips past local validation; the server refuses it
    with pytest.raises(RemoteEngineError, match="HTTP 400.*top_p"):
        asyncio.run(remote.generate(prompts[:1], bad))
    with pytest.raises(NotImplementedError, match="cannot receive weights"):
        asyncio.run(remote.update_weights([]))
    remote.close()
    # Nothing listens on a port we just freed.
    probe = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    free_port = probe.server_address[1]
    probe.server_close()
    dead = RemoteEngine(f"http://127.0.0.1:{free_port}", tokenizer=tokenizer, max_retries=0)
    with pytest.raises(RemoteEngineError, match="cannot reach"):
        asyncio.run(dead.generate(prompts[:1], GREEDY))
    dead.close()


def test_remote_timeout_is_reported():
    listener = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)  # accepts, never answers
    host, port = listener.server_address
    remote = RemoteEngine(f"http://{host}:{port}", timeout_s=0.3, max_retries=0)
    with pytest.raises(RemoteEngineError, match="within 0.3 s"):
        asyncio.run(remote.generate([[1, 2, 3]], GREEDY))
    remote.close()
    listener.server_close()
