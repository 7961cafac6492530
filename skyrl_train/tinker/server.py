"""``skyrl-train serve``: a server the official ``tinker`` client talks to unchanged (FastAPI on uvicorn).

:class:`~skyrl_train.tinker.service.TinkerService` keeps the sessions, the training models and samplers the
clients created, and the index of saved checkpoints (``tinker_checkpoints.json`` in the store folder, so
saved weights outlive the client that saved them and the server itself); it turns each request into a job on
the lane of its model or sampler (:mod:`skyrl_train.tinker.futures`) and the backend
(:mod:`skyrl_train.tinker.backend`) does the model work. :func:`create_app` maps the client's endpoints
(:mod:`skyrl_train.tinker.protocol`) onto it.

    skyrl-train serve --port 8000 --store-dir runs/tinker
    TINKER_API_KEY=tml-local python my_tinker_script.py      # ServiceClient(base_url="http://127.0.0.1:8000")
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from skyrl_train.tinker import protocol
from skyrl_train.tinker.service import DEFAULT_MAX_TOKENS, HTTPError, TinkerService
from skyrl_train.tinker.store import CheckpointIndex, ModelRecord, SamplerRecord

__all__ = [
    "CLIENT_CONFIG",
    "DEFAULT_MAX_TOKENS",
    "CheckpointIndex",
    "HTTPError",
    "ModelRecord",
    "SamplerRecord",
    "TinkerService",
    "create_app",
    "serve",
    "serve_in_thread",
    "supported_models",
]

log = logging.getLogger(__name__)

CLIENT_CONFIG = {
    "pjwt_auth_enabled": False,
    "credential_default_source": "api_key",
    "use_pyqwest_transport": False,
    "proto_compress_fwdbwd": False,
    "parallel_fwdbwd_chunks": True,
    "sample_use_retrieve_futures": False,
    "custom_loss_server_side": False,
    "sample_join_sampling_session": True,
}
"""The feature flags this server answers ``/client/config`` with (see :mod:`skyrl_train.tinker.protocol`)."""


def create_app(service: TinkerService, *, poll_wait_s: float = 20.0, expiry_check_s: float = 30.0):
    """The FastAPI application of the Tinker endpoints over ``service``.

    ``poll_wait_s``: how long a ``/retrieve_future`` poll waits for its result before answering try_again
    (the client waits 45 s for an answer); ``expiry_check_s``: how often sessions without heartbeats are
    ended.
    """

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async def expire():
            while True:
                await asyncio.sleep(expiry_check_s)
                for session_id in service.expire_sessions():
                    log.warning(
                        "session %s ended: no heartbeat for %.0f s", session_id, service.sessions.timeout_s
                    )

        task = asyncio.create_task(expire())
        try:
            yield
        finally:
            task.cancel()

    app = FastAPI(title="skyrl-train Tinker API", lifespan=lifespan)
    app.state.service = service

    @app.exception_handler(HTTPError)
    async def http_error(request: Request, exc: HTTPError):
        return JSONResponse(status_code=exc.status, content={"detail": exc.message})

    @app.exception_handler(protocol.WireError)
    async def wire_error(request: Request, exc: protocol.WireError):
        return JSONResponse(status_code=400, content={"detail": str(exc)})

    async def body_of(request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            raise HTTPError(400, "the request body is not JSON") from None
        if not isinstance(body, dict):
            raise HTTPError(400, "the request body must be a JSON object")
        return body

    @app.get("/api/v1/healthz")
    async def healthz():
        return {"status": "ok"}

    @app.post("/api/v1/client/config")
    async def client_config():
        return CLIENT_CONFIG

    @app.post("/api/v1/client/dynamic_config")
    async def client_dynamic_config():
        return {"refresh_interval_sec": 300, "sample_cancel_enabled": False}

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities():
        return {"supported_models": supported_models(service.capabilities)}

    @app.post("/api/v1/telemetry")
    async def telemetry():
        return {"status": "accepted"}

    @app.post("/api/v1/create_session")
    async def create_session(request: Request):
        return service.create_session(await body_of(request))

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat(request: Request):
        return service.heartbeat((await body_of(request)).get("session_id", ""))

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def finish(session_id: str, request: Request):
        body = await body_of(request)
        reason = (body.get("reason") or {}).get("type", "success")
        service.finish_session(session_id, reason)
        return {}

    @app.post("/api/v1/create_model")
    async def create_model(request: Request):
        return service.create_model(await body_of(request))

    @app.post("/api/v1/get_info")
    async def get_info(request: Request):
        return service.get_info((await body_of(request)).get("model_id", ""))

    @app.post("/api/v1/forward_backward")
    async def forward_backward(request: Request):
        raw = await request.body()
        try:
            if protocol.PROTOBUF in request.headers.get("content-type", ""):
                call = await asyncio.to_thread(
                    protocol.decode_forward_backward, raw, request.headers.get("content-encoding")
                )
            else:
                call = protocol.decode_json_forward_backward(await body_of(request))
        except protocol.WireError as exc:
            service.skip(exc.model_id, exc.seq_id)
            raise
        return await asyncio.to_thread(service.forward_backward, call)

    @app.post("/api/v1/optim_step")
    async def optim_step(request: Request):
        return service.optim_step(await body_of(request))

    @app.post("/api/v1/save_weights")
    async def save_weights(request: Request):
        return service.save_weights(await body_of(request))

    @app.post("/api/v1/save_weights_for_sampler")
    async def save_weights_for_sampler(request: Request):
        return service.save_weights_for_sampler(await body_of(request))

    @app.post("/api/v1/load_weights")
    async def load_weights(request: Request):
        return service.load_weights(await body_of(request))

    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(request: Request):
        return await asyncio.to_thread(service.create_sampling_session, await body_of(request))

    @app.get("/api/v1/training_runs/{run_id}")
    async def training_run(run_id: str):
        return service.training_run(run_id)

    @app.get("/api/v1/samplers/{sampler_id}")
    async def get_sampler(sampler_id: str):
        return service.get_sampler(sampler_id)

    @app.post("/api/v1/join_sampling_session")
    async def join_sampling_session(request: Request):
        return service.join_sampling_session((await body_of(request)).get("sampling_session_id", ""))

    @app.post("/api/v1/asample")
    async def asample(request: Request):
        return service.sample(await body_of(request))

    @app.post("/api/v1/retrieve_future")
    async def retrieve_future(request: Request):
        request_id = (await body_of(request)).get("request_id", "")
        fut = await service.retrieve(request_id, poll_wait_s)
        if not fut.done:
            return {"type": "try_again", "request_id": request_id, "queue_state": "active"}
        service.futures.mark_retrieved(fut)
        if fut.error is not None:
            return {"error": fut.error, "category": fut.category}
        if fut.proto:
            return Response(content=fut.payload, media_type=protocol.PROTOBUF)
        return fut.payload

    return app


def supported_models(capabilities: dict[str, Any]) -> list[dict[str, Any]]:
    """The backend's base models as the client's ``SupportedModel`` records."""
    models = capabilities.get("base_models") or capabilities.get("models") or []
    out = []
    for model in models:
        if isinstance(model, str):
            model = {"model_name": model}
        out.append(
            {
                "model_name": model.get("model_name") or model.get("name"),
                "max_context_length": model.get("max_context_length"),
                "trainable": model.get("trainable", True),
                "sampleable": model.get("sampleable", True),
            }
        )
    return out


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    store_dir: str | Path = "runs/tinker",
    device: str = "cpu",
    base_models: dict[str, str] | None = None,
) -> None:
    """Run the server until interrupted: the backend on ``device``, checkpoints under ``store_dir``."""
    import uvicorn

    from skyrl_train.tinker.backend import TinkerBackend

    backend = TinkerBackend(base_models=base_models, device=device, store_dir=Path(store_dir))
    service = TinkerService(backend, store_dir)
    names = ", ".join(m["model_name"] for m in supported_models(service.capabilities))
    print(
        f"Tinker API on http://{host}:{port} (base models: {names}; checkpoints in {store_dir})", flush=True
    )
    uvicorn.run(create_app(service), host=host, port=port, log_level="warning", timeout_graceful_shutdown=5)


@contextlib.contextmanager
def serve_in_thread(service: TinkerService, host: str = "127.0.0.1", port: int = 0, **app_kwargs: Any):
    """Serve ``service`` from a thread of this process (tests, benchmarks, notebooks); yields the base URL
    and stops the server on exit. ``port=0`` takes a free port."""
    import socket

    import uvicorn

    if port == 0:
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
    config = uvicorn.Config(
        create_app(service, **app_kwargs),
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="tinker-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"the Tinker server did not start on {host}:{port}")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
