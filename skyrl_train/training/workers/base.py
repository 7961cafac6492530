"""The training worker's base: one model in one training process, sharded with FSDP2 under a process group.

One worker object lives in each training process. With a default process group (started by
:class:`skyrl_train.training.workers.group.WorkerGroup`, gloo on CPU, NCCL with gloo beside it for CPU tensors on GPU)
the model is sharded with ``fully_shard`` per decoder layer and at the root, and every rank trains on its
own slice of the batch (data parallel; FSDP averages the gradients; every rank runs as many micro-batches as
the busiest one, so the collectives pair up). Without a process group the worker runs unsharded in the
calling process, which is the CPU path of the main job.

:class:`FSDPWorker` builds the model on the CPU (the same initialisation on every rank), shards it layer by
layer onto the device with rank 0's weights in every shard (no rank holds the whole model on its GPU; in
bfloat16 on CUDA with ``trainer.bf16``, gradients reduced in float32), runs the forward
passes that score response tokens, the optimizer step with its learning-rate schedule
(``transformers.get_scheduler``, as SkyRL), full state dicts for weight sync and sharded checkpoints. The
roles subclass it: :mod:`.policy`, :mod:`.reference`, :mod:`.critic`. Batches: :mod:`.batching`. Outputs are
float32 CPU tensors of shape ``[B, T]``, 0 outside the response.

Dropout is switched off when a worker is built, so the training forward scores tokens exactly like the
forward that produced ``old_log_probs``; train steps run in train mode (gradient checkpointing needs it),
everything else in eval mode.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import get_scheduler

from skyrl_train import distributed as dist_utils
from skyrl_train.config import FSDPConfig, OptimizerConfig, TrainerConfig
from skyrl_train.training.workers.batching import (
    Batch,
    balance_micro_batches,
    batch_tensors,
    iter_micro_batches,
    iter_token_micro_batches,
    micro_batch_weight,
    num_sequences,
    pack_micro_batch,
    pad_right,
    position_ids,
    run_mini_batches,
    trim_padding,
)

__all__ = [
    "FSDPWorker",
    "ModelFactory",
    "build_lr_scheduler",
    "local_shard",
    "mixed_precision_policy",
    "role_kwargs",
]

ModelFactory = Callable[[], nn.Module]
"""Builds the worker's model (called once per process, under the worker's seed)."""

_SCHEDULES = {"constant": "constant_with_warmup", "cosine": "cosine", "linear": "linear"}


def build_lr_scheduler(
    optimizer: torch.optim.Optimizer,
    *,
    warmup_steps: int = 0,
    kind: str = "constant",
    total_steps: int | None = None,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over ``warmup_steps`` optimizer steps, then a constant, cosine or linear learning rate.

    ``kind`` is ``constant``, ``cosine`` or ``linear`` (the ``*_with_warmup`` spellings of the config are
    accepted too); the schedules are ``transformers.get_scheduler``'s, as in SkyRL: the warm-up rises from 0
    (step ``s`` uses ``lr * s / warmup_steps``), cosine and linear decay to 0 at ``total_steps``.
    """
    name = _SCHEDULES.get(kind.removesuffix("_with_warmup"))
    if name is None:
        raise ValueError(f"unknown lr scheduler {kind!r}; choose constant, cosine or linear (_with_warmup)")
    if name != "constant_with_warmup" and not total_steps:
        raise ValueError(f"the {kind} lr scheduler needs total_steps (the number of optimizer steps)")
    return get_scheduler(
        name, optimizer, num_warmup_steps=warmup_steps, num_training_steps=total_steps or None
    )


def role_kwargs(trainer: TrainerConfig, fsdp: FSDPConfig) -> dict[str, Any]:
    """The keyword arguments every worker takes from the ``trainer`` section and its role's FSDP settings."""
    return {
        "device": trainer.placement.device,
        "bf16": trainer.bf16,
        "micro_batch_size": trainer.micro_train_batch_size_per_gpu,
        "forward_micro_batch_size": trainer.micro_forward_batch_size_per_gpu,
        "seed": trainer.seed,
        "reshard_after_forward": fsdp.reshard_after_forward,
        "cpu_offload": fsdp.cpu_offload,
    }


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


def _disable_dropout(model: nn.Module) -> None:
    """Zero every dropout probability: the training forward must score tokens exactly like the forward
    that produced ``old_log_probs`` (the PPO ratio is 1 before the first update)."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
        for name in ("attention_dropout", "dropout", "hidden_dropout"):
            if isinstance(getattr(module, name, None), float):
                setattr(module, name, 0.0)


@contextlib.contextmanager
def _single_process_dcp_quiet(sharded: bool) -> Iterator[None]:
    # torch.distributed.checkpoint warns that it assumes one process; without a process group that is
    # exactly what we mean.
    with warnings.catch_warnings():
        if not sharded:
            warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        yield


def _return_freed_memory_to_the_os() -> None:
    """Serve allocations of 1 MiB and more with their own mappings, unmapped when freed (glibc).

    glibc raises its mmap threshold each time a large block is freed, after which a step's activations
    come from the heap, whose freed pages stay resident: the process's memory grows step after step and
    peaks gigabytes above what it holds. A fixed threshold keeps the peak at what is live (measured on the
    main job: 6.5 GB -> 5.3 GB), for a page fault per fresh page of a large tensor.
    """
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD


def mixed_precision_policy(device: torch.device, bf16: bool) -> Any:
    """FSDP2's precision for a model sharded on ``device``: with ``bf16`` on CUDA (``trainer.bf16``) the
    parameters are all-gathered and used in bfloat16 (half the bytes of float32); gradients are always
    reduced in float32. Elsewhere everything stays float32 (a CPU trains in float32)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    param_dtype = torch.bfloat16 if bf16 and torch.device(device).type == "cuda" else None
    return MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)


def local_shard(full: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s part of ``full`` as FSDP2 shards it: ``torch.chunk`` over dim 0, empty for ranks past
    the last chunk."""
    chunks = torch.chunk(full, world_size, dim=0)
    if rank < len(chunks):
        return chunks[rank]
    return full.new_empty((0, *full.shape[1:]))


def _full_value(tensor: torch.Tensor) -> float:
    if hasattr(tensor, "full_tensor"):  # a DTensor from FSDP2's clip_grad_norm_
        tensor = tensor.full_tensor()
    return float(tensor.item())


class FSDPWorker:
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
        packed: bool = True,
        logits_chunk_size: int = 128,
        max_tokens_per_micro_batch: int | None = 1024,
    ) -> None:
        if micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.device = self._resolve_device(device)
        if self.device.type == "cpu":
            _return_freed_memory_to_the_os()
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
        # packed: shared prompts once, no padding, chunked log-softmax; else the padded rows as they come
        self.packed = bool(packed)
        if logits_chunk_size < 1:
            raise ValueError(f"logits_chunk_size must be >= 1, got {logits_chunk_size}")
        self.logits_chunk_size = int(logits_chunk_size)
        if max_tokens_per_micro_batch is not None and max_tokens_per_micro_batch < 1:
            raise ValueError(
                f"max_tokens_per_micro_batch must be >= 1 or None, got {max_tokens_per_micro_batch}"
            )
        # the packed path also cuts micro-batches by tokens: activation memory follows tokens, not rows
        self.max_tokens_per_micro_batch = max_tokens_per_micro_batch if self.packed else None
        self.last_forward_tokens = 0
        self.last_forward_attended = 0

        # The same random initialisation on every rank, without disturbing the caller's random state (the
        # CPU's and every GPU's: torch.manual_seed reseeds them all).
        with torch.random.fork_rng(devices=dist_utils.fork_rng_devices()):
            torch.manual_seed(seed)
            model = self._build_model(model_factory)
        if gradient_checkpointing:
            _enable_activation_checkpointing(getattr(model, "backbone", model))
        if not trainable:
            model.requires_grad_(False)
        _disable_dropout(model)
        model.eval()
        if self.sharded:
            # the model stays on the CPU: each rank keeps only its shard on the device
            self._shard_from_rank0(model)
        else:
            model.to(self.device)
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

    def _shard_from_rank0(self, model: nn.Module) -> None:
        """Shard the CPU-built ``model`` over the ranks and load rank 0's weights into every shard.

        ``fully_shard`` moves one decoder layer at a time to the device and keeps this rank's shard of it,
        so no rank ever holds the whole model on its GPU. Rank 0's tensors then travel one at a time
        (staged on the device, broadcast, each rank copying its own chunk): ranks that built the model
        differently (another seed, another load) would otherwise hold shards of different models.
        """
        rank0_tensors = (
            {name: t.detach() for name, t in [*model.named_parameters(), *model.named_buffers()]}
            if self.rank == 0
            else {}
        )
        self._shard(model)
        self._load_rank0_tensors(model, rank0_tensors)
        del rank0_tensors
        if self.device.type == "cuda":
            torch.cuda.empty_cache()  # the layers' unsharded copies: back to the driver, not kept in reserve

    def _load_rank0_tensors(self, model: nn.Module, rank0_tensors: Mapping[str, torch.Tensor]) -> None:
        import torch.distributed as dist

        with torch.no_grad():
            for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
                if self.rank == 0:
                    staged = rank0_tensors[name].to(self.device)
                else:
                    staged = torch.empty(tensor.shape, dtype=tensor.dtype, device=self.device)
                dist.broadcast(staged, src=0)
                if hasattr(tensor, "to_local"):  # a DTensor: this rank's chunk of dim 0 (FSDP2's sharding)
                    local = tensor.to_local()
                    chunk = local_shard(staged, self.rank, self.world_size)
                    if chunk.shape != local.shape:
                        raise RuntimeError(
                            f"{name}: this rank's shard has shape {tuple(local.shape)}, the chunk of rank "
                            f"{self.rank} of {self.world_size} of the full tensor {tuple(chunk.shape)}"
                        )
                    local.copy_(chunk)
                else:
                    tensor.data.copy_(staged)

    def _shard(self, model: nn.Module) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

        mesh = init_device_mesh(self.device.type, (self.world_size,))
        options = {
            "mp_policy": mixed_precision_policy(self.device, self.bf16),
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
        # Unsharded, the fused kernel updates each parameter in one pass: no foreach temporaries the size of
        # the model (a peak of several hundred MB) and far less memory traffic on a CPU.
        fused = not self.sharded and self.device.type in ("cpu", "cuda")
        self.optimizer = torch.optim.AdamW(
            params, lr=opt.lr, betas=(beta1, beta2), weight_decay=opt.weight_decay, fused=fused or None
        )
        self.max_grad_norm = opt.max_grad_norm
        self.scheduler = build_lr_scheduler(
            self.optimizer, warmup_steps=opt.num_warmup_steps, kind=opt.scheduler, total_steps=total_steps
        )

    # -- forward

    def _forward_logits(self, mb: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, int, int]:
        """Logits that predict the response tokens kept after trimming: ``[b, kept, V]`` (untempered)."""
        input_ids, attention_mask, kept, response_len = trim_padding(mb)
        with self._autocast():
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids(attention_mask),
                use_cache=False,
            )
        logits = out.logits if hasattr(out, "logits") else out[0]
        length = input_ids.shape[1]
        return logits[:, length - kept - 1 : length - 1, :], kept, response_len

    def _log_probs_and_entropy(
        self, mb: Mapping[str, torch.Tensor], *, with_entropy: bool, entropy_grad: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``[b, T]`` log-probs (and entropies) of a micro-batch's response tokens, 0 past each response."""
        if self.packed:
            return self._packed_log_probs_and_entropy(
                mb, with_entropy=with_entropy, entropy_grad=entropy_grad
            )
        return self._padded_log_probs_and_entropy(mb, with_entropy=with_entropy, entropy_grad=entropy_grad)

    def _attention_mask_4d(self, mask: torch.Tensor) -> torch.Tensor:
        # SDPA takes the boolean mask as is; eager attention adds the mask to its scores
        if getattr(getattr(self.model, "config", None), "_attn_implementation", "sdpa") == "sdpa":
            return mask
        dtype = next(self.model.parameters()).dtype
        additive = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
        return additive.masked_fill_(~mask, torch.finfo(dtype).min)

    def _packed_log_probs_and_entropy(
        self, mb: Mapping[str, torch.Tensor], *, with_entropy: bool, entropy_grad: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The shared-prefix path: each group's prompt computed once (:func:`pack_micro_batch`), the output
        head and the log-softmax run only on the positions that predict a response token, in chunks."""
        from skyrl_train.training.algorithms.logits import chunked_token_scores

        packed = pack_micro_batch(mb, pad_id=int(getattr(self.model.config, "pad_token_id", None) or 0))
        self.last_forward_tokens = packed.tokens
        self.last_forward_attended = packed.attended
        inputs = {
            "input_ids": packed.input_ids.to(self.device),
            "attention_mask": self._attention_mask_4d(packed.attention_mask.to(self.device)),
            "position_ids": packed.position_ids.to(self.device),
            "use_cache": False,
        }
        rows, cols = packed.rows.to(self.device), packed.cols.to(self.device)
        labels = packed.labels.to(self.device)
        head = self.model.get_output_embeddings() if not self.sharded else None
        backbone = getattr(self.model, "base_model", None)
        with self._autocast():
            if head is not None and backbone is not None and backbone is not self.model:
                hidden = backbone(**inputs).last_hidden_state
                scores_in = hidden[rows, cols]
            else:
                # FSDP2 gathers the root's parameters (embeddings, head) in the root's forward only: run it,
                # keeping the logits of the predicting columns alone
                head = None
                keep = torch.unique(cols)
                out = self.model(**inputs, logits_to_keep=keep)
                logits = out.logits if hasattr(out, "logits") else out[0]
                scores_in = logits[rows, torch.searchsorted(keep, cols)]
            log_probs, entropy = chunked_token_scores(
                scores_in,
                labels,
                head=head,
                temperature=self.temperature,
                with_entropy=with_entropy,
                entropy_grad=entropy_grad,
                chunk_size=self.logits_chunk_size,
            )
        log_probs = packed.scatter(log_probs)
        return log_probs, (packed.scatter(entropy) if entropy is not None else None)

    def _padded_log_probs_and_entropy(
        self, mb: Mapping[str, torch.Tensor], *, with_entropy: bool, entropy_grad: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The plain path: the padded rows through the model, full-vocabulary logits of every position."""
        from skyrl_train.training.algorithms.logits import entropy_from_logits, log_probs_from_logits

        logits, kept, response_len = self._forward_logits(mb)
        if self.temperature != 1.0:
            logits = logits / self.temperature
        labels = mb["input_ids"][:, mb["input_ids"].shape[1] - response_len :][:, :kept]
        log_probs = pad_right(log_probs_from_logits(logits, labels), response_len)
        entropy = None
        if with_entropy:
            # Without an entropy bonus the entropy is only a metric: keep its [b, T, V] graph out.
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                entropy = pad_right(entropy_from_logits(logits), response_len)
        return log_probs, entropy

    def _train_micro_batches(self, tensors: Mapping[str, torch.Tensor]) -> list[tuple[dict, bool]]:
        """The micro-batches of a train step, each with a flag that says it is padding: ``micro_batch_size``
        rows at most and, on the packed path, ``max_tokens_per_micro_batch`` tokens (each loss is weighted
        by its share, so any split gives the same step). Under a process group every rank gets as many as
        the rank that needs the most (:func:`~skyrl_train.training.workers.batching.balance_micro_batches`): FSDP's
        collectives in each forward and backward must pair up across ranks."""
        micro_batches = list(
            iter_token_micro_batches(tensors, self.micro_batch_size, self.max_tokens_per_micro_batch)
        )
        count = dist_utils.all_reduce_max(len(micro_batches), self._metric_device())
        return balance_micro_batches(micro_batches, count)

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
        """Clip gradients (FSDP-aware), step the optimizer and the scheduler; skip non-finite steps, and steps
        with no gradient at all (a batch whose every advantage is 0 and no other loss term): Adam would still
        move every weight by its momentum, and weight decay shrink them, on no signal."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        max_norm = float(self.max_grad_norm) if self.max_grad_norm else float("inf")
        grad_norm = _full_value(torch.nn.utils.clip_grad_norm_(params, max_norm))
        lr = float(self.optimizer.param_groups[0]["lr"])
        skipped = not math.isfinite(grad_norm)
        no_gradient = grad_norm == 0.0
        if not (skipped or no_gradient):
            self.optimizer.step()
            self.scheduler.step()
            self.global_step += 1
        self.optimizer.zero_grad(set_to_none=True)
        self.model.eval()
        return {
            "grad_norm": grad_norm,
            "lr": lr,
            "skipped_step": float(skipped),
            "no_gradient_step": float(no_gradient),
        }

    def _global_counts(self, tensors: Mapping[str, torch.Tensor]) -> tuple[float, float]:
        tokens = float(tensors["response_mask"].sum())
        sequences = num_sequences(tensors["response_mask"])
        device = self.device if self.device.type == "cuda" else "cpu"
        return dist_utils.all_reduce_sum(tokens, device), dist_utils.all_reduce_sum(sequences, device)

    def _micro_weight(self, mb: Mapping[str, torch.Tensor], reduction: str, tokens: float, seqs: float):
        """See :func:`~skyrl_train.training.workers.batching.micro_batch_weight`."""
        return micro_batch_weight(mb["response_mask"], reduction, tokens, seqs, self.world_size)

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
