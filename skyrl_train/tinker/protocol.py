"""The wire protocol of the official ``tinker`` client (0.38), and its conversion to plain Python and numpy.

What the client sends and expects, read from its source (``tinker/_client.py``, ``tinker/resources/*``,
``tinker/lib/internal_client_holder.py``, ``tinker/lib/api_future_impl.py``, ``tinker/lib/public_interfaces/*``,
``tinker/proto/*``). Every path is under ``/api/v1``; bodies are JSON unless said otherwise; the client
authenticates with ``X-API-Key`` (the client insists on a ``tml-`` prefix: set ``TINKER_API_KEY=tml-local`` or pass ``api_key=``; the server checks nothing).

Start-up of a ``ServiceClient`` (lazily, on the first training or sampling client):

- ``POST /client/config`` ``{"sdk_version"}`` -> feature flags (``ClientConfigResponse``). We answer
  ``pjwt_auth_enabled=false`` (plain API keys), ``use_pyqwest_transport=false`` (httpx),
  ``proto_compress_fwdbwd=false`` (we still accept ``Content-Encoding: zstd``), ``sample_use_retrieve_futures=false``
  (one ``retrieve_future`` poll per request), ``custom_loss_server_side=false`` (custom losses run client-side as
  a forward pass plus a linear ``cross_entropy`` backward, which needs nothing more from the server),
  ``sample_join_sampling_session=true`` (an unpickled ``SamplingClient`` asks for its clone number).
- ``POST /client/dynamic_config`` -> ``ClientDynamicConfigResponse`` (refresh interval, sample cancel flags).
- ``POST /create_session`` ``{"tags", "user_metadata", "sdk_version", "project_id", "display_name"}`` ->
  ``{"type": "create_session", "session_id"}``.
- ``POST /session_heartbeat`` ``{"session_id"}`` every 10 s -> ``{"type": "session_heartbeat"}``; HTTP 410 tells
  the client the session has finished (its heartbeat loop stops).
- ``POST /telemetry`` ``{"events", "platform", "sdk_version", "session_id", "process_uuid"}`` ->
  ``{"status": "accepted"}`` (disable on the client with ``TINKER_TELEMETRY=0``).
- ``POST /sessions/{session_id}/finish`` ``{"reason": {"type": "success"|"errored"|"interrupted"}, "detail"}``
  (``ServiceClient.close``): the session ends; later requests of that session are refused with HTTP 410.

Futures. Every model operation answers at once with an ``UntypedAPIFuture`` ``{"request_id", "model_id"?,
"sample_sequence_ids"?}``; the client then polls ``POST /retrieve_future`` ``{"request_id",
"allow_metadata_only"}`` (45 s timeout per poll, no retries of its own on 4xx other than 400/408/410/429):

- still running: ``{"type": "try_again", "request_id", "queue_state": "active"}`` (the client polls again at
  once, so the server holds each poll open for a while before saying try_again: long polling);
- failed: ``{"error": message, "category": "user"|"server"|"unknown"}`` -> ``tinker.RequestFailedError``;
- done: the result. ``ForwardBackwardOutput`` and ``SampleResponse`` must be protobuf
  (``Content-Type: application/x-protobuf``; the client sends ``Accept: application/x-protobuf`` and refuses
  JSON for these two), every other result is JSON of its pydantic type;
- unknown id: HTTP 404 (fatal on the client: ``ValueError``).

Training (``TrainingClient``; ``model_id`` is ``"{session_id}:train:{model_seq_id}"``, the form the client
itself derives for create-via-load; ``seq_id`` is the per-model request counter + 1, requests are sent in
that order, a large ``forward_backward`` may come as several chunks of consecutive seq_ids, sent in parallel):

- ``POST /create_model`` ``{"session_id", "model_seq_id", "base_model", "lora_config": {"rank", "seed",
  "train_mlp", "train_attn", "train_unembed"}, "optimizer_config": {"type": "adamw"}, "user_metadata"}``
  -> future of ``{"model_id", "type": "create_model"}``; then ``POST /get_info`` ``{"model_id"}`` ->
  ``{"model_id", "model_data": {"arch", "model_name", "tokenizer_id"}, "is_lora", "lora_rank", "model_name"}``
  (``get_tokenizer()`` loads ``AutoTokenizer.from_pretrained(tokenizer_id)``: we give a local folder).
- ``POST /forward_backward``: protobuf ``tinker_public.ForwardBackwardRequest`` (``model_id``, ``seq_id``,
  ``loss_fn``, ``loss_fn_config`` (floats) / ``loss_fn_config_v2`` (number or text), ``forward_only``,
  ``data[]``: ``model_input`` chunks (``encoded_text.tokens`` as int32 bytes; images and audio are refused) and
  ``loss_fn_inputs`` by name: ``Tensor`` (``dtype`` float32 | int64, ``shape``, ``dense`` bytes or
  ``sparse_csr``)). ``TrainingClient.forward`` is the same request with ``forward_only=true``. Result
  (protobuf ``ForwardBackwardOutput``): ``loss_fn_output_type``, ``metrics`` (name ``"key:reduction"``, e.g.
  ``loss:sum``; the client combines chunks by the reduction), ``loss_fn_outputs[]``: ``ArrayRecord`` with
  ``num_datums`` and ``fields`` by name -> ``BatchedTensor`` (all datums' values concatenated, ``offsets`` the
  int64 byte offsets of each datum, ``dtype``, ``trailing_shape``). Each datum has at least ``logprobs``.
- ``POST /optim_step`` ``{"model_id", "seq_id", "adam_params": {"learning_rate", "beta1", "beta2", "eps",
  "weight_decay", "grad_clip_norm"}}`` -> future of ``{"metrics": {...}}``.
- ``POST /save_weights`` ``{"model_id", "path": name, "seq_id", "ttl_seconds", "overwrite", "user_metadata"}``
  (``save_state``) -> future of ``{"path": "tinker://{model_id}/weights/{name}"}``.
- ``POST /save_weights_for_sampler`` ``{"model_id", "path": name | null, "sampling_session_seq_id", "kind",
  "seq_id", ...}`` -> future of ``{"path": "tinker://{model_id}/sampler_weights/{name}"}`` when a name is
  given, else ``{"sampling_session_id"}`` (``save_weights_and_get_sampling_client``: a sampler on a frozen copy
  of the current weights, no checkpoint kept).
- ``POST /load_weights`` ``{"path", "optimizer": bool}`` plus either ``{"model_id", "seq_id"}`` (load into an
  existing model: ``load_state``) or ``{"session_id", "model_seq_id", "base_model"?}`` (a new model from a
  checkpoint: ``create_training_client_from_state[_with_optimizer]``) -> future of ``{"path", "model_id"}``.

Sampling (``SamplingClient``):

- ``POST /create_sampling_session`` ``{"session_id", "sampling_session_seq_id", "base_model"?,
  "model_path"?}`` -> ``{"sampling_session_id"}``; ``GET /samplers/{id}`` -> ``{"sampler_id", "base_model",
  "model_path"}`` (when the client was created from a path only).
- ``POST /asample`` ``{"sampling_session_id", "seq_id", "num_samples", "prompt": {"chunks": [{"type":
  "encoded_text", "tokens"}]}, "sampling_params": {"max_tokens", "temperature", "top_p", "top_k", "seed",
  "stop": str | [str] | [int]}, "prompt_logprobs", "topk_prompt_logprobs", ...}`` -> future with
  ``sample_sequence_ids`` (one per sample). Result (protobuf ``SampleResponse``): ``sequences[]`` (``tokens``
  int32 bytes, ``logprobs`` float32 bytes, ``stop_reason`` STOP | LENGTH), ``prompt_logprobs`` float32 bytes
  with NaN where there is none (the first token). ``compute_logprobs(prompt)`` is ``asample`` with
  ``max_tokens=1`` and ``prompt_logprobs=true``; top-k, target and alternative prompt log-probs are refused.
- ``POST /join_sampling_session`` ``{"sampling_session_id"}`` -> ``{"client_counter"}`` (unpickled clients).

Service: ``GET /healthz`` -> ``{"status": "ok"}``; ``GET /get_server_capabilities`` ->
``{"supported_models": [{"model_name", "max_context_length", "trainable", "sampleable"}]}``;
``GET /training_runs/{model_id}`` (``RestClient.get_training_run[_by_tinker_path]``) -> ``{"training_run_id",
"base_model", "model_owner", "is_lora", "lora_rank", "last_request_time", "user_metadata"}``. The other REST
calls (checkpoint lists, deletion, publishing, external weights, copies) answer 404.

Errors at submission are HTTP errors with a JSON ``{"detail": message}`` body, which the client raises as
``tinker.NotFoundError`` (404: unknown model or sampler), ``tinker.BadRequestError`` (400: a malformed
request), ``tinker.APIStatusError`` (410: the session has ended); errors found while running (mismatched
shapes, an unsupported loss) fail the future with category ``user``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

PROTOBUF = "application/x-protobuf"


class WireError(ValueError):
    """A request the wire format cannot express for this server (bad tensor, non-text input, ...).

    ``model_id`` and ``seq_id`` name the refused request when they could be read (the model's queue then
    need not wait for that seq_id)."""

    model_id: str | None = None
    seq_id: int | None = None


def _pb():
    # The message classes ship with the client package (the ``tinker`` extra); imported when first needed.
    from tinker.proto import tinker_public_pb2

    return tinker_public_pb2


def _dtype_numbers() -> dict[int, Any]:
    pb = _pb()
    return {
        pb.DTYPE_FLOAT32: np.float32,
        pb.DTYPE_INT64: np.int64,
        pb.DTYPE_INT32: np.int32,
    }


@dataclass
class ForwardBackwardCall:
    """A decoded ``/forward_backward`` request: per datum the model's tokens and its loss inputs by name."""

    model_id: str
    seq_id: int
    loss_fn: str
    loss_fn_config: dict[str, float | str] | None
    forward_only: bool
    data: list[tuple[list[int], dict[str, np.ndarray]]] = field(default_factory=list)


def decode_tensor(msg: Any, name: str) -> np.ndarray:
    """A ``tinker_public.Tensor`` as a numpy array of its shape (a sparse CSR matrix is made dense)."""
    dtypes = _dtype_numbers()
    if msg.dtype not in dtypes:
        raise WireError(f"loss_fn_inputs[{name!r}]: unsupported dtype {msg.dtype}")
    dtype = dtypes[msg.dtype]
    shape = list(msg.shape)
    if msg.HasField("sparse_csr"):
        csr = msg.sparse_csr
        values = np.frombuffer(csr.values, dtype=dtype)
        crow = np.frombuffer(csr.crow_indices, dtype=np.int64)
        col = np.frombuffer(csr.col_indices, dtype=np.int64)
        if len(shape) != 2 or len(crow) != shape[0] + 1 or len(col) != len(values):
            raise WireError(f"loss_fn_inputs[{name!r}]: malformed sparse tensor of shape {shape}")
        dense = np.zeros(shape, dtype=dtype)
        for row in range(shape[0]):
            lo, hi = int(crow[row]), int(crow[row + 1])
            dense[row, col[lo:hi]] = values[lo:hi]
        return dense
    arr = np.frombuffer(msg.dense, dtype=dtype).copy()
    if shape:
        if int(np.prod(shape)) != arr.size:
            raise WireError(f"loss_fn_inputs[{name!r}]: {arr.size} values do not fill shape {shape}")
        arr = arr.reshape(shape)
    return arr


def _chunk_tokens(chunk: Any) -> list[int]:
    kind = chunk.WhichOneof("chunk")
    if kind != "encoded_text":
        raise WireError(f"model_input chunk of kind {kind!r} is not supported (text tokens only)")
    return np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).astype(int).tolist()


def decode_forward_backward(body: bytes, content_encoding: str | None = None) -> ForwardBackwardCall:
    """Decode the protobuf body of ``/forward_backward`` (zstd-compressed when the header says so)."""
    if content_encoding and "zstd" in content_encoding:
        import zstandard

        body = zstandard.ZstdDecompressor().decompress(body, max_output_size=1 << 31)
    msg = _pb().ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception as exc:  # protobuf's DecodeError
        raise WireError(f"forward_backward body is not a ForwardBackwardRequest: {exc}") from None
    config: dict[str, float | str] = {}
    for key, value in msg.loss_fn_config_v2.items():
        config[key] = value.text if value.WhichOneof("value") == "text" else float(value.number)
    for key, value in msg.loss_fn_config.items():
        config.setdefault(key, float(value))
    data = []
    try:
        for datum in msg.data:
            tokens: list[int] = []
            for chunk in datum.model_input:
                tokens.extend(_chunk_tokens(chunk))
            inputs = {name: decode_tensor(t, name) for name, t in datum.loss_fn_inputs.items()}
            data.append((tokens, inputs))
    except WireError as exc:
        exc.model_id, exc.seq_id = msg.model_id, int(msg.seq_id)
        raise
    return ForwardBackwardCall(
        model_id=msg.model_id,
        seq_id=int(msg.seq_id),
        loss_fn=msg.loss_fn,
        loss_fn_config=config or None,
        forward_only=bool(msg.forward_only),
        data=data,
    )


def decode_json_tensor(td: dict[str, Any], name: str) -> np.ndarray:
    """A JSON ``TensorData`` (``data``, ``dtype``, ``shape``) as a numpy array."""
    dtype = {"float32": np.float32, "int64": np.int64}.get(td.get("dtype", "float32"))
    if dtype is None:
        raise WireError(f"{name}: unsupported dtype {td.get('dtype')!r}")
    arr = np.asarray(td.get("data", []), dtype=dtype)
    shape = td.get("shape")
    if shape:
        arr = arr.reshape(shape)
    return arr


def model_input_tokens(model_input: dict[str, Any]) -> list[int]:
    """The tokens of a JSON ``ModelInput`` (``{"chunks": [{"type": "encoded_text", "tokens": [...]}]}``)."""
    tokens: list[int] = []
    for chunk in model_input.get("chunks", []):
        kind = chunk.get("type", "encoded_text")
        if kind != "encoded_text":
            raise WireError(f"model_input chunk of type {kind!r} is not supported (text tokens only)")
        tokens.extend(int(t) for t in chunk.get("tokens", []))
    return tokens


def encode_forward_output(outputs: list[dict[str, np.ndarray]], metrics: dict[str, float]) -> bytes:
    """A protobuf ``ForwardBackwardOutput``: one ``ArrayRecord`` holding every datum's fields."""
    pb = _pb()
    msg = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord")
    for key, value in metrics.items():
        msg.metrics[key] = float(value)
    record = msg.loss_fn_outputs.add()
    record.num_datums = len(outputs)
    names = list(outputs[0]) if outputs else []
    for name in names:
        arrays = []
        for i, out in enumerate(outputs):
            if name not in out:
                raise ValueError(f"datum {i} has no output {name!r} (datum 0 has)")
            arrays.append(np.asarray(out[name]))
        integer = all(np.issubdtype(a.dtype, np.integer) for a in arrays)
        dtype = np.int64 if integer else np.float32
        arrays = [a.astype(dtype, copy=False) for a in arrays]
        trailing = arrays[0].shape[1:] if arrays[0].ndim > 1 else ()
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([a.nbytes for a in arrays])
        bt = record.fields[name]
        bt.dtype = pb.DTYPE_INT64 if integer else pb.DTYPE_FLOAT32
        bt.data = b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)
        bt.offsets = offsets.tobytes()
        bt.trailing_shape.extend(int(s) for s in trailing)
    return msg.SerializeToString()


def encode_sample_response(result: dict[str, Any]) -> bytes:
    """A protobuf ``SampleResponse`` from the backend's ``sample`` result."""
    pb = _pb()
    msg = pb.SampleResponse()
    for seq in result["sequences"]:
        out = msg.sequences.add()
        out.stop_reason = pb.STOP_REASON_STOP if seq.get("stop_reason") == "stop" else pb.STOP_REASON_LENGTH
        out.tokens = np.asarray(seq["tokens"], dtype=np.int32).tobytes()
        if seq.get("logprobs") is not None:
            out.logprobs = np.asarray(seq["logprobs"], dtype=np.float32).tobytes()
    prompt_logprobs = result.get("prompt_logprobs")
    if prompt_logprobs is not None:
        values = [np.nan if lp is None else lp for lp in prompt_logprobs]
        msg.prompt_logprobs = np.asarray(values, dtype=np.float32).tobytes()
    return msg.SerializeToString()


def tinker_path(model_id: str, kind: str, name: str) -> str:
    """``tinker://{model_id}/{weights|sampler_weights}/{name}``, the checkpoint address the client knows."""
    if "/" in name or not name:
        raise WireError(f"checkpoint name {name!r} must be non-empty and contain no '/'")
    return f"tinker://{model_id}/{kind}/{name}"


def parse_tinker_path(path: str) -> tuple[str, str, str]:
    """``(model_id, kind, name)`` of a ``tinker://`` path; a clear error for anything else."""
    if not path.startswith("tinker://"):
        raise WireError(f"checkpoint path must start with 'tinker://', got {path!r}")
    parts = path[len("tinker://") :].split("/")
    if len(parts) != 3 or parts[1] not in ("weights", "sampler_weights") or not parts[2]:
        raise WireError(f"checkpoint path {path!r} is not tinker://<run>/(weights|sampler_weights)/<name>")
    return parts[0], parts[1], parts[2]


def decode_json_forward_backward(body: dict[str, Any], forward_only: bool = False) -> ForwardBackwardCall:
    """Decode a JSON ``ForwardBackwardRequest`` (the same request without protobuf, e.g. from ``curl``)."""
    fb = body.get("forward_backward_input") or {}
    data = []
    for i, datum in enumerate(fb.get("data") or []):
        tokens = model_input_tokens(datum.get("model_input") or {})
        inputs = {}
        for name, td in (datum.get("loss_fn_inputs") or {}).items():
            if not isinstance(td, dict):
                td = {"data": td, "dtype": "int64" if name == "target_tokens" else "float32"}
            inputs[name] = decode_json_tensor(td, f"datum {i} {name}")
        data.append((tokens, inputs))
    return ForwardBackwardCall(
        model_id=str(body.get("model_id", "")),
        seq_id=int(body.get("seq_id") or 0),
        loss_fn=str(fb.get("loss_fn", "")),
        loss_fn_config=fb.get("loss_fn_config"),
        forward_only=bool(body.get("forward_only", forward_only)),
        data=data,
    )
