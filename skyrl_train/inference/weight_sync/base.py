"""The weight-sync interface: how the trainer's new weights reach the inference engine, chosen once.

A :class:`WeightSync` is the trainer's side (``push(engine, named_tensors)``); strategies whose engine runs
in another process also have a :class:`WeightReceiver`, which the engine's process builds from the spec the
trainer sends when it first pushes. Strategies by name in :data:`WEIGHT_SYNCS` (``generator.weight_sync_backend``):

- ``in_process``: the engine lives in the trainer's process: it shares the policy's module, or copies the
  tensors into its own in place (``update_weights``);
- ``shared_memory``: an engine process on this machine reads the state dict from one shared-memory block the
  trainer writes;
- ``gloo``: an engine process receives the state dict by a gloo broadcast (CPU; works across machines);
- ``nccl``: a GPU engine (vLLM's workers, or an hf engine process on another GPU) receives an NCCL broadcast;
- ``cuda_ipc``: a GPU engine on the trainer's own GPU maps the trainer's tensors through CUDA IPC handles.

This module imports nothing heavy: a strategy's module (and torch) is imported when it is chosen.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from skyrl_gym.registries import Registry
from skyrl_train import names
from skyrl_train.config.rules import weight_sync_name

if TYPE_CHECKING:
    import torch


__all__ = [
    "WEIGHT_SYNCS",
    "SyncReport",
    "WeightReceiver",
    "WeightSync",
    "full_tensors",
    "make_weight_sync",
    "weight_sync_name",
]


@dataclasses.dataclass
class SyncReport:
    """What one push did: tensors and bytes sent, and the engine's policy version afterwards."""

    tensors: int = 0
    bytes: int = 0
    version: int | None = None


class WeightSync(abc.ABC):
    """The trainer's side of one strategy. Built once per run; the first push connects to the engine."""

    name: ClassVar[str] = ""
    """The strategy's registered name."""
    needs_cuda: ClassVar[bool] = False
    """Whether the strategy only runs with CUDA tensors and a GPU engine."""
    engine_in_process: ClassVar[bool] = False
    """Whether the engine must live in the trainer's process (else it must be in its own process)."""

    @abc.abstractmethod
    def push(
        self, engine: Any, named_tensors: Iterable[tuple[str, torch.Tensor]], *, version: int | None = None
    ) -> SyncReport:
        """Load ``named_tensors`` (Hugging Face names, full tensors) into ``engine``; blocks until the engine
        uses them. ``version`` becomes the engine's policy version (default: one more)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free what the strategy holds (shared memory, process groups)."""

    @classmethod
    def receiver(cls, spec: dict[str, Any]) -> WeightReceiver:
        """The engine process's side, built from the ``spec`` the trainer's first push sends."""
        raise NotImplementedError(f"the {cls.name!r} weight sync has no engine-process side")


class WeightReceiver(abc.ABC):
    """The engine process's side of a strategy: turns one update message into named tensors."""

    @abc.abstractmethod
    def receive(self, message: Any) -> list[tuple[str, torch.Tensor]]:
        """Wait for one update's tensors; the returned tensors stay valid until the next call."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free what the receiver holds."""


WEIGHT_SYNCS: Registry[type[WeightSync]] = names.WEIGHT_SYNCS
"""Weight-sync strategies by name; a built-in's module is imported only when it is chosen."""


def make_weight_sync(name: str, **options: Any) -> WeightSync:
    """The strategy registered as ``name`` (a did-you-mean if none), built with its own options."""
    return WEIGHT_SYNCS.get(name)(**options)


def full_tensors(named_tensors: Iterable[tuple[str, Any]], device: Any = None) -> list[tuple[str, Any]]:
    """``(name, tensor)`` with FSDP shards gathered (``full_tensor``), detached, contiguous, on ``device``
    (default: where each is)."""
    out = []
    for name, tensor in named_tensors:
        if hasattr(tensor, "full_tensor"):
            tensor = tensor.full_tensor()
        tensor = tensor.detach()
        if device is not None:
            tensor = tensor.to(device)
        out.append((name, tensor.contiguous()))
    return out


def run_blocking(coroutine: Any) -> Any:
    """Run an engine's coroutine to its end from synchronous trainer code."""
    import asyncio

    return asyncio.run(coroutine)
