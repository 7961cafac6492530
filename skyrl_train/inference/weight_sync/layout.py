"""Where each tensor of a state dict lives in one flat byte buffer (shared by the strategies that move the
whole state dict as a few large buffers: shared memory, gloo, NCCL, CUDA IPC)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

__all__ = ["Slot", "byte_layout", "dtype_of", "views"]

_ALIGN = 64


@dataclasses.dataclass(frozen=True)
class Slot:
    """One tensor: its name, dtype (``"float32"``), shape and byte offset in the buffer."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int


def dtype_of(name: str) -> Any:
    """The torch dtype called ``name`` (``"float32"``, ``"bfloat16"``)."""
    import torch

    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def byte_layout(named_tensors: Sequence[tuple[str, Any]]) -> tuple[list[Slot], int]:
    """Slots for the tensors, one after the other (64-byte aligned), and the buffer's total size."""
    slots, offset = [], 0
    for name, tensor in named_tensors:
        nbytes = tensor.numel() * tensor.element_size()
        slots.append(
            Slot(name, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), offset, nbytes)
        )
        offset += -(-nbytes // _ALIGN) * _ALIGN
    return slots, max(offset, _ALIGN)


def views(buffer: Any, slots: Sequence[Slot]) -> list[tuple[str, Any]]:
    """``(name, tensor)`` views into ``buffer`` (a flat uint8 tensor) for each slot."""
    return [
        (s.name, buffer[s.offset : s.offset + s.nbytes].view(dtype_of(s.dtype)).view(s.shape)) for s in slots
    ]


def as_slots(raw: Sequence[Any]) -> list[Slot]:
    """Slots back from their pickled or dict form."""
    return [s if isinstance(s, Slot) else Slot(**s) for s in raw]
