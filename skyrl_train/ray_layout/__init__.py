"""The Ray layout of a run (``trainer.placement.backend=ray``): training workers, the inference engine and
the environment workers as Ray actors in placement groups, on one machine or many.

- :mod:`.plan`: where every actor goes, from the config alone (no ray import);
- :mod:`.cluster`: joining the cluster, placement groups, waits with deadlines and errors that name the actor;
- :mod:`.engine`: the engine actor and the :class:`~.engine.RayEngine` the runner talks to;
- :mod:`.envs`: environment actors, the pool and the proxy environment;
- :class:`RayLayout` (here): builds them for the trainer and takes them down.

The training workers' group is :class:`skyrl_train.training.workers.ray_group.RayWorkerGroup`, the ``ray`` entry of
:data:`skyrl_train.training.workers.group.WORKER_GROUPS`. Importing this package does not import ray.
"""

from __future__ import annotations

import functools
from typing import Any

from skyrl_train.ray_layout.plan import RayPlan, RolePlacement, ray_plan

__all__ = ["RayLayout", "RayPlan", "RolePlacement", "ray_plan"]


class RayLayout:
    """The placement groups of a run and the builders of its actors (see the package docstring)."""

    def __init__(self, plan: RayPlan):
        from skyrl_train.ray_layout.cluster import PlacementGroups, connect

        self.plan = plan
        self.ray = connect(plan.address)
        self.groups = PlacementGroups(plan.groups, plan.start_timeout_s)
        self.engine: Any = None
        self.env_pool: Any = None

    @classmethod
    def from_config(cls, config: Any) -> RayLayout:
        """Join the cluster and reserve the placement groups of ``config``."""
        return cls(ray_plan(config))

    def worker_group(self, role: str, plan: Any, **extra: Any) -> Any:
        """The :class:`~skyrl_train.training.workers.ray_group.RayWorkerGroup` of a trainer
        :class:`~skyrl_train.training.workers.plan.WorkerPlan` on its bundles (``extra``: constructor arguments)."""
        from skyrl_train.models import load_model
        from skyrl_train.training.workers.group import WORKER_GROUPS

        kwargs = {**plan.kwargs, **extra, "model_factory": functools.partial(load_model, plan.model_path)}
        return WORKER_GROUPS.get("ray")(
            plan.cls,
            plan.world_size,
            kwargs,
            device=kwargs["device"],
            placement=(self.groups, self.plan.roles[role]),
            start_timeout_s=self.plan.start_timeout_s,
            call_timeout_s=self.plan.call_timeout_s,
        )

    def build_engine(self, config: Any, tokenizer: Any) -> Any:
        """The inference engine of ``config`` in an actor on its bundle, as a
        :class:`~skyrl_train.ray_layout.engine.RayEngine`."""
        from skyrl_train.ray_layout.engine import RayEngine

        where = self.plan.roles["engine"]
        self.engine = RayEngine(
            kind=config.generator.backend,
            generator=config.generator,
            model_path=config.trainer.policy.model.path,
            tokenizer=tokenizer,
            seed=config.trainer.seed,
            device=self.plan.device,
            actor_options={
                "num_cpus": where.num_cpus,
                "num_gpus": where.num_gpus,
                "scheduling_strategy": self.groups.strategy(where.group, where.bundles[0]),
            },
            start_timeout_s=self.plan.start_timeout_s,
            call_timeout_s=self.plan.call_timeout_s,
        )
        return self.engine

    def build_generator(self, config: Any, engine: Any) -> Any:
        """The runner: environments in a pool of ``generator.env_workers`` actors, or in this process."""
        from skyrl_train.rollout import MultiTurnGenerator

        if not self.plan.env_workers:
            return MultiTurnGenerator.from_config(engine, config)
        from skyrl_train.ray_layout.envs import EnvActorPool, RemoteEnvRunner

        self.env_pool = EnvActorPool.from_plan(self.plan)
        return RemoteEnvRunner.from_config(engine, config, env_pool=self.env_pool)

    def shutdown(self) -> None:
        """Stop the engine and environment actors and free the placement groups (idempotent)."""
        if self.env_pool is not None:
            self.env_pool.close()
            self.env_pool = None
        if self.engine is not None:
            self.engine.close()
            self.engine = None
        self.groups.remove()
