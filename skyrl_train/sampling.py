"""The sampling parameters of a run's rollouts: one training step's (seeded per step) and every evaluation's.

Apart from the trainer so that the parts that roll out on their own schedule (the asynchronous loop, the stage
evaluations) read the same rule without importing the trainer.
"""

from __future__ import annotations

from skyrl_train.config import Config, SamplingParams

__all__ = ["eval_sampling", "rollout_sampling"]


def rollout_sampling(config: Config, step: int) -> SamplingParams:
    """The sampling parameters of training step ``step``: ``generator.sampling_params``, seeded with its
    ``seed`` (or ``trainer.seed``) plus the step, so that every step samples differently and reproducibly."""
    params = config.generator.sampling_params
    base = config.trainer.seed if params.seed is None else params.seed
    return params.model_copy(update={"seed": base + step})


def eval_sampling(config: Config) -> SamplingParams:
    """The sampling parameters of every evaluation: ``generator.eval_sampling_params``, seeded with its
    ``seed`` (or ``trainer.seed``)."""
    params = config.generator.eval_sampling_params
    return params.model_copy(update={"seed": config.trainer.seed if params.seed is None else params.seed})
