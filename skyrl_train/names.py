"""The built-in algorithms by name, each with where it lives (``module:attribute``), and nothing imported.

The config's rules check a configured name against these keys without importing torch, and the registries of
:mod:`skyrl_train.algorithms.registry` load each part from its path when first asked for: one list, read by
both, so that a name cannot be known to one and missing from the other.
"""

from __future__ import annotations

__all__ = ["ADVANTAGE_ESTIMATORS", "POLICY_LOSSES"]

_ADVANTAGES = "skyrl_train.algorithms.advantages"
_LOSSES = "skyrl_train.algorithms.policy_loss"

ADVANTAGE_ESTIMATORS: dict[str, str] = {
    "grpo": f"{_ADVANTAGES}:grpo",
    "dr_grpo": f"{_ADVANTAGES}:dr_grpo",
    "rloo": f"{_ADVANTAGES}:rloo",
    "raft": f"{_ADVANTAGES}:raft",
    "reinforce++": f"{_ADVANTAGES}:reinforce_plus_plus",
    "gae": f"{_ADVANTAGES}:gae",
}
"""Advantage estimators that ship with the project (``trainer.algorithm.advantage_estimator``)."""

POLICY_LOSSES: dict[str, str] = {
    "ppo": f"{_LOSSES}:ppo_loss",
    "regular": f"{_LOSSES}:ppo_loss",
    "dual_clip": f"{_LOSSES}:dual_clip_loss",
    "gspo": f"{_LOSSES}:gspo_loss",
}
"""Policy losses that ship with the project (``trainer.algorithm.policy_loss_type``); ``regular`` is SkyRL's
name for ``ppo``."""
