"""`VLLMEngine`: vLLM's async engine behind the `InferenceEngine` interface, on GPUs or on vLLM's CPU build.

vLLM itself is imported when an engine is built, so nothing else needs it installed (`engine_args` shows what
the config makes of vLLM's arguments without it).

- **One event loop for the engine's lifetime.** vLLM's async engine binds its output handler to the loop it
  first runs on. The engine is built on a loop of its own, on a thread of its own, and every call (generate,
  weight update, pause, probe) runs there, whichever loop or thread it comes from: ``asyncio.run`` per call,
  one long-lived loop, or plain threads (``generate_sync``, ``pause``) all work.
- **Token ids in and out.** Prompts go in as ``{"prompt_token_ids": ...}``; log-probabilities of the sampled
  tokens come back from the raw logits (like `HFEngine`); stop strings stay in the output.
- **Weights as bytes, per layer.** vLLM's worker RPC (msgpack) does not carry tensor data, so each tensor is
  cast to the engine's dtype on the sending side and sent as its raw bytes with its dtype and shape, in chunks
  of one or more layers (`update_chunk_bytes`). The worker extension stages the chunks, digests what arrived
  (:mod:`skyrl_train.inference.weight_sync.gate`) and then reloads them in place in one pass with vLLM's own
  ``reload_weights`` (which also re-packs weights for the CPU kernels). A digest that differs from the
  sender's stops with an error naming the tensor.
- **In-flight updates.** :meth:`pause` freezes the running requests where they are
  (``pause_generation(mode="keep")``), the weights are swapped, the requests' KV is recomputed with the new
  weights, and :meth:`resume` lets them go on with their tokens so far kept. Every generated token carries the
  version of the weights that produced it (`GenerationOutput.policy_versions`).
- On GPUs the worker extension also receives weights by an NCCL broadcast (:mod:`skyrl_train.inference.weight_sync.nccl`)
  or maps them through CUDA IPC handles (:mod:`skyrl_train.inference.weight_sync.cuda_ipc`); sleep mode frees the GPU in
  colocated layouts. Those paths need a GPU and have not run on the CPU build (which refuses sleep mode).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import uuid
import warnings
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any, TypeVar

import torch

from skyrl_train.config.rules import VLLM_MAX_TEMPERATURE
from skyrl_train.inference.base import GenerationOutput, InferenceEngine, SamplingParams

T = TypeVar("T")

MAX_TEMPERATURE = VLLM_MAX_TEMPERATURE
"""The highest sampling temperature the engine passes on (the config's rules refuse more for vLLM)."""


def _vllm() -> Any:
    """The vllm module; imported when an engine is built, so that the config's kwargs can be checked on a
    machine without vLLM."""
    try:
        import vllm
    except ImportError as error:  # pragma: no cover - depends on the machine
        raise ImportError(
            "the 'vllm' inference engine needs vLLM: on a GPU machine pip install 'skyrl[vllm]'; on an x86-64 "
            "CPU `make vllm-env` builds .venv-vllm with vLLM's CPU build; or use generator.backend=hf"
        ) from error
    return vllm


def encode_tensor(name: str, tensor: torch.Tensor) -> tuple[str, str, list[int], bytes]:
    """``(name, dtype, shape, raw bytes)``: a tensor in a form vLLM's RPC carries intact."""
    tensor = tensor.detach().contiguous()
    data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
    return name, str(tensor.dtype).removeprefix("torch."), list(tensor.shape), data


def decode_tensor(item: Sequence[Any]) -> tuple[str, torch.Tensor]:
    """The inverse of :func:`encode_tensor` (a copy that owns its memory)."""
    name, dtype, shape, data = item
    dtype = getattr(torch, dtype)
    if not data:
        return name, torch.empty(shape, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # frombuffer warns that bytes are read-only; the clone owns its copy
        flat = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return name, flat.view(dtype).reshape(shape)


def layer_chunks(
    named_tensors: Iterable[tuple[str, torch.Tensor]], chunk_bytes: int
) -> Iterable[list[tuple[str, torch.Tensor]]]:
    """Group tensors into chunks that end at a layer boundary (the part of the name before the layer index's
    next dot) once they hold at least `chunk_bytes`; a single larger tensor is a chunk of its own."""
    chunk: list[tuple[str, torch.Tensor]] = []
    size = 0
    layer = None
    for name, tensor in named_tensors:
        this_layer = _layer_of(name)
        if chunk and size >= chunk_bytes and this_layer != layer:
            yield chunk
            chunk, size = [], 0
        chunk.append((name, tensor))
        size += tensor.numel() * tensor.element_size()
        layer = this_layer
    if chunk:
        yield chunk


def _layer_of(name: str) -> str:
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return name


class WorkerExtension:
    """Mixed into every vLLM worker (`worker_extension_cls`): stages weight chunks, then reloads them."""

    def skyrl_stage_weights(self, items: list[Sequence[Any]]) -> dict[str, int]:
        """Decode one chunk of encoded tensors, keep them for :meth:`skyrl_commit_weights`, and return the
        digest of each as it arrived."""
        from skyrl_train.inference.weight_sync.gate import fingerprint

        staged = self.__dict__.setdefault("_skyrl_staged", [])
        digests = {}
        for item in items:
            name, tensor = decode_tensor(item)
            digests[name] = fingerprint(tensor)
            staged.append((name, tensor))
        return digests

    def skyrl_commit_weights(self) -> int:
        """Reload the staged tensors into the model in place (vLLM's ``reload_weights``, which re-packs them
        for its kernels) and drop them; returns how many were loaded."""
        staged = self.__dict__.pop("_skyrl_staged", [])
        if staged:
            self.skyrl_load_weights(staged)
        return len(staged)

    def skyrl_drop_staged(self) -> None:
        """Forget staged tensors of an update that failed."""
        self.__dict__.pop("_skyrl_staged", None)

    def skyrl_load_weights(self, named_tensors: list[tuple[str, torch.Tensor]]) -> int:
        device = self.device if hasattr(self, "device") else torch.device("cpu")  # type: ignore[attr-defined]
        weights = [(name, tensor.to(device, non_blocking=True)) for name, tensor in named_tensors]
        self.reload_weights(weights_iterator=iter(weights))  # type: ignore[attr-defined]
        if torch.cuda.is_available() and getattr(device, "type", "cpu") == "cuda":
            torch.cuda.synchronize()
        return len(weights)

    def skyrl_init_weight_group(self, host: str, port: int, world_size: int, timeout_s: float) -> None:
        """Join the trainer's NCCL weight group as rank 1 + this worker's tensor-parallel rank."""
        from datetime import timedelta

        import torch.distributed as dist

        from skyrl_train.inference.weight_sync.nccl import new_nccl_group

        rank = 1 + self.rank  # type: ignore[attr-defined]
        store = dist.TCPStore(host, port, world_size, False, timedelta(seconds=timeout_s))
        self._skyrl_weight_group = new_nccl_group(store, rank, world_size, timeout_s)
        self._skyrl_weight_store = store

    def skyrl_receive_broadcast(self, slots: list[dict], size: int) -> dict[str, int]:
        """Receive one packed state dict from the trainer's broadcast, load it, and return the digests of
        what arrived."""
        from skyrl_train.inference.weight_sync.gate import fingerprints
        from skyrl_train.inference.weight_sync.layout import as_slots, views

        device = self.device  # type: ignore[attr-defined]
        flat = torch.empty(size, dtype=torch.uint8, device=device)
        self._skyrl_weight_group.broadcast(flat, 0).wait()
        tensors = views(flat, as_slots(slots))
        digests = fingerprints(tensors)
        self.skyrl_load_weights(tensors)
        return digests

    def skyrl_load_ipc(self, handle: Sequence[Any], slots: list[dict]) -> dict[str, int]:
        """Map the trainer's packed state dict through its CUDA IPC handle (sent as plain data, see
        :mod:`skyrl_train.inference.weight_sync.cuda_ipc`), load it, and return the digests of what it read."""
        from skyrl_train.inference.weight_sync.cuda_ipc import open_handle
        from skyrl_train.inference.weight_sync.gate import fingerprints
        from skyrl_train.inference.weight_sync.layout import as_slots, views

        tensors = views(open_handle(handle), as_slots(slots))  # type: ignore[attr-defined]
        digests = fingerprints(tensors)
        self.skyrl_load_weights(tensors)
        return digests


class _EngineLoop:
    """An event loop on its own thread, for the engine's lifetime: every coroutine of the engine runs here."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def on_loop(self) -> bool:
        return threading.current_thread() is self._thread

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the engine's loop and wait for it from a thread that is not the loop's."""
        if self.on_loop():
            coroutine.close()
            raise RuntimeError("a blocking engine call was made from the engine's own event loop")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    async def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Await a coroutine that runs on the engine's loop, from any loop (cancelling this cancels it)."""
        if self.on_loop():
            return await coroutine
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return await asyncio.wrap_future(future)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self.loop.close()


class VLLMEngine(InferenceEngine):
    """vLLM on one or more GPUs (tensor parallel), or on the CPU with vLLM's CPU build; token in / token out.

    `model_path`: a Hugging Face name or folder ("embedded:..." names resolve to their cached folder).
    `update_chunk_bytes`: weights go to the workers in chunks of whole layers of at least about this size.
    `weight_sync_backend`: ``in_process`` (bytes through vLLM's worker RPC; works on CPU and GPU), ``nccl`` or
    ``cuda_ipc`` (GPU only, :mod:`skyrl_train.inference.weight_sync`).
    `cpu_kv_cache_gib`: on the CPU build, the KV cache's size (``VLLM_CPU_KVCACHE_SPACE``, unless set).
    Other keyword arguments go to `vllm.AsyncEngineArgs` (e.g. `max_model_len`, `enforce_eager`).
    """

    _commit = "skyrl_commit_weights"
    """The worker method that loads the staged chunks of an update."""

    def __init__(
        self,
        model_path: str,
        *,
        tokenizer: Any = None,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.8,
        dtype: str = "bfloat16",
        seed: int = 0,
        enable_sleep_mode: bool = False,
        enable_prefix_caching: bool = True,
        update_chunk_bytes: int = 256 << 20,
        weight_sync_backend: str = "in_process",
        cpu_kv_cache_gib: float = 1.0,
        **engine_kwargs: Any,
    ) -> None:
        from skyrl_train.models import load_tokenizer, resolve_model_path

        vllm = self._vllm = _vllm()
        path = resolve_model_path(model_path)
        self._tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model_path)
        self.on_gpu = torch.cuda.is_available()
        if not self.on_gpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{cpu_kv_cache_gib:g}")
            enable_sleep_mode = False  # the CPU build refuses sleep mode; there is no device memory to free
            # a seeded request whose prefill is split over steps makes the CPU build's worker die ("CPU
            # Generator does not use offset"): prefills are kept whole there
            engine_kwargs.setdefault("enable_chunked_prefill", False)
        self.enable_sleep_mode = enable_sleep_mode
        self.tensor_parallel_size = tensor_parallel_size
        self.weight_sync_backend = weight_sync_backend
        """in_process: weights go to the workers as bytes through vLLM's RPC; nccl or cuda_ipc: by that
        strategy (:mod:`skyrl_train.inference.weight_sync`), chosen once."""
        self._weight_sync: Any = None
        if weight_sync_backend != "in_process":
            from skyrl_train.inference.weight_sync import make_weight_sync

            self._weight_sync = make_weight_sync(weight_sync_backend)
        self.policy_version = 0
        """Version of the weights in use: 0 at start, one more per update (or the version an update names)."""
        self.update_chunk_bytes = update_chunk_bytes
        self.last_sync: dict[str, float] = {}
        """What the last weight update did: tensors, bytes, chunks, seconds, digest seconds."""
        self._paused = False
        self._running: set[str] = set()
        self._delivered = 0
        self._closed = False
        args = vllm.AsyncEngineArgs(
            model=path,
            tokenizer=path,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            dtype=dtype,
            seed=seed,
            enable_sleep_mode=enable_sleep_mode,
            enable_prefix_caching=enable_prefix_caching,
            worker_extension_cls=f"{__name__}.WorkerExtension",
            **engine_kwargs,
        )
        self._loop = _EngineLoop(f"vllm-engine-{id(self):x}")

        async def start() -> Any:
            return vllm.AsyncLLMEngine.from_engine_args(args)

        try:
            self._engine = self._loop.call(start())
        except BaseException:
            self._loop.stop()
            raise
        self.dtype: torch.dtype = self._engine.model_config.dtype
        """The dtype the engine runs in; weights are cast to it before they are sent."""

    @staticmethod
    def engine_args(generator: Any, *, seed: int | None = None) -> dict[str, Any]:
        """The keyword arguments :meth:`from_config` gives the engine (and through it `vllm.AsyncEngineArgs`)
        for the config's `generator` section; computed without importing vLLM."""
        return {
            "tensor_parallel_size": generator.inference_engine_tensor_parallel_size,
            "gpu_memory_utilization": generator.gpu_memory_utilization,
            "dtype": generator.model_dtype,
            "seed": 0 if seed is None else seed,
            "enable_prefix_caching": generator.enable_prefix_caching,
            "enforce_eager": generator.enforce_eager,
            "max_num_seqs": generator.max_num_seqs,
            "max_num_batched_tokens": generator.max_num_batched_tokens,
            # the engine shares the policy's GPUs (colocate_all): it sleeps while the policy trains
            "enable_sleep_mode": True,
            "weight_sync_backend": generator.weight_sync_backend or "in_process",
        }

    @classmethod
    def from_config(
        cls,
        generator: Any,
        *,
        model_path: str,
        tokenizer: Any = None,
        model: Any = None,
        seed: int | None = None,
        device: str = "cuda",
    ) -> VLLMEngine:
        """Build from the config's `generator` section (see :meth:`engine_args`); vLLM loads `model_path`
        itself, so a `model` object is not used."""
        return cls(model_path, tokenizer=tokenizer, **cls.engine_args(generator, seed=seed))

    @classmethod
    def create(
        cls, *, model_path: str | None = None, model: Any = None, tokenizer: Any = None, **options: Any
    ) -> VLLMEngine:
        """vLLM loads `model_path` itself (a model object is not used); options go to the constructor."""
        if model_path is None:
            raise ValueError("make_engine('vllm') needs a model_path (vLLM loads the weights itself)")
        return cls(model_path, tokenizer=tokenizer, **options)

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def paused(self) -> bool:
        """Whether :meth:`pause` holds the running requests."""
        return self._paused

    # ------------------------------------------------------------------------------------------ generation
    async def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[GenerationOutput]:
        """One response per prompt; concurrent calls (from any loop or thread) share the engine's batches."""
        for index, prompt in enumerate(prompts):
            if not prompt:
                raise ValueError(f"prompt {index} is empty")
        return await self._loop.run(self._generate_all([list(p) for p in prompts], params))

    async def _generate_all(self, prompts: list[list[int]], params: SamplingParams) -> list[GenerationOutput]:
        return list(await asyncio.gather(*(self._generate_one(p, params, i) for i, p in enumerate(prompts))))

    def _sampling(self, params: SamplingParams, index: int) -> Any:
        seed = None if params.seed is None else (params.seed * 0x9E3779B1 + index) % (1 << 63)
        if params.temperature > MAX_TEMPERATURE:
            raise ValueError(
                f"temperature {params.temperature} is above {MAX_TEMPERATURE}, which vLLM refuses"
            )
        return self._vllm.SamplingParams(
            n=1,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,
            min_p=params.min_p,
            max_tokens=params.max_tokens,
            stop=list(params.stop or []) or None,
            stop_token_ids=list(params.stop_token_ids or []) or None,
            include_stop_str_in_output=True,
            ignore_eos=params.ignore_eos,
            skip_special_tokens=False,
            logprobs=0,
            seed=seed,
        )

    async def _generate_one(self, prompt: list[int], params: SamplingParams, index: int) -> GenerationOutput:
        sampling = self._sampling(params, index)
        request_id = uuid.uuid4().hex
        versions: list[int] = []
        final = None
        self._running.add(request_id)
        try:
            async for output in self._engine.generate({"prompt_token_ids": prompt}, sampling, request_id):
                final = output
                if output.outputs:
                    # tokens reach this loop in the order the engine made them, and an update happens only
                    # while the engine is paused with every token so far delivered: the version now is theirs
                    new = len(output.outputs[0].token_ids) - len(versions)
                    versions.extend([self.policy_version] * new)
                    self._delivered += 1
        finally:
            self._running.discard(request_id)
        if final is None or not final.outputs:
            return GenerationOutput([], [], "abort")
        completion = final.outputs[0]
        token_ids = list(completion.token_ids)
        logprobs = None
        if completion.logprobs is not None:
            logprobs = [
                float(step[token].logprob) for step, token in zip(completion.logprobs, token_ids, strict=True)
            ]
        finish = completion.finish_reason
        stop_value = completion.stop_reason
        return GenerationOutput(
            token_ids=token_ids,
            logprobs=logprobs,
            stop_reason={"stop": "stop", "length": "length"}.get(finish, "abort"),  # type: ignore[arg-type]
            stop_string=stop_value if isinstance(stop_value, str) else None,
            policy_versions=versions[: len(token_ids)],
        )

    async def prompt_logprobs(self, token_ids: Sequence[int]) -> list[float]:
        """Log-probability of each token of ``token_ids[1:]`` given the tokens before it, under the weights in
        use (the weight-sync probe)."""
        return await self._loop.run(self._prompt_logprobs(list(token_ids)))

    async def _prompt_logprobs(self, token_ids: list[int]) -> list[float]:
        sampling = self._vllm.SamplingParams(n=1, temperature=0.0, max_tokens=1, prompt_logprobs=0)
        final = None
        async for output in self._engine.generate(
            {"prompt_token_ids": token_ids}, sampling, request_id=uuid.uuid4().hex
        ):
            final = output
        if final is None or final.prompt_logprobs is None:
            raise RuntimeError("vLLM returned no prompt log-probabilities for the weight-sync probe")
        steps = final.prompt_logprobs[1:]
        return [float(step[token].logprob) for step, token in zip(steps, token_ids[1:], strict=True)]

    # ----------------------------------------------------------------------------------- in-flight control
    def pause(self, wait: bool = True) -> int:
        """Freeze the running requests where they are (their tokens and place are kept) and queue new ones;
        returns how many requests are held. Blocking; see :meth:`pause_async`."""
        return self._loop.call(self._pause())

    def resume(self) -> None:
        """Let the held requests go on (they first recompute their KV with the weights now in use)."""
        self._loop.call(self._resume())

    async def pause_async(self) -> int:
        return await self._loop.run(self._pause())

    async def resume_async(self) -> None:
        await self._loop.run(self._resume())

    async def _pause(self) -> int:
        if not self._paused:
            # "keep": the scheduler stops after the step in progress and answers once every output so far
            # has been sent; the caches stay (the held requests need them until the update)
            await self._engine.pause_generation(mode="keep", clear_cache=False)
            self._paused = True
            # let every request's reader take the outputs already queued for it before a version changes:
            # done once a few turns of this loop deliver nothing new (bounded: the engine sends nothing more)
            quiet, last = 0, -1
            for _ in range(200):
                await asyncio.sleep(0.005)
                quiet, last = (quiet + 1, last) if self._delivered == last else (0, self._delivered)
                if quiet >= 3:
                    break
        return len(self._running)

    async def _resume(self) -> None:
        if self._paused:
            await self._engine.resume_generation()
            self._paused = False

    # -------------------------------------------------------------------------------------- weight update
    async def update_weights(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], *, version: int | None = None
    ) -> None:
        """Load new weights in place: by the chosen nccl / cuda_ipc strategy, or as bytes per layer through
        the workers' RPC. Each tensor is cast to the engine's dtype first; the digests of what the workers
        received must equal the sender's (else :class:`~skyrl_train.inference.weight_sync.gate.WeightSyncError`, naming
        the tensor, and nothing is loaded). Running requests should be paused (:meth:`pause`) or absent."""
        if self._weight_sync is not None:
            tensors = [(n, self._cast(t, keep_device=True)) for n, t in named_tensors]
            await self._loop.run(self._weight_sync.push_engine(self, tensors, version))
            return
        await self._loop.run(self._update_by_rpc(named_tensors, version))

    def _cast(self, tensor: torch.Tensor, *, keep_device: bool = False) -> torch.Tensor:
        if hasattr(tensor, "full_tensor"):
            tensor = tensor.full_tensor()
        tensor = tensor.detach()
        if not keep_device:
            tensor = tensor.to("cpu")
        if tensor.is_floating_point() and tensor.dtype != self.dtype:
            tensor = tensor.to(self.dtype)
        return tensor.contiguous()

    async def _update_by_rpc(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int | None
    ) -> None:
        import time

        from skyrl_train.inference.weight_sync.gate import compare_fingerprints, fingerprint

        start = time.perf_counter()
        digest_s = 0.0
        sent: dict[str, int] = {}
        received: dict[str, int] = {}
        count = size = chunks = 0
        cast = ((name, self._cast(tensor)) for name, tensor in named_tensors)
        try:
            for chunk in layer_chunks(cast, self.update_chunk_bytes):
                t0 = time.perf_counter()
                for name, tensor in chunk:
                    sent[name] = fingerprint(tensor)
                digest_s += time.perf_counter() - t0
                payload = [encode_tensor(name, tensor) for name, tensor in chunk]
                for worker in await self._engine.collective_rpc("skyrl_stage_weights", args=(payload,)):
                    for name, digest in worker.items():
                        if received.setdefault(name, digest) != digest:  # tensor-parallel workers disagree
                            received[name] = -1
                count += len(chunk)
                size += sum(t.numel() * t.element_size() for _, t in chunk)
                chunks += 1
            compare_fingerprints(sent, received)
        except BaseException:
            await self._engine.collective_rpc("skyrl_drop_staged")
            raise
        await self._engine.collective_rpc(self._commit)
        await self.after_weight_update(version)
        self.last_sync = {
            "tensors": float(count),
            "bytes": float(size),
            "chunks": float(chunks),
            "seconds": time.perf_counter() - start,
            "digest_seconds": digest_s,
        }

    async def collective_rpc(self, method: str, args: tuple = ()) -> list[Any]:
        """Run a method of the worker extension on every worker (the weight-sync strategies' entry)."""
        return await self._loop.run(self._engine.collective_rpc(method, args=args))

    async def after_weight_update(self, version: int | None) -> None:
        """Drop KV computed with the old weights (held requests recompute theirs when resumed) and count the
        new version."""
        await self._loop.run(self._engine.reset_prefix_cache(reset_running_requests=True))
        self.policy_version = self.policy_version + 1 if version is None else int(version)

    async def sleep(self) -> None:
        """Free the GPU for the training step (sleep level 1: weights to CPU memory, KV cache dropped)."""
        if self.enable_sleep_mode:
            await self._loop.run(self._engine.reset_prefix_cache())
            await self._loop.run(self._engine.sleep(level=1))

    async def wake_up(self, tags: list[str] | None = None) -> None:
        """Take the GPU back: ``tags=["weights"]`` first (then sync), ``["kv_cache"]`` after; None: both."""
        if self.enable_sleep_mode:
            if tags is None:
                await self._loop.run(self._engine.wake_up())
            else:
                await self._loop.run(self._engine.wake_up(tags=tags))

    def close(self) -> None:
        """Stop the engine (its worker processes too) and its loop; safe to call twice."""
        if self._closed:
            return
        self._closed = True

        async def shutdown() -> None:
            self._engine.shutdown()
            # the engine's output handler and any request still waiting end here, on their own loop
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self._loop.call(shutdown())
        finally:
            self._loop.stop()
            # let vLLM's engine object go now, while the interpreter is whole: collected at exit instead, its
            # own finalizer shuts it down a second time with half its modules gone and prints an error
            del self._engine
