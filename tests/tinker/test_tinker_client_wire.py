"""The wire format against the client's own encoders and decoders, and the lanes' ordering and batching
(no model: these run in milliseconds)."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

tinker = pytest.importorskip("tinker")

from tinker import types  # noqa: E402
from tinker.proto.request_conv import forward_backward_request_to_proto  # noqa: E402
from tinker.proto.response_conv import (  # noqa: E402
    deserialize_forward_backward_output,
    deserialize_sample_response,
)

from skyrl_train.tinker import protocol  # noqa: E402
from skyrl_train.tinker.futures import Failure, FutureStore, Job, Lane  # noqa: E402


def test_forward_backward_request_decodes_what_the_client_encodes():
    ids = np.array([[0, 7], [3, 0], [0, 0]], dtype=np.int64)
    request = types.ForwardBackwardRequest(
        model_id="s-1:train:0",
        seq_id=4,
        forward_backward_input=types.ForwardBackwardInput(
            data=[
                types.Datum(
                    model_input=types.ModelInput(
                        chunks=[types.EncodedTextChunk(tokens=[5, 6]), types.EncodedTextChunk(tokens=[7])]
                    ),
                    loss_fn_inputs={
                        "target_tokens": [6, 7, 8],
                        "weights": [0.0, 0.5, 1.0],
                        "candidates": types.TensorData.from_numpy(ids),
                    },
                )
            ],
            loss_fn="ppo",
            loss_fn_config={"clip_low_threshold": 0.7, "mode": "strict"},
        ),
    )
    body = forward_backward_request_to_proto(request)
    body.forward_only = True
    call = protocol.decode_forward_backward(body.SerializeToString())
    assert (call.model_id, call.seq_id, call.loss_fn, call.forward_only) == ("s-1:train:0", 4, "ppo", True)
    assert call.loss_fn_config == {"clip_low_threshold": pytest.approx(0.7), "mode": "strict"}
    ((tokens, inputs),) = call.data
    assert tokens == [5, 6, 7]
    assert inputs["target_tokens"].dtype == np.int64 and inputs["target_tokens"].tolist() == [6, 7, 8]
    np.testing.assert_array_equal(inputs["weights"], np.array([0.0, 0.5, 1.0], np.float32))
    np.testing.assert_array_equal(inputs["candidates"], ids)

    import zstandard

    packed = zstandard.ZstdCompressor().compress(body.SerializeToString())
    assert protocol.decode_forward_backward(packed, "zstd").data[0][0] == [5, 6, 7]


def test_sparse_tensors_are_made_dense():
    import torch

    dense = np.zeros((4, 8), dtype=np.float32)
    dense[0, 1], dense[1, 0], dense[3, 7] = 2.0, 1.0, 3.0
    td = types.TensorData.from_torch_sparse(torch.tensor(dense))
    assert td.sparse_crow_indices is not None  # sent as CSR
    request = types.ForwardBackwardRequest(
        model_id="m",
        seq_id=1,
        forward_backward_input=types.ForwardBackwardInput(
            data=[types.Datum(model_input=types.ModelInput.from_ints([1, 2]), loss_fn_inputs={"w": td})],
            loss_fn="cross_entropy",
        ),
    )
    call = protocol.decode_forward_backward(forward_backward_request_to_proto(request).SerializeToString())
    np.testing.assert_array_equal(call.data[0][1]["w"], dense)


def test_non_text_inputs_and_bad_bodies_are_refused():
    with pytest.raises(protocol.WireError, match="not a ForwardBackwardRequest"):
        protocol.decode_forward_backward(b"\xff\xff\xff")
    with pytest.raises(protocol.WireError, match="type 'image' is not supported"):
        protocol.model_input_tokens({"chunks": [{"type": "image", "data": "", "format": "png"}]})
    with pytest.raises(protocol.WireError, match="tinker://<run>/"):
        protocol.parse_tinker_path("tinker://run/nothing/x")


def test_forward_output_reads_back_through_the_client():
    outputs = [
        {"logprobs": np.array([-1.0, -2.5], np.float32), "ids": np.array([[1, 2], [3, 4]], np.int64)},
        {"logprobs": np.array([-0.5], np.float32), "ids": np.array([[5, 6]], np.int64)},
    ]
    out = deserialize_forward_backward_output(protocol.encode_forward_output(outputs, {"loss:sum": 4.0}))
    assert out.metrics == {"loss:sum": 4.0} and len(out.loss_fn_outputs) == 2
    for got, want in zip(out.loss_fn_outputs, outputs, strict=True):
        np.testing.assert_array_equal(got["logprobs"].to_numpy(), want["logprobs"])
        assert got["ids"].dtype == "int64"
        np.testing.assert_array_equal(got["ids"].to_numpy(), want["ids"])


def test_sample_response_reads_back_through_the_client():
    result = {
        "sequences": [
            {"tokens": [4, 5], "logprobs": [-0.25, -1.5], "stop_reason": "stop"},
            {"tokens": [6], "logprobs": [-2.0], "stop_reason": "length"},
        ],
        "prompt_logprobs": [None, -3.0, -0.5],
    }
    out = deserialize_sample_response(protocol.encode_sample_response(result))
    assert [list(s.tokens) for s in out.sequences] == [[4, 5], [6]]
    assert [s.stop_reason for s in out.sequences] == ["stop", "length"]
    assert out.sequences[0].logprobs == [-0.25, -1.5]
    assert out.prompt_logprobs == [None, -3.0, -0.5]


def _job(store, order, run=None, key=None, args=None, seq=None):
    return Job(future=store.create(None), order=order, run=run, batch_key=key, args=args, seq_id=seq)


def _wait_done(futures, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not all(f.done for f in futures):
        assert time.monotonic() < deadline, "lane did not finish"
        time.sleep(0.005)


def test_lane_runs_in_seq_order_and_waits_for_a_missing_seq_id():
    store, ran = FutureStore(), []
    lane = Lane("m", store, seq_ordered=True, gap_wait_s=5.0)

    def step(n):
        return lambda: (ran.append(n), ({"n": n}, False))[1]

    later = _job(store, 2, step(2), seq=2)
    lane.submit(later)  # seq 1 is still on its way: the lane waits for it
    time.sleep(0.05)
    assert ran == []
    first = _job(store, 1, step(1), seq=1)
    lane.submit(first)
    _wait_done([first.future, later.future])
    assert ran == [1, 2] and later.future.payload == {"n": 2} and lane.gap_timeouts == 0
    lane.close()


def test_lane_batches_contiguous_jobs_of_one_key_and_isolates_a_bad_one():
    store, batches = FutureStore(), []

    def runner(group):
        batches.append([j.args for j in group])
        if any(j.args == "bad" for j in group):
            raise Failure("bad datum")
        return [({"x": j.args}, False) for j in group]

    lane = Lane("m", store, runner, seq_ordered=True)
    gate = threading.Event()
    hold = _job(store, 0, lambda: (gate.wait(10), ({}, False))[1])
    lane.submit(hold)
    jobs = [
        _job(store, 1, key="fb", args="a", seq=1),
        _job(store, 2, key="fb", args="bad", seq=2),
        _job(store, 3, key="fb", args="c", seq=3),
        _job(store, 4, lambda: ({"step": True}, False), seq=4),
        _job(store, 5, key="fb", args="e", seq=5),
    ]
    for job in jobs:
        lane.submit(job)
    gate.set()
    _wait_done([j.future for j in jobs])
    # a, bad, c in one call; it failed, so each ran alone; the optimizer step split the batches
    assert batches == [["a", "bad", "c"], ["a"], ["bad"], ["c"], ["e"]]
    assert [j.future.error for j in jobs] == [None, "bad datum", None, None, None]
    assert jobs[0].future.payload == {"x": "a"} and jobs[3].future.payload == {"step": True}
    assert lane.calls == 4  # the held job, the batch of three, the step, the last one
    lane.close()


def test_a_poll_wakes_when_its_future_resolves_from_another_thread():
    store = FutureStore()
    fut = store.create("s")

    async def poll():
        threading.Timer(0.05, store.resolve, args=(fut, {"ok": 1})).start()
        return await store.wait(fut, timeout=10)

    assert asyncio.run(poll()) is True and fut.payload == {"ok": 1}
    pending = store.create("s")
    assert asyncio.run(store.wait(pending, timeout=0.01)) is False


def test_a_refused_seq_id_is_not_waited_for():
    store = FutureStore()
    lane = Lane("m", store, seq_ordered=True, gap_wait_s=60.0)
    job = _job(store, 2, lambda: ({"ran": True}, False), seq=2)
    lane.submit(job)
    lane.skip(1)  # seq 1 was refused at submission (e.g. an image chunk)
    _wait_done([job.future])  # well before the 60 s gap wait
    assert job.future.payload == {"ran": True} and lane.gap_timeouts == 0
    lane.close()


def test_retrieved_outcomes_are_forgotten_sooner_than_unclaimed_ones():
    store = FutureStore(keep_s=3600, retrieved_keep_s=0.0)
    claimed, unclaimed = store.create(None), store.create(None)
    store.resolve(claimed, {"a": 1})
    store.resolve(unclaimed, {"b": 2})
    store.mark_retrieved(claimed)
    time.sleep(0.01)
    store._evict_locked()
    assert store.get(claimed.request_id) is None and store.get(unclaimed.request_id) is unclaimed
