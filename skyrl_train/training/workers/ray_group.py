"""Run one training worker per Ray actor and drive them from the trainer: the sibling of
:class:`~skyrl_train.training.workers.group.WorkerGroup` for a Ray cluster (``trainer.placement.backend=ray``).

:class:`RayWorkerGroup` starts ``world_size`` actors (each on its bundle of a placement group when given
one). Rank 0 reports its machine's address and a free port; every actor then joins the process group there
(gloo on CPU; on GPU NCCL, with gloo for CPU tensors), builds its worker (FSDP2 shards the model over the
ranks) and runs the calls the driver sends. The methods are :class:`WorkerGroup`'s: batch methods send each
rank its slice of the rows and return rank 0's metrics or the concatenated per-row outputs.

Failures are loud: every wait has a deadline, and a rank that raises, dies or overruns shuts the whole group
down and raises an error naming the rank and the call (:mod:`skyrl_train.ray_layout.cluster`): a death is a
:class:`~skyrl_train.training.workers.group.WorkerLostError`, from which the trainer can resume its last checkpoint.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_train import distributed as dist_utils
from skyrl_train.training.workers.group import RankedWorkers, WorkerGroupError

__all__ = ["RayWorkerGroup", "TrainingActor"]


class TrainingActor:
    """The body of one training actor: joins the process group, builds its worker, runs calls on it."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size
        self.worker: Any = None

    def address(self) -> tuple[str, int]:
        """This actor's machine address and a port free on it (rank 0 hosts the process group)."""
        import ray

        host = ray.util.get_node_ip_address()
        return host, dist_utils.find_free_port(host)

    def pid(self) -> int:
        """The actor's process id."""
        return os.getpid()

    def node_id(self) -> str:
        """The id of the Ray node (machine) the actor runs on."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def setup(
        self,
        master_addr: str,
        master_port: int,
        backend: str,
        device: str,
        worker_cls: type,
        worker_kwargs: dict[str, Any],
        timeout_s: float,
        num_threads: int,
    ) -> int:
        """Join the process group and build the worker; returns the process id."""
        import torch

        if not device.startswith("cuda"):
            torch.set_num_threads(num_threads)
        dist_utils.init_process_group(
            self.rank,
            self.world_size,
            backend=backend,
            master_addr=master_addr,
            master_port=master_port,
            timeout_s=timeout_s,
        )
        kwargs = dict(worker_kwargs)
        if device.startswith("cuda"):
            kwargs["device"] = "cuda:0"  # Ray shows the actor only its own GPU
        self.worker = worker_cls(**kwargs)
        return os.getpid()

    def run(self, method: str, args: tuple, kwargs: dict) -> Any:
        """``worker.method(*args, **kwargs)``."""
        return getattr(self.worker, method)(*args, **kwargs)

    def push_weights(self, engine_actor: Any, timeout_s: float) -> int:
        """Gather the full weights (every rank takes part) and, on rank 0, load them into the engine actor
        directly (they do not pass through the driver); returns the tensors rank 0 sent."""
        import ray

        state = self.worker.full_state_dict()
        if self.rank != 0:
            return 0
        ray.get(engine_actor.load_weights.remote(state), timeout=timeout_s)
        return len(state)

    def stop(self) -> None:
        """Leave the process group."""
        dist_utils.destroy_process_group()


class RayWorkerGroup(RankedWorkers):
    """``world_size`` worker actors behind the API of a single worker; see the module docstring.

    ``worker_cls(**worker_kwargs)`` is built in every actor (the class and arguments travel by pickle).
    ``placement`` is ``(placement_groups, role_placement)`` from the Ray layout (the
    :class:`~skyrl_train.ray_layout.cluster.PlacementGroups` and the role's
    :class:`~skyrl_train.ray_layout.plan.RolePlacement`); without it each actor asks the cluster for one
    CPU (a GPU on cuda) of its own. ``call_timeout_s`` bounds every call, ``start_timeout_s`` the start.
    """

    def __init__(
        self,
        worker_cls: type,
        world_size: int,
        worker_kwargs: Mapping[str, Any] | None = None,
        *,
        device: str | None = None,
        backend: str | None = None,
        placement: tuple[Any, Any] | None = None,
        start_timeout_s: float = 600.0,
        call_timeout_s: float | None = 3600.0,
    ) -> None:
        from skyrl_train.ray_layout.cluster import connect, wait_all

        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        ray = connect()
        kwargs = dict(worker_kwargs or {})
        self.device = str(device or kwargs.get("device") or "cpu")
        self.backend = backend or dist_utils.default_backend(self.device)
        self.world_size = world_size
        self.worker_cls = worker_cls
        self.role = getattr(worker_cls, "role", "worker")
        self.call_timeout_s = call_timeout_s
        self._closed = False
        cuda = self.device.startswith("cuda")
        remote = ray.remote(TrainingActor)
        self.actors = []
        for rank in range(world_size):
            if placement is not None:
                groups, where = placement
                options = {
                    "num_cpus": where.num_cpus,
                    "num_gpus": where.num_gpus,
                    "scheduling_strategy": groups.strategy(where.group, where.bundles[rank]),
                }
            else:
                options = {"num_cpus": 1, "num_gpus": 1 if cuda else 0}
            actor = remote.options(name=None, max_concurrency=2, **options).remote(rank, world_size)
            self.actors.append(actor)
        self.labels = [f"{self.role} worker actor rank {rank}" for rank in range(world_size)]
        try:
            host, port = wait_all(
                [self.actors[0].address.remote()], self.labels[:1], "start", start_timeout_s
            )[0]
            threads = max(1, int(placement[1].num_cpus) if placement is not None else 1)
            self.pids = wait_all(
                [
                    actor.setup.remote(
                        host, port, self.backend, self.device, worker_cls, kwargs, start_timeout_s, threads
                    )
                    for actor in self.actors
                ],
                self.labels,
                "start (joining the process group, building the worker)",
                start_timeout_s,
            )
        except BaseException:
            self.shutdown()
            raise

    # -- plumbing

    def _wait(self, refs: Sequence[Any], what: str) -> list[Any]:
        from skyrl_train.ray_layout.cluster import wait_all

        try:
            return wait_all(refs, self.labels, what, self.call_timeout_s)
        except WorkerGroupError as error:
            self.shutdown()
            raise type(error)(f"{error}; the {self.role} worker group was shut down") from None

    def _run(self, method: str, args_by_rank: Sequence[tuple], kwargs: dict) -> list[Any]:
        refs = [
            actor.run.remote(method, args, kwargs)
            for actor, args in zip(self.actors, args_by_rank, strict=True)
        ]
        return self._wait(refs, method)

    def push_weights(self, engine_actor: Any) -> int:
        """Load the current weights into an engine actor straight from rank 0 (see
        :meth:`TrainingActor.push_weights`); returns the number of tensors sent."""
        self._check_open()
        timeout = self.call_timeout_s
        refs = [actor.push_weights.remote(engine_actor, timeout) for actor in self.actors]
        return self._wait(refs, "weight sync to the inference engine actor")[0]

    # -- lifetime

    def shutdown(self, grace_s: float = 5.0) -> None:
        """Stop every actor (leave the process group, then kill); safe to call twice."""
        if self._closed:
            return
        self._closed = True
        import ray

        stops = [actor.stop.remote() for actor in self.actors]
        try:
            ray.wait(stops, num_returns=len(stops), timeout=grace_s)
        except Exception:  # actors already dead: nothing to leave
            pass
        for actor in self.actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                pass
