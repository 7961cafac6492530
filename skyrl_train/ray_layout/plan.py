"""Where each actor of a Ray run goes, computed from the config alone (nothing here imports ray).

A :class:`RayPlan` names the placement groups of a run (how many bundles, what each bundle reserves) and,
for every role (``policy``, ``ref``, ``critic``, ``engine``), the group and bundle of each of its actors and
the share of the bundle each actor asks for:

- ``trainer.placement.colocate_all`` (the default): one group ``shared`` with a bundle per training rank;
  rank ``r`` of every training role sits on bundle ``r``, the engine on bundle 0, and the roles of a bundle
  split it evenly (a GPU bundle is time-shared by the policy, the reference model and the engine, as in
  SkyRL's colocated layout).
- ``colocate_all=false``: the policy in group ``policy``; the reference model with it
  (``colocate_policy_ref``) or in group ``ref``; the critic in group ``critic``; the engine alone in group
  ``engine`` (its GPUs: ``generator.inference_engine_tensor_parallel_size``).

Bundles of one group are packed onto as few machines as possible (Ray's ``PACK``), so ``*_num_nodes`` times
``*_num_gpus_per_node`` ranks fill whole machines first.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["RayPlan", "RolePlacement", "ray_plan"]


@dataclasses.dataclass(frozen=True)
class RolePlacement:
    """The actors of one role: their placement group, the bundle of each rank and what each asks for."""

    group: str
    """Name of the placement group (a key of :attr:`RayPlan.groups`)."""
    bundles: tuple[int, ...]
    """Bundle index of each rank."""
    num_cpus: float
    """CPUs each actor of the role reserves within its bundle."""
    num_gpus: float
    """GPUs each actor reserves within its bundle (a fraction when roles share a bundle)."""


@dataclasses.dataclass(frozen=True)
class RayPlan:
    """The Ray layout of a run; see the module docstring. Built by :func:`ray_plan`."""

    address: str | None
    """The cluster to join (``trainer.placement.ray_address``)."""
    device: str
    """``cpu`` or ``cuda`` (``trainer.placement.ray_device``)."""
    groups: dict[str, list[dict[str, float]]]
    """Placement groups by name: the resources of each bundle."""
    roles: dict[str, RolePlacement]
    """Where the actors of each role go."""
    start_timeout_s: float
    """Deadline for the cluster, the placement groups and each actor's start."""
    call_timeout_s: float
    """Deadline of one call to a training or engine actor."""
    env_workers: int
    """Environment actors (``generator.env_workers``; 0: environments in the trainer's process)."""
    env_worker_num_cpus: float
    """CPUs of each environment actor."""
    env_timeout_s: float
    """Deadline of one environment call (``generator.env_timeout_s``)."""

    def as_dict(self) -> dict[str, Any]:
        """Plain nested dicts (for logs and tests)."""
        return dataclasses.asdict(self)


def ray_plan(config: Any) -> RayPlan:
    """The :class:`RayPlan` of ``config`` (a :class:`~skyrl_train.config.Config` with backend ray)."""
    p, gen, algorithm = config.trainer.placement, config.generator, config.trainer.algorithm
    cuda = p.ray_device == "cuda"
    sizes = {"policy": config.policy_world_size}
    if algorithm.needs_reference:
        sizes["ref"] = config.ref_world_size
    if algorithm.needs_critic:
        sizes["critic"] = config.critic_world_size

    # which group each role goes to
    if p.colocate_all:
        members = {"shared": [*sizes, "engine"]}
    else:
        members = {"policy": ["policy"]}
        if "ref" in sizes:
            members["policy" if p.colocate_policy_ref else "ref"] = [
                *members.get("policy" if p.colocate_policy_ref else "ref", []),
                "ref",
            ]
        if "critic" in sizes:
            members["critic"] = ["critic"]
        members["engine"] = ["engine"]

    training_bundle = {"CPU": float(p.ray_num_cpus_per_worker), **({"GPU": 1.0} if cuda else {})}
    engine_gpus = float(gen.inference_engine_tensor_parallel_size)
    groups: dict[str, list[dict[str, float]]] = {}
    roles: dict[str, RolePlacement] = {}
    for group, names in members.items():
        if names == ["engine"]:
            bundle = {"CPU": float(p.ray_num_cpus_per_worker), **({"GPU": engine_gpus} if cuda else {})}
            groups[group] = [bundle]
            roles["engine"] = RolePlacement(group, (0,), bundle["CPU"], bundle.get("GPU", 0.0))
            continue
        width = max(sizes.get(name, 1) for name in names)
        groups[group] = [dict(training_bundle) for _ in range(width)]
        share = 1.0 / len(names)  # the roles of a group split each bundle evenly
        for name in names:
            ranks = 1 if name == "engine" else sizes[name]
            roles[name] = RolePlacement(
                group,
                tuple(range(ranks)),
                training_bundle["CPU"] * share,
                share if cuda else 0.0,
            )
    return RayPlan(
        address=p.ray_address,
        device=p.ray_device,
        groups=groups,
        roles=roles,
        start_timeout_s=float(p.ray_start_timeout_s),
        call_timeout_s=float(p.ray_call_timeout_s),
        env_workers=gen.env_workers,
        env_worker_num_cpus=float(gen.env_worker_num_cpus),
        env_timeout_s=float(gen.env_timeout_s),
    )
