"""The Tinker backend on the real embedded SmolLM2-135M, on the CPU: losses, steps, checkpoints, samplers.

Batches are a few short sequences, so each call takes about a second; every test makes its own model and
unloads it.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from skyrl_train.tinker.backend import (  # noqa: E402
    BadRequest,
    Datum,
    TinkerBackend,
    UnknownModel,
    UnsupportedLoss,
)

TEXT = "The capital of France is Paris. The capital of Italy is Rome."


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    # One intra-op thread: on a CPU shared with other jobs, two threads wait on each other at every small
    # matmul of these short sequences (measured: a step took 6x longer under load than with one thread).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    backend = TinkerBackend(store_dir=tmp_path_factory.mktemp("tinker_store"), max_live_samplers=2)
    yield backend
    backend.close()
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def ids(backend) -> list[int]:
    return backend._tokenizer("embedded").encode(TEXT)


@pytest.fixture(scope="module")
def shared(backend):
    """A LoRA model for tests that only read it (forward calls, refused requests, steps with lr 0)."""
    model_id = backend.create_model("embedded", lora_rank=8, seed=0)
    yield model_id
    backend.unload(model_id)


@pytest.fixture
def model(backend):
    model_id = backend.create_model("embedded", lora_rank=8, seed=0)
    yield model_id
    backend.unload(model_id)


def sft_datum(ids: list[int], weights=None) -> Datum:
    n = len(ids) - 1
    w = np.ones(n, np.float32) if weights is None else np.asarray(weights, np.float32)
    return Datum(tokens=ids[:-1], inputs={"target_tokens": np.array(ids[1:]), "weights": w})


def policy_datum(ids: list[int], sampling_logprobs, advantages) -> Datum:
    return Datum(
        tokens=ids[:-1],
        inputs={
            "target_tokens": np.array(ids[1:]),
            "logprobs": np.asarray(sampling_logprobs, np.float32),
            "advantages": np.asarray(advantages, np.float32),
        },
    )


def trainable(backend, model_id) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in backend._model(model_id).trainable}


def current_logprobs(backend, model_id, ids) -> np.ndarray:
    return backend.forward(model_id, [sft_datum(ids)], "cross_entropy").outputs[0]["logprobs"]


@pytest.mark.parametrize("rank", [8, 0], ids=["lora", "full"])
def test_cross_entropy_step_lowers_the_loss_on_its_batch(backend, ids, rank):
    model_id = backend.create_model("embedded", lora_rank=rank)
    try:
        data = [sft_datum(ids), sft_datum(ids[:8])]
        before = backend.forward(model_id, data, "cross_entropy")
        # loss:sum is the weighted negative log-likelihood summed over tokens and data
        nll = -sum(float(out["logprobs"].sum()) for out in before.outputs)
        assert before.metrics["loss:sum"] == pytest.approx(nll, rel=1e-5)
        np.testing.assert_allclose(before.outputs[0]["elementwise_loss"], -before.outputs[0]["logprobs"])
        assert before.outputs[0]["logprobs"].shape == (len(ids) - 1,)

        weights_before = trainable(backend, model_id)
        fb = backend.forward_backward(model_id, data, "cross_entropy")
        assert fb.metrics["loss:sum"] == pytest.approx(before.metrics["loss:sum"], rel=1e-5)
        step = backend.optim_step(model_id, learning_rate=1e-3 if rank else 2e-5)
        assert step["grad_norm:mean"] > 0
        after = backend.forward(model_id, data, "cross_entropy")
        assert after.metrics["loss:sum"] < before.metrics["loss:sum"]
        moved = [n for n, p in trainable(backend, model_id).items() if not torch.equal(p, weights_before[n])]
        assert moved
    finally:
        backend.unload(model_id)


def test_lora_starts_at_the_base_model_and_trains_only_adapters(backend, ids, model):
    base = backend.create_model("embedded", lora_rank=None)
    try:
        np.testing.assert_allclose(
            current_logprobs(backend, model, ids), current_logprobs(backend, base, ids), atol=1e-5
        )
        names = list(trainable(backend, model))
        assert names and all("lora_" in n for n in names)
        assert any("lm_head" in n for n in names) and any("mlp" in n for n in names)
    finally:
        backend.unload(base)
    settings = {"lora_rank": 4, "train_mlp": False, "train_unembed": False}
    made = [backend.create_model("embedded", seed=seed, **settings) for seed in (1, 1, 2)]
    try:
        names = list(trainable(backend, made[0]))
        assert names and all("self_attn" in n for n in names)
        # the seed decides the adapters' initial A matrices
        first, same_seed, other_seed = (trainable(backend, m) for m in made)
        assert all(torch.equal(first[n], same_seed[n]) for n in names)
        assert not all(torch.equal(first[n], other_seed[n]) for n in names)
    finally:
        for model_id in made:
            backend.unload(model_id)


def test_gradients_accumulate_across_forward_backward_calls_until_the_step(backend, ids, model):
    first, second = sft_datum(ids), sft_datum(ids[:9])
    backend.forward_backward(model, [first, second], "cross_entropy")
    together = {n: p.grad.clone() for n, p in backend._model(model).trainable if p.grad is not None}
    backend.optim_step(model, learning_rate=0.0)  # zeroes the gradients, moves nothing
    backend.forward_backward(model, [first], "cross_entropy")
    backend.forward_backward(model, [second], "cross_entropy")
    apart = {n: p.grad.clone() for n, p in backend._model(model).trainable if p.grad is not None}
    assert together.keys() == apart.keys() and together
    # the same sum up to rounding (padding in the joint pass changes the order of float additions)
    joint = torch.cat([together[n].flatten() for n in together])
    split = torch.cat([apart[n].flatten() for n in together])
    assert float(torch.linalg.vector_norm(split - joint) / torch.linalg.vector_norm(joint)) < 1e-4


def test_importance_sampling_with_positive_advantages_raises_those_tokens_logprobs(backend, ids, model):
    lp = current_logprobs(backend, model, ids)
    n = len(lp)
    advantages = np.zeros(n, np.float32)
    advantages[n // 2 :] = 1.0  # reward the second half of the sequence only
    datum = policy_datum(ids, lp, advantages)
    out = backend.forward_backward(model, [datum], "importance_sampling")
    # on-policy the ratio is 1: the loss is minus the advantages' sum
    assert out.metrics["loss:sum"] == pytest.approx(-advantages.sum(), rel=1e-4)
    backend.optim_step(model, learning_rate=1e-3)
    after = current_logprobs(backend, model, ids)
    assert after[n // 2 :].sum() > lp[n // 2 :].sum()


def test_negative_advantages_lower_those_tokens_logprobs(backend, ids, model):
    lp = current_logprobs(backend, model, ids)
    backend.forward_backward(model, [policy_datum(ids, lp, -np.ones(len(lp)))], "importance_sampling")
    backend.optim_step(model, learning_rate=1e-3)
    assert current_logprobs(backend, model, ids).sum() < lp.sum()


def test_ppo_tokens_outside_the_clip_range_give_no_gradient(backend, ids, shared):
    lp = current_logprobs(backend, shared, ids)
    ones = np.ones(len(lp), np.float32)
    # the sampler gave every token e^-1 of its current probability: ratio e > 1.2, positive advantage: clipped
    out = backend.forward_backward(shared, [policy_datum(ids, lp - 1.0, ones)], "ppo")
    np.testing.assert_allclose(out.outputs[0]["elementwise_loss"], -1.2 * ones, rtol=1e-5)
    assert backend.optim_step(shared, learning_rate=0.0)["grad_norm:mean"] == 0.0
    # the same ratio with a negative advantage is not clipped (min picks the unclipped term)
    backend.forward_backward(shared, [policy_datum(ids, lp - 1.0, -ones)], "ppo")
    assert backend.optim_step(shared, learning_rate=0.0)["grad_norm:mean"] > 0
    # a wider clip range from the config lets the first case through
    config = {"clip_low_threshold": 0.5, "clip_high_threshold": 3.0}
    backend.forward_backward(shared, [policy_datum(ids, lp - 1.0, ones)], "ppo", config)
    assert backend.optim_step(shared, learning_rate=0.0)["grad_norm:mean"] > 0
    # inside the range ppo equals importance sampling, gradient and all
    fb = backend.forward_backward(shared, [policy_datum(ids, lp - 0.05, ones)], "ppo")
    ppo_norm = backend.optim_step(shared, learning_rate=0.0)["grad_norm:mean"]
    fb_is = backend.forward_backward(shared, [policy_datum(ids, lp - 0.05, ones)], "importance_sampling")
    is_norm = backend.optim_step(shared, learning_rate=0.0)["grad_norm:mean"]
    assert fb.metrics["loss:sum"] == pytest.approx(fb_is.metrics["loss:sum"], rel=1e-6)
    assert ppo_norm == pytest.approx(is_norm, rel=1e-5)


def test_other_policy_losses_follow_their_formulas(backend, ids, shared):
    lp = current_logprobs(backend, shared, ids).astype(np.float64)
    sampling = lp - 0.5  # ratio e^0.5 ~ 1.65, above 1.2
    adv = np.linspace(-1.0, 1.0, len(lp))
    datum = policy_datum(ids, sampling, adv)
    ratio = np.exp(lp - sampling.astype(np.float32))
    cases = {
        "importance_sampling": -ratio * adv,
        "cispo": -np.clip(ratio, 0.8, 1.2) * lp * adv,
        "dro": -(lp * adv - 0.5 * 0.05 * (lp - sampling) ** 2),
        "ppo": -np.minimum(ratio * adv, np.clip(ratio, 0.8, 1.2) * adv),
    }
    for loss_fn, expected in cases.items():
        out = backend.forward(shared, [datum], loss_fn)
        np.testing.assert_allclose(
            out.outputs[0]["elementwise_loss"], expected, rtol=1e-4, atol=1e-5, err_msg=loss_fn
        )
        assert out.metrics["loss:sum"] == pytest.approx(expected.sum(), rel=1e-4, abs=1e-4)
    # gspo: one sequence ratio (the geometric mean over the masked tokens) for every token
    mask = np.zeros(len(lp), np.float32)
    mask[4:] = 1
    gspo = Datum(datum.tokens, {**datum.inputs, "sequence_ratio_mask": mask})
    seq_ratio = np.exp(np.mean((lp - sampling)[4:]))
    expected = -np.minimum(seq_ratio * adv, np.clip(seq_ratio, 0.8, 1.2) * adv)
    out = backend.forward(shared, [gspo], "gspo")
    np.testing.assert_allclose(out.outputs[0]["elementwise_loss"], expected, rtol=1e-4, atol=1e-5)


def test_cross_entropy_over_k_candidates_per_position(backend, ids, shared):
    n = len(ids) - 1
    targets = np.stack([ids[1:], [7] * n, [42] * n], axis=1)
    weights = np.tile(np.array([1.0, 0.5, 0.0], np.float32), (n, 1))
    out = backend.forward(
        shared, [Datum(ids[:-1], {"target_tokens": targets, "weights": weights})], "cross_entropy"
    )
    lp = out.outputs[0]["logprobs"]
    assert lp.shape == (n, 3)
    np.testing.assert_allclose(lp[:, 0], current_logprobs(backend, shared, ids), atol=1e-5)
    assert out.metrics["loss:sum"] == pytest.approx(-(lp * weights).sum(), rel=1e-5)


def test_bad_requests_are_refused_with_a_message_that_names_the_problem(backend, ids, shared):
    n = len(ids) - 1
    short = policy_datum(ids, np.zeros(n), np.zeros(n - 1))
    with pytest.raises(
        BadRequest, match="datum 1: input 'advantages' has shape \\(12,\\), expected \\(13,\\)"
    ):
        backend.forward_backward(
            shared, [policy_datum(ids, np.zeros(n), np.zeros(n)), short], "importance_sampling"
        )
    with pytest.raises(BadRequest, match="needs input 'advantages'"):
        backend.forward(
            shared, [Datum(ids[:-1], {"target_tokens": np.array(ids[1:]), "logprobs": np.zeros(n)})], "ppo"
        )
    with pytest.raises(BadRequest, match="does not read input 'mask'"):
        backend.forward(
            shared,
            [Datum(ids[:-1], {"target_tokens": np.array(ids[1:]), "mask": np.ones(n)})],
            "cross_entropy",
        )
    with pytest.raises(BadRequest, match="outside the vocabulary"):
        backend.forward(shared, [Datum(ids[:-1], {"target_tokens": np.full(n, 10**6)})], "cross_entropy")
    with pytest.raises(BadRequest, match="NaN"):
        backend.forward(shared, [sft_datum(ids, weights=[np.nan] * n)], "cross_entropy")
    with pytest.raises(BadRequest, match="loss_fn_config key 'beta' is not read by loss 'ppo'"):
        backend.forward(shared, [policy_datum(ids, np.zeros(n), np.zeros(n))], "ppo", {"beta": 1.0})
    with pytest.raises(UnsupportedLoss, match="'kl_magic' is not supported; supported: cispo, cross_entropy"):
        backend.forward_backward(shared, [sft_datum(ids)], "kl_magic")
    with pytest.raises(UnknownModel, match="unknown base model 'gpt-17'"):
        backend.create_model("gpt-17", lora_rank=8)
    with pytest.raises(UnknownModel, match="unknown model 'model-nope'"):
        backend.forward(model_id="model-nope", data=[sft_datum(ids)], loss_fn="cross_entropy")
    with pytest.raises(BadRequest, match="select no layer"):
        backend.create_model("embedded", lora_rank=8, train_mlp=False, train_attn=False, train_unembed=False)
    # nothing was accumulated by the refused calls
    assert backend._model(shared).pending_backwards == 0


def test_save_and_load_restore_weights_and_optimizer_bit_for_bit(backend, ids, model):
    data = [sft_datum(ids)]
    backend.forward_backward(model, data, "cross_entropy")
    backend.optim_step(model, learning_rate=1e-3)
    path = backend.save_weights(model, "step1", with_optimizer=True)
    assert path == f"{model}/weights/step1"

    def next_step(model_id):
        backend.forward_backward(model_id, data, "cross_entropy")
        backend.optim_step(model_id, learning_rate=1e-3, weight_decay=0.01)
        return trainable(backend, model_id)

    expected = next_step(model)
    backend.load_weights(model, path, with_optimizer=True)
    again = next_step(model)
    restored = backend.create_model_from_state(path, with_optimizer=True)
    try:
        fresh = next_step(restored)
        for name, tensor in expected.items():
            assert torch.equal(again[name], tensor), name
            assert torch.equal(fresh[name], tensor), name
    finally:
        backend.unload(restored)
    # weights saved for sampling carry no optimizer state
    sampler_path = backend.save_weights(model, "step1", with_optimizer=False)
    assert sampler_path == f"{model}/sampler_weights/step1"
    with pytest.raises(BadRequest, match="without optimizer state"):
        backend.load_weights(model, sampler_path, with_optimizer=True)
    with pytest.raises(BadRequest, match="not a checkpoint of this server"):
        backend.load_weights(model, "../../etc", with_optimizer=False)
    other = backend.create_model("embedded", lora_rank=4)
    try:
        with pytest.raises(BadRequest, match="lora_rank=8"):
            backend.load_weights(other, path, with_optimizer=False)
    finally:
        backend.unload(other)


def test_sampled_logprobs_match_compute_logprobs_and_the_training_forward(backend, ids, model):
    backend.forward_backward(model, [sft_datum(ids)], "cross_entropy")
    backend.optim_step(model, learning_rate=1e-3)
    sampler = backend.sampler(model_id=model)
    prompt = ids[:6]
    result = backend.sample(sampler, prompt, num_samples=3, max_tokens=6, seed=3, prompt_logprobs=True)
    assert len(result["sequences"]) == 3
    for seq in result["sequences"]:
        assert 1 <= len(seq["tokens"]) <= 6 and len(seq["logprobs"]) == len(seq["tokens"])
        assert seq["stop_reason"] in ("stop", "length")
        full = prompt + seq["tokens"]
        recomputed = backend.compute_logprobs(sampler, full)
        assert recomputed[0] is None
        np.testing.assert_allclose(recomputed[len(prompt) :], seq["logprobs"], atol=1e-4)
        training = current_logprobs(backend, model, full)
        np.testing.assert_allclose(training[len(prompt) - 1 :], seq["logprobs"], atol=1e-4)
    # prompt log-probs: None for the first token, then each prompt token given the ones before
    prompt_lps = result["prompt_logprobs"]
    assert prompt_lps[0] is None and len(prompt_lps) == len(prompt)
    np.testing.assert_allclose(prompt_lps[1:], backend.compute_logprobs(sampler, prompt)[1:], atol=1e-5)
    # the same seed draws the same tokens
    again = backend.sample(sampler, prompt, num_samples=3, max_tokens=6, seed=3)
    assert [s["tokens"] for s in again["sequences"]] == [s["tokens"] for s in result["sequences"]]
    assert again["prompt_logprobs"] is None


def test_samplers_hold_frozen_weights_of_a_model_a_path_or_the_base(backend, ids, model):
    prompt = ids[:6]
    base = backend.sampler(base_model="HuggingFaceTB/SmolLM2-135M-Instruct")
    before = backend.sampler(model_id=model)
    for _ in range(2):
        backend.forward_backward(model, [sft_datum(ids)], "cross_entropy")
        backend.optim_step(model, learning_rate=1e-3)
    path = backend.save_weights(model, "trained", with_optimizer=False)
    saved = backend.sampler(path=path)
    lp_base = backend.compute_logprobs(base, ids)[1:]
    lp_before = backend.compute_logprobs(before, ids)[1:]
    # two engines live (the cap): the saved weights go into the idle engine of the same adapters
    reused = backend.stats["engines_reused"]
    lp_saved = backend.compute_logprobs(saved, ids)[1:]
    assert backend.stats["engines_reused"] == reused + 1
    np.testing.assert_allclose(lp_before, lp_base, atol=1e-5)  # the adapters started at zero
    assert sum(lp_saved) > sum(lp_before) + 1.0  # trained on exactly this text
    np.testing.assert_allclose(lp_saved, current_logprobs(backend, model, ids), atol=1e-4)
    # greedy decoding, stop tokens, and an empty stop list that disables EOS
    greedy = backend.sample(saved, prompt, num_samples=2, max_tokens=5, temperature=0.0)
    first = greedy["sequences"][0]["tokens"]
    assert greedy["sequences"][1]["tokens"] == first
    stopped = backend.sample(saved, prompt, num_samples=1, max_tokens=5, temperature=0.0, stop=[first[1]])
    assert stopped["sequences"][0]["tokens"] == first[: first.index(first[1]) + 1]
    assert stopped["sequences"][0]["stop_reason"] == "stop"
    eos = backend._tokenizer("embedded").eos_token_id
    endless = backend.sample(base, [eos], num_samples=1, max_tokens=4, temperature=0.0, stop=[])
    assert len(endless["sequences"][0]["tokens"]) == 4 and endless["sequences"][0]["stop_reason"] == "length"
    with pytest.raises(BadRequest, match="outside the vocabulary"):
        backend.sample(base, [10**6], num_samples=1, max_tokens=2)
    with pytest.raises(BadRequest, match="top_p"):
        backend.sample(base, prompt, num_samples=1, max_tokens=2, top_p=0.0)
    backend.unload(saved)
    with pytest.raises(UnknownModel, match="unknown sampler"):
        backend.compute_logprobs(saved, ids)
    # at most max_live_samplers engines hold a model; the others come back from their files
    assert len(backend._engines) <= backend.max_live_samplers
    np.testing.assert_allclose(backend.compute_logprobs(before, ids)[1:], lp_before, atol=1e-6)
    np.testing.assert_allclose(backend.compute_logprobs(base, ids)[1:], lp_base, atol=1e-6)
    # a snapshot's files go with its sampler; named saves stay
    snapshot = backend._sampler(before).path
    assert snapshot.is_dir()
    backend.unload(before)
    assert not snapshot.exists() and (backend.store_dir / path).is_dir()


def test_concurrent_calls_on_one_model_run_one_at_a_time_and_lose_nothing(backend, ids, model):
    import threading

    datum = sft_datum(ids)
    backend.forward_backward(model, [datum], "cross_entropy")
    single = {n: p.grad.clone() for n, p in backend._model(model).trainable if p.grad is not None}
    backend.optim_step(model, learning_rate=0.0)
    sampler = backend.sampler(base_model="embedded")
    errors, samples = [], []

    def train():
        try:
            backend.forward_backward(model, [datum], "cross_entropy")
        except Exception as error:  # surfaced below
            errors.append(error)

    def sample():
        samples.append(backend.sample(sampler, ids[:4], num_samples=1, max_tokens=3, seed=0))

    threads = [threading.Thread(target=train) for _ in range(3)] + [threading.Thread(target=sample)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(samples) == 1
    assert backend._model(model).pending_backwards == 3
    for name, param in backend._model(model).trainable:
        if name in single:
            torch.testing.assert_close(param.grad, 3 * single[name], rtol=1e-4, atol=1e-6)


def test_engines_for_several_samplers_are_made_concurrently(backend, ids, model):
    import threading

    first = backend.sampler(model_id=model)
    backend.forward_backward(model, [sft_datum(ids)], "cross_entropy")
    backend.optim_step(model, learning_rate=1e-3)
    second = backend.sampler(model_id=model)
    results: dict[str, list] = {}

    def score(name, sampler):
        results[name] = backend.compute_logprobs(sampler, ids)

    def create():  # loads a model while the engines load theirs
        made = backend.create_model("embedded", lora_rank=2)
        results["new model"] = [None, *current_logprobs(backend, made, ids)]
        backend.unload(made)

    threads = [
        threading.Thread(target=score, args=(name, sampler))
        for name, sampler in (("first", first), ("first again", first), ("second", second))
    ] + [threading.Thread(target=create)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.keys() == {"first", "first again", "second", "new model"}
    assert results["first"] == results["first again"]  # one engine, made once, served both
    # fresh adapters leave the base model as it was, like the first snapshot's
    np.testing.assert_allclose(results["new model"][1:], results["first"][1:], atol=1e-4)
    np.testing.assert_allclose(results["second"][1:], current_logprobs(backend, model, ids), atol=1e-4)
    assert sum(results["second"][1:]) > sum(results["first"][1:])
    assert not backend._building and len(backend._engines) <= backend.max_live_samplers
