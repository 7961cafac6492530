"""``cuda_ipc``: a GPU engine on the trainer's own GPU maps the trainer's tensors through CUDA IPC handles.

The trainer packs the state dict into one CUDA buffer and sends its IPC handle
(``torch.multiprocessing.reductions.reduce_tensor``); the engine's process (an hf engine process, or each
vLLM worker through ``skyrl_load_ipc`` in :mod:`skyrl_train.inference.vllm`) rebuilds a tensor over the same
GPU memory and copies from it into its model: no bytes leave the GPU. The trainer keeps the buffer alive
until the engine has copied it. Needs CUDA; runs only where a GPU is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from skyrl_train.weight_sync.base import SyncReport, WeightReceiver, WeightSync, full_tensors, run_blocking
from skyrl_train.weight_sync.gloo import pack
from skyrl_train.weight_sync.layout import as_slots, views

__all__ = ["CudaIpcReceiver", "CudaIpcSync", "open_handle"]


def open_handle(handle: Any) -> Any:
    """The tensor an IPC handle (``reduce_tensor``'s ``(rebuild, args)``) stands for, in this process."""
    rebuild, args = handle
    return rebuild(*args)


class CudaIpcSync(WeightSync):
    """Send a CUDA IPC handle of the packed state dict to an engine on the same GPU."""

    name = "cuda_ipc"
    needs_cuda = True

    def __init__(self, device: str = "cuda") -> None:
        self.device = device

    def push(
        self, engine: Any, named_tensors: Iterable[tuple[str, Any]], *, version: int | None = None
    ) -> SyncReport:
        """Pack on the GPU, hand over the handle, wait until the engine copied it."""
        import torch
        from torch.multiprocessing.reductions import reduce_tensor

        if not torch.cuda.is_available():
            raise RuntimeError(
                "generator.weight_sync_backend=cuda_ipc needs a CUDA GPU; on a CPU use shared_memory"
            )
        tensors = full_tensors(named_tensors, device=self.device)
        slots, flat = pack(tensors, self.device)
        torch.cuda.synchronize()
        handle = reduce_tensor(flat)
        meta = [vars(s) for s in slots]
        if hasattr(engine, "collective_rpc"):  # vLLM's workers
            run_blocking(self._push_vllm(engine, handle, meta, version))
            result = engine.policy_version
        elif getattr(engine, "is_engine_process", False):
            engine.call("weights_setup", {"strategy": self.name})
            result = engine.call("weights_update", self.name, (handle, meta), version)
        else:
            raise ValueError("cuda_ipc sends weights to another process: an hf engine process or vLLM")
        del flat  # the engine has copied it
        return SyncReport(len(tensors), sum(s.nbytes for s in slots), result)

    async def push_engine(
        self, engine: Any, named_tensors: Iterable[tuple[str, Any]], version: int | None
    ) -> SyncReport:
        """The push to vLLM's workers, from the engine's own event loop."""
        import torch
        from torch.multiprocessing.reductions import reduce_tensor

        tensors = full_tensors(named_tensors, device=self.device)
        slots, flat = pack(tensors, self.device)
        torch.cuda.synchronize()
        await self._push_vllm(engine, reduce_tensor(flat), [vars(s) for s in slots], version)
        return SyncReport(len(tensors), sum(s.nbytes for s in slots), engine.policy_version)

    @staticmethod
    async def _push_vllm(engine: Any, handle: Any, meta: list, version: int | None) -> None:
        await engine.collective_rpc("skyrl_load_ipc", args=(handle, meta))
        await engine.after_weight_update(version)

    @classmethod
    def receiver(cls, spec: dict[str, Any]) -> CudaIpcReceiver:
        return CudaIpcReceiver()


class CudaIpcReceiver(WeightReceiver):
    """Opens each update's handle; the views are over the trainer's GPU memory."""

    def receive(self, message: Any) -> list[tuple[str, Any]]:
        handle, meta = message
        return views(open_handle(handle), as_slots(meta))
