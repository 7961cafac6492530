"""Run one training worker per process and drive them from the trainer process.

:class:`WorkerGroup` spawns ``world_size`` processes (``torch.multiprocessing``, spawn start method). Each
joins a process group (gloo on CPU; on GPU NCCL, with gloo for CPU tensors; ``127.0.0.1`` and a free port),
builds its worker (for example :class:`~skyrl_train.training.workers.policy.PolicyWorker`, which then shards the model
with FSDP2) and waits for commands on its own queue. Batch methods send each rank its contiguous slice of the rows; the ranks
run the same collective code and the driver returns rank 0's answer (metrics are already averaged over
ranks by the workers) or the concatenated per-row outputs.

Failures are loud and leave nothing behind: an exception in a rank, or a rank that dies (killed, out of
memory), ends every process of the group and raises :class:`WorkerGroupError` naming the rank that failed
first, then what the others did (a peer whose collective broke with it is named after it); a worker
whose driver disappears exits on its own within a second.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import threading
import time
import traceback
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from skyrl_gym.registries import Registry
from skyrl_train import distributed as dist_utils
from skyrl_train.training.workers.batching import batch_size, batch_tensors, run_mini_batches, slice_batch


def _peer_lost(traceback_text: str) -> bool:
    """Whether a rank's error is its connection to a peer breaking: the peer's failure, not its own."""
    lines = traceback_text.strip().splitlines()
    last = lines[-1] if lines else ""
    return any(
        phrase in last
        for phrase in (
            "Connection reset by peer",
            "Connection closed by peer",
            "Broken pipe",
            "NCCL communicator",
        )
    )


class WorkerGroupError(RuntimeError):
    """A worker process raised or died; the whole group has been shut down."""


class WorkerLostError(WorkerGroupError):
    """A worker died (its process was killed, ran out of memory, its machine went away): the run can go on
    from its last checkpoint with new workers (``trainer.placement.max_restarts``)."""


def _exit_when_orphaned(parent_pid: int) -> None:
    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            time.sleep(1.0)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def _worker_main(
    rank: int,
    world_size: int,
    master_port: int,
    backend: str,
    device: str,
    worker_cls: type,
    worker_kwargs: dict[str, Any],
    commands: Any,
    results: Any,
    parent_pid: int,
) -> None:
    """The loop of one worker process: set up, then run commands until told to stop."""
    _exit_when_orphaned(parent_pid)
    # Ctrl-C reaches the whole process group; the driver decides how the workers end.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import torch

        if device.startswith("cuda"):
            torch.cuda.set_device(rank)
        elif "OMP_NUM_THREADS" not in os.environ:
            # N processes with a thread per core each would oversubscribe the CPU N times over.
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
        dist_utils.init_process_group(rank, world_size, backend=backend, master_port=master_port)
        kwargs = dict(worker_kwargs)
        if device.startswith("cuda"):
            kwargs["device"] = f"cuda:{rank}"
        worker = worker_cls(**kwargs)
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))
        return
    results.put((rank, "ok", None))
    while True:
        command = commands.get()
        if command is None:
            break
        method, args, kwargs = command
        try:
            out = getattr(worker, method)(*args, **kwargs)
        except BaseException:
            results.put((rank, "error", traceback.format_exc()))
            return
        results.put((rank, "ok", out))
    dist_utils.destroy_process_group()


def _stop_processes(processes: list, commands: list, grace_s: float) -> None:
    for command_queue, process in zip(commands, processes, strict=True):
        if process.is_alive():
            try:
                command_queue.put(None)
            except (OSError, ValueError):
                pass
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.terminate()
            process.join(2.0)
        if process.is_alive():
            process.kill()
            process.join(2.0)


class RankedWorkers:
    """The API of a single worker over ``world_size`` ranks, for every placement of them.

    A subclass says how one command reaches every rank (:meth:`_run`: the same arguments, or one set per rank)
    and how to stop them; everything else (the per-rank calls, splitting a batch over the ranks, the worker
    methods) is written once here.
    """

    role: str
    world_size: int
    _closed: bool

    def _run(self, method: str, args_by_rank: Sequence[tuple], kwargs: dict) -> list[Any]:
        """Run ``worker.method(*args_by_rank[rank], **kwargs)`` on every rank; the answers by rank."""
        raise NotImplementedError

    def shutdown(self, grace_s: float = 10.0) -> None:
        """Stop every rank; safe to call twice."""
        raise NotImplementedError

    def _check_open(self) -> None:
        if self._closed:
            raise WorkerGroupError(f"the {self.role} worker group is shut down")

    def call(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Run ``worker.method(*args, **kwargs)`` on every rank; the answers by rank."""
        self._check_open()
        return self._run(method, [args] * self.world_size, kwargs)

    def _call_sharded(self, method: str, batch: Any) -> list[Any]:
        self._check_open()
        tensors = batch_tensors(batch)
        size = batch_size(tensors)
        if size % self.world_size:
            raise ValueError(
                f"{method}: a batch of {size} rows does not split evenly over {self.world_size} workers; "
                "make the number of trajectories a multiple of the number of training processes"
            )
        shard = size // self.world_size
        shards = [
            (slice_batch(tensors, rank * shard, (rank + 1) * shard),) for rank in range(self.world_size)
        ]
        return self._run(method, shards, {})

    # -- the worker API

    def compute_log_probs(self, batch: Any):
        """Per-token log-probabilities ``[B, T]``: each rank computes its slice of the rows."""
        import torch

        return torch.cat(self._call_sharded("compute_log_probs", batch), dim=0)

    def compute_values(self, batch: Any):
        """Critic values ``[B, T]``: each rank computes its slice of the rows."""
        import torch

        return torch.cat(self._call_sharded("compute_values", batch), dim=0)

    def train_step(self, batch: Any) -> dict[str, float]:
        """One data-parallel optimizer step on one mini-batch; metrics averaged over the ranks."""
        return self._call_sharded("train_step", batch)[0]

    def train_batch(self, batch: Any, mini_batch_size: int, update_epochs: int = 1) -> dict[str, float]:
        """Optimizer steps over consecutive mini-batches of ``mini_batch_size`` rows (all ranks together)."""
        return run_mini_batches(self, batch, mini_batch_size, update_epochs, self.role)

    def reset_optimizer(self, optimizer_cfg: Any, total_steps: int | None = None, **kwargs: Any) -> None:
        """Every rank starts a fresh optimizer and schedule (keyword arguments: the worker's own)."""
        self.call("reset_optimizer", optimizer_cfg, total_steps, **kwargs)

    def set_loss_reduction(self, mode: str) -> str:
        """Every rank reduces its losses with ``mode`` from now on; the reduction it replaces."""
        return self.call("set_loss_reduction", mode)[0]

    def full_state_dict(self) -> dict:
        """The unsharded weights on CPU (gathered on rank 0)."""
        return self.call("full_state_dict")[0]

    def save_checkpoint(self, path: str | Path) -> None:
        """Every rank writes its shards into folder ``path`` (a folder all ranks can reach)."""
        self.call("save_checkpoint", str(path))

    def load_checkpoint(self, path: str | Path) -> None:
        """Every rank restores its shards from ``path``."""
        self.call("load_checkpoint", str(path))

    @property
    def global_step(self) -> int:
        """Optimizer steps taken so far."""
        return int(self.call("__getattribute__", "global_step")[0])

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class WorkerGroup(RankedWorkers):
    """``world_size`` worker processes behind the API of a single worker.

    ``worker_cls(**worker_kwargs)`` is built in every process; the class and every argument (the model
    factory in particular) must be picklable: a module-level function or a ``functools.partial`` of one,
    not a lambda. ``device`` is ``"cpu"`` (gloo) or ``"cuda"`` (NCCL and gloo, rank ``r`` on GPU ``r``); by
    default the ``device`` of ``worker_kwargs``. Use it as a context manager or call :meth:`shutdown`.
    """

    def __init__(
        self,
        worker_cls: type,
        world_size: int,
        worker_kwargs: Mapping[str, Any] | None = None,
        *,
        device: str | None = None,
        backend: str | None = None,
        start_timeout_s: float = 300.0,
    ) -> None:
        import torch.multiprocessing as mp

        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        kwargs = dict(worker_kwargs or {})
        device = str(device or kwargs.get("device") or "cpu")
        self.world_size = world_size
        self.worker_cls = worker_cls
        self.device = device
        self.backend = backend or dist_utils.default_backend(device)
        self.role = getattr(worker_cls, "role", "worker")
        self._closed = False
        context = mp.get_context("spawn")
        port = dist_utils.find_free_port()
        self._results = context.Queue()
        self._commands = [context.Queue() for _ in range(world_size)]
        self._processes = []
        for rank in range(world_size):
            process = context.Process(
                target=_worker_main,
                args=(
                    rank,
                    world_size,
                    port,
                    self.backend,
                    device,
                    worker_cls,
                    kwargs,
                    self._commands[rank],
                    self._results,
                    os.getpid(),
                ),
                name=f"skyrl-{self.role}-rank{rank}",
            )
            process.start()
            self._processes.append(process)
        self._finalizer = weakref.finalize(self, _stop_processes, self._processes, self._commands, 5.0)
        self._collect("start", timeout_s=start_timeout_s)

    # -- plumbing

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers, by rank."""
        return [process.pid for process in self._processes]

    def _fail(self, message: str) -> WorkerGroupError:
        self.shutdown(grace_s=0.0)
        return WorkerGroupError(message)

    def _collect(self, what: str, timeout_s: float | None = None) -> list[Any]:
        """Wait for one answer per rank; raise (after shutting the group down) on an error or a death."""
        answers: dict[int, Any] = {}
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while len(answers) < self.world_size:
            try:
                rank, status, payload = self._results.get(timeout=0.2)
            except queue.Empty:
                if any(
                    r not in answers and not self._processes[r].is_alive() for r in range(self.world_size)
                ):
                    raise self._failure(what, answers, {}) from None
                if deadline is not None and time.monotonic() > deadline:
                    raise self._fail(
                        f"{self.role} workers did not answer {what} within {timeout_s:.0f} s"
                    ) from None
                continue
            if status == "error":
                raise self._failure(what, answers, {rank: payload})
            answers[rank] = payload
        return [answers[rank] for rank in range(self.world_size)]

    def _failure(
        self, what: str, answers: dict[int, Any], errors: dict[int, str], grace_s: float = 10.0
    ) -> WorkerGroupError:
        """Shut the group down and say why, after hearing from every rank.

        One rank's failure fails its peers' collectives too (gloo: "Connection reset by peer"), and whose
        report arrives first is chance. So each rank that has not answered first gets ``grace_s`` to answer,
        report its error or die: a peer notices a closed connection at once, and a rank busy on its own is
        reported as not having answered. The cause named first is a rank that died, else one whose error is
        not a lost connection to a peer; the other ranks' outcomes follow.
        """

        def pending() -> list[int]:
            return [r for r in range(self.world_size) if r not in answers and r not in errors]

        def take(timeout: float) -> None:
            rank, status, payload = self._results.get(timeout=timeout)
            (errors if status == "error" else answers)[rank] = payload

        deadline = time.monotonic() + grace_s
        while pending() and time.monotonic() < deadline:
            if not any(self._processes[r].is_alive() for r in pending()):
                # the dead may have reported before dying: what is still in the pipe arrives within moments
                with contextlib.suppress(queue.Empty):
                    while pending():
                        take(0.5)
                break
            with contextlib.suppress(queue.Empty):
                take(0.2)
        dead = {r: self._processes[r].exitcode for r in pending() if not self._processes[r].is_alive()}
        silent = [r for r in pending() if r not in dead]
        self.shutdown(grace_s=0.0)
        causes = [
            f"{self.role} worker rank {r} (pid {self._processes[r].pid}) died with exit code {code} during {what}"
            for r, code in sorted(dead.items())
        ]
        ranked = sorted(errors, key=lambda r: (_peer_lost(errors[r]), r))
        causes += [f"{self.role} worker rank {r} failed during {what}" for r in ranked]
        causes += [f"{self.role} worker rank {r} had not answered {what}" for r in silent]
        message = f"{causes[0]}; the worker group was shut down"
        if len(causes) > 1:
            message += ". The other ranks: " + "; ".join(causes[1:])
        for r in ranked:
            message += f"\nWorker traceback (rank {r}):\n{errors[r]}"
        return (WorkerLostError if dead else WorkerGroupError)(message)

    def _run(self, method: str, args_by_rank: Sequence[tuple], kwargs: dict) -> list[Any]:
        for command_queue, args in zip(self._commands, args_by_rank, strict=True):
            command_queue.put((method, args, kwargs))
        return self._collect(method)

    # -- lifetime

    def shutdown(self, grace_s: float = 10.0) -> None:
        """Stop every worker process (politely, then by force); safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._finalizer.detach()
        _stop_processes(self._processes, self._commands, grace_s)


WORKER_GROUPS: Registry[type] = Registry(
    "worker group",
    "trainer.placement.backend",
    builtins={
        "process": "skyrl_train.training.workers.group:WorkerGroup",
        "ray": "skyrl_train.training.workers.ray_group:RayWorkerGroup",
    },
)
"""How a role's several workers are placed, by name: ``process`` (spawned processes on this machine, backends
cpu and cuda) or ``ray`` (Ray actors in placement groups). Each takes ``(worker_cls, world_size,
worker_kwargs, device=...)`` and offers the same methods."""


def make_workers(worker_cls: type, num_processes: int = 1, device: str = "cpu", **worker_kwargs: Any) -> Any:
    """A worker in this process when ``num_processes`` is 1, else a :class:`WorkerGroup` of that size.

    Both have the same methods: ``compute_log_probs``, ``train_step``, ``train_batch``,
    ``full_state_dict``, ``save_checkpoint``, ``load_checkpoint`` (and ``compute_values`` for the critic).
    """
    if num_processes == 1:
        return worker_cls(device=device, **worker_kwargs)
    return WorkerGroup(worker_cls, num_processes, worker_kwargs, device=device)
