"""An inference engine in its own process: generation and training overlap for real on a CPU.

:class:`EngineProcess` is a small client with the engine interface in the trainer's process. It spawns a
process that loads the model itself (``engine_class(backend).create(model_path=..., **options)``) and serves
requests over a pipe: ``generate`` calls (many at once: each reply is matched to its request by id), and
calls of the engine's own methods (``pause``, ``resume``, ``logits``, ``stats``) and of the weight-sync
receivers (:mod:`skyrl_train.inference.weight_sync`): the trainer's first push sends a spec from which the process
builds the strategy's receiver, later pushes send one message each.

Weight updates and other calls run on one thread of their own in the engine's process, so that the decode
loop goes on while the bytes arrive, and only the copy into the model waits for a token boundary.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import multiprocessing
import threading
import traceback
from collections.abc import Iterable, Sequence
from typing import Any

from skyrl_train.inference.base import GenerationOutput, InferenceEngine, SamplingParams

__all__ = ["EngineProcess", "EngineProcessError"]

logger = logging.getLogger("skyrl_train.inference.process")

_CALLS = (
    "pause",
    "resume",
    "logits",
    "stats",
    "policy_version",
    "weights_setup",
    "weights_update",
    "weights_digests",
)
"""What the client may ask the engine's process to run besides ``generate``."""


class EngineProcessError(RuntimeError):
    """The engine's process failed (to start, or on a request); the message carries its traceback."""


class EngineProcess(InferenceEngine):
    """An engine (``backend``, default ``hf``) served from a spawned process; see the module docstring.

    `model_path` is loaded by the process itself; `options` go to the engine's ``create`` there (for hf:
    ``max_batch_size``, ``prefix_cache_tokens``, ``seed``, ``dtype``, ``device``...). `torch_threads`: intra-op
    threads of the process (default: torch's own choice). `start_timeout_s`: how long loading may take.
    `weight_sync_backend`: the strategy `update_weights` sends weights by (shared_memory, gloo, or on GPUs
    nccl / cuda_ipc), chosen once. The tokenizer is loaded here from `model_path` unless given.
    """

    is_engine_process = True

    def __init__(
        self,
        model_path: str,
        *,
        backend: str = "hf",
        tokenizer: Any = None,
        weight_sync_backend: str = "shared_memory",
        torch_threads: int | None = None,
        start_timeout_s: float = 600.0,
        **options: Any,
    ) -> None:
        from skyrl_train.inference.weight_sync import make_weight_sync
        from skyrl_train.models import load_tokenizer

        self.backend = backend
        self.weight_sync_backend = weight_sync_backend
        self.weight_sync = make_weight_sync(weight_sync_backend)
        """The strategy every `update_weights` goes through."""
        self.model_path = str(model_path)
        self.options = dict(options)
        self._tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model_path)
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_serve,
            args=(child, backend, self.model_path, self.options, torch_threads),
            name=f"{backend}-engine",
            daemon=True,
        )
        self._process.start()
        child.close()
        self._ids = itertools.count()
        self._futures: dict[int, concurrent.futures.Future] = {}
        self._lock = threading.Lock()
        self._closed = False
        if not self._conn.poll(start_timeout_s):
            self._process.kill()
            raise EngineProcessError(f"the {backend} engine process did not start in {start_timeout_s:.0f} s")
        kind, info = self._recv_start()
        if kind != "ready":
            self._process.join(10)
            raise EngineProcessError(f"the {backend} engine process failed to start:\n{info}")
        self.info: dict[str, Any] = info
        """What the process reported when ready (its pid, the model's dtype and device)."""
        self._reader = threading.Thread(target=self._read, name="engine-process-reader", daemon=True)
        self._reader.start()

    def _recv_start(self) -> tuple[str, Any]:
        try:
            _, kind, info = self._conn.recv()
        except EOFError:
            return "error", f"the process exited with code {self._process.exitcode} before it was ready"
        return kind, info

    # ------------------------------------------------------------------------------ the engine API
    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def pid(self) -> int | None:
        """The engine process's id."""
        return self._process.pid

    async def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[GenerationOutput]:
        """Generate in the engine's process; concurrent calls are batched there."""
        return await asyncio.wrap_future(self.submit(prompts, params))

    def generate_sync(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[GenerationOutput]:
        """Blocking `generate`; safe from any thread."""
        return self.submit(prompts, params).result()

    def submit(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> concurrent.futures.Future[list[GenerationOutput]]:
        """Send a generation to the process and return at once."""
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
        prompts = [[int(t) for t in p] for p in prompts]
        return self._send("generate", (prompts, params.model_dump()), {})

    def call_async(self, method: str, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        """Run one of the engine process's calls (``pause``, ``resume``, ``logits``, ``stats``,
        ``policy_version``, ``weights_setup``, ``weights_update``) and return its future."""
        if method not in _CALLS:
            raise ValueError(f"unknown engine-process call {method!r}; known: {', '.join(_CALLS)}")
        return self._send(method, args, kwargs)

    def call(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """`call_async` and wait for its result."""
        return self.call_async(method, *args, **kwargs).result(timeout)

    def pause(self) -> int:
        """Stop the engine's decode loop at a token boundary; returns the sequences it holds."""
        return self.call("pause")

    def resume(self) -> None:
        """Let the engine's decode loop go on (sequences across a weight update recompute their KV)."""
        self.call("resume")

    def logits(self, token_ids: Sequence[int]) -> Any:
        """The engine model's logits at every position of ``token_ids`` (see ``HFEngine.logits``)."""
        return self.call("logits", [int(t) for t in token_ids])

    @property
    def stats(self) -> dict[str, int]:
        """The engine's counters, read from its process."""
        return self.call("stats")

    @property
    def policy_version(self) -> int:
        """The version of the weights the engine uses."""
        return self.call("policy_version")

    async def update_weights(
        self, named_tensors: Iterable[tuple[str, Any]], *, version: int | None = None
    ) -> None:
        """Send new weights by the client's strategy (`weight_sync_backend`); the engine's process loads them
        at a token boundary, and requests in flight go on with them."""
        await asyncio.to_thread(self.weight_sync.push, self, list(named_tensors), version=version)

    def close(self) -> None:
        """Stop the process (requests still running end with stop_reason "abort"); idempotent."""
        if self._closed:
            return
        with self._lock:
            self._closed = True
            try:
                self._conn.send((None, "close", (), {}))
            except (OSError, ValueError):
                pass
        self._process.join(60)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(10)
        self._reader.join(10)
        self.weight_sync.close()
        self._fail_all(EngineProcessError("the engine process was closed"))

    # ------------------------------------------------------------------------------ the pipe
    def _send(self, method: str, args: tuple, kwargs: dict) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the engine process is closed")
            request_id = next(self._ids)
            self._futures[request_id] = future
            self._conn.send((request_id, method, args, kwargs))
        return future

    def _read(self) -> None:
        while True:
            try:
                request_id, kind, value = self._conn.recv()
            except (EOFError, OSError):
                break
            if request_id is None:  # the process acknowledged "close"
                break
            with self._lock:
                future = self._futures.pop(request_id, None)
            if future is None:
                continue
            # a caller may have cancelled its future (an asynchronous group given up) before the answer came:
            # the answer is dropped, and this thread goes on reading for the others
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                if kind == "ok":
                    future.set_result(value)
                else:
                    future.set_exception(EngineProcessError(value))
        self._fail_all(EngineProcessError(f"the engine process ended (exit code {self._process.exitcode})"))

    def _fail_all(self, error: Exception) -> None:
        with self._lock:
            futures, self._futures = list(self._futures.values()), {}
        for future in futures:
            if not future.done():
                future.set_exception(error)


# ---------------------------------------------------------------------------------- the engine's process


def bind_cuda_device(device: Any) -> None:
    """Make ``device`` (e.g. ``"cuda:1"``) the calling thread's current CUDA device, so that every tensor
    made on plain ``"cuda"`` there (a weight receiver's buffer, NCCL's communicator) lands on the engine's
    GPU and not on GPU 0. CUDA keeps the current device per thread: every thread of the engine's process that
    touches the GPU calls this. Nothing happens for a CPU device or a bare ``"cuda"``."""
    if device is None:
        return
    import torch

    device = torch.device(device)
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)


def engine_calls_executor(device: Any) -> concurrent.futures.ThreadPoolExecutor:
    """The one thread that runs the engine process's calls (weight receivers, ``pause``...), bound to the
    engine's CUDA device (:func:`bind_cuda_device`)."""
    return concurrent.futures.ThreadPoolExecutor(
        1, thread_name_prefix="engine-calls", initializer=bind_cuda_device, initargs=(device,)
    )


def _serve(
    conn: Any, backend: str, model_path: str, options: dict[str, Any], torch_threads: int | None
) -> None:
    """The engine process: load the engine, then answer requests until "close" or the pipe ends."""
    send_lock = threading.Lock()

    def send(request_id: Any, kind: str, value: Any) -> None:
        with send_lock:
            conn.send((request_id, kind, value))

    try:
        import torch

        if torch_threads:
            torch.set_num_threads(torch_threads)
        bind_cuda_device(options.get("device"))
        from skyrl_train.inference.base import engine_class

        engine = engine_class(backend).create(model_path=model_path, **options)
        parameter = next(engine.model.parameters())
        import os

        send(
            None,
            "ready",
            {"pid": os.getpid(), "dtype": str(parameter.dtype), "device": str(parameter.device)},
        )
    except BaseException:
        send(None, "error", traceback.format_exc())
        return

    receivers: dict[str, Any] = {}
    digests: dict[str, dict[str, int]] = {}
    calls = engine_calls_executor(options.get("device"))

    def run_call(method: str, args: tuple, kwargs: dict) -> Any:
        if method == "stats":
            return dict(engine.stats)
        if method == "policy_version":
            return engine.policy_version
        if method == "weights_setup":
            from skyrl_train.inference.weight_sync import WEIGHT_SYNCS

            (spec,) = args
            old = receivers.pop(spec["strategy"], None)
            if old is not None:
                old.close()
            receivers[spec["strategy"]] = WEIGHT_SYNCS.get(spec["strategy"]).receiver(spec)
            return None
        if method == "weights_update":
            from skyrl_train.inference.weight_sync.gate import fingerprints

            strategy, message, version = args
            tensors = receivers[strategy].receive(message)  # the decode loop runs on meanwhile
            digests[strategy] = fingerprints(tensors)  # what arrived, for the trainer's weight-sync gate
            engine.load_weights(tensors, version=version)  # at a token boundary
            return engine.policy_version
        if method == "weights_digests":
            (strategy,) = args
            return digests.pop(strategy, {})
        return getattr(engine, method)(*args, **kwargs)

    def answer(request_id: int, work: Any) -> None:
        try:
            send(request_id, "ok", work())
        except BaseException:
            send(request_id, "error", traceback.format_exc())

    try:
        while True:
            try:
                request_id, method, args, kwargs = conn.recv()
            except (EOFError, OSError):
                break
            if method == "close":
                break
            if method == "generate":
                prompts, params = args
                try:
                    future = engine.submit(prompts, SamplingParams(**params))
                except Exception:
                    send(request_id, "error", traceback.format_exc())
                    continue
                future.add_done_callback(
                    lambda f, rid=request_id: answer(rid, lambda: [_plain(o) for o in f.result()])
                )
            else:
                calls.submit(answer, request_id, lambda m=method, a=args, k=kwargs: run_call(m, a, k))
    finally:
        engine.close()
        calls.shutdown(wait=True)
        for receiver in receivers.values():
            receiver.close()
        try:
            send(None, "closed", None)
        except (OSError, ValueError):
            pass


def _plain(output: GenerationOutput) -> GenerationOutput:
    """The output with plain-Python fields only (cheap to pickle)."""
    output.metrics = dict(output.metrics)
    return output
