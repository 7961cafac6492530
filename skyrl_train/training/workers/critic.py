"""``CriticWorker``: the value model of PPO with GAE, a value head on a language model's backbone, trained
with a clipped value loss."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from skyrl_train import distributed as dist_utils
from skyrl_train.config import AlgorithmConfig, TrainerConfig
from skyrl_train.training.workers.base import FSDPWorker, ModelFactory, role_kwargs
from skyrl_train.training.workers.batching import (
    Batch,
    batch_tensors,
    iter_micro_batches,
    pad_right,
    position_ids,
    trim_padding,
)

__all__ = ["CriticWorker", "ValueModel"]


class ValueModel(nn.Module):
    """A language model's backbone with a linear value head over the last hidden state."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        backbone = getattr(lm, "base_model", None)
        if backbone is None or backbone is lm:
            raise TypeError(f"{type(lm).__name__} has no separate backbone (base_model) for a value head")
        self.backbone = backbone
        self.config = lm.config
        self.value_head = nn.Linear(int(lm.config.hidden_size), 1)
        nn.init.normal_(self.value_head.weight, std=0.02)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        hidden = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=use_cache
        ).last_hidden_state
        # hidden @ w + b with the [1, H] head as a vector: a fresh [b, L] tensor, not a view of [b, L, 1]
        # (FSDP2 warns about views as module outputs).
        weight, bias = self.value_head.weight[0], self.value_head.bias[0]
        return (torch.matmul(hidden.to(weight.dtype), weight) + bias,)


class CriticWorker(FSDPWorker):
    """The critic for PPO with GAE: a value head on the language model, trained with a clipped value loss.

    ``algorithm_cfg`` (an :class:`~skyrl_train.config.AlgorithmConfig` or a dict of its fields): the worker
    reads ``value_clip``, ``loss_reduction`` and ``max_seq_len``. ``optimizer_cfg`` as for the policy.
    """

    role = "critic"

    def __init__(
        self,
        model_factory: ModelFactory,
        optimizer_cfg: Any = None,
        algorithm_cfg: Any = None,
        *,
        device: str | torch.device = "cpu",
        bf16: bool = False,
        micro_batch_size: int = 1,
        forward_micro_batch_size: int | None = None,
        seed: int = 0,
        gradient_checkpointing: bool = False,
        reshard_after_forward: bool = True,
        cpu_offload: bool = False,
        total_steps: int | None = None,
    ) -> None:
        super().__init__(
            model_factory,
            device=device,
            bf16=bf16,
            micro_batch_size=micro_batch_size,
            forward_micro_batch_size=forward_micro_batch_size,
            seed=seed,
            gradient_checkpointing=gradient_checkpointing,
            reshard_after_forward=reshard_after_forward,
            cpu_offload=cpu_offload,
            trainable=True,
        )
        algorithm = self.algorithm_cfg = AlgorithmConfig.coerce(algorithm_cfg)
        self.value_clip = algorithm.value_clip
        self.loss_reduction = algorithm.loss_reduction
        self.max_seq_len = algorithm.max_seq_len
        self._build_optimizer(optimizer_cfg, total_steps)

    @staticmethod
    def config_kwargs(trainer: TrainerConfig) -> dict[str, Any]:
        """The constructor's keyword arguments for the config's ``trainer`` section (everything but the
        model factory and ``total_steps``)."""
        return {
            "optimizer_cfg": trainer.critic.optimizer_config,
            "algorithm_cfg": trainer.algorithm,
            **role_kwargs(trainer, trainer.critic.fsdp_config),
            "gradient_checkpointing": trainer.gradient_checkpointing,
        }

    def _build_model(self, model_factory: ModelFactory) -> nn.Module:
        lm = model_factory()
        self._layer_class_names = set(getattr(lm, "_no_split_modules", None) or ())
        return ValueModel(lm)

    def _values(self, mb: Mapping[str, torch.Tensor]) -> torch.Tensor:
        input_ids, attention_mask, kept, response_len = trim_padding(mb)
        with self._autocast():
            (values,) = self.model(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask)
            )
        length = input_ids.shape[1]
        # The value of the state before each response token, aligned like the log-probabilities.
        return pad_right(values[:, length - kept - 1 : length - 1].float(), response_len)

    @torch.no_grad()
    def compute_values(self, batch: Batch) -> torch.Tensor:
        """Value estimates for the response positions, ``[B, T]`` float32 on CPU, 0 outside the response."""
        tensors = batch_tensors(batch)
        self.model.eval()
        out = []
        for mb in iter_micro_batches(tensors, self.forward_micro_batch_size):
            mb = self._to_device(mb)
            out.append((self._values(mb) * mb["response_mask"]).cpu())
        return torch.cat(out, dim=0)

    def compute_log_probs(self, batch: Batch) -> torch.Tensor:
        raise TypeError("the critic has no log-probabilities; use compute_values")

    def train_step(self, batch: Batch) -> dict[str, float]:
        """One optimizer step of the value loss on one mini-batch (needs ``values`` and ``returns``).

        Returns ``critic/loss``, ``critic/vf_clip_frac``, ``critic/values_mean``, ``critic/grad_norm``,
        ``critic/lr``, ``critic/skipped_step`` and ``critic/no_gradient_step``, averaged over ranks.
        """
        from skyrl_train.training.algorithms.reductions import masked_mean
        from skyrl_train.training.algorithms.value_loss import value_loss

        tensors = batch_tensors(batch)
        for key in ("values", "returns"):
            if tensors.get(key) is None:
                raise KeyError(f"critic training needs '{key}' in the batch")
        self.model.train()
        tokens, seqs = self._global_counts(tensors)
        sums: dict[str, float] = {}
        for mb in iter_micro_batches(tensors, self.micro_batch_size):
            mb = self._to_device(mb)
            mask = mb["response_mask"].float()
            values = self._values(mb)
            loss, loss_metrics = value_loss(
                values,
                mb["values"],
                mb["returns"],
                mask,
                self.value_clip,
                self.loss_reduction,
                max_seq_len=self.max_seq_len,
            )
            weight = self._micro_weight(mb, self.loss_reduction, tokens, seqs)
            (loss * weight).backward()
            for key, value in (
                ("loss", loss.detach()),
                ("vf_clip_frac", loss_metrics["vf_clip_frac"]),
                ("values_mean", masked_mean(values.detach(), mask)),
            ):
                sums[key] = sums.get(key, 0.0) + float(value) * weight
        metrics = dist_utils.all_reduce_mean(sums, self._metric_device())
        metrics.update(self._clip_and_step())
        return {f"critic/{key}": value for key, value in metrics.items()}
