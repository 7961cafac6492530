"""``RefWorker``: the frozen reference model of the KL terms (log-probabilities only)."""

from __future__ import annotations

from typing import Any

import torch

from skyrl_train.config import TrainerConfig
from skyrl_train.training.workers.base import FSDPWorker, ModelFactory, role_kwargs

__all__ = ["RefWorker"]


class RefWorker(FSDPWorker):
    """The frozen reference model for the KL term: :meth:`compute_log_probs` only (``packed`` as for the
    policy)."""

    role = "ref"

    def __init__(
        self,
        model_factory: ModelFactory,
        *,
        device: str | torch.device = "cpu",
        bf16: bool = False,
        micro_batch_size: int = 1,
        forward_micro_batch_size: int | None = None,
        temperature: float = 1.0,
        seed: int = 0,
        reshard_after_forward: bool = True,
        cpu_offload: bool = False,
        packed: bool = True,
    ) -> None:
        super().__init__(
            model_factory,
            device=device,
            bf16=bf16,
            micro_batch_size=micro_batch_size,
            forward_micro_batch_size=forward_micro_batch_size,
            temperature=temperature,
            seed=seed,
            reshard_after_forward=reshard_after_forward,
            cpu_offload=cpu_offload,
            trainable=False,
            packed=packed,
        )

    @staticmethod
    def config_kwargs(trainer: TrainerConfig, *, temperature: float) -> dict[str, Any]:
        """The constructor's keyword arguments for the config's ``trainer`` section (all but the model)."""
        return {"temperature": temperature, **role_kwargs(trainer, trainer.ref.fsdp_config)}
