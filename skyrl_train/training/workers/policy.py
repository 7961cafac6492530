"""``PolicyWorker``: the policy's log-probabilities and its clipped policy-gradient updates.

The loss is the one registered under ``trainer.algorithm.policy_loss_type`` (PPO clip, dual clip, GSPO...),
plus the KL loss and the entropy bonus when they are on, reduced as ``loss_reduction`` says. Micro-batches
accumulate gradients weighted so that one step equals one step on the whole (all-rank) mini-batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from skyrl_train import distributed as dist_utils
from skyrl_train.config import AlgorithmConfig, PolicyLoraConfig, TrainerConfig
from skyrl_train.training.algorithms.off_policy import corrected_advantages
from skyrl_train.training.workers.base import FSDPWorker, ModelFactory, role_kwargs
from skyrl_train.training.workers.batching import Batch, batch_tensors

__all__ = ["PolicyWorker", "resolve_policy_loss"]


def _old_log_probs(mb: Mapping[str, torch.Tensor], log_probs: torch.Tensor) -> torch.Tensor:
    """The batch's old log-probs; without them (a strictly on-policy step: one mini-batch, one update
    epoch) the current ones, detached, which are the same numbers without a second forward pass."""
    old = mb.get("old_log_probs")
    return log_probs.detach() if old is None else old


def resolve_policy_loss(name: str) -> Callable:
    """The policy loss registered under ``name`` (built-ins and ``@register_policy_loss`` ones)."""
    from skyrl_train.training.algorithms.registry import get_policy_loss

    return get_policy_loss(name)


class PolicyWorker(FSDPWorker):
    """The policy: log-probabilities and clipped policy-gradient updates.

    ``optimizer_cfg``: an :class:`~skyrl_train.config.OptimizerConfig` (a dict of its fields or None: the
    schema's defaults); cosine and linear schedules need ``total_steps`` (optimizer steps of the run).
    ``algorithm_cfg``: an :class:`~skyrl_train.config.AlgorithmConfig` (or a dict of its fields): the
    worker reads ``policy_loss_type``, ``loss_reduction``, ``max_seq_len``, ``use_kl_loss``,
    ``kl_loss_coef``, ``kl_estimator_type``, ``use_entropy_loss``, ``entropy_loss_coef`` and
    ``off_policy_correction`` (a batch's ``rollout_log_probs`` weigh its tokens); the policy
    loss reads its own fields (``eps_clip_low``...) from it.
    ``lora``: a :class:`~skyrl_train.config.PolicyLoraConfig` (or a dict of its fields; rank 0 or None: every
    weight trains). With a rank, ``model`` is the model with peft's LoRA layers injected (the same class,
    adapters inside its linear layers), only the adapters require gradients, and :meth:`full_state_dict`
    gives the merged weights under the plain model's names.
    ``policy_loss_fn`` replaces the registry lookup by ``policy_loss_type`` with a callable of the
    registry's signature ``fn(log_probs, old_log_probs, advantages, response_mask, cfg) -> (loss,
    metrics)``. ``temperature`` divides the logits, as the sampler did. ``packed`` (the default) runs each
    group's shared prompt once and no padding (:func:`~skyrl_train.training.workers.batching.pack_micro_batch`);
    False runs the padded rows as they come (the same numbers, more work). On the packed path a micro-batch
    also holds at most ``max_tokens_per_micro_batch`` packed tokens (past its first row), which bounds the
    activation memory of a step (about 1.4 MB a token for SmolLM2-135M in float32); None: rows only.
    """

    role = "policy"

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
        temperature: float = 1.0,
        seed: int = 0,
        gradient_checkpointing: bool = False,
        reshard_after_forward: bool = True,
        cpu_offload: bool = False,
        total_steps: int | None = None,
        policy_loss_fn: Callable | None = None,
        packed: bool = True,
        max_tokens_per_micro_batch: int | None = 1024,
        lora: Any = None,
    ) -> None:
        self.lora = PolicyLoraConfig.coerce(lora)
        self.seed = seed  # the adapters' initialisation (read while the model is built)
        super().__init__(
            model_factory,
            device=device,
            bf16=bf16,
            micro_batch_size=micro_batch_size,
            forward_micro_batch_size=forward_micro_batch_size,
            temperature=temperature,
            seed=seed,
            gradient_checkpointing=gradient_checkpointing,
            reshard_after_forward=reshard_after_forward,
            cpu_offload=cpu_offload,
            trainable=True,
            packed=packed,
            max_tokens_per_micro_batch=max_tokens_per_micro_batch,
        )
        algorithm = self.algorithm_cfg = AlgorithmConfig.coerce(algorithm_cfg)
        self.loss_reduction = algorithm.loss_reduction
        self.max_seq_len = algorithm.max_seq_len
        self.policy_loss_fn = policy_loss_fn or resolve_policy_loss(algorithm.policy_loss_type)
        self.use_kl_loss = algorithm.use_kl_loss
        self.kl_loss_coef = algorithm.kl_loss_coef
        self.kl_estimator = algorithm.kl_estimator_type
        self.entropy_coef = algorithm.entropy_loss_coef if algorithm.use_entropy_loss else 0.0
        self.off_policy = algorithm.off_policy_correction
        self._build_optimizer(optimizer_cfg, total_steps)

    @staticmethod
    def config_kwargs(trainer: TrainerConfig, *, temperature: float) -> dict[str, Any]:
        """The constructor's keyword arguments for the config's ``trainer`` section (everything but the
        model factory and ``total_steps``); ``temperature`` is the rollouts' sampling temperature."""
        return {
            "optimizer_cfg": trainer.policy.optimizer_config,
            "algorithm_cfg": trainer.algorithm,
            "temperature": temperature,
            **role_kwargs(trainer, trainer.policy.fsdp_config),
            "gradient_checkpointing": trainer.gradient_checkpointing,
            "lora": trainer.policy.lora,
        }

    def _build_model(self, model_factory: ModelFactory) -> nn.Module:
        model = super()._build_model(model_factory)
        if not self.lora.rank:
            return model
        from skyrl_train.training.lora import apply_lora, lora_targets, ties_output_embeddings

        lora = self.lora
        if lora.train_unembed and ties_output_embeddings(model):
            # the engines hold one weight for both (vLLM skips a tied head's tensor when it loads)
            raise ValueError(
                "trainer.policy.lora.train_unembed: this model ties its output projection to its input "
                "embeddings, so the engine could not take an adapted head apart from them; set it to false"
            )
        targets = lora_targets(
            model, train_attn=lora.train_attn, train_mlp=lora.train_mlp, train_unembed=lora.train_unembed
        )
        peft_model = apply_lora(model, rank=lora.rank, alpha=lora.alpha, targets=targets, seed=self.seed)
        # peft injects its layers into the model itself: keep the model (its forward, its backbone and head
        # for the packed path, an engine can run it) and drop the wrapper, which only adds methods
        return peft_model.get_base_model()

    def reset_optimizer(
        self, optimizer_cfg: Any, total_steps: int | None = None, *, base: bool = False
    ) -> None:
        """A fresh optimizer and schedule (see :class:`FSDPWorker`). With LoRA, ``base`` chooses what trains
        from now on: the base weights with the adapters held as they are (the ``full_warmup`` warm-up), or,
        by default, the adapters alone. Without LoRA every weight trains either way."""
        if self.lora.rank:
            for name, param in self.model.named_parameters():
                param.requires_grad_((".lora_" in name) != base)
        self.optimizer = self.scheduler = None  # the old state goes before the new optimizer is built
        super().reset_optimizer(optimizer_cfg, total_steps)

    def set_loss_reduction(self, mode: str) -> str:
        """Reduce the losses of the steps from now on with ``mode`` (one of
        :data:`~skyrl_train.training.algorithms.reductions.LOSS_REDUCTIONS`; the supervised warm-up's own
        reduction); the reduction it replaces."""
        from skyrl_train.training.algorithms.reductions import LOSS_REDUCTIONS

        if mode not in LOSS_REDUCTIONS:
            raise ValueError(f"unknown loss reduction {mode!r}; one of {LOSS_REDUCTIONS}")
        previous = self.loss_reduction
        self.loss_reduction = mode
        self.algorithm_cfg = self.algorithm_cfg.model_copy(update={"loss_reduction": mode})
        return previous

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The plain model's weights for the inference engine: with LoRA, each adapted weight merged
        (``W0 + B @ A * alpha / rank``) and the adapters left out (see :class:`FSDPWorker`)."""
        state = super().full_state_dict()
        if not self.lora.rank or not state:
            return state
        from skyrl_train.training.lora import merged_state_dict

        return merged_state_dict(state, scaling=self.lora.alpha / self.lora.rank)

    def _reduce(self, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        from skyrl_train.training.algorithms.reductions import reduce_loss

        return reduce_loss(values, mask, self.loss_reduction, max_seq_len=self.max_seq_len)

    def _kl(self, log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
        from skyrl_train.training.algorithms.kl import kl_penalty

        return kl_penalty(log_probs, ref_log_probs, self.kl_estimator)

    def train_step(self, batch: Batch) -> dict[str, float]:
        """One optimizer step on one mini-batch (this rank's slice of it under a process group).

        Micro-batches of ``micro_batch_size`` accumulate gradients, each loss weighted by its share of the
        mini-batch's tokens (token_mean) or sequences (the sequence-mean reductions) across all ranks, so
        the step equals one step on the whole mini-batch at once. Returns metrics averaged over ranks:
        ``policy/loss``, ``policy/pg_loss``, ``policy/entropy`` (token mean), ``policy/grad_norm`` (before
        clipping), ``policy/nll`` (the trained tokens' negative log-likelihood before the update, reduced like
        the loss), ``policy/lr``, ``policy/skipped_step`` (1 when the gradient was not finite and the step
        was skipped), ``policy/no_gradient_step`` (1 when the gradient was exactly 0, as in a batch without
        reward variance, and no update was made), the loss's own metrics (``policy/clip_frac``...), and, when the batch carries
        ``ref_log_probs``, ``policy/kl`` (and ``policy/kl_loss`` when the KL loss is on).
        """
        tensors = batch_tensors(batch)
        self.model.train()  # dropout is off (see _disable_dropout); gradient checkpointing needs it
        has_ref = tensors.get("ref_log_probs") is not None
        tokens, seqs = self._global_counts(tensors)
        sums: dict[str, float] = {}
        entropy_sum = 0.0

        def add(key: str, value: Any, weight: float) -> None:
            sums[key] = sums.get(key, 0.0) + float(value) * weight

        for mb, padding in self._train_micro_batches(tensors):
            mb = self._to_device(mb)
            mask = mb["response_mask"].float()
            log_probs, entropy = self._log_probs_and_entropy(
                mb, with_entropy=True, entropy_grad=bool(self.entropy_coef)
            )
            old_log_probs = _old_log_probs(mb, log_probs)
            # tokens another policy sampled (asynchronous rollouts): weighted by the behaviour correction
            advantages, correction = corrected_advantages(
                mb["advantages"], old_log_probs, mb.get("rollout_log_probs"), mask, self.off_policy
            )
            pg_loss, loss_metrics = self.policy_loss_fn(
                log_probs, old_log_probs, advantages, mask, self.algorithm_cfg
            )
            loss_metrics = {**(loss_metrics or {}), **correction}
            loss = pg_loss
            kl_loss = None
            if has_ref:
                kl_loss = self._reduce(self._kl(log_probs, mb["ref_log_probs"]), mask)
                if self.use_kl_loss:
                    loss = loss + self.kl_loss_coef * kl_loss
            if self.entropy_coef:
                loss = loss - self.entropy_coef * self._reduce(entropy, mask)
            # a padding micro-batch only keeps this rank in step with the others' collectives
            weight = 0.0 if padding else self._micro_weight(mb, self.loss_reduction, tokens, seqs)
            (loss * weight).backward()
            if padding:
                continue
            if kl_loss is not None:
                if self.use_kl_loss:
                    add("kl_loss", kl_loss.detach(), weight)
                add("kl", kl_loss.detach(), weight)
            add("loss", loss.detach(), weight)
            add("pg_loss", pg_loss.detach(), weight)
            add("nll", self._reduce(-log_probs.detach(), mask), weight)
            for key, value in (loss_metrics or {}).items():
                add(key, value, weight)
            entropy_sum += float((entropy.detach() * mask).sum())

        device = self._metric_device()
        metrics = dist_utils.all_reduce_mean(sums, device)
        metrics["entropy"] = dist_utils.all_reduce_sum(entropy_sum, device) / max(tokens, 1.0)
        metrics.update(self._clip_and_step())
        return {f"policy/{key}": value for key, value in metrics.items()}
