"""``gloo``: an engine process receives the state dict by a gloo broadcast over TCP (CPU, any machine).

The trainer and the engine's process form a process group of their own (rank 0: the trainer, rank 1: the
engine), apart from any default group of the training workers. Each push flattens the state dict into one
buffer per dtype and broadcasts it; the engine receives into buffers of its own while it keeps generating,
then copies them into its model at a token boundary. The engine's digests of what it received must equal the
trainer's (:mod:`skyrl_train.inference.weight_sync.gate`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from skyrl_train.inference.weight_sync.base import SyncReport, WeightReceiver, WeightSync, full_tensors
from skyrl_train.inference.weight_sync.gate import compare_fingerprints, fingerprints
from skyrl_train.inference.weight_sync.layout import Slot, as_slots, byte_layout, views

__all__ = ["BroadcastReceiver", "BroadcastSync", "GlooSync", "pack"]


def pack(tensors: list[tuple[str, Any]], device: Any) -> tuple[list[Slot], Any]:
    """The tensors' layout and one flat uint8 buffer holding them all, on ``device``."""
    import torch

    slots, size = byte_layout(tensors)
    flat = torch.empty(size, dtype=torch.uint8, device=device)
    for (_, target), (_, tensor) in zip(views(flat, slots), tensors, strict=True):
        target.copy_(tensor)
    return slots, flat


class BroadcastSync(WeightSync):
    """A broadcast from the trainer (rank 0) to the engine (rank 1) in a two-process group of their own;
    ``backend`` names the torch process group (gloo here, NCCL in :mod:`.nccl`)."""

    backend = "gloo"
    host = "127.0.0.1"

    def __init__(self, timeout_s: float = 600.0, device: str = "cpu") -> None:
        self.timeout_s = timeout_s
        self.device = device
        self._group: Any = None
        self._store: Any = None
        self._slots: list[Slot] = []
        self._engine_id: int | None = None

    def _new_group(self, store: Any, rank: int, size: int) -> Any:
        import torch.distributed as dist

        return dist.ProcessGroupGloo(store, rank, size, timedelta(seconds=self.timeout_s))

    def push(
        self, engine: Any, named_tensors: Iterable[tuple[str, Any]], *, version: int | None = None
    ) -> SyncReport:
        """Broadcast the packed state dict; returns once the engine loaded it."""
        if not getattr(engine, "is_engine_process", False):
            raise ValueError(
                f"generator.weight_sync_backend={self.name} sends weights to an engine in its own process: "
                "set generator.engine_process=true, or use in_process"
            )
        tensors = full_tensors(named_tensors)
        slots, flat = pack(tensors, self.device)
        if self._group is None or slots != self._slots or self._engine_id != id(engine):
            self._connect(engine, slots, flat.numel())
        done = engine.call_async("weights_update", self.name, None, version)
        self._group.broadcast(flat, 0).wait()
        result = done.result(self.timeout_s)
        compare_fingerprints(fingerprints(tensors), engine.call("weights_digests", self.name))
        return SyncReport(len(tensors), sum(s.nbytes for s in slots), result)

    def _connect(self, engine: Any, slots: list[Slot], size: int) -> None:
        import torch.distributed as dist

        from skyrl_train.distributed import find_free_port

        port = find_free_port(self.host)
        self._store = dist.TCPStore(
            self.host, port, 2, True, timedelta(seconds=self.timeout_s), wait_for_workers=False
        )
        spec = {
            "strategy": self.name,
            "host": self.host,
            "port": port,
            "size": size,
            "slots": [vars(s) for s in slots],
            "timeout_s": self.timeout_s,
        }
        joined = engine.call_async("weights_setup", spec)
        self._group = self._new_group(self._store, 0, 2)
        joined.result(self.timeout_s)
        self._slots, self._engine_id = slots, id(engine)

    def close(self) -> None:
        self._group, self._store = None, None

    @classmethod
    def receiver(cls, spec: dict[str, Any]) -> BroadcastReceiver:
        return BroadcastReceiver(cls(timeout_s=spec["timeout_s"]), spec)


class BroadcastReceiver(WeightReceiver):
    """The engine's rank of the broadcast group, with its receive buffer."""

    def __init__(self, sync: BroadcastSync, spec: dict[str, Any], device: Any = "cpu") -> None:
        import torch
        import torch.distributed as dist

        self._store = dist.TCPStore(spec["host"], spec["port"], 2, False, timedelta(seconds=sync.timeout_s))
        self._group = sync._new_group(self._store, 1, 2)
        self._flat = torch.empty(spec["size"], dtype=torch.uint8, device=device)
        self._views = views(self._flat, as_slots(spec["slots"]))

    def receive(self, message: Any) -> list[tuple[str, Any]]:
        self._group.broadcast(self._flat, 0).wait()
        return self._views

    def close(self) -> None:
        self._group, self._store = None, None


class GlooSync(BroadcastSync):
    """The state dict by a gloo broadcast to an engine in its own process (CPU tensors)."""

    name = "gloo"
