"""Dynamic sampling: a step trains only on rollout groups whose rewards differ (``trainer.algorithm.dynamic_sampling``).

GRPO's advantage of a sample is its reward minus its group's mean: in a group where every sample earned the
same reward (all wrong, or all right) every advantage is zero, so the group adds no gradient, while its
tokens still cost a full forward and backward pass and, under a token mean, dilute the other groups' weight.

- ``filter`` (DAPO, Yu et al. 2025): such groups are dropped and further batches of prompts are sampled until
  ``train_batch_size`` groups with reward variance are collected (the first ones are kept) or
  ``max_sample_batches`` batches were sampled;
- ``replace`` (POLARIS): when at least ``min_replace_ratio`` of a batch's groups have variance, each group
  without is replaced by a copy (a new group id) of one with, drawn with a seeded generator; otherwise as
  ``filter``.

When the batches run out (``max_sample_batches``, or the data) the step trains on the groups with variance it
has, and skips its update when there are none; SkyRL's trainer raises an error instead. Error trajectories
do not count towards a group's variance (they are left out of the advantages) but stay with their group.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any

from skyrl_train.rollout.records import GeneratorOutput, TrajectoryResult

__all__ = ["DynamicSampler", "has_reward_variance", "mini_batch_groups"]


def has_reward_variance(group: list[TrajectoryResult]) -> bool:
    """Whether at least two of the group's scored (non-error) samples earned different rewards."""
    rewards = {t.reward for t in group if not t.is_error}
    return len(rewards) > 1


def mini_batch_groups(kept: int, mini_batch: int, planned: int) -> int:
    """Groups per mini-batch for a step that kept ``kept`` groups (fewer than a full batch): consecutive
    mini-batches of equal size, at most ``mini_batch`` groups each where that divides ``kept`` within the
    ``planned`` optimizer steps of a full batch (an on-policy step stays one update), else the fewest larger
    ones (at worst one mini-batch of every kept group)."""
    least = -(-kept // mini_batch)
    for count in [*range(least, planned + 1), *range(min(least, planned + 1) - 1, 0, -1)]:
        if kept % count == 0:
            return kept // count
    return kept


@dataclasses.dataclass
class DynamicSampler:
    """Collects a step's groups under one dynamic-sampling rule (see the module docstring)."""

    kind: str
    """``filter`` or ``replace``."""
    batch_size: int
    """Groups a step trains on (``trainer.train_batch_size``)."""
    max_sample_batches: int = 30
    """Batches sampled per step at most, the first included; <= 0: no limit."""
    min_replace_ratio: float = 0.3
    """``replace``: the least share of groups with variance for replacing."""

    @classmethod
    def from_config(cls, config: Any) -> DynamicSampler | None:
        """The sampler of ``trainer.algorithm.dynamic_sampling``; ``None`` when its type is null."""
        section = config.trainer.algorithm.dynamic_sampling
        if section.type is None:
            return None
        return cls(
            kind=section.type,
            batch_size=config.trainer.train_batch_size,
            max_sample_batches=section.max_sample_batches,
            min_replace_ratio=section.min_replace_ratio,
        )

    def collect(
        self, first: GeneratorOutput, more: Callable[[], GeneratorOutput | None], *, seed: int = 0
    ) -> tuple[GeneratorOutput, dict[str, float]]:
        """The groups to train on, starting from the batch ``first``; ``more()`` samples the next batch of
        prompts (``None`` when the data ran out). Returns them (the first batch's metrics kept: they describe
        the policy's own rewards) and this step's ``dynamic_sampling/*`` metrics."""
        groups = list(first.groups().values())
        kept = [g for g in groups if has_reward_variance(g)]
        sampled, batches = len(groups), 1
        replaced = 0
        if self.kind == "replace" and kept and len(kept) >= self.min_replace_ratio * len(groups):
            kept, replaced = self._replace(groups, kept, seed)
        while len(kept) < self.batch_size and (
            self.max_sample_batches <= 0 or batches < self.max_sample_batches
        ):
            extra = more()
            if extra is None:
                break
            batches += 1
            extra_groups = list(extra.groups().values())
            sampled += len(extra_groups)
            kept += [g for g in extra_groups if has_reward_variance(g)]
        kept = kept[: self.batch_size]
        trajectories = [t for group in kept for t in group]
        metrics = {
            "dynamic_sampling/batches": float(batches),
            "dynamic_sampling/groups_sampled": float(sampled),
            "dynamic_sampling/groups_kept": float(len(kept)),
            "dynamic_sampling/groups_replaced": float(replaced),
            "dynamic_sampling/kept_share": len(kept) / max(sampled, 1),
            "dynamic_sampling/full_batch": float(len(kept) == self.batch_size),
        }
        return GeneratorOutput(trajectories, dict(first.metrics)), metrics

    def _replace(
        self, groups: list[list[TrajectoryResult]], kept: list[list[TrajectoryResult]], seed: int
    ) -> tuple[list[list[TrajectoryResult]], int]:
        """Every group without variance replaced by a copy of a group with, under a fresh group id."""
        rng = random.Random(f"skyrl_train.loop.dynamic_sampling:{seed}")
        next_id = max(t.group_id for group in groups for t in group) + 1
        out, replaced = [], 0
        for group in groups:
            if has_reward_variance(group):
                out.append(group)
                continue
            source = rng.choice(kept)
            out.append([dataclasses.replace(t, group_id=next_id) for t in source])
            next_id += 1
            replaced += 1
        return out, replaced
