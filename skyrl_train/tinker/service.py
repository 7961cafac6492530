"""The state and request handling of the Tinker server, without HTTP.

:class:`TinkerService` keeps the sessions, the training models and samplers the clients created
(:mod:`skyrl_train.tinker.store`) and the index of saved checkpoints; it turns each request into a job on the
lane of its model or sampler (:mod:`skyrl_train.tinker.futures`) and the backend
(:mod:`skyrl_train.tinker.backend`) does the model work. :mod:`skyrl_train.tinker.server` maps the client's
endpoints onto it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from skyrl_train.tinker import protocol
from skyrl_train.tinker.futures import Failure, Future, FutureStore, Job, Lane, SessionRegistry
from skyrl_train.tinker.store import CheckpointIndex, ModelRecord, SamplerRecord

__all__ = ["DEFAULT_MAX_TOKENS", "HTTPError", "TinkerService"]

DEFAULT_MAX_TOKENS = 128
"""``max_tokens`` of a sample request that leaves it unset (the client's ``SamplingParams`` default is None)."""


class HTTPError(Exception):
    """An error answered at once with an HTTP status and a message (``{"detail": message}``)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def _user_error(exc: BaseException) -> Failure:
    # The backend signals the client's mistakes with KeyError (unknown model) and ValueError (bad request,
    # unsupported loss) subclasses; KeyError's str() would quote the message.
    message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    return Failure(str(message), "user")


def _call(fn, *args, **kwargs):
    """Run a backend call; the client's mistakes become user failures, anything else propagates."""
    try:
        return fn(*args, **kwargs)
    except (KeyError, ValueError) as exc:
        raise _user_error(exc) from exc


class TinkerService:
    """Sessions, models, samplers and checkpoints of the Tinker API over one backend.

    Request methods validate what can be checked at once (unknown model or sampler: :class:`HTTPError` 404;
    an ended session: 410; a malformed request: 400), queue a job and return the client's
    ``UntypedAPIFuture`` as a dict; the job's outcome is fetched with :meth:`retrieve`.
    """

    def __init__(
        self, backend: Any, store_dir: str | Path, *, datum_cls: Any = None, session_timeout_s=900.0
    ):
        self.backend = backend
        self.store_dir = Path(store_dir)
        self.store_dir.mkdir(parents=True, exist_ok=True)
        if datum_cls is None:
            from skyrl_train.tinker.backend import Datum as datum_cls
        self.datum_cls = datum_cls
        self.futures = FutureStore()
        self.sessions = SessionRegistry(timeout_s=session_timeout_s)
        self.checkpoints = CheckpointIndex.load(self.store_dir / "tinker_checkpoints.json")
        self.models: dict[str, ModelRecord] = {}
        self.samplers: dict[str, SamplerRecord] = {}
        self._lock = threading.Lock()
        # Loading a model is not thread-safe in transformers/accelerate (weights initialise on the meta device
        # through a process-wide patch, so another thread building modules meanwhile gets empty tensors):
        # model creation, and a sampler's first call (which builds its engine), take turns.
        self._build_lock = threading.Lock()
        self._seeded = itertools.count()
        self.capabilities = backend.capabilities()

    # -- sessions -----------------------------------------------------------------------------------------

    def create_session(self, body: dict[str, Any]) -> dict[str, Any]:
        """A new session for a ``ServiceClient``."""
        session = self.sessions.create(body.get("user_metadata"))
        return {"type": "create_session", "session_id": session.session_id}

    def _live_session(self, session_id: str | None):
        if not session_id:
            raise HTTPError(400, "session_id is required")
        session = self.sessions.touch(session_id)
        if session is None:
            raise HTTPError(404, f"unknown session '{session_id}'")
        if session.ended is not None:
            raise HTTPError(
                410, f"session '{session_id}' has ended ({session.ended}); start a new ServiceClient"
            )
        return session

    def heartbeat(self, session_id: str) -> dict[str, Any]:
        """A sign of life from a client (410 once its session is over)."""
        self._live_session(session_id)
        return {"type": "session_heartbeat"}

    def finish_session(self, session_id: str, reason: str) -> None:
        """End a session: its models and samplers finish their queued work and are then unloaded; every
        checkpoint they saved stays."""
        session = self.sessions.get(session_id)
        if session is None:
            raise HTTPError(404, f"unknown session '{session_id}'")
        if session.ended is not None:
            return  # the first reason wins, as the client documents
        session.ended = reason
        with self._lock:
            models = [self.models[m] for m in session.models if m in self.models]
            samplers = [self.samplers[s] for s in session.samplers if s in self.samplers]
        for record in models:
            record.lane.close(then=lambda r=record: self._unload(r.backend_id))
        for record in samplers:
            record.lane.close(then=lambda r=record: self._unload(r.backend_id))

    def _unload(self, backend_id: str | None) -> None:
        if backend_id is not None:
            try:
                self.backend.unload(backend_id)
            except KeyError:
                pass  # already gone

    def expire_sessions(self) -> list[str]:
        """End the sessions whose clients stopped sending heartbeats; their ids."""
        ended = []
        for session in self.sessions.expired():
            self.finish_session(session.session_id, "expired: no heartbeat")
            ended.append(session.session_id)
        return ended

    # -- futures ------------------------------------------------------------------------------------------

    def _submit(self, lane: Lane, session_id: str, *, order=None, seq_id=None, **job) -> dict[str, Any]:
        fut = self.futures.create(session_id)
        if order is None:
            order = seq_id if seq_id is not None else lane.next_order()
        try:
            lane.submit(Job(future=fut, order=order, seq_id=seq_id, **job))
        except Failure as exc:
            raise HTTPError(410, str(exc)) from None
        return {"request_id": fut.request_id}

    async def retrieve(self, request_id: str, wait_s: float) -> Future:
        """The future of ``request_id`` once done, or still pending after ``wait_s`` (long polling)."""
        fut = self.futures.get(request_id)
        if fut is None:
            raise HTTPError(404, f"unknown request_id '{request_id}'")
        await self.futures.wait(fut, wait_s)
        return fut

    # -- training -----------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _refusing(self, record: ModelRecord, seq_id: int | None):
        """Around a request's checks: when it is refused, its model's lane stops waiting for its seq_id."""
        try:
            yield
        except (HTTPError, protocol.WireError):
            record.lane.skip(seq_id)
            raise

    def skip(self, model_id: str | None, seq_id: int | None) -> None:
        """A request of ``model_id`` that could not even be decoded: its lane need not wait for it."""
        with self._lock:
            record = self.models.get(model_id or "")
        if record is not None:
            record.lane.skip(seq_id)

    def _model(self, model_id: str) -> ModelRecord:
        with self._lock:
            record = self.models.get(model_id)
        if record is None:
            raise HTTPError(404, f"unknown model_id '{model_id}'; create it with create_lora_training_client")
        self._live_session(record.session_id)
        record.last_request = time.time()
        return record

    def training_run(self, run_id: str) -> dict[str, Any]:
        """``RestClient.get_training_run[_by_tinker_path]``: a model as a training run, live or known from
        its checkpoints (base model, LoRA rank, the user metadata it was created with)."""
        from datetime import datetime, timezone

        with self._lock:
            record = self.models.get(run_id)
        if record is not None:
            facts = {"base_model": record.base_model, "lora_rank": record.lora_rank}
            facts |= {"user_metadata": record.user_metadata, "time": record.last_request}
        else:
            entries = self.checkpoints.under(run_id)
            if not entries:
                raise HTTPError(404, f"unknown training run '{run_id}'")
            last = max(entries, key=lambda e: e.get("created", 0))
            facts = {"base_model": last["base_model"], "lora_rank": last.get("lora_rank")}
            facts |= {"user_metadata": last.get("user_metadata"), "time": last.get("created", 0)}
        metadata = {str(k): str(v) for k, v in (facts["user_metadata"] or {}).items()}
        return {
            "training_run_id": run_id,
            "base_model": facts["base_model"],
            "model_owner": "local",
            "is_lora": facts["lora_rank"] is not None,
            "lora_rank": facts["lora_rank"],
            "last_request_time": datetime.fromtimestamp(facts["time"], timezone.utc).isoformat(),
            "user_metadata": metadata or None,
        }

    def _new_model(self, session, model_seq_id: int, base_model: str, lora_rank: int | None) -> ModelRecord:
        model_id = f"{session.session_id}:train:{model_seq_id}"
        with self._lock:
            if model_id in self.models:
                raise HTTPError(
                    400, f"model '{model_id}' exists already (model_seq_id {model_seq_id} reused)"
                )
            lane = Lane(model_id, self.futures, self._run_model_batch, seq_ordered=True)
            record = ModelRecord(model_id, session.session_id, base_model, lora_rank, lane)
            self.models[model_id] = record
            session.models.append(model_id)
        return record

    def create_model(self, body: dict[str, Any]) -> dict[str, Any]:
        """``create_lora_training_client``: a new model on its own lane; the backend loads it there."""
        session = self._live_session(body.get("session_id"))
        base_model = body.get("base_model")
        if not base_model:
            raise HTTPError(400, "base_model is required")
        optimizer = (body.get("optimizer_config") or {}).get("type", "adamw")
        if optimizer != "adamw":
            raise HTTPError(400, f"optimizer '{optimizer}' is not supported (only adamw)")
        lora = body.get("lora_config") or {}
        rank = lora.get("rank")
        record = self._new_model(session, int(body.get("model_seq_id", 0)), base_model, rank or None)
        record.user_metadata = body.get("user_metadata")

        def run():
            with self._build_lock:
                record.backend_id = _call(
                    self.backend.create_model,
                    base_model,
                    lora_rank=rank or None,
                    seed=lora.get("seed"),
                    train_mlp=lora.get("train_mlp", True),
                    train_attn=lora.get("train_attn", True),
                    train_unembed=lora.get("train_unembed", True),
                )
            return {"type": "create_model", "model_id": record.model_id}, False

        # order 0: before the model's first request (seq_id 1)
        out = self._submit(record.lane, session.session_id, order=0, run=run)
        return {**out, "model_id": record.model_id}

    def get_info(self, model_id: str) -> dict[str, Any]:
        """Model facts for ``TrainingClient``: base model, LoRA rank, the tokenizer to load (a local folder)."""
        record = self._model(model_id)
        info: dict[str, Any] = {}
        if record.backend_id is not None:
            info = _call(self.backend.tokenizer_info, record.backend_id)
        return {
            "type": "get_info",
            "model_id": model_id,
            "model_data": {
                "arch": info.get("arch"),
                "model_name": record.base_model,
                "tokenizer_id": info.get("tokenizer_id"),
            },
            "is_lora": info.get("is_lora", record.lora_rank is not None),
            "lora_rank": info.get("lora_rank", record.lora_rank),
            "model_name": record.base_model,
        }

    def forward_backward(self, call: protocol.ForwardBackwardCall) -> dict[str, Any]:
        """``forward`` / ``forward_backward``: queued on the model's lane, batched with its neighbours."""
        record = self._model(call.model_id)
        with self._refusing(record, call.seq_id):
            if not call.data:
                raise HTTPError(400, "forward_backward needs at least one datum")
        data = [self.datum_cls(tokens=tokens, inputs=inputs) for tokens, inputs in call.data]
        config = tuple(sorted((call.loss_fn_config or {}).items()))
        key = ("forward" if call.forward_only else "forward_backward", call.loss_fn, config)
        out = self._submit(
            record.lane, record.session_id, seq_id=call.seq_id, batch_key=key, args=(record, data)
        )
        return {**out, "model_id": call.model_id}

    def _run_model_batch(self, group: list[Job]) -> list[tuple[Any, bool] | Failure]:
        kind, loss_fn, config = group[0].batch_key
        record = group[0].args[0]
        data = [d for job in group for d in job.args[1]]
        method = self.backend.forward if kind == "forward" else self.backend.forward_backward
        result = _call(method, record.backend_id, data, loss_fn, dict(config) or None)
        outcomes: list[tuple[Any, bool] | Failure] = []
        start = 0
        for job in group:
            n = len(job.args[1])
            outputs = result.outputs[start : start + n]
            start += n
            metrics = dict(result.metrics)
            if len(group) > 1:
                metrics = _split_metrics(metrics, outputs, n, len(data))
            outcomes.append((protocol.encode_forward_output(outputs, metrics), True))
        return outcomes

    def optim_step(self, body: dict[str, Any]) -> dict[str, Any]:
        """``optim_step``: Adam with the request's parameters, after the model's earlier requests."""
        record = self._model(body.get("model_id", ""))
        params = body.get("adam_params")
        if params is None:
            record.lane.skip(body.get("seq_id"))
            other = (body.get("optimizer_params") or {}).get("type", "unknown")
            raise HTTPError(400, f"optimizer '{other}' is not supported (only Adam: pass tinker.AdamParams)")
        kwargs = {
            "learning_rate": float(params.get("learning_rate", 1e-4)),
            "beta1": float(params.get("beta1", 0.9)),
            "beta2": float(params.get("beta2", 0.95)),
            "eps": float(params.get("eps", 1e-12)),
            "weight_decay": float(params.get("weight_decay", 0.0)),
            "grad_clip_norm": float(params.get("grad_clip_norm", 0.0)),
        }

        def run():
            metrics = _call(self.backend.optim_step, record.backend_id, **kwargs)
            return {"metrics": {k: float(v) for k, v in (metrics or {}).items()}}, False

        out = self._submit(record.lane, record.session_id, seq_id=body.get("seq_id"), run=run)
        return {**out, "model_id": record.model_id}

    def _save(self, record: ModelRecord, name: str, kind: str, overwrite: bool) -> str:
        path = protocol.tinker_path(record.model_id, kind, name)
        if self.checkpoints.get(path) is not None and not overwrite:
            raise Failure(f"checkpoint '{path}' exists already; pass overwrite=True to replace it")
        with_optimizer = kind == "weights"
        backend_path = _call(
            self.backend.save_weights, record.backend_id, name, with_optimizer=with_optimizer
        )
        self.checkpoints.put(
            path,
            {
                "backend_path": str(backend_path),
                "base_model": record.base_model,
                "lora_rank": record.lora_rank,
                "with_optimizer": with_optimizer,
                "user_metadata": record.user_metadata,
                "created": time.time(),
            },
        )
        return path

    def save_weights(self, body: dict[str, Any]) -> dict[str, Any]:
        """``save_state``: weights and optimizer state, as ``tinker://{model}/weights/{name}``."""
        record = self._model(body.get("model_id", ""))
        name = body.get("path") or f"state-{body.get('seq_id', 0)}"
        with self._refusing(record, body.get("seq_id")):
            self._check_name(name)

        def run():
            path = self._save(record, name, "weights", bool(body.get("overwrite")))
            return {"type": "save_weights", "path": path}, False

        out = self._submit(record.lane, record.session_id, seq_id=body.get("seq_id"), run=run)
        return {**out, "model_id": record.model_id}

    @staticmethod
    def _check_name(name: str) -> None:
        try:
            protocol.tinker_path("m", "weights", name)
        except protocol.WireError as exc:
            raise HTTPError(400, str(exc)) from None

    def save_weights_for_sampler(self, body: dict[str, Any]) -> dict[str, Any]:
        """Weights for sampling: a named checkpoint (``sampler_weights``) or, without a name, a sampling
        session on a frozen copy of the current weights (``save_weights_and_get_sampling_client``)."""
        record = self._model(body.get("model_id", ""))
        name = body.get("path")
        session = self._live_session(record.session_id)
        if name is not None:
            with self._refusing(record, body.get("seq_id")):
                self._check_name(name)

            def run():
                path = self._save(record, name, "sampler_weights", True)
                return {"type": "save_weights_for_sampler", "path": path}, False

        else:
            seq = body.get("sampling_session_seq_id")
            sampler = self._new_sampler(session, seq, record.base_model, None)

            def run():
                sampler.backend_id = _call(self.backend.sampler, model_id=record.backend_id)
                return {"type": "save_weights_for_sampler", "sampling_session_id": sampler.sampler_id}, False

        out = self._submit(record.lane, record.session_id, seq_id=body.get("seq_id"), run=run)
        return {**out, "model_id": record.model_id}

    def _checkpoint(self, path: str) -> dict[str, Any]:
        try:
            protocol.parse_tinker_path(path)
        except protocol.WireError as exc:
            raise HTTPError(400, str(exc)) from None
        entry = self.checkpoints.get(path)
        if entry is None:
            raise HTTPError(404, f"unknown checkpoint '{path}' (never saved on this server)")
        return entry

    def load_weights(self, body: dict[str, Any]) -> dict[str, Any]:
        """``load_state`` into an existing model, or a new model from a checkpoint
        (``create_training_client_from_state[_with_optimizer]``)."""
        path = body.get("path", "")
        with_optimizer = bool(body.get("optimizer"))
        existing = self._model(body.get("model_id", "")) if body.get("session_id") is None else None
        with contextlib.ExitStack() as checks:
            if existing is not None:
                checks.enter_context(self._refusing(existing, body.get("seq_id")))
            entry = self._checkpoint(path)
            if with_optimizer and not entry.get("with_optimizer"):
                raise HTTPError(400, f"checkpoint '{path}' holds no optimizer state (saved for sampling)")
        if existing is None:
            session = self._live_session(body["session_id"])
            base_model = body.get("base_model") or entry["base_model"]
            record = self._new_model(
                session, int(body.get("model_seq_id", 0)), base_model, entry.get("lora_rank")
            )
            record.user_metadata = body.get("user_metadata") or entry.get("user_metadata")

            def run():
                with self._build_lock:
                    record.backend_id = _call(
                        self.backend.create_model_from_state,
                        entry["backend_path"],
                        with_optimizer=with_optimizer,
                    )
                return {"type": "load_weights", "path": path, "model_id": record.model_id}, False

            out = self._submit(record.lane, session.session_id, order=0, run=run)
            return {**out, "model_id": record.model_id}
        record = existing

        def run():
            _call(
                self.backend.load_weights,
                record.backend_id,
                entry["backend_path"],
                with_optimizer=with_optimizer,
            )
            return {"type": "load_weights", "path": path, "model_id": record.model_id}, False

        out = self._submit(record.lane, record.session_id, seq_id=body.get("seq_id"), run=run)
        return {**out, "model_id": record.model_id}

    # -- sampling -----------------------------------------------------------------------------------------

    def _new_sampler(
        self, session, seq: int | None, base_model: str, model_path: str | None
    ) -> SamplerRecord:
        sampler_id = f"{session.session_id}:sample:{seq if seq is not None else len(session.samplers)}"
        with self._lock:
            if sampler_id in self.samplers:
                raise HTTPError(400, f"sampling session '{sampler_id}' exists already")
            lane = Lane(sampler_id, self.futures, self._run_sample_batch)
            record = SamplerRecord(sampler_id, session.session_id, base_model, model_path, lane)
            self.samplers[sampler_id] = record
            session.samplers.append(sampler_id)
        return record

    def create_sampling_session(self, body: dict[str, Any]) -> dict[str, Any]:
        """A sampler on a saved checkpoint or on a base model; loads before answering (the client expects
        the session id in the reply)."""
        session = self._live_session(body.get("session_id"))
        model_path, base_model = body.get("model_path"), body.get("base_model")
        if model_path:
            entry = self._checkpoint(model_path)
            kwargs = {"path": entry["backend_path"]}
            base_model = base_model or entry["base_model"]
        elif base_model:
            kwargs = {"base_model": base_model}
        else:
            raise HTTPError(400, "create_sampling_session needs model_path or base_model")
        try:
            backend_id = self.backend.sampler(**kwargs)
        except KeyError as exc:
            raise HTTPError(404, str(_user_error(exc))) from None
        except ValueError as exc:
            raise HTTPError(400, str(exc)) from None
        record = self._new_sampler(session, body.get("sampling_session_seq_id"), base_model, model_path)
        record.backend_id = backend_id
        return {"type": "create_sampling_session", "sampling_session_id": record.sampler_id}

    def _sampler(self, sampler_id: str) -> SamplerRecord:
        with self._lock:
            record = self.samplers.get(sampler_id or "")
        if record is None:
            raise HTTPError(404, f"unknown sampling session '{sampler_id}'")
        self._live_session(record.session_id)
        return record

    def get_sampler(self, sampler_id: str) -> dict[str, Any]:
        """What a sampler samples from."""
        record = self._sampler(sampler_id)
        return {"sampler_id": sampler_id, "base_model": record.base_model, "model_path": record.model_path}

    def join_sampling_session(self, sampler_id: str) -> dict[str, Any]:
        """A clone number for an unpickled ``SamplingClient`` (its seq_ids then never collide)."""
        record = self._sampler(sampler_id)
        with self._lock:
            record.clones += 1
            return {"type": "join_sampling_session", "client_counter": record.clones}

    def sample(self, body: dict[str, Any]) -> dict[str, Any]:
        """``sample`` / ``compute_logprobs``: queued on the sampler's lane; requests with the same prompt and
        parameters (and no seed) are sampled in one call."""
        record = self._sampler(body.get("sampling_session_id", ""))
        for name in ("topk_prompt_logprobs", "topk_sample_logprobs", "prompt_alt_tokens_k"):
            if body.get(name):
                raise HTTPError(400, f"{name} is not supported by this server")
        if body.get("target_prompt_logprobs") is not None:
            raise HTTPError(400, "target_prompt_logprobs is not supported by this server")
        try:
            prompt = protocol.model_input_tokens(body.get("prompt") or {})
        except protocol.WireError as exc:
            raise HTTPError(400, str(exc)) from None
        if not prompt:
            raise HTTPError(400, "the prompt is empty")
        num_samples = int(body.get("num_samples", 1))
        if num_samples < 1:
            raise HTTPError(400, f"num_samples must be at least 1, got {num_samples}")
        params = body.get("sampling_params") or {}
        stop = params.get("stop")
        if isinstance(stop, str):
            stop = [stop]
        options = {
            "max_tokens": int(params.get("max_tokens") or DEFAULT_MAX_TOKENS),
            "temperature": float(params.get("temperature", 1.0)),
            "top_p": float(params.get("top_p", 1.0)),
            "top_k": int(params.get("top_k", -1)),
            "stop": list(stop) if stop is not None else None,
            "seed": params.get("seed"),
            "prompt_logprobs": bool(body.get("prompt_logprobs")),
        }
        last_n = body.get("prompt_logprobs_last_n")
        if last_n is not None and not 1 <= int(last_n) <= len(prompt) - 1:
            raise HTTPError(
                400, f"prompt_logprobs_last_n must be between 1 and {len(prompt) - 1}, got {last_n}"
            )
        # Unseeded requests batch together; a seed fixes one call's draws, so a seeded one runs alone.
        key = ("sample",) if options["seed"] is None else ("seeded", next(self._seeded))
        args = (record, prompt, num_samples, options, last_n)
        out = self._submit(record.lane, record.session_id, batch_key=key, args=args)
        out["sample_sequence_ids"] = [f"{out['request_id']}:{i}" for i in range(num_samples)]
        return out

    def _run_sample_batch(self, group: list[Job]) -> list[tuple[Any, bool] | Failure]:
        """Requests with the same prompt and parameters become one backend call with their samples summed;
        different ones run concurrently, so that the sampler's engine decodes them as one batch."""
        record = group[0].args[0]
        calls: dict[tuple, list[Job]] = {}
        for job in group:
            _, prompt, _, options, _ = job.args
            calls.setdefault((tuple(prompt), json.dumps(options, sort_keys=True)), []).append(job)

        def run(jobs: list[Job]) -> list[tuple[Any, bool] | Failure]:
            _, prompt, _, options, _ = jobs[0].args
            total = sum(job.args[2] for job in jobs)
            try:
                result = _call(self.backend.sample, record.backend_id, prompt, num_samples=total, **options)
            except Failure as exc:
                return [exc] * len(jobs)
            outcomes: list[tuple[Any, bool] | Failure] = []
            start = 0
            for job in jobs:
                n, last_n = job.args[2], job.args[4]
                prompt_logprobs = result.get("prompt_logprobs")
                if prompt_logprobs is not None and last_n is not None:
                    cut = len(prompt_logprobs) - int(last_n)
                    prompt_logprobs = [None] * cut + list(prompt_logprobs[cut:])
                part = {
                    "sequences": result["sequences"][start : start + n],
                    "prompt_logprobs": prompt_logprobs,
                }
                start += n
                outcomes.append((protocol.encode_sample_response(part), True))
            return outcomes

        by_job: dict[int, tuple[Any, bool] | Failure] = {}
        if not record.warm:
            with self._build_lock:  # the first call builds the sampler's engine
                results = [run(jobs) for jobs in calls.values()]
            record.warm = True
        elif len(calls) == 1:
            results = [run(next(iter(calls.values())))]
        else:
            with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="tinker-sample") as pool:
                results = list(pool.map(run, calls.values()))
        for jobs, outcomes in zip(calls.values(), results, strict=True):
            for job, outcome in zip(jobs, outcomes, strict=True):
                by_job[id(job)] = outcome
        return [by_job[id(job)] for job in group]


def _split_metrics(
    metrics: dict[str, float], outputs: list[dict[str, np.ndarray]], n: int, total: int
) -> dict:
    """One request's metrics out of a batched call: ``loss:sum`` from its data's elementwise losses when the
    backend gave them, other sums in proportion to its data, means / max / min as they are."""
    out = {}
    for key, value in metrics.items():
        if key.endswith(":sum"):
            if key == "loss:sum" and outputs and all("elementwise_loss" in o for o in outputs):
                out[key] = float(sum(np.sum(o["elementwise_loss"]) for o in outputs))
            else:
                out[key] = float(value) * n / total
        else:
            out[key] = float(value)
    return out
