"""How a run's training roles are built: which worker class, how many processes, which model, which arguments.

:func:`plan_workers` reads the config into one :class:`WorkerPlan` per role (policy; the reference model when
a KL term is on; the critic for gae); :func:`build_worker` turns a plan into the worker (in this process, a
process group, or Ray actors); :func:`engine_shares_policy` says whether the inference engine may run the
policy's own model object, :func:`engine_sleeps_while_training` whether it gives its memory back while the
policy trains.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from skyrl_train.config import Config

__all__ = [
    "WorkerPlan",
    "build_worker",
    "engine_shares_policy",
    "engine_sleeps_while_training",
    "plan_workers",
]


@dataclasses.dataclass
class WorkerPlan:
    """How the trainer builds one training role: worker class, processes, model and constructor arguments."""

    cls: type
    """``PolicyWorker``, ``RefWorker`` or ``CriticWorker``."""
    world_size: int
    """Worker processes (1: in the trainer's process, unsharded)."""
    model_path: str
    """The model the worker loads."""
    kwargs: dict[str, Any]
    """The worker's ``config_kwargs`` for the run's config."""


def plan_workers(config: Config) -> dict[str, WorkerPlan]:
    """The training roles of a run (policy; the reference model when a KL term is on; the critic for
    gae), each from its own section of ``trainer`` and its own ``trainer.placement`` sizes."""
    from skyrl_train.training.workers import CriticWorker, PolicyWorker, RefWorker

    tr = config.trainer
    # the training forward divides the logits by the sampling temperature, as the sampler did
    temperature = config.generator.sampling_params.temperature or 1.0
    plans = {
        "policy": WorkerPlan(
            PolicyWorker,
            config.policy_world_size,
            tr.policy.model.path,
            PolicyWorker.config_kwargs(tr, temperature=temperature),
        )
    }
    if tr.algorithm.needs_reference:
        plans["ref"] = WorkerPlan(
            RefWorker,
            config.ref_world_size,
            tr.ref.model.path or tr.policy.model.path,
            RefWorker.config_kwargs(tr, temperature=temperature),
        )
    if tr.algorithm.needs_critic:
        plans["critic"] = WorkerPlan(
            CriticWorker, config.critic_world_size, tr.critic.model.path, CriticWorker.config_kwargs(tr)
        )
    return plans


def build_worker(plan: WorkerPlan, *, layout: Any = None, **extra: Any) -> Any:
    """The worker of ``plan``: with a Ray ``layout`` (:class:`~skyrl_train.ray_layout.RayLayout`), a
    :class:`~skyrl_train.training.workers.ray_group.RayWorkerGroup` on the role's bundles; else in this process for
    one worker, or a :class:`~skyrl_train.training.workers.group.WorkerGroup` of ``plan.world_size`` processes.
    ``extra`` adds constructor arguments (``total_steps``)."""
    from skyrl_train.models import load_model

    if layout is not None:
        return layout.worker_group(plan.cls.role, plan, **extra)
    kwargs = {**plan.kwargs, **extra, "model_factory": functools.partial(load_model, plan.model_path)}
    if plan.world_size <= 1:
        return plan.cls(**kwargs)
    from skyrl_train.training.workers.group import WORKER_GROUPS

    return WORKER_GROUPS.get("process")(
        plan.cls, plan.world_size, worker_kwargs=kwargs, device=kwargs["device"]
    )


def engine_shares_policy(config: Config) -> bool:
    """Whether the inference engine runs the policy's own model object (weight sync is then free): an
    engine that can (``runs_shared_model``: hf), one policy worker in this process, the policy's float32,
    weights synced at all, and the synchronous mode."""
    from skyrl_train.inference.base import engine_class

    gen = config.generator
    return (
        engine_class(gen.backend).runs_shared_model
        and config.trainer.placement.backend != "ray"  # the engine is an actor of its own
        and not gen.engine_process  # an engine process loads its own copy
        and config.policy_world_size == 1
        and gen.model_dtype == "float32"
        and config.trainer.sync_weights
        and config.trainer.mode == "sync"  # an async engine generates while the policy trains
    )


def engine_sleeps_while_training(config: Config) -> bool:
    """Whether the trainer puts the inference engine to sleep for each update (``engine.sleep()`` after the
    rollouts, ``wake_up(["weights"])`` before the weight sync, ``wake_up(["kv_cache"])`` after it): the
    engine shares the policy's devices (``trainer.placement.colocate_all``: vLLM then frees its weights and
    KV cache for the training step), holds a model of its own (not the policy's object), is not a remote
    server, and the run is synchronous (an asynchronous engine generates while the policy trains)."""
    return (
        config.trainer.placement.colocate_all
        and config.trainer.mode == "sync"
        and config.generator.backend != "remote"
        and not engine_shares_policy(config)
    )
