"""`VLLMEngine`: vLLM's async engine behind the `InferenceEngine` interface (GPU only).

vLLM itself is imported when an engine is built, so nothing else needs it installed (`engine_args` shows what
the config makes of vLLM's arguments without it). Prompts go in as
token ids (`{"prompt_token_ids": ...}`), logprobs of the sampled tokens come back (vLLM computes them from the
raw logits, like `HFEngine`), stop strings stay in the output (`include_stop_str_in_output`). Weights are
updated in place by named tensors through a small worker extension that calls the model's own
`load_weights`; sleep mode frees the GPU between rollouts when the engine was built with
`enable_sleep_mode=True` (a colocated layout: the trainer calls `sleep()` before its update and
`wake_up()` after it). The worker extension also receives weights by an NCCL broadcast
(:mod:`skyrl_train.weight_sync.nccl`) or maps them through CUDA IPC handles
(:mod:`skyrl_train.weight_sync.cuda_ipc`). Everything here needs a GPU; tests/train/test_vllm.py is marked.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from skyrl_train.inference.base import GenerationOutput, InferenceEngine, SamplingParams


def _vllm() -> Any:
    """The vllm module; imported when an engine is built, so that the config's kwargs can be checked on a
    machine without vLLM."""
    try:
        import vllm
    except ImportError as error:  # pragma: no cover - depends on the machine
        raise ImportError(
            "the 'vllm' inference engine needs vLLM and a CUDA GPU: pip install 'skyrl[vllm]'; "
            "on a CPU use generator.backend=hf"
        ) from error
    return vllm


class WorkerExtension:
    """Mixed into every vLLM worker (`worker_extension_cls`): loads named tensors into the model."""

    def skyrl_load_weights(self, named_tensors: list[tuple[str, torch.Tensor]]) -> int:
        device = next(self.model_runner.model.parameters()).device  # type: ignore[attr-defined]
        weights = [(name, tensor.to(device, non_blocking=True)) for name, tensor in named_tensors]
        self.model_runner.model.load_weights(weights=weights)  # type: ignore[attr-defined]
        torch.cuda.synchronize()
        return len(weights)

    def skyrl_init_weight_group(self, host: str, port: int, world_size: int, timeout_s: float) -> None:
        """Join the trainer's NCCL weight group as rank 1 + this worker's tensor-parallel rank."""
        from datetime import timedelta

        import torch.distributed as dist

        from skyrl_train.weight_sync.nccl import new_nccl_group

        rank = 1 + self.rank  # type: ignore[attr-defined]
        store = dist.TCPStore(host, port, world_size, False, timedelta(seconds=timeout_s))
        self._skyrl_weight_group = new_nccl_group(store, rank, world_size, timeout_s)
        self._skyrl_weight_store = store

    def skyrl_receive_broadcast(self, slots: list[dict], size: int) -> int:
        """Receive one packed state dict from the trainer's broadcast and load it."""
        from skyrl_train.weight_sync.layout import as_slots, views

        device = next(self.model_runner.model.parameters()).device  # type: ignore[attr-defined]
        flat = torch.empty(size, dtype=torch.uint8, device=device)
        self._skyrl_weight_group.broadcast(flat, 0).wait()
        return self.skyrl_load_weights(views(flat, as_slots(slots)))

    def skyrl_load_ipc(self, handle: Any, slots: list[dict]) -> int:
        """Map the trainer's packed state dict through its CUDA IPC handle and load it."""
        from skyrl_train.weight_sync.cuda_ipc import open_handle
        from skyrl_train.weight_sync.layout import as_slots, views

        return self.skyrl_load_weights(views(open_handle(handle), as_slots(slots)))


class VLLMEngine(InferenceEngine):
    """vLLM on one or more GPUs (tensor parallel), token in / token out.

    `model_path`: a Hugging Face name or folder ("embedded:..." names resolve to their cached folder).
    `update_chunk_bytes`: weights are sent to the workers in chunks of about this size.
    Other keyword arguments go to `vllm.AsyncEngineArgs` (e.g. `max_model_len`, `enforce_eager`).
    """

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
        update_chunk_bytes: int = 1 << 30,
        weight_sync_backend: str = "in_process",
        **engine_kwargs: Any,
    ) -> None:
        from skyrl_train.models import load_tokenizer, resolve_model_path

        vllm = self._vllm = _vllm()
        path = resolve_model_path(model_path)
        self._tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model_path)
        self.enable_sleep_mode = enable_sleep_mode
        self.tensor_parallel_size = tensor_parallel_size
        self.weight_sync_backend = weight_sync_backend
        """in_process: weights go to the workers through vLLM's RPC in chunks; nccl or cuda_ipc: by that
        strategy (:mod:`skyrl_train.weight_sync`), chosen once."""
        self._weight_sync: Any = None
        if weight_sync_backend != "in_process":
            from skyrl_train.weight_sync import make_weight_sync

            self._weight_sync = make_weight_sync(weight_sync_backend)
        self.policy_version = 0
        """Version of the weights in use (one more per update); vLLM does not stamp tokens with it."""
        self.update_chunk_bytes = update_chunk_bytes
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
        self._engine = vllm.AsyncLLMEngine.from_engine_args(args)

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

    async def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[GenerationOutput]:
        import asyncio

        return list(
            await asyncio.gather(*(self._generate_one(list(p), params, i) for i, p in enumerate(prompts)))
        )

    async def _generate_one(self, prompt: list[int], params: SamplingParams, index: int) -> GenerationOutput:
        if not prompt:
            raise ValueError(f"prompt {index} is empty")
        seed = None if params.seed is None else (params.seed * 0x9E3779B1 + index) % (1 << 63)
        sampling = self._vllm.SamplingParams(
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
        final = None
        async for output in self._engine.generate(
            {"prompt_token_ids": prompt}, sampling, request_id=uuid.uuid4().hex
        ):
            final = output
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
        )

    async def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Send the tensors to every worker in chunks, load them with the model's `load_weights`; or by the
        chosen nccl / cuda_ipc strategy."""
        if self._weight_sync is not None:
            await self._weight_sync.push_engine(self, named_tensors, None)
            return
        chunk: list[tuple[str, torch.Tensor]] = []
        size = 0
        for name, tensor in named_tensors:
            if hasattr(tensor, "full_tensor"):
                tensor = tensor.full_tensor()
            tensor = tensor.detach().to("cpu").contiguous()
            chunk.append((name, tensor))
            size += tensor.numel() * tensor.element_size()
            if size >= self.update_chunk_bytes:
                await self._engine.collective_rpc("skyrl_load_weights", args=(chunk,))
                chunk, size = [], 0
        if chunk:
            await self._engine.collective_rpc("skyrl_load_weights", args=(chunk,))
        await self.after_weight_update(None)

    async def collective_rpc(self, method: str, args: tuple = ()) -> list[Any]:
        """Run a method of the worker extension on every worker (the weight-sync strategies' entry)."""
        return await self._engine.collective_rpc(method, args=args)

    async def after_weight_update(self, version: int | None) -> None:
        """Forget cached prefixes computed with the old weights and count the new version."""
        await self._engine.reset_prefix_cache()
        self.policy_version = self.policy_version + 1 if version is None else int(version)

    async def sleep(self) -> None:
        """Free the GPU for the training step (sleep level 1: weights to CPU memory, KV cache dropped)."""
        if self.enable_sleep_mode:
            await self._engine.reset_prefix_cache()
            await self._engine.sleep(level=1)

    async def wake_up(self, tags: list[str] | None = None) -> None:
        """Take the GPU back: ``tags=["weights"]`` first (then sync), ``["kv_cache"]`` after; None: both."""
        if self.enable_sleep_mode:
            if tags is None:
                await self._engine.wake_up()
            else:
                await self._engine.wake_up(tags=tags)

    def close(self) -> None:
        shutdown = getattr(self._engine, "shutdown", None)
        if shutdown is not None:
            shutdown()
