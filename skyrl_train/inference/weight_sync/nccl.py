"""``nccl``: a GPU engine on other GPUs receives the state dict by an NCCL broadcast.

Two engines are served: an hf engine in its own process on another GPU (the process joins a two-rank NCCL
group of its own, as in :mod:`.gloo`), and the vLLM engine, whose workers join the group through their
worker extension (``skyrl_init_weight_group`` / ``skyrl_receive_broadcast`` in
:mod:`skyrl_train.inference.vllm`): rank 0 is the trainer, ranks 1.. the engine's tensor-parallel workers.
NCCL cannot put two ranks on one GPU: for an engine on the trainer's own GPU use ``cuda_ipc``. Needs CUDA;
written against torch's ``ProcessGroupNCCL`` and runs only where a GPU is.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from skyrl_train.inference.weight_sync.base import SyncReport, full_tensors, run_blocking
from skyrl_train.inference.weight_sync.gloo import BroadcastReceiver, BroadcastSync, pack

__all__ = ["NcclSync"]


def new_nccl_group(store: Any, rank: int, size: int, timeout_s: float) -> Any:
    """A process group of NCCL over ``store``, apart from any default group."""
    import torch.distributed as dist

    options = dist.ProcessGroupNCCL.Options()
    options._timeout = timedelta(seconds=timeout_s)
    return dist.ProcessGroupNCCL(store, rank, size, options)


class NcclSync(BroadcastSync):
    """The state dict by an NCCL broadcast from the trainer's GPU to the engine's."""

    name = "nccl"
    needs_cuda = True

    def __init__(self, timeout_s: float = 600.0, device: str = "cuda") -> None:
        super().__init__(timeout_s=timeout_s, device=device)
        self._world = 2

    def _new_group(self, store: Any, rank: int, size: int) -> Any:
        return new_nccl_group(store, rank, size, self.timeout_s)

    def push(
        self, engine: Any, named_tensors: Iterable[tuple[str, Any]], *, version: int | None = None
    ) -> SyncReport:
        """Broadcast to an hf engine process, or to the vLLM engine's workers."""
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError(
                "generator.weight_sync_backend=nccl needs CUDA GPUs; on a CPU use gloo or shared_memory"
            )
        if not hasattr(engine, "collective_rpc"):
            return super().push(engine, named_tensors, version=version)
        return run_blocking(self.push_engine(engine, named_tensors, version))

    async def push_engine(
        self, engine: Any, named_tensors: Iterable[tuple[str, Any]], version: int | None
    ) -> SyncReport:
        """The push to vLLM's workers, from the engine's own event loop."""
        return await self._push_vllm(engine, full_tensors(named_tensors, device=self.device), version)

    async def _push_vllm(
        self, engine: Any, tensors: list[tuple[str, Any]], version: int | None
    ) -> SyncReport:
        import asyncio

        import torch.distributed as dist

        from skyrl_train.distributed import find_free_port
        from skyrl_train.inference.weight_sync.gate import compare_fingerprints, fingerprints

        slots, flat = pack(tensors, self.device)
        if self._group is None or slots != self._slots or self._engine_id != id(engine):
            world = 1 + engine.tensor_parallel_size
            port = find_free_port(self.host)
            self._store = dist.TCPStore(
                self.host, port, world, True, timedelta(seconds=self.timeout_s), wait_for_workers=False
            )
            joined = asyncio.ensure_future(
                engine.collective_rpc(
                    "skyrl_init_weight_group", args=(self.host, port, world, self.timeout_s)
                )
            )
            self._group = await asyncio.to_thread(self._new_group, self._store, 0, world)
            await joined
            self._slots, self._engine_id = slots, id(engine)
        meta = [vars(s) for s in slots]
        received = asyncio.ensure_future(
            engine.collective_rpc("skyrl_receive_broadcast", args=(meta, flat.numel()))
        )
        await asyncio.to_thread(lambda: self._group.broadcast(flat, 0).wait())
        sent = fingerprints(tensors)
        for digests in await received:  # what each worker received must be what was sent
            compare_fingerprints(sent, digests)
        await engine.after_weight_update(version)
        return SyncReport(len(tensors), sum(s.nbytes for s in slots), engine.policy_version)

    @classmethod
    def receiver(cls, spec: dict[str, Any]) -> BroadcastReceiver:
        import torch

        return BroadcastReceiver(cls(timeout_s=spec["timeout_s"]), spec, device=torch.device("cuda"))
