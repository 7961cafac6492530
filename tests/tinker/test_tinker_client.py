"""The official ``tinker`` client against ``skyrl-train serve`` on 127.0.0.1, with the embedded model on the CPU.

One server and backend for the module (the model loads once); each test makes its own LoRA training client.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

tinker = pytest.importorskip("tinker")
pytest.importorskip("fastapi")
pytest.importorskip("peft")

from tinker import types  # noqa: E402
from tinker_server import running_server  # noqa: E402

from skyrl_train.tinker.backend import TinkerBackend  # noqa: E402
from skyrl_train.tinker.futures import Job  # noqa: E402

pytestmark = pytest.mark.slow

PROMPT = "Question: what is the capital of France?\nAnswer:"
ANSWER = " The capital of France is Paris."


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # The client reads these at construction: a key in its format (the server checks none) and no
    # telemetry uploads.
    mp = pytest.MonkeyPatch()
    mp.setenv("TINKER_API_KEY", "tml-local")
    mp.setenv("TINKER_TELEMETRY", "0")
    store = tmp_path_factory.mktemp("tinker-store")
    backend = TinkerBackend(store_dir=store, max_tokens_per_pass=1024)
    with running_server(backend, store) as (url, service):
        yield {"url": url, "service": service, "backend": backend, "store": store}
    backend.close()
    mp.undo()


@pytest.fixture(scope="module")
def client(server):
    sc = tinker.ServiceClient(base_url=server["url"])
    yield sc
    sc.close("success").result()


@pytest.fixture(scope="module")
def tokenizer(client):
    tc = client.create_lora_training_client(base_model="embedded", rank=4, seed=0).result()
    return tc.get_tokenizer()


def sft_datum(tokenizer, prompt=PROMPT, answer=ANSWER) -> types.Datum:
    """Next-token prediction on ``prompt + answer``, the loss on the answer's tokens only."""
    p = tokenizer.encode(prompt)
    a = tokenizer.encode(answer)
    tokens = p + a
    weights = [0.0] * (len(p) - 1) + [1.0] * len(a)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights},
    )


def answer_logprob(tc, datum) -> float:
    out = tc.forward([datum], "cross_entropy").result()
    lp = out.loss_fn_outputs[0]["logprobs"].to_numpy()
    w = np.asarray(datum.loss_fn_inputs["weights"].data)
    return float((lp * w).sum())


def test_supervised_step_lowers_the_loss_on_its_batch(client, tokenizer):
    tc = client.create_lora_training_client(base_model="embedded", rank=8, seed=1).result()
    info = tc.get_info()
    assert info.lora_rank == 8 and info.model_data.model_name == "embedded"
    batch = [sft_datum(tokenizer), sft_datum(tokenizer, "Q: 2+2?\nA:", " 4")]
    before = tc.forward(batch, "cross_entropy").result()
    fb = tc.forward_backward(batch, "cross_entropy")
    step = tc.optim_step(types.AdamParams(learning_rate=5e-3))
    fb_out, step_out = fb.result(), step.result()
    after = tc.forward(batch, "cross_entropy").result()
    # forward and forward_backward compute the same loss on the same weights
    assert fb_out.metrics["loss:sum"] == pytest.approx(before.metrics["loss:sum"], rel=1e-5)
    assert step_out.metrics["grad_norm:mean"] > 0
    assert after.metrics["loss:sum"] < before.metrics["loss:sum"]
    # logprobs come back one per target token, and the weighted sum is the loss
    lp = fb_out.loss_fn_outputs[0]["logprobs"].to_numpy()
    assert lp.shape == (len(batch[0].loss_fn_inputs["target_tokens"].data),)


def test_waiting_forward_backward_calls_are_batched_into_one_backend_call(server, client, tokenizer):
    tc = client.create_lora_training_client(base_model="embedded", rank=4, seed=2).result()
    d1, d2 = sft_datum(tokenizer), sft_datum(tokenizer, "Q: 3+3?\nA:", " 6")
    alone = [tc.forward([d], "cross_entropy").result().metrics["loss:sum"] for d in (d1, d2)]
    lane = server["service"].models[tc.model_id].lane
    # Hold the lane with a job of our own until both requests are queued behind it.
    gate = threading.Event()
    held = server["service"].futures.create(None)
    lane.submit(Job(future=held, order=-1, run=lambda: (gate.wait(60), ({}, False))[1]))
    calls = lane.calls
    f1 = tc.forward_backward([d1], "cross_entropy")
    f2 = tc.forward_backward([d2], "cross_entropy")
    deadline = time.monotonic() + 60
    while len(lane._pending) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    gate.set()
    r1, r2 = f1.result(), f2.result()
    assert lane.calls - calls == 2  # the held job, then both requests in one call
    assert r1.metrics["loss:sum"] == pytest.approx(alone[0], rel=1e-5)
    assert r2.metrics["loss:sum"] == pytest.approx(alone[1], rel=1e-5)
    tc.optim_step(types.AdamParams(learning_rate=1e-3)).result()


def test_importance_sampling_step_raises_the_logprob_of_advantaged_tokens(client, tokenizer):
    tc = client.create_lora_training_client(base_model="embedded", rank=8, seed=3).result()
    sampler = tc.save_weights_and_get_sampling_client().result()
    prompt = tokenizer.encode(PROMPT)
    res = sampler.sample(
        types.ModelInput.from_ints(prompt), 2, types.SamplingParams(max_tokens=6, temperature=1.0, seed=7)
    ).result()
    data, good = [], []
    for seq, advantage in zip(res.sequences, (1.0, -1.0), strict=True):
        tokens = prompt + list(seq.tokens)
        n_prompt = len(prompt) - 1
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(tokens[:-1]),
            loss_fn_inputs={
                "target_tokens": tokens[1:],
                "logprobs": [0.0] * n_prompt + list(seq.logprobs),
                "advantages": [0.0] * n_prompt + [advantage] * len(seq.tokens),
            },
        )
        data.append(datum)
        good.append(
            types.Datum(
                model_input=datum.model_input,
                loss_fn_inputs={
                    "target_tokens": tokens[1:],
                    "weights": [0.0] * n_prompt + [1.0] * len(seq.tokens),
                },
            )
        )
    before = [answer_logprob(tc, d) for d in good]
    out = tc.forward_backward(data, "importance_sampling").result()
    # on-policy: the ratio is 1, so the loss is minus the sum of the advantages
    assert out.metrics["loss:sum"] == pytest.approx(
        -sum(len(s.tokens) * a for s, a in zip(res.sequences, (1, -1), strict=True)), abs=0.05
    )
    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    after = [answer_logprob(tc, d) for d in good]
    assert after[0] > before[0]  # the positively advantaged sample became more likely
    assert after[1] < before[1]  # the negatively advantaged one less likely


def test_ppo_and_custom_losses_run(client, tokenizer):
    tc = client.create_lora_training_client(base_model="embedded", rank=4, seed=4).result()
    d = sft_datum(tokenizer)
    n = len(d.loss_fn_inputs["target_tokens"].data)
    lp = tc.forward([d], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    ppo = types.Datum(
        model_input=d.model_input,
        loss_fn_inputs={
            "target_tokens": d.loss_fn_inputs["target_tokens"],
            "logprobs": lp.tolist(),
            "advantages": [1.0] * n,
        },
    )
    out = tc.forward_backward([ppo], "ppo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}).result()
    assert out.metrics["loss:sum"] == pytest.approx(-n, abs=1e-3)  # ratio 1 everywhere

    # A custom loss runs in the client (forward, then a linear cross-entropy backward on the server).
    def neg_ll(data, logprobs_list):
        loss = sum(
            -(lp * w.to_torch()).sum()
            for lp, w in zip(logprobs_list, [x.loss_fn_inputs["weights"] for x in data], strict=True)
        )
        return loss, {"custom_nll:sum": float(loss.detach())}

    custom = tc.forward_backward_custom([d], neg_ll).result()
    ce = tc.forward([d], "cross_entropy").result()
    assert custom.metrics["loss:sum"] == pytest.approx(ce.metrics["loss:sum"], rel=1e-5)
    tc.optim_step(types.AdamParams(learning_rate=1e-3)).result()


def test_sampling_tokens_and_logprobs_match_the_backend(server, client, tokenizer):
    tc = client.create_lora_training_client(base_model="embedded", rank=4, seed=5).result()
    sampler = tc.save_weights_and_get_sampling_client().result()
    prompt = tokenizer.encode(PROMPT)
    res = sampler.sample(
        types.ModelInput.from_ints(prompt),
        3,
        types.SamplingParams(max_tokens=8, temperature=1.0),
        include_prompt_logprobs=True,
    ).result()
    assert len(res.sequences) == 3
    backend = server["backend"]
    backend_sampler = server["service"].samplers[sampler._sampling_session_id].backend_id
    expected_prompt = backend.compute_logprobs(backend_sampler, prompt)
    assert res.prompt_logprobs[0] is None
    np.testing.assert_allclose(res.prompt_logprobs[1:], expected_prompt[1:], atol=1e-4)
    for seq in res.sequences:
        assert 1 <= len(seq.tokens) <= 8 and len(seq.logprobs) == len(seq.tokens)
        assert seq.stop_reason in ("stop", "length")
        full = backend.compute_logprobs(backend_sampler, prompt + list(seq.tokens))
        np.testing.assert_allclose(seq.logprobs, full[len(prompt) :], atol=1e-3)
    # compute_logprobs through the client equals the backend's
    seq = prompt + list(res.sequences[0].tokens)
    via_api = sampler.compute_logprobs(types.ModelInput.from_ints(seq)).result()
    assert via_api[0] is None
    np.testing.assert_allclose(via_api[1:], backend.compute_logprobs(backend_sampler, seq)[1:], atol=1e-5)
    # and the training model's forward gives the same log-probabilities as its sampler
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(seq[:-1]), loss_fn_inputs={"target_tokens": seq[1:]}
    )
    train_lp = tc.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    np.testing.assert_allclose(train_lp, via_api[1:], atol=1e-3)


def test_save_and_load_round_trip_exactly(client, tokenizer):
    tc = client.create_lora_training_client(base_model="embedded", rank=4, seed=6).result()
    d = sft_datum(tokenizer)
    adam = types.AdamParams(learning_rate=1e-2)
    tc.forward_backward([d], "cross_entropy").result()
    tc.optim_step(adam).result()
    saved = tc.save_state("round-trip").result()
    assert saved.path == f"tinker://{tc.model_id}/weights/round-trip"
    at_save = tc.forward([d], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    tc.forward_backward([d], "cross_entropy").result()
    tc.optim_step(adam).result()
    after_step = tc.forward([d], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    assert not np.array_equal(at_save, after_step)

    restored = client.create_training_client_from_state_with_optimizer(saved.path).result()
    got = restored.forward([d], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    np.testing.assert_array_equal(got, at_save)
    # the optimizer state came back too: the same step gives the same weights
    restored.forward_backward([d], "cross_entropy").result()
    restored.optim_step(adam).result()
    got = restored.forward([d], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    np.testing.assert_array_equal(got, after_step)

    # load_state into the first model takes it back to the checkpoint
    with pytest.warns(FutureWarning):
        load = tc.load_state(saved.path)
    load.result()
    got = tc.forward([d], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    np.testing.assert_array_equal(got, at_save)


def test_saved_weights_outlive_the_client_and_the_server(server, tokenizer, tmp_path):
    sc = tinker.ServiceClient(base_url=server["url"])
    tc = sc.create_lora_training_client(base_model="embedded", rank=4, seed=8).result()
    d = sft_datum(tokenizer)
    tc.forward_backward([d], "cross_entropy").result()
    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    path = tc.save_weights_for_sampler("kept").result().path
    assert path == f"tinker://{tc.model_id}/sampler_weights/kept"
    seq = tokenizer.encode(PROMPT + ANSWER)
    expected = (
        sc.create_sampling_client(model_path=path)
        .result()
        .compute_logprobs(types.ModelInput.from_ints(seq))
        .result()
    )
    sc.close("interrupted").result()  # this client goes away

    # a fresh server process-alike (new backend, same store folder) serves the checkpoint to a new client
    backend = TinkerBackend(store_dir=server["store"])
    with running_server(backend, server["store"]) as (url, _):
        sc2 = tinker.ServiceClient(base_url=url)
        sampler = sc2.create_sampling_client(model_path=path).result()
        assert sampler.get_base_model() == "embedded"
        got = sampler.compute_logprobs(types.ModelInput.from_ints(seq)).result()
        np.testing.assert_allclose(got[1:], expected[1:], atol=1e-6)
        sc2.close("success").result()
    backend.close()


def test_waiting_sample_calls_share_backend_calls_and_pickled_samplers_work(
    server, client, tokenizer, monkeypatch
):
    import pickle

    backend, service = server["backend"], server["service"]
    sampler = client.create_sampling_client(base_model="embedded").result()
    record = service.samplers[sampler._sampling_session_id]
    calls = []
    real_sample = backend.sample

    def counted(sampler_id, prompt, **kwargs):
        calls.append((tuple(prompt), kwargs["num_samples"]))
        return real_sample(sampler_id, prompt, **kwargs)

    monkeypatch.setattr(backend, "sample", counted)
    gate = threading.Event()
    held = service.futures.create(None)
    record.lane.submit(Job(future=held, order=-1, run=lambda: (gate.wait(60), ({}, False))[1]))
    a, b = tokenizer.encode(PROMPT), tokenizer.encode("Q: 2+2?\nA:")
    params = types.SamplingParams(max_tokens=3, temperature=1.0)
    futures = [
        sampler.sample(types.ModelInput.from_ints(a), 2, params),
        sampler.sample(types.ModelInput.from_ints(a), 1, params),
        sampler.sample(types.ModelInput.from_ints(b), 1, params),
    ]
    deadline = time.monotonic() + 60
    while len(record.lane._pending) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    gate.set()
    results = [f.result() for f in futures]
    assert [len(r.sequences) for r in results] == [2, 1, 1]
    # the two requests of prompt a became one call of three samples; b ran beside it
    assert sorted(calls) == sorted([(tuple(a), 3), (tuple(b), 1)])
    monkeypatch.undo()

    # an unpickled copy (another process would do the same) joins the session and samples
    copy = pickle.loads(pickle.dumps(sampler))
    out = copy.sample(types.ModelInput.from_ints(b), 1, params).result()
    assert 1 <= len(out.sequences[0].tokens) <= 3
    # prompt_logprobs_last_n scores only the prompt's last tokens
    last = sampler.compute_logprobs(types.ModelInput.from_ints(a), prompt_logprobs_last_n=3).result()
    full = sampler.compute_logprobs(types.ModelInput.from_ints(a)).result()
    assert last[:-3] == [None] * (len(a) - 3)
    np.testing.assert_allclose(last[-3:], full[-3:], atol=1e-6)


def test_two_clients_train_at_the_same_time(server, tokenizer):
    """Two clients create their models (loading takes turns) and train them side by side."""
    batch = [sft_datum(tokenizer)]
    results: dict[int, tuple[float, float]] = {}
    errors: list[BaseException] = []

    def train(i: int) -> None:
        try:
            sc = tinker.ServiceClient(base_url=server["url"])
            tc = sc.create_lora_training_client(base_model="embedded", rank=4, seed=10 + i).result()
            first = tc.forward(batch, "cross_entropy").result().metrics["loss:sum"]
            for _ in range(2):
                fb = tc.forward_backward(batch, "cross_entropy")
                step = tc.optim_step(types.AdamParams(learning_rate=1e-3))
                fb.result(), step.result()
            results[i] = (first, tc.forward(batch, "cross_entropy").result().metrics["loss:sum"])
            sc.close("success").result()
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=train, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    assert sorted(results) == [0, 1]
    assert all(after < before for before, after in results.values()), results
