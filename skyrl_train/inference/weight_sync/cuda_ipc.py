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

from skyrl_train.inference.weight_sync.base import (
    SyncReport,
    WeightReceiver,
    WeightSync,
    full_tensors,
    run_blocking,
)
from skyrl_train.inference.weight_sync.gloo import pack
from skyrl_train.inference.weight_sync.layout import as_slots, views

__all__ = ["CudaIpcReceiver", "CudaIpcSync", "handle_data", "open_handle"]


def handle_data(handle: Any, device_uuid: str | None = None) -> dict[str, Any]:
    """A CUDA IPC handle (``reduce_tensor``'s ``(rebuild, args)``) as plain data that any serializer carries:
    vLLM's RPC refuses the rebuild function and the classes in it. The device is named by its UUID as well as
    its index, since the receiving process may number its visible GPUs differently."""
    _rebuild, args = handle
    (
        _tensor_cls,
        size,
        stride,
        tensor_offset,
        storage_cls,
        dtype,
        device,
        storage_handle,
        storage_size,
        storage_offset,
        requires_grad,
        ref_counter_handle,
        ref_counter_offset,
        event_handle,
        event_sync_required,
    ) = args
    return {
        "size": [int(x) for x in size],
        "stride": [int(x) for x in stride],
        "tensor_offset": int(tensor_offset),
        "storage_cls": storage_cls.__name__,
        "dtype": str(dtype).removeprefix("torch."),
        "device": int(device),
        "device_uuid": device_uuid,
        "storage_handle": bytes(storage_handle),
        "storage_size": int(storage_size),
        "storage_offset": int(storage_offset),
        "requires_grad": bool(requires_grad),
        "ref_counter_handle": bytes(ref_counter_handle),
        "ref_counter_offset": int(ref_counter_offset),
        "event_handle": None if event_handle is None else bytes(event_handle),
        "event_sync_required": bool(event_sync_required),
    }


def _local_device(data: dict[str, Any]) -> int:
    """This process's index of the handle's GPU: the one with its UUID, else the index the sender used."""
    import torch

    wanted = data.get("device_uuid")
    if wanted:
        for index in range(torch.cuda.device_count()):
            if str(torch.cuda.get_device_properties(index).uuid) == wanted:
                return index
    return int(data["device"])


def open_handle(data: Any) -> Any:
    """The tensor a handle stands for, in this process: from :func:`handle_data`'s plain data (or a raw
    ``(rebuild, args)`` pair from the same machine's multiprocessing pipe)."""
    import torch
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    if not isinstance(data, dict):
        rebuild, args = data
        return rebuild(*args)
    return rebuild_cuda_tensor(
        torch.Tensor,
        torch.Size(data["size"]),
        tuple(data["stride"]),
        data["tensor_offset"],
        getattr(torch, data["storage_cls"]),
        getattr(torch, data["dtype"]),
        _local_device(data),
        data["storage_handle"],
        data["storage_size"],
        data["storage_offset"],
        data["requires_grad"],
        data["ref_counter_handle"],
        data["ref_counter_offset"],
        data["event_handle"],
        data["event_sync_required"],
    )


def device_uuid(device: Any) -> str:
    """The UUID of a CUDA device, the same in every process whatever its index there."""
    import torch

    return str(torch.cuda.get_device_properties(torch.device(device)).uuid)


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
            run_blocking(self._push_vllm(engine, handle, tensors, meta, version))
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
        await self._push_vllm(engine, reduce_tensor(flat), tensors, [vars(s) for s in slots], version)
        return SyncReport(len(tensors), sum(s.nbytes for s in slots), engine.policy_version)

    async def _push_vllm(
        self, engine: Any, handle: Any, tensors: list[tuple[str, Any]], meta: list, version: int | None
    ) -> None:
        """Send the handle as plain data to every worker; each returns the digests of what it read, which
        must equal the trainer's (:mod:`skyrl_train.inference.weight_sync.gate`)."""
        from skyrl_train.inference.weight_sync.gate import compare_fingerprints, fingerprints

        data = handle_data(handle, device_uuid(self.device))
        sent = fingerprints(tensors)
        for received in await engine.collective_rpc("skyrl_load_ipc", args=(data, meta)):
            compare_fingerprints(sent, received)
        await engine.after_weight_update(version)

    @classmethod
    def receiver(cls, spec: dict[str, Any]) -> CudaIpcReceiver:
        return CudaIpcReceiver()


class CudaIpcReceiver(WeightReceiver):
    """Opens each update's handle; the views are over the trainer's GPU memory."""

    def receive(self, message: Any) -> list[tuple[str, Any]]:
        handle, meta = message
        return views(open_handle(handle), as_slots(meta))
