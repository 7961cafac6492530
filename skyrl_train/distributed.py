"""Process-group helpers for the training workers: setup, rank queries and metric reductions.

Every helper also works without a process group (a single in-process worker): ranks are then 0, the world
size is 1 and the reductions return their input. torch is imported lazily so that importing this module
stays cheap for code that only needs :func:`find_free_port`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

DEFAULT_MASTER_ADDR = "127.0.0.1"


def find_free_port(host: str = DEFAULT_MASTER_ADDR) -> int:
    """Ask the operating system for a TCP port that is free right now on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


CUDA_BACKEND = "cpu:gloo,cuda:nccl"
"""The training workers' process group on GPUs: NCCL for CUDA tensors, gloo for CPU tensors (offloaded
gradients in the gradient-norm reduction, CPU-built models broadcast from rank 0, metric sums)."""


def default_backend(device: str) -> str:
    """The collective backend for a device type: on CUDA :data:`CUDA_BACKEND` (an NCCL-only group cannot
    reduce the CPU tensors of ``cpu_offload``), ``gloo`` otherwise."""
    return CUDA_BACKEND if str(device).startswith("cuda") else "gloo"


def fork_rng_devices() -> list[int]:
    """The CUDA devices whose random state ``torch.random.fork_rng`` must save around a seeded block:
    every visible GPU (``torch.manual_seed`` reseeds them all), none without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return []
    return list(range(torch.cuda.device_count()))


def init_process_group(
    rank: int,
    world_size: int,
    *,
    backend: str = "gloo",
    master_addr: str = DEFAULT_MASTER_ADDR,
    master_port: int,
    timeout_s: float = 600.0,
) -> None:
    """Join the default process group over TCP at ``master_addr:master_port``.

    Also sets the usual environment variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
    ``MASTER_PORT``) so that libraries that read them agree with the group.
    """
    import torch.distributed as dist

    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        MASTER_ADDR=master_addr,
        MASTER_PORT=str(master_port),
    )
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://{master_addr}:{master_port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )


def is_distributed() -> bool:
    """True when a default process group exists in this process."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    """This process's rank, 0 without a process group."""
    import torch.distributed as dist

    return dist.get_rank() if is_distributed() else 0


def get_world_size() -> int:
    """Number of processes in the default group, 1 without a process group."""
    import torch.distributed as dist

    return dist.get_world_size() if is_distributed() else 1


def barrier() -> None:
    """Wait for every rank (no-op without a process group)."""
    import torch.distributed as dist

    if is_distributed():
        dist.barrier()


def destroy_process_group() -> None:
    """Leave the default process group if there is one."""
    import torch.distributed as dist

    if is_distributed():
        dist.destroy_process_group()


def _all_reduce_one(value: Any, dtype: Any, op: Any, device: Any) -> Any:
    import torch
    import torch.distributed as dist

    tensor = torch.tensor([value], dtype=dtype, device=device)
    dist.all_reduce(tensor, op=op)
    return tensor.item()


def all_reduce_sum(value: Any, device: Any = "cpu") -> float:
    """Sum a number over all ranks (the number itself without a process group)."""
    import torch
    import torch.distributed as dist

    if not is_distributed():
        return float(value)
    return float(_all_reduce_one(float(value), torch.float64, dist.ReduceOp.SUM, device))


def all_reduce_max(value: int, device: Any = "cpu") -> int:
    """The largest of an integer over all ranks (the integer itself without a process group)."""
    import torch
    import torch.distributed as dist

    if not is_distributed():
        return int(value)
    return int(_all_reduce_one(int(value), torch.int64, dist.ReduceOp.MAX, device))


def all_reduce_mean(metrics: Mapping[str, float], device: Any = "cpu") -> dict[str, float]:
    """Average a dict of numbers over all ranks in one collective.

    Every rank must pass the same keys; keys are sorted so the order cannot differ between ranks.
    """
    import torch
    import torch.distributed as dist

    if not is_distributed() or get_world_size() == 1:
        return {key: float(value) for key, value in metrics.items()}
    keys = sorted(metrics)
    tensor = torch.tensor([float(metrics[key]) for key in keys], dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    tensor /= get_world_size()
    return {key: float(value) for key, value in zip(keys, tensor.tolist(), strict=True)}
