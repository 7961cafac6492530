"""Training workers on PyTorch FSDP2: the policy, the frozen reference model and the critic.

One worker object lives in each training process. With a default process group (started by
:class:`skyrl_train.workers.group.WorkerGroup`, gloo on CPU, NCCL on GPU) the model is sharded with
``fully_shard`` per decoder layer and at the root, and every rank trains on its own slice of the batch
(data parallel; FSDP averages the gradients). Without a process group the worker runs unsharded in the
calling process, which is the CPU path of the main job.

Batches are anything with the tensor fields of :class:`skyrl_train.batch.TrainingBatch` (a dataclass or a
plain dict): ``input_ids [B, L]`` (left-padded prompt followed by the right-padded response),
``attention_mask [B, L]`` and ``response_mask [B, T]``, where the response is the last ``T`` columns, so
the log-probability of token ``L - T + t`` comes from the logits at position ``L - T + t - 1``. Training
also reads ``old_log_probs``, ``advantages`` and optionally ``ref_log_probs`` (policy) or ``values`` and
``returns`` (critic). Outputs are float32 CPU tensors of shape ``[B, T]``, 0 outside the response.

Dropout is switched off when a worker is built, so the training forward scores tokens exactly like the
forward that produced ``old_log_probs``; train steps run in train mode (gradient checkpointing needs it),
everything else in eval mode.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from skyrl_train import distributed as dist_utils
from skyrl_train.config import AlgorithmConfig, FSDPConfig, OptimizerConfig, TrainerConfig

ModelFactory = Callable[[], nn.Module]
Batch = Any  # a TrainingBatch, or a dict of tensors with the same field names

_TOKEN_MEAN = "token_mean"


# --------------------------------------------------------------------------------------------- helpers


def batch_tensors(batch: Batch) -> dict[str, torch.Tensor]:
    """The tensor fields of a batch (a dataclass, a mapping or any object) as a plain dict."""
    if isinstance(batch, Mapping):
        items = batch.items()
    elif dataclasses.is_dataclass(batch):
        items = ((f.name, getattr(batch, f.name)) for f in dataclasses.fields(batch))
    else:
        items = vars(batch).items()
    return {key: value for key, value in items if isinstance(value, torch.Tensor)}


def batch_size(tensors: Mapping[str, torch.Tensor]) -> int:
    """Number of rows of a tensor dict (the first dimension of ``input_ids``)."""
    if "input_ids" not in tensors:
        raise KeyError(f"a training batch needs 'input_ids'; it has {sorted(tensors)}")
    return int(tensors["input_ids"].shape[0])


def slice_batch(tensors: Mapping[str, torch.Tensor], start: int, end: int) -> dict[str, torch.Tensor]:
    """Rows ``start:end`` of every per-row tensor (tensors whose first dimension is the batch size)."""
    size = batch_size(tensors)
    return {
        key: (value[start:end] if value.dim() > 0 and value.shape[0] == size else value)
        for key, value in tensors.items()
    }


def iter_micro_batches(tensors: Mapping[str, torch.Tensor], micro_batch_size: int) -> Iterator[dict]:
    """Consecutive slices of at most ``micro_batch_size`` rows."""
    size = batch_size(tensors)
    for start in range(0, size, micro_batch_size):
        yield slice_batch(tensors, start, min(start + micro_batch_size, size))


def build_lr_scheduler(
    optimizer: torch.optim.Optimizer,
    *,
    warmup_steps: int = 0,
    kind: str = "constant",
    total_steps: int | None = None,
    min_lr_ratio: float = 0.0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup over ``warmup_steps`` optimizer steps, then a constant, cosine or linear learning rate.

    ``kind`` is ``constant``, ``cosine`` or ``linear`` (the ``*_with_warmup`` spellings of the config are
    accepted too). Cosine and linear decay from the peak to ``min_lr_ratio * peak`` at ``total_steps`` and
    stay there. The first step already uses ``lr / warmup_steps``, not 0.
    """
    kind = kind.removesuffix("_with_warmup")
    if kind not in ("constant", "cosine", "linear"):
        raise ValueError(f"unknown lr scheduler {kind!r}; choose constant, cosine or linear (_with_warmup)")
    if kind != "constant" and not total_steps:
        raise ValueError(f"the {kind} lr scheduler needs total_steps (the number of optimizer steps)")

    def factor(step: int) -> float:
        if warmup_steps > 0 and step < warmup_steps:
            return (step + 1) / warmup_steps
        if kind == "constant":
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        if kind == "linear":
            return 1.0 - (1.0 - min_lr_ratio) * progress
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    # Left-padded prompts: positions count real tokens only, as during generation.
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def _trim_padding(mb: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """Drop columns that are padding in every row of a micro-batch.

    Returns the trimmed ``input_ids``/``attention_mask``, the number of response columns kept (the response
    stays the last columns) and the full response length ``T``.
    """
    input_ids, attention_mask = mb["input_ids"], mb["attention_mask"]
    length, response_len = input_ids.shape[1], mb["response_mask"].shape[1]
    used = attention_mask.bool().any(dim=0).nonzero()
    if used.numel() == 0:
        return input_ids, attention_mask, response_len, response_len
    first = min(int(used[0]), length - response_len - 1)  # keep the last prompt token: it predicts token 0
    first = max(first, 0)
    last = max(int(used[-1]) + 1, length - response_len + 1)
    kept_response = last - (length - response_len)
    return input_ids[:, first:last], attention_mask[:, first:last], kept_response, response_len


def _pad_right(values: torch.Tensor, length: int) -> torch.Tensor:
    if values.shape[1] == length:
        return values
    return torch.nn.functional.pad(values, (0, length - values.shape[1]))


def _decoder_layers(model: nn.Module, layer_class_names: set[str]) -> list[nn.Module]:
    """The transformer blocks to shard one by one: modules of the model's ``_no_split_modules`` classes,
    else the children of the largest ``nn.ModuleList``."""
    layers = [m for m in model.modules() if type(m).__name__ in layer_class_names]
    if layers:
        return layers
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


def _enable_activation_checkpointing(model: nn.Module) -> None:
    """Recompute each decoder layer's activations in the backward (transformers models)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    elif hasattr(model, "gradient_checkpointing_enable"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    else:
        raise TypeError(f"{type(model).__name__} does not support gradient checkpointing")


def _role_kwargs(trainer: TrainerConfig, fsdp: FSDPConfig) -> dict[str, Any]:
    """The keyword arguments every worker takes from the ``trainer`` section and its role's FSDP settings."""
    return {
        "device": "cuda" if trainer.placement.backend == "cuda" else "cpu",
        "bf16": trainer.bf16,
        "micro_batch_size": trainer.micro_train_batch_size_per_gpu,
        "forward_micro_batch_size": trainer.micro_forward_batch_size_per_gpu,
        "seed": trainer.seed,
        "reshard_after_forward": fsdp.reshard_after_forward,
        "cpu_offload": fsdp.cpu_offload,
    }


def _disable_dropout(model: nn.Module) -> None:
    """Zero every dropout probability: the training forward must score tokens exactly like the forward
    that produced ``old_log_probs`` (the PPO ratio is 1 before the first update)."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
        for name in ("attention_dropout", "dropout", "hidden_dropout"):
            if isinstance(getattr(module, name, None), float):
                setattr(module, name, 0.0)


def _num_sequences(response_mask: torch.Tensor) -> float:
    # The sequence-mean reductions average over rows with at least one response token.
    return float((response_mask.sum(-1) > 0).sum())


@contextlib.contextmanager
def _single_process_dcp_quiet(sharded: bool) -> Iterator[None]:
    # torch.distributed.checkpoint warns that it assumes one process; without a process group that is
    # exactly what we mean.
    with warnings.catch_warnings():
        if not sharded:
            warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        yield


def _full_value(tensor: torch.Tensor) -> float:
    if hasattr(tensor, "full_tensor"):  # a DTensor from FSDP2's clip_grad_norm_
        tensor = tensor.full_tensor()
    return float(tensor.item())


# ------------------------------------------------------------------------------------------ base worker


class _FSDPWorker:
    """Model construction, sharding, forward passes and checkpoints shared by the three workers."""

    role = "model"

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
        gradient_checkpointing: bool = False,
        reshard_after_forward: bool = True,
        cpu_offload: bool = False,
        trainable: bool = True,
    ) -> None:
        if micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.device = self._resolve_device(device)
        self.bf16 = bool(bf16)
        self.micro_batch_size = int(micro_batch_size)
        self.forward_micro_batch_size = int(forward_micro_batch_size or micro_batch_size)
        self.temperature = float(temperature)
        self.rank = dist_utils.get_rank()
        self.world_size = dist_utils.get_world_size()
        self.sharded = dist_utils.is_distributed()
        self.trainable = trainable
        self.reshard_after_forward = reshard_after_forward
        self.cpu_offload = cpu_offload and self.sharded

        # The same random initialisation on every rank, without disturbing the caller's random state.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = self._build_model(model_factory)
        if not self.cpu_offload:  # offloaded parameters stay on the CPU; FSDP moves them for compute
            model.to(self.device)
        if gradient_checkpointing:
            _enable_activation_checkpointing(getattr(model, "backbone", model))
        if not trainable:
            model.requires_grad_(False)
        _disable_dropout(model)
        model.eval()
        if self.sharded:
            self._broadcast_from_rank0(model)
            self._shard(model)
        self.model = model
        self.optimizer: torch.optim.Optimizer | None = None
        self.scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
        self.global_step = 0

    # -- setup

    @staticmethod
    def _resolve_device(device: str | torch.device) -> torch.device:
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        return device

    def _build_model(self, model_factory: ModelFactory) -> nn.Module:
        model = model_factory()
        self._layer_class_names = set(getattr(model, "_no_split_modules", None) or ())
        return model

    def _broadcast_from_rank0(self, model: nn.Module) -> None:
        # Ranks that built the model differently (another seed, another load) would otherwise hold
        # shards of different models.
        import torch.distributed as dist

        with torch.no_grad():
            for tensor in [*model.parameters(), *model.buffers()]:
                if tensor.device == self.device:
                    dist.broadcast(tensor.data, src=0)
                else:  # CPU-offloaded parameters under NCCL travel through the GPU
                    staged = tensor.data.to(self.device)
                    dist.broadcast(staged, src=0)
                    tensor.data.copy_(staged)

    def _shard(self, model: nn.Module) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

        mesh = init_device_mesh(self.device.type, (self.world_size,))
        options = {
            # Gradients are reduced in float32 even when the forward runs in bf16.
            "mp_policy": MixedPrecisionPolicy(reduce_dtype=torch.float32),
            "offload_policy": CPUOffloadPolicy() if self.cpu_offload else OffloadPolicy(),
        }
        for layer in _decoder_layers(model, self._layer_class_names):
            fully_shard(layer, mesh=mesh, reshard_after_forward=self.reshard_after_forward, **options)
        # The root's parameters (embeddings, head) are needed right after the forward by the backward.
        fully_shard(model, mesh=mesh, reshard_after_forward=False, **options)

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.bf16 and self.device.type == "cuda":
            return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _to_device(self, mb: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {key: value.to(self.device, non_blocking=True) for key, value in mb.items()}

    def _build_optimizer(self, optimizer_cfg: Any, total_steps: int | None) -> None:
        opt = self.optimizer_cfg = OptimizerConfig.coerce(optimizer_cfg)
        params = [p for p in self.model.parameters() if p.requires_grad]
        beta1, beta2 = opt.adam_betas
        self.optimizer = torch.optim.AdamW(
            params, lr=opt.lr, betas=(beta1, beta2), weight_decay=opt.weight_decay
        )
        self.max_grad_norm = opt.max_grad_norm
        self.scheduler = build_lr_scheduler(
            self.optimizer, warmup_steps=opt.num_warmup_steps, kind=opt.scheduler, total_steps=total_steps
        )

    # -- forward

    def _forward_logits(self, mb: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, int, int]:
        """Logits that predict the response tokens kept after trimming: ``[b, kept, V]`` (untempered)."""
        input_ids, attention_mask, kept, response_len = _trim_padding(mb)
        with self._autocast():
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=_position_ids(attention_mask),
                use_cache=False,
            )
        logits = out.logits if hasattr(out, "logits") else out[0]
        length = input_ids.shape[1]
        return logits[:, length - kept - 1 : length - 1, :], kept, response_len

    def _log_probs_and_entropy(
        self, mb: Mapping[str, torch.Tensor], *, with_entropy: bool, entropy_grad: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        from skyrl_train.algorithms.logits import entropy_from_logits, log_probs_from_logits

        logits, kept, response_len = self._forward_logits(mb)
        if self.temperature != 1.0:
            logits = logits / self.temperature
        labels = mb["input_ids"][:, mb["input_ids"].shape[1] - response_len :][:, :kept]
        log_probs = _pad_right(log_probs_from_logits(logits, labels), response_len)
        entropy = None
        if with_entropy:
            # Without an entropy bonus the entropy is only a metric: keep its [b, T, V] graph out.
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                entropy = _pad_right(entropy_from_logits(logits), response_len)
        return log_probs, entropy

    def _metric_device(self) -> Any:
        return self.device if self.device.type == "cuda" else "cpu"

    @torch.no_grad()
    def compute_log_probs(self, batch: Batch) -> torch.Tensor:
        """Per-token log-probabilities of the response tokens, ``[B, T]`` float32 on CPU (no gradients).

        Runs in micro-batches of ``forward_micro_batch_size``; 0 where ``response_mask`` is 0.
        """
        tensors = batch_tensors(batch)
        self.model.eval()
        out = []
        for mb in iter_micro_batches(tensors, self.forward_micro_batch_size):
            mb = self._to_device(mb)
            log_probs, _ = self._log_probs_and_entropy(mb, with_entropy=False)
            out.append((log_probs * mb["response_mask"]).float().cpu())
        return torch.cat(out, dim=0)

    # -- weights and checkpoints

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Unsharded float tensors on CPU, by parameter name, for the inference engine.

        A collective under a process group: every rank must call it; rank 0 gets the tensors, the other
        ranks an empty dict.
        """
        if not self.sharded:
            return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(self.model, options=options)
        return dict(state) if self.rank == 0 else {}

    def _dcp_state(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

        if self.optimizer is None:
            return {"model": get_model_state_dict(self.model)}
        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        return {"model": model_state, "optimizer": optimizer_state}

    def save_checkpoint(self, path: str | Path) -> None:
        """Write the model, optimizer and scheduler into folder ``path`` (every rank must call it).

        Model and optimizer go through torch.distributed.checkpoint (each rank writes its own shards, and
        a checkpoint can be loaded under a different number of processes); the scheduler and the step
        count go to ``worker_state.pt``.
        """
        import torch.distributed.checkpoint as dcp

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        with _single_process_dcp_quiet(self.sharded):
            dcp.save(self._dcp_state(), checkpoint_id=str(path / "dcp"), no_dist=not self.sharded)
        if self.rank == 0:
            extra = {
                "global_step": self.global_step,
                "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            }
            torch.save(extra, path / "worker_state.pt")
        dist_utils.barrier()

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore what :meth:`save_checkpoint` wrote into ``path`` (every rank must call it)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

        path = Path(path)
        if not (path / "dcp").is_dir():
            raise FileNotFoundError(f"no worker checkpoint in '{path}' (expected a 'dcp' folder)")
        state = self._dcp_state()
        with _single_process_dcp_quiet(self.sharded):
            dcp.load(state, checkpoint_id=str(path / "dcp"), no_dist=not self.sharded)
        if self.optimizer is None:
            set_model_state_dict(self.model, state["model"])
        else:
            set_state_dict(
                self.model,
                self.optimizer,
                model_state_dict=state["model"],
                optim_state_dict=state["optimizer"],
            )
        extra = torch.load(path / "worker_state.pt", map_location="cpu", weights_only=False)
        self.global_step = int(extra["global_step"])
        if self.scheduler is not None and extra["scheduler"] is not None:
            self.scheduler.load_state_dict(extra["scheduler"])

    # -- optimizer step

    def _clip_and_step(self) -> dict[str, float]:
        """Clip gradients (FSDP-aware), step the optimizer and the scheduler; skip non-finite steps."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        max_norm = float(self.max_grad_norm) if self.max_grad_norm else float("inf")
        grad_norm = _full_value(torch.nn.utils.clip_grad_norm_(params, max_norm))
        lr = float(self.optimizer.param_groups[0]["lr"])
        skipped = not math.isfinite(grad_norm)
        if not skipped:
            self.optimizer.step()
            self.scheduler.step()
            self.global_step += 1
        self.optimizer.zero_grad(set_to_none=True)
        self.model.eval()
        return {"grad_norm": grad_norm, "lr": lr, "skipped_step": float(skipped)}

    def _global_counts(self, tensors: Mapping[str, torch.Tensor]) -> tuple[float, float]:
        tokens = float(tensors["response_mask"].sum())
        sequences = _num_sequences(tensors["response_mask"])
        device = self.device if self.device.type == "cuda" else "cpu"
        return dist_utils.all_reduce_sum(tokens, device), dist_utils.all_reduce_sum(sequences, device)

    def _micro_weight(self, mb: Mapping[str, torch.Tensor], reduction: str, tokens: float, seqs: float):
        """Factor on a micro-batch's reduced loss so that the accumulated gradient equals the gradient of
        the loss reduced over the whole (all-rank) mini-batch. FSDP averages gradients over ranks, hence
        the world size factor."""
        if reduction == _TOKEN_MEAN:
            share = float(mb["response_mask"].sum()) / max(tokens, 1.0)
        else:
            share = _num_sequences(mb["response_mask"]) / max(seqs, 1.0)
        return share * self.world_size

    def train_batch(self, batch: Batch, mini_batch_size: int, update_epochs: int = 1) -> dict[str, float]:
        """Several optimizer steps over one batch: ``update_epochs`` passes of consecutive mini-batches.

        Returns the metrics averaged over the steps, plus ``<role>/num_updates``.
        """
        return run_mini_batches(self, batch, mini_batch_size, update_epochs, self.role)

    def train_step(self, batch: Batch) -> dict[str, float]:  # pragma: no cover - overridden
        raise NotImplementedError

    def reset_optimizer(self, optimizer_cfg: Any, total_steps: int | None = None) -> None:
        """Start a fresh optimizer and learning-rate schedule (e.g. RL after a supervised warm-up)."""
        self._build_optimizer(optimizer_cfg, total_steps)

    def shutdown(self) -> None:
        """Nothing to stop in process; here so that a worker and a WorkerGroup are interchangeable."""


def run_mini_batches(worker: Any, batch: Batch, mini_batch_size: int, update_epochs: int, role: str):
    """Call ``worker.train_step`` on consecutive mini-batches and average the metrics."""
    tensors = batch_tensors(batch)
    size = batch_size(tensors)
    if mini_batch_size < 1 or size % mini_batch_size:
        raise ValueError(f"the batch of {size} rows does not split into mini-batches of {mini_batch_size}")
    totals: dict[str, float] = {}
    steps = 0
    for _ in range(update_epochs):
        for start in range(0, size, mini_batch_size):
            metrics = worker.train_step(slice_batch(tensors, start, start + mini_batch_size))
            for key, value in metrics.items():
                totals[key] = totals.get(key, 0.0) + value
            steps += 1
    out = {key: value / steps for key, value in totals.items()}
    out[f"{role}/num_updates"] = float(steps)
    return out


# -------------------------------------------------------------------------------------------- policy


def _old_log_probs(mb: Mapping[str, torch.Tensor], log_probs: torch.Tensor) -> torch.Tensor:
    """The batch's old log-probs; without them (a strictly on-policy step: one mini-batch, one update
    epoch) the current ones, detached, which are the same numbers without a second forward pass."""
    old = mb.get("old_log_probs")
    return log_probs.detach() if old is None else old


def resolve_policy_loss(name: str) -> Callable:
    """The policy loss registered under ``name`` (built-ins and ``@register_policy_loss`` ones)."""
    from skyrl_train.algorithms.registry import get_policy_loss

    return get_policy_loss(name)


class PolicyWorker(_FSDPWorker):
    """The policy: log-probabilities and clipped policy-gradient updates.

    ``optimizer_cfg``: an :class:`~skyrl_train.config.OptimizerConfig` (a dict of its fields or None: the
    schema's defaults); cosine and linear schedules need ``total_steps`` (optimizer steps of the run).
    ``algorithm_cfg``: an :class:`~skyrl_train.config.AlgorithmConfig` (or a dict of its fields): the
    worker reads ``policy_loss_type``, ``loss_reduction``, ``max_seq_len``, ``use_kl_loss``,
    ``kl_loss_coef``, ``kl_estimator_type``, ``use_entropy_loss`` and ``entropy_loss_coef``; the policy
    loss reads its own fields (``eps_clip_low``...) from it.
    ``policy_loss_fn`` replaces the registry lookup by ``policy_loss_type`` with a callable of the
    registry's signature ``fn(log_probs, old_log_probs, advantages, response_mask, cfg) -> (loss,
    metrics)``. ``temperature`` divides the logits, as the sampler did.
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
    ) -> None:
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
        )
        algorithm = self.algorithm_cfg = AlgorithmConfig.coerce(algorithm_cfg)
        self.loss_reduction = algorithm.loss_reduction
        self.max_seq_len = algorithm.max_seq_len
        self.policy_loss_fn = policy_loss_fn or resolve_policy_loss(algorithm.policy_loss_type)
        self.use_kl_loss = algorithm.use_kl_loss
        self.kl_loss_coef = algorithm.kl_loss_coef
        self.kl_estimator = algorithm.kl_estimator_type
        self.entropy_coef = algorithm.entropy_loss_coef if algorithm.use_entropy_loss else 0.0
        self._build_optimizer(optimizer_cfg, total_steps)

    @staticmethod
    def config_kwargs(trainer: TrainerConfig, *, temperature: float) -> dict[str, Any]:
        """The constructor's keyword arguments for the config's ``trainer`` section (everything but the
        model factory and ``total_steps``); ``temperature`` is the rollouts' sampling temperature."""
        return {
            "optimizer_cfg": trainer.policy.optimizer_config,
            "algorithm_cfg": trainer.algorithm,
            "temperature": temperature,
            **_role_kwargs(trainer, trainer.policy.fsdp_config),
            "gradient_checkpointing": trainer.gradient_checkpointing,
        }

    def _reduce(self, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        from skyrl_train.algorithms.reductions import reduce_loss

        return reduce_loss(values, mask, self.loss_reduction, max_seq_len=self.max_seq_len)

    def _kl(self, log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
        from skyrl_train.algorithms.kl import kl_penalty

        return kl_penalty(log_probs, ref_log_probs, self.kl_estimator)

    def train_step(self, batch: Batch) -> dict[str, float]:
        """One optimizer step on one mini-batch (this rank's slice of it under a process group).

        Micro-batches of ``micro_batch_size`` accumulate gradients, each loss weighted by its share of the
        mini-batch's tokens (token_mean) or sequences (the sequence-mean reductions) across all ranks, so
        the step equals one step on the whole mini-batch at once. Returns metrics averaged over ranks:
        ``policy/loss``, ``policy/pg_loss``, ``policy/entropy`` (token mean), ``policy/grad_norm`` (before
        clipping), ``policy/lr``, ``policy/skipped_step`` (1 when the gradient was not finite and the step
        was skipped), the loss's own metrics (``policy/clip_frac``...), and, when the batch carries
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

        for mb in iter_micro_batches(tensors, self.micro_batch_size):
            mb = self._to_device(mb)
            mask = mb["response_mask"].float()
            log_probs, entropy = self._log_probs_and_entropy(
                mb, with_entropy=True, entropy_grad=bool(self.entropy_coef)
            )
            pg_loss, loss_metrics = self.policy_loss_fn(
                log_probs, _old_log_probs(mb, log_probs), mb["advantages"], mask, self.algorithm_cfg
            )
            loss = pg_loss
            weight = self._micro_weight(mb, self.loss_reduction, tokens, seqs)
            if has_ref:
                kl_loss = self._reduce(self._kl(log_probs, mb["ref_log_probs"]), mask)
                if self.use_kl_loss:
                    loss = loss + self.kl_loss_coef * kl_loss
                    add("kl_loss", kl_loss.detach(), weight)
                add("kl", kl_loss.detach(), weight)
            if self.entropy_coef:
                loss = loss - self.entropy_coef * self._reduce(entropy, mask)
            (loss * weight).backward()
            add("loss", loss.detach(), weight)
            add("pg_loss", pg_loss.detach(), weight)
            for key, value in (loss_metrics or {}).items():
                add(key, value, weight)
            entropy_sum += float((entropy.detach() * mask).sum())

        device = self._metric_device()
        metrics = dist_utils.all_reduce_mean(sums, device)
        metrics["entropy"] = dist_utils.all_reduce_sum(entropy_sum, device) / max(tokens, 1.0)
        metrics.update(self._clip_and_step())
        return {f"policy/{key}": value for key, value in metrics.items()}


# ----------------------------------------------------------------------------------------- reference


class RefWorker(_FSDPWorker):
    """The frozen reference model for the KL term: :meth:`compute_log_probs` only."""

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
        )

    @staticmethod
    def config_kwargs(trainer: TrainerConfig, *, temperature: float) -> dict[str, Any]:
        """The constructor's keyword arguments for the config's ``trainer`` section (all but the model)."""
        return {"temperature": temperature, **_role_kwargs(trainer, trainer.ref.fsdp_config)}


# -------------------------------------------------------------------------------------------- critic


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


class CriticWorker(_FSDPWorker):
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
            **_role_kwargs(trainer, trainer.critic.fsdp_config),
            "gradient_checkpointing": trainer.gradient_checkpointing,
        }

    def _build_model(self, model_factory: ModelFactory) -> nn.Module:
        lm = model_factory()
        self._layer_class_names = set(getattr(lm, "_no_split_modules", None) or ())
        return ValueModel(lm)

    def _values(self, mb: Mapping[str, torch.Tensor]) -> torch.Tensor:
        input_ids, attention_mask, kept, response_len = _trim_padding(mb)
        with self._autocast():
            (values,) = self.model(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=_position_ids(attention_mask)
            )
        length = input_ids.shape[1]
        # The value of the state before each response token, aligned like the log-probabilities.
        return _pad_right(values[:, length - kept - 1 : length - 1].float(), response_len)

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
        ``critic/lr`` and ``critic/skipped_step``, averaged over ranks.
        """
        from skyrl_train.algorithms.reductions import masked_mean
        from skyrl_train.algorithms.value_loss import value_loss

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
