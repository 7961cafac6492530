"""``shared_memory``: an engine process on this machine reads the state dict from one shared-memory block.

The first push creates a block the size of the state dict and sends its name and layout to the engine's
process, which maps it. Every push then copies the tensors into the block (one memory copy, while the engine
keeps generating) and sends one small message; the engine copies the block into its model at a token
boundary. Nothing is pickled but the layout. The engine's digests of what it read must equal the trainer's
(:mod:`skyrl_train.inference.weight_sync.gate`).
"""

from __future__ import annotations

from collections.abc import Iterable
from multiprocessing import shared_memory
from typing import Any

from skyrl_train.inference.weight_sync.base import SyncReport, WeightReceiver, WeightSync, full_tensors
from skyrl_train.inference.weight_sync.gate import compare_fingerprints, fingerprints
from skyrl_train.inference.weight_sync.layout import Slot, as_slots, byte_layout, views

__all__ = ["SharedMemoryReceiver", "SharedMemorySync"]


def _flat(block: shared_memory.SharedMemory) -> Any:
    import torch

    return torch.frombuffer(block.buf, dtype=torch.uint8)


class SharedMemorySync(WeightSync):
    """Write the state dict into a shared-memory block the engine's process maps."""

    name = "shared_memory"

    def __init__(self) -> None:
        self._block: shared_memory.SharedMemory | None = None
        self._slots: list[Slot] = []
        self._engine_id: int | None = None

    def push(
        self, engine: Any, named_tensors: Iterable[tuple[str, Any]], *, version: int | None = None
    ) -> SyncReport:
        """Copy the tensors into the block, then have the engine load them."""
        if not getattr(engine, "is_engine_process", False):
            raise ValueError(
                "generator.weight_sync_backend=shared_memory sends weights to an engine in its own process: "
                "set generator.engine_process=true, or use in_process"
            )
        tensors = full_tensors(named_tensors, device="cpu")
        slots, size = byte_layout(tensors)
        if self._block is None or slots != self._slots or self._engine_id != id(engine):
            self._connect(engine, slots, size)
        sent = fingerprints(tensors)
        self._fill(tensors)
        version = engine.call("weights_update", self.name, None, version)
        compare_fingerprints(sent, engine.call("weights_digests", self.name))
        return SyncReport(len(tensors), sum(s.nbytes for s in slots), version)

    def _fill(self, tensors: list[tuple[str, Any]]) -> None:
        """Copy the tensors into the block."""
        flat = _flat(self._block)
        for (_, target), (_, tensor) in zip(views(flat, self._slots), tensors, strict=True):
            target.copy_(tensor)

    def _connect(self, engine: Any, slots: list[Slot], size: int) -> None:
        self.close()
        self._block = shared_memory.SharedMemory(create=True, size=size)
        self._slots, self._engine_id = slots, id(engine)
        spec = {"strategy": self.name, "block": self._block.name, "slots": [vars(s) for s in slots]}
        engine.call("weights_setup", spec)

    def close(self) -> None:
        """Unmap and delete the block."""
        if self._block is not None:
            self._block.close()
            self._block.unlink()
            self._block = None

    @classmethod
    def receiver(cls, spec: dict[str, Any]) -> SharedMemoryReceiver:
        return SharedMemoryReceiver(spec["block"], as_slots(spec["slots"]))


class SharedMemoryReceiver(WeightReceiver):
    """Maps the trainer's block; each update's tensors are views into it."""

    def __init__(self, block_name: str, slots: list[Slot]) -> None:
        # The engine process is the trainer's multiprocessing child, so both share one resource tracker:
        # attaching registers the block there again (a no-op, the tracker keeps a set) and the trainer's
        # unlink unregisters it once. Unregistering here as well would take the trainer's entry away and make
        # the tracker fail at that unlink (KeyError). If the trainer dies, the tracker deletes the block.
        self._block = shared_memory.SharedMemory(name=block_name)
        self._views = views(_flat(self._block), slots)

    def receive(self, message: Any) -> list[tuple[str, Any]]:
        return self._views

    def close(self) -> None:
        self._views = []
        try:
            self._block.close()
        except BufferError:  # a view is still alive somewhere; the mapping goes with the process
            pass
