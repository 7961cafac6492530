"""Every swappable part of the trainer that the config names, by name, with where it lives (``module:attribute``),
and nothing of the parts imported.

Each registry here is the one its part's package registers into and builds from (the dispatch package's
``DISPATCHERS`` is this module's, and so on): the config's rules check a configured name against it without
importing the part (nor torch), and a part is imported the first time it is asked for. One list, read by both,
so that a name cannot be known to one and missing from the other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from skyrl_gym.registries import Registry

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGENTS",
    "BUILTIN_ADVANTAGE_ESTIMATORS",
    "BUILTIN_POLICY_LOSSES",
    "DISPATCHERS",
    "ENVIRONMENT_SETTINGS_CHECK",
    "POLICY_LOSSES",
    "WEIGHT_SYNCS",
    "check_environment_settings",
    "part_settings",
]

_ADVANTAGES = "skyrl_train.training.algorithms.advantages"
_LOSSES = "skyrl_train.training.algorithms.policy_loss"

BUILTIN_ADVANTAGE_ESTIMATORS: dict[str, str] = {
    "grpo": f"{_ADVANTAGES}:grpo",
    "dr_grpo": f"{_ADVANTAGES}:dr_grpo",
    "rloo": f"{_ADVANTAGES}:rloo",
    "raft": f"{_ADVANTAGES}:raft",
    "reinforce++": f"{_ADVANTAGES}:reinforce_plus_plus",
    "gae": f"{_ADVANTAGES}:gae",
}
"""Advantage estimators that ship with the project (``trainer.algorithm.advantage_estimator``)."""

BUILTIN_POLICY_LOSSES: dict[str, str] = {
    "ppo": f"{_LOSSES}:ppo_loss",
    "regular": f"{_LOSSES}:ppo_loss",
    "dual_clip": f"{_LOSSES}:dual_clip_loss",
    "gspo": f"{_LOSSES}:gspo_loss",
}
"""Policy losses that ship with the project (``trainer.algorithm.policy_loss_type``); ``regular`` is SkyRL's
name for ``ppo``."""


ADVANTAGE_ESTIMATORS: Registry[Callable[..., Any]] = Registry(
    "advantage estimator", "trainer.algorithm.advantage_estimator", builtins=BUILTIN_ADVANTAGE_ESTIMATORS
)
"""Advantage estimators by name (:mod:`skyrl_train.training.algorithms.registry` registers into it)."""

POLICY_LOSSES: Registry[Callable[..., Any]] = Registry(
    "policy loss", "trainer.algorithm.policy_loss_type", builtins=BUILTIN_POLICY_LOSSES
)
"""Policy losses by name."""

DISPATCHERS: Registry[Callable[..., Any]] = Registry(
    "dispatcher",
    "generator.dispatcher",
    builtins={
        "async_batch": "skyrl_train.rollout.dispatch.async_batch:AsyncBatchDispatcher",
        "fixed_pool": "skyrl_train.rollout.dispatch.fixed_pool:FixedPoolDispatcher",
        "async_pipeline": "skyrl_train.rollout.dispatch.async_pipeline:AsyncPipelineDispatcher",
    },
)
"""Dispatcher factories by name (``generator.dispatcher.type``); a dispatcher class's ``settings`` is the class
of the rest of ``generator.dispatcher``."""

WEIGHT_SYNCS: Registry[Any] = Registry(
    "weight sync strategy",
    "generator.weight_sync_backend",
    builtins={
        "in_process": "skyrl_train.inference.weight_sync.in_process:InProcessSync",
        "shared_memory": "skyrl_train.inference.weight_sync.shared_memory:SharedMemorySync",
        "gloo": "skyrl_train.inference.weight_sync.gloo:GlooSync",
        "nccl": "skyrl_train.inference.weight_sync.nccl:NcclSync",
        "cuda_ipc": "skyrl_train.inference.weight_sync.cuda_ipc:CudaIpcSync",
    },
)
"""Weight-sync strategies by name (``generator.weight_sync_backend``); a built-in's module is imported only when
it is chosen."""

AGENTS: Registry[Callable[..., Any]] = Registry(
    "agent",
    "generator.agent",
    builtins={
        "multi_turn": "skyrl_train.rollout.trajectory:Trajectory",
        "react": "skyrl_train.rollout.react:ReActTrajectory",
    },
)
"""Trajectory classes by agent name (``generator.agent.type``); a class's ``settings`` is the class of the rest of
``generator.agent``."""


def part_settings(registry: Registry[Any], name: str) -> Any:
    """The settings class that part ``name`` of ``registry`` declares beside itself (its ``settings``
    attribute), or None for a part that declares none. Imports the part when first asked."""
    return getattr(registry.get(name), "settings", None)


ENVIRONMENT_SETTINGS_CHECK = "skyrl_gym.envs.registration:check_env_configs"
"""What checks ``environment.skyrl_gym``: each environment's settings against the class its registration
declares (``EnvSpec.config``), an id no environment has refused with a did-you-mean."""


def check_environment_settings(env_configs: Any) -> list[str]:
    """The problems of ``environment.skyrl_gym`` (``env_config`` by environment id), one message each, found by
    :data:`ENVIRONMENT_SETTINGS_CHECK`, imported here when first called: the registry reads each declared
    settings class, not the environment."""
    import importlib

    module, _, attribute = ENVIRONMENT_SETTINGS_CHECK.partition(":")
    return list(getattr(importlib.import_module(module), attribute)(env_configs))
