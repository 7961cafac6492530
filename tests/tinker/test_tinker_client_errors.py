"""Bad requests through the official ``tinker`` client: each is a clear error to that client, and the server
goes on serving the others (a second client trains after every error)."""

from __future__ import annotations

import time

import numpy as np
import pytest

tinker = pytest.importorskip("tinker")
httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

from tinker import types  # noqa: E402
from tinker_server import running_server  # noqa: E402

from skyrl_train.tinker.backend import TinkerBackend  # noqa: E402

pytestmark = pytest.mark.slow

TOKENS = [1, 504, 3458, 282, 4649, 314, 7042, 30]  # any ids inside the vocabulary


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TINKER_API_KEY", "tml-local")
    mp.setenv("TINKER_TELEMETRY", "0")
    store = tmp_path_factory.mktemp("tinker-store")
    backend = TinkerBackend(store_dir=store)
    with running_server(backend, store) as (url, service):
        yield {"url": url, "service": service}
    backend.close()
    mp.undo()


@pytest.fixture(scope="module")
def bystander(server):
    """Another client's training model: it must keep working whatever the failing client does."""
    sc = tinker.ServiceClient(base_url=server["url"])
    tc = sc.create_lora_training_client(base_model="embedded", rank=2, seed=0).result()
    yield tc
    sc.close("success").result()


def datum(**inputs) -> types.Datum:
    inputs.setdefault("target_tokens", TOKENS[1:])
    return types.Datum(model_input=types.ModelInput.from_ints(TOKENS[:-1]), loss_fn_inputs=inputs)


def still_serving(tc) -> None:
    out = tc.forward_backward([datum()], "cross_entropy").result()
    assert np.isfinite(out.metrics["loss:sum"])
    tc.optim_step(types.AdamParams(learning_rate=1e-4)).result()


@pytest.fixture
def client(server):
    sc = tinker.ServiceClient(base_url=server["url"])
    yield sc
    sc.close("errored").result()


def test_unknown_base_model(client, bystander):
    with pytest.raises(tinker.RequestFailedError, match="unknown base model 'no-such-model'.*embedded"):
        client.create_lora_training_client(base_model="no-such-model", rank=2).result()
    with pytest.raises(tinker.NotFoundError, match="unknown base model 'no-such-model'"):
        client.create_sampling_client(base_model="no-such-model").result()
    still_serving(bystander)


def test_unknown_checkpoint_and_model(server, client, bystander):
    with pytest.raises(tinker.NotFoundError, match="unknown checkpoint 'tinker://nobody/weights/none'"):
        client.create_sampling_client(model_path="tinker://nobody/weights/none").result()
    with pytest.raises(tinker.BadRequestError, match="not tinker://<run>/"):
        client.create_training_client_from_state("tinker://just-a-name").result()
    # a model id no client created, sent the way the client sends forward_backward without protobuf
    reply = httpx.post(
        f"{server['url']}/api/v1/forward_backward",
        json={
            "model_id": "s-0:train:9",
            "seq_id": 1,
            "forward_backward_input": {"loss_fn": "cross_entropy", "data": []},
        },
    )
    assert reply.status_code == 404 and "unknown model_id 's-0:train:9'" in reply.json()["detail"]
    still_serving(bystander)


def test_mismatched_shapes_fail_that_request_only(client, bystander):
    tc = client.create_lora_training_client(base_model="embedded", rank=2, seed=1).result()
    with pytest.raises(tinker.RequestFailedError, match="input 'weights' has shape \\(3,\\)"):
        tc.forward_backward([datum(weights=[1.0, 1.0, 1.0])], "cross_entropy").result()
    with pytest.raises(tinker.RequestFailedError, match="advantages"):
        tc.forward([datum(logprobs=[0.0] * 7)], "importance_sampling").result()
    still_serving(tc)  # the same client goes on
    still_serving(bystander)


def test_a_loss_the_server_lacks(client, bystander):
    tc = client.create_lora_training_client(base_model="embedded", rank=2, seed=2).result()
    with pytest.raises(tinker.RequestFailedError, match="loss function 'stable_reinforce' is not supported"):
        tc.forward_backward([datum(weights=[1.0] * 7)], "stable_reinforce").result()
    with pytest.raises(tinker.RequestFailedError, match="loss_fn_config key 'bogus'"):
        tc.forward_backward([datum(weights=[1.0] * 7)], "cross_entropy", {"bogus": 1.0}).result()
    still_serving(bystander)


def test_sampling_requests_the_server_cannot_serve(client, bystander):
    sampler = client.create_sampling_client(base_model="embedded").result()
    with pytest.raises(tinker.BadRequestError, match="topk_prompt_logprobs is not supported"):
        sampler.sample(
            types.ModelInput.from_ints(TOKENS), 1, types.SamplingParams(max_tokens=2), topk_prompt_logprobs=2
        ).result()
    with pytest.raises(tinker.RequestFailedError, match="outside the vocabulary"):
        sampler.sample(types.ModelInput.from_ints([10**7]), 1, types.SamplingParams(max_tokens=2)).result()
    out = sampler.sample(types.ModelInput.from_ints(TOKENS), 1, types.SamplingParams(max_tokens=2)).result()
    assert 1 <= len(out.sequences[0].tokens) <= 2
    still_serving(bystander)


def test_requests_after_the_session_ended(server, bystander):
    sc = tinker.ServiceClient(base_url=server["url"])
    tc = sc.create_lora_training_client(base_model="embedded", rank=2, seed=3).result()
    saved = tc.save_state("before-the-end").result().path
    session_id = tc.model_id.split(":")[0]
    # The session ends from elsewhere (here: another process finishes it, as an operator or a timeout would).
    reply = httpx.post(
        f"{server['url']}/api/v1/sessions/{session_id}/finish", json={"reason": {"type": "success"}}
    )
    assert reply.status_code == 200
    with pytest.raises(tinker.APIStatusError, match=f"session '{session_id}' has ended") as info:
        tc.forward([datum()], "cross_entropy").result()
    assert info.value.status_code == 410
    still_serving(bystander)
    # what it saved is still there for a new client
    sc2 = tinker.ServiceClient(base_url=server["url"])
    restored = sc2.create_training_client_from_state(saved).result()
    still_serving(restored)
    sc2.close("success").result()


def test_a_client_that_stops_sending_heartbeats_loses_nothing_saved(server, bystander):
    service = server["service"]
    sc = tinker.ServiceClient(base_url=server["url"])
    tc = sc.create_lora_training_client(base_model="embedded", rank=2, seed=4).result()
    tc.forward_backward([datum()], "cross_entropy").result()
    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    path = tc.save_weights_for_sampler("last-words").result().path
    session_id = tc.model_id.split(":")[0]
    # As if its last heartbeat were older than the timeout: the server ends the session, unloads its model.
    service.sessions.get(session_id).last_seen = time.monotonic() - service.sessions.timeout_s - 1
    assert session_id in service.expire_sessions()
    lane = service.models[tc.model_id].lane
    deadline = time.monotonic() + 30
    while lane._thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not lane._thread.is_alive()
    with pytest.raises(KeyError):
        service.backend.unload(service.models[tc.model_id].backend_id)  # already unloaded
    sc2 = tinker.ServiceClient(base_url=server["url"])
    lp = (
        sc2.create_sampling_client(model_path=path)
        .result()
        .compute_logprobs(types.ModelInput.from_ints(TOKENS))
    )
    assert all(np.isfinite(x) for x in lp.result()[1:])
    sc2.close("success").result()
    still_serving(bystander)


def test_an_image_input_is_refused_and_the_model_goes_on(server, client, bystander):
    tc = client.create_lora_training_client(base_model="embedded", rank=2, seed=5).result()
    image = types.ImageChunk(data=b"\x89PNG....", format="png", expected_tokens=4)
    bad = types.Datum(
        model_input=types.ModelInput(chunks=[types.EncodedTextChunk(tokens=TOKENS[:3]), image]),
        loss_fn_inputs={"target_tokens": [1] * 7},
    )
    with pytest.raises(tinker.BadRequestError, match="chunk of kind 'image' is not supported"):
        tc.forward_backward([bad], "cross_entropy").result()
    # the refused request's seq_id is released: the model's next request runs without waiting for it
    lane = server["service"].models[tc.model_id].lane
    still_serving(tc)
    assert lane.next_seq == 4 and lane.gap_timeouts == 0  # seq 1 refused; 2 and 3 ran without a wait
    still_serving(bystander)
