"""The training and sampling backend behind the Tinker-compatible server: plain Python and numpy in and out.

:class:`TinkerBackend` holds training models (a base model with LoRA adapters from peft, or all of its
weights trainable when the LoRA rank is 0 or None), their Adam state and the gradients accumulated since the
last optimizer step, and samplers (frozen weights served by this project's ``hf`` engine). It knows nothing
of HTTP: the server turns wire types into :class:`Datum` lists and keyword arguments, and the errors below
into client errors (:class:`UnknownModel`, :class:`BadRequest`, :class:`UnsupportedLoss`).

What each call does, in Tinker's terms:
- ``forward`` / ``forward_backward``: the model's log-probabilities of every datum's ``target_tokens``
  (position i of a datum's tokens predicts ``target_tokens[i]``) and one of the built-in losses of
  :mod:`skyrl_train.tinker.losses`, summed over tokens and data (``loss:sum``); ``forward_backward`` adds
  the loss's gradient to the gradients accumulated since the last ``optim_step``.
- ``optim_step``: one AdamW step (``torch.optim.AdamW``: decoupled weight decay) with the request's
  hyperparameters, the global gradient norm clipped first when ``grad_clip_norm > 0``; then the gradients
  are zeroed.
- ``save_weights(with_optimizer=True)`` writes the trainable weights and the optimizer state
  (``<store_dir>/<model_id>/weights/<name>``); ``with_optimizer=False`` the weights for sampling
  (``.../sampler_weights/<name>``). Files are exact copies of the tensors (safetensors and ``torch.save``),
  so a load restores the model bit for bit, and they outlive the process.
- ``sampler``: frozen weights (of a model now, a saved path or a base model) behind an hf engine: tokens,
  their log-probabilities (log-softmax at temperature 1 of the sampling model, what ``compute_logprobs``
  and a training forward recompute) and the prompt's log-probabilities. The backend checks each request
  against the base model and Tinker's sampling rules; the samplers and their engines (LoRA merged into a
  plain copy of the base model, at most ``max_live_samplers`` engines live, idle ones refilled with new
  weights) are :class:`~skyrl_train.tinker.samplers.SamplerPool`'s.

Thread safety: each training model has its own lock (calls on one model run one at a time, different
models run concurrently); samplers are the hf engine's, which batches concurrent requests. Model loads
(and LoRA initialisation) run one at a time in the whole process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from skyrl_train.tinker import losses as _losses
from skyrl_train.tinker.losses import LOSSES
from skyrl_train.tinker.samplers import SamplerPool, _Sampler
from skyrl_train.tinker.types import (
    _WEIGHTS,
    BadRequest,
    Datum,
    ForwardOutput,
    ModelSpec,
    UnknownModel,
    UnsupportedLoss,
)

if TYPE_CHECKING:
    import torch


__all__ = [
    "BadRequest",
    "Datum",
    "ForwardOutput",
    "TinkerBackend",
    "UnknownModel",
    "UnsupportedLoss",
]

EMBEDDED_SOURCE = "embedded:smollm2-135m"
DEFAULT_BASE_MODELS = {"embedded": EMBEDDED_SOURCE, "HuggingFaceTB/SmolLM2-135M-Instruct": EMBEDDED_SOURCE}
"""Client-visible base model names and the model each loads: the bundled SmolLM2-135M-Instruct under its
short name and its Hugging Face name."""

MAX_LORA_RANK = 256
_FORMAT = 1
_MANIFEST = "skyrl_tinker.json"
_OPTIMIZER = "optimizer.pt"
_LOAD_LOCK = threading.RLock()  # model loading and LoRA initialisation (global torch state)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class _TrainingModel:
    """A training model's module, its trainable parameters (by name, in a fixed order), its optimizer."""

    def __init__(self, model_id: str, spec: ModelSpec, module: Any, causal_lm: Any) -> None:
        import torch

        self.model_id = model_id
        self.spec = spec
        self.module = module
        self.causal_lm = causal_lm
        self.trainable = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW([p for _, p in self.trainable], lr=0.0)
        self.lock = threading.RLock()
        self.steps = 0
        self.pending_backwards = 0


class TinkerBackend:
    """Training models and samplers for the Tinker API, on this project's model loading and hf engine.

    ``base_models``: client-visible name -> model source (a Hugging Face name or folder, or an
    ``embedded:`` name); default :data:`DEFAULT_BASE_MODELS`. ``store_dir``: where saved weights live.
    ``seed``: the default seed of LoRA initialisation and of sampling without a seed.
    ``max_live_samplers``: engines kept in memory at once. ``snapshots_per_model``: how many samplers made
    from a model's current weights (``sampler(model_id=...)``, written to ``<model_id>/snapshots``) stay
    usable; older ones are deleted. ``max_tokens_per_pass``: padded tokens per forward pass (larger batches
    run in several passes, gradients summed). ``prefix_cache_tokens``: each engine's prefix cache.
    """

    def __init__(
        self,
        *,
        base_models: Mapping[str, str] | None = None,
        device: str = "cpu",
        store_dir: Path | str,
        seed: int = 0,
        max_live_samplers: int = 2,
        snapshots_per_model: int = 4,
        max_tokens_per_pass: int = 4096,
        prefix_cache_tokens: int = 4096,
    ) -> None:
        if max_live_samplers < 1 or snapshots_per_model < 1 or max_tokens_per_pass < 1:
            raise ValueError(
                "max_live_samplers, snapshots_per_model and max_tokens_per_pass must be positive"
            )

        self.base_models = dict(base_models) if base_models is not None else dict(DEFAULT_BASE_MODELS)
        self.device = device
        self.store_dir = Path(store_dir)
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.seed = seed
        self.max_live_samplers = max_live_samplers
        self.snapshots_per_model = snapshots_per_model
        self.max_tokens_per_pass = max_tokens_per_pass
        self.prefix_cache_tokens = prefix_cache_tokens
        self._models: dict[str, _TrainingModel] = {}
        self._tokenizers: dict[str, Any] = {}
        self._configs: dict[str, Any] = {}
        self._lock = threading.Lock()  # the registries above, the samplers' and the id counter
        self._counter = 0
        self._pool = SamplerPool(self)
        self.stats = self._pool.stats
        """How sampler engines were made: built (a model loaded) or reused (new weights copied in)."""

    # ------------------------------------------------------------------ base models

    def _source(self, base_model: str) -> str:
        source = self.base_models.get(base_model)
        if source is None:
            raise UnknownModel(
                f"unknown base model '{base_model}'; this server has: {', '.join(sorted(self.base_models))}"
            )
        return source

    def _config(self, base_model: str) -> Any:
        with self._lock:
            config = self._configs.get(base_model)
        if config is None:
            from transformers import AutoConfig

            from skyrl_train.models import resolve_model_path

            config = AutoConfig.from_pretrained(resolve_model_path(self._source(base_model)))
            with self._lock:
                self._configs[base_model] = config
        return config

    def _tokenizer(self, base_model: str) -> Any:
        with self._lock:
            tokenizer = self._tokenizers.get(base_model)
        if tokenizer is None:
            from skyrl_train.models import load_tokenizer

            tokenizer = load_tokenizer(self._source(base_model))
            with self._lock:
                self._tokenizers[base_model] = tokenizer
        return tokenizer

    def _vocab_size(self, base_model: str) -> int:
        return int(self._config(base_model).get_text_config().vocab_size)

    def _context_length(self, base_model: str) -> int:
        return int(getattr(self._config(base_model).get_text_config(), "max_position_embeddings", 1 << 30))

    def capabilities(self) -> dict[str, Any]:
        """The base models (name, context length, trainable, sampleable), loss names and largest LoRA rank."""
        models = [
            {
                "model_name": name,
                "max_context_length": self._context_length(name),
                "trainable": True,
                "sampleable": True,
            }
            for name in self.base_models
        ]
        return {"models": models, "losses": sorted(LOSSES), "max_lora_rank": MAX_LORA_RANK}

    # ------------------------------------------------------------------ building modules

    def _load_base(self, base_model: str) -> Any:
        """A fresh float32 copy of a base model on the backend's device, one load at a time: transformers'
        ``from_pretrained`` builds the model under process-wide settings (meta-device initialisation), so two
        threads loading at once can leave one with weights that have no data."""
        from skyrl_train.models import load_model

        with _LOAD_LOCK:
            return load_model(self._source(base_model), dtype="float32", device=self.device)

    def _build(self, spec: ModelSpec, *, seed: int) -> tuple[Any, Any]:
        """A fresh module for ``spec`` (peft-wrapped when LoRA) and the causal LM inside it."""
        from skyrl_train.training.lora import apply_lora, lora_targets, untie_output_embeddings

        causal_lm = self._load_base(spec.base_model)
        if spec.lora_rank == 0:
            causal_lm.requires_grad_(True)
            return causal_lm, causal_lm
        causal_lm.requires_grad_(False)
        targets = lora_targets(
            causal_lm, train_attn=spec.train_attn, train_mlp=spec.train_mlp, train_unembed=spec.train_unembed
        )
        if spec.train_unembed:
            untie_output_embeddings(causal_lm)
        with _LOAD_LOCK:  # the seeded initialisation draws from torch's process-wide generator
            module = apply_lora(
                causal_lm, rank=spec.lora_rank, alpha=spec.lora_alpha, targets=targets, seed=seed
            )
        return module, module.get_base_model()

    def _next_id(self, prefix: str) -> str:
        with self._lock:
            self._counter += 1
            return f"{prefix}-{uuid.uuid4().hex[:12]}"

    def create_model(
        self,
        base_model: str,
        *,
        lora_rank: int | None,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
    ) -> str:
        """A new training model on ``base_model``: LoRA adapters of ``lora_rank`` on the chosen layers, or
        every weight trainable when the rank is None or 0. Returns its model id."""
        self._source(base_model)
        rank = int(lora_rank or 0)
        if not 0 <= rank <= MAX_LORA_RANK:
            raise BadRequest(
                f"lora rank must be between 1 and {MAX_LORA_RANK} (0 or None: full fine-tuning), got {lora_rank}"
            )
        if rank and not (train_mlp or train_attn or train_unembed):
            raise BadRequest(
                "the LoRA settings select no layer: set at least one of train_attn, train_mlp, train_unembed"
            )
        from skyrl_train.training.lora import DEFAULT_LORA_ALPHA

        spec = ModelSpec(
            base_model,
            rank,
            float(DEFAULT_LORA_ALPHA),
            bool(train_mlp),
            bool(train_attn),
            bool(train_unembed),
        )
        return self._add_model(spec, seed=self.seed if seed is None else int(seed))

    def _add_model(self, spec: ModelSpec, *, seed: int) -> str:
        module, causal_lm = self._build(spec, seed=seed)
        model_id = self._next_id("model")
        with self._lock:
            self._models[model_id] = _TrainingModel(model_id, spec, module, causal_lm)
        return model_id

    def _model(self, model_id: str) -> _TrainingModel:
        with self._lock:
            model = self._models.get(model_id)
        if model is None:
            raise UnknownModel(f"unknown model '{model_id}' (never created, or unloaded)")
        return model

    def tokenizer_info(self, model_id: str) -> dict[str, Any]:
        """What the client needs to load the tokenizer and describe the model: ``model_name`` (the base
        model), ``tokenizer_id`` (a local folder), ``arch``, ``is_lora``, ``lora_rank``."""
        from skyrl_train.models import resolve_model_path

        spec = self._model(model_id).spec
        config = self._config(spec.base_model)
        return {
            "model_name": spec.base_model,
            "tokenizer_id": resolve_model_path(self._source(spec.base_model)),
            "arch": getattr(config, "model_type", None),
            "is_lora": spec.lora_rank > 0,
            "lora_rank": spec.lora_rank or None,
        }

    def unload(self, model_id: str) -> None:
        """Forget a training model or a sampler by its id; UnknownModel when there is neither. Saved weights
        and the samplers made from a model stay; a sampler's snapshot of a model's weights goes with it."""
        if self._pool.unload(model_id):
            return
        model = self._model(model_id)
        with model.lock, self._lock:
            self._models.pop(model_id, None)

    # ------------------------------------------------------------------ forward / backward

    def _check_data(self, model: _TrainingModel, data: Sequence[Datum], loss_fn: str, loss_fn_config: Any):
        if loss_fn not in LOSSES:
            raise UnsupportedLoss(
                f"loss function '{loss_fn}' is not supported; supported: {', '.join(sorted(LOSSES))}"
            )
        if not data:
            raise BadRequest("no data: forward and forward_backward need at least one datum")
        try:
            config = _losses.loss_config(loss_fn, loss_fn_config)
        except ValueError as error:
            raise BadRequest(str(error)) from None
        vocab = self._vocab_size(model.spec.base_model)
        context = self._context_length(model.spec.base_model)
        checked = []
        for i, datum in enumerate(data):
            tokens = np.asarray(datum.tokens)
            if tokens.ndim != 1 or tokens.size == 0:
                raise BadRequest(f"datum {i}: the model input must be a non-empty list of token ids")
            if tokens.dtype.kind not in "iu":
                raise BadRequest(f"datum {i}: the model input must hold integer token ids")
            if tokens.size > context:
                raise BadRequest(
                    f"datum {i}: {tokens.size} tokens, more than the model's context of {context}"
                )
            bad = tokens[(tokens < 0) | (tokens >= vocab)]
            if bad.size:
                raise BadRequest(f"datum {i}: token id {int(bad[0])} is outside the vocabulary of {vocab}")
            try:
                inputs = _losses.validate(loss_fn, datum.inputs, int(tokens.size), vocab, f"datum {i}")
            except ValueError as error:
                raise BadRequest(str(error)) from None
            checked.append((tokens.astype(np.int64), inputs))
        return checked, config

    def _passes(self, checked: list) -> list[list[int]]:
        """Data indices grouped into forward passes of at most ``max_tokens_per_pass`` padded tokens; longest
        first, so that sequences of similar length share a pass and little compute goes to padding."""
        passes: list[list[int]] = []
        current: list[int] = []
        longest = 0
        order = sorted(range(len(checked)), key=lambda i: -len(checked[i][0]))
        for i in order:
            tokens = checked[i][0]
            n = len(tokens)
            if current and max(longest, n) * (len(current) + 1) > self.max_tokens_per_pass:
                passes.append(current)
                current, longest = [], 0
            current.append(i)
            longest = max(longest, n)
        if current:
            passes.append(current)
        return passes

    def _target_logprobs(self, model: _TrainingModel, batch: list) -> list[torch.Tensor]:
        """Log-probabilities of each datum's target tokens (``[n]`` or ``[n, K]``), one forward pass."""
        import torch

        from skyrl_train.training.algorithms.logits import chunked_token_scores

        lengths = [len(tokens) for tokens, _ in batch]
        longest = max(lengths)
        ids = torch.zeros((len(batch), longest), dtype=torch.long)
        mask = torch.zeros((len(batch), longest), dtype=torch.long)
        for row, (tokens, _) in enumerate(batch):
            ids[row, : len(tokens)] = torch.from_numpy(tokens)
            mask[row, : len(tokens)] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        hidden = model.causal_lm.get_decoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        rows, labels, shapes = [], [], []
        for row, (tokens, inputs) in enumerate(batch):
            targets = torch.from_numpy(inputs["target_tokens"]).to(self.device)
            h = hidden[row, : len(tokens)]
            if targets.ndim == 2:  # K candidates per position: score each against the same hidden state
                h = h.repeat_interleave(targets.shape[1], dim=0)
            rows.append(h)
            labels.append(targets.reshape(-1))
            shapes.append(tuple(targets.shape))
        scores, _ = chunked_token_scores(
            torch.cat(rows), torch.cat(labels), head=model.causal_lm.get_output_embeddings()
        )
        out, start = [], 0
        for shape in shapes:
            n = int(np.prod(shape))
            out.append(scores[start : start + n].reshape(shape))
            start += n
        return out

    def _run(self, model_id: str, data: Sequence[Datum], loss_fn: str, loss_fn_config: Any, backward: bool):
        import torch

        model = self._model(model_id)
        with model.lock:
            checked, config = self._check_data(model, data, loss_fn, loss_fn_config)
            outputs: list[dict[str, np.ndarray] | None] = [None] * len(checked)
            loss_sum = 0.0
            model.module.eval()  # no dropout: forward and forward_backward compute the same numbers
            for indices in self._passes(checked):
                batch = [checked[i] for i in indices]
                with torch.set_grad_enabled(backward):
                    logprobs = self._target_logprobs(model, batch)
                    total = None
                    for i, lp, (_, inputs) in zip(indices, logprobs, batch, strict=True):
                        tensors = {
                            k: torch.from_numpy(v).to(self.device)
                            for k, v in inputs.items()
                            if k != "target_tokens"
                        }
                        elementwise = _losses.elementwise_loss(loss_fn, lp, tensors, config)
                        datum_loss = elementwise.sum()
                        total = datum_loss if total is None else total + datum_loss
                        outputs[i] = {
                            "logprobs": lp.detach().float().cpu().numpy(),
                            "elementwise_loss": elementwise.detach().float().cpu().numpy(),
                        }
                    if backward and total is not None and total.requires_grad:
                        total.backward()
                loss_sum += float(total.detach()) if total is not None else 0.0
            if backward:
                model.pending_backwards += 1
        return ForwardOutput(outputs=[o for o in outputs if o is not None], metrics={"loss:sum": loss_sum})

    def forward(
        self,
        model_id: str,
        data: Sequence[Datum],
        loss_fn: str,
        loss_fn_config: Mapping[str, Any] | None = None,
    ) -> ForwardOutput:
        """The loss and per-datum outputs without touching gradients."""
        return self._run(model_id, data, loss_fn, loss_fn_config, backward=False)

    def forward_backward(
        self,
        model_id: str,
        data: Sequence[Datum],
        loss_fn: str,
        loss_fn_config: Mapping[str, Any] | None = None,
    ) -> ForwardOutput:
        """The loss and per-datum outputs; the loss's gradient is added to those accumulated since the last
        ``optim_step``."""
        return self._run(model_id, data, loss_fn, loss_fn_config, backward=True)

    def optim_step(
        self,
        model_id: str,
        *,
        learning_rate: float,
        beta1: float = 0.9,
        beta2: float = 0.95,
        eps: float = 1e-12,
        weight_decay: float = 0.0,
        grad_clip_norm: float = 0.0,
    ) -> dict[str, float]:
        """One AdamW step on the accumulated gradients, then zero them. Returns ``grad_norm:mean`` (the
        global norm before clipping) and ``learning_rate:mean``."""
        import torch

        values = {"learning_rate": learning_rate, "beta1": beta1, "beta2": beta2, "eps": eps}
        values |= {"weight_decay": weight_decay, "grad_clip_norm": grad_clip_norm}
        for key, value in values.items():
            if not isinstance(value, int | float) or not np.isfinite(value) or value < 0:
                raise BadRequest(f"{key} must be a finite number >= 0, got {value!r}")
        if not (beta1 < 1 and beta2 < 1):
            raise BadRequest(f"beta1 and beta2 must be below 1, got {beta1} and {beta2}")
        model = self._model(model_id)
        with model.lock:
            params = [p for _, p in model.trainable]
            grads = [p.grad for p in params if p.grad is not None]
            norm = (
                float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
                if grads
                else 0.0
            )
            if grad_clip_norm > 0 and grads:
                torch.nn.utils.clip_grad_norm_(params, grad_clip_norm)
            for group in model.optimizer.param_groups:
                group.update(lr=learning_rate, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay)
            # Adam's second moments of fresh LoRA matrices fall into the denormal range, where CPU arithmetic
            # is about 100x slower: flushed to zero during the step only (the setting is the thread's
            # processor state, which other code in the process must not inherit)
            torch.set_flush_denormal(True)
            try:
                model.optimizer.step()
            finally:
                torch.set_flush_denormal(False)
            model.optimizer.zero_grad(set_to_none=True)
            model.steps += 1
            model.pending_backwards = 0
        return {"grad_norm:mean": norm, "learning_rate:mean": float(learning_rate)}

    # ------------------------------------------------------------------ checkpoints

    def _resolve(self, path: str) -> Path:
        """A saved path id (``<model_id>/weights/<name>``, with or without a ``tinker://`` scheme) as a
        folder under ``store_dir``; BadRequest when it is outside it or holds no checkpoint."""
        relative = path[len("tinker://") :] if path.startswith("tinker://") else path
        root = self.store_dir.resolve()
        folder = (root / relative).resolve()
        if not folder.is_relative_to(root) or folder == root:
            raise BadRequest(
                f"'{path}' is not a checkpoint of this server (paths look like <model_id>/weights/<name>)"
            )
        if not (folder / _MANIFEST).is_file():
            raise BadRequest(f"no saved weights at '{path}'")
        return folder

    def _write_checkpoint(self, model: _TrainingModel, folder: Path, *, with_optimizer: bool) -> None:
        """Write the model's trainable weights (and optimizer state) to ``folder``, atomically."""
        import torch
        from safetensors.torch import save_file

        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
        try:
            tensors = {name: p.detach().cpu().contiguous() for name, p in model.trainable}
            save_file(tensors, str(tmp / _WEIGHTS))
            if with_optimizer:
                torch.save(model.optimizer.state_dict(), tmp / _OPTIMIZER)
            manifest = {
                "format": _FORMAT,
                "spec": model.spec.to_json(),
                "model_id": model.model_id,
                "steps": model.steps,
                "with_optimizer": with_optimizer,
                "saved_at": time.time(),
            }
            (tmp / _MANIFEST).write_text(json.dumps(manifest, indent=1))
            if folder.exists():  # overwrite: move the old one aside, rename() cannot replace a folder
                stale = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old-", dir=folder.parent))
                os.rename(folder, stale / folder.name)
                shutil.rmtree(stale, ignore_errors=True)
            os.rename(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def save_weights(self, model_id: str, name: str, *, with_optimizer: bool) -> str:
        """Save the model's weights as ``name``: with the optimizer state (a training checkpoint,
        ``<model_id>/weights/<name>``) or without (for sampling, ``<model_id>/sampler_weights/<name>``).
        Returns that path id; saving under a name again replaces it."""
        if not isinstance(name, str) or not _NAME.match(name):
            raise BadRequest(
                f"checkpoint name {name!r} must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        model = self._model(model_id)
        relative = f"{model_id}/{'weights' if with_optimizer else 'sampler_weights'}/{name}"
        with model.lock:
            self._write_checkpoint(model, self.store_dir / relative, with_optimizer=with_optimizer)
        return relative

    def _read_manifest(self, folder: Path) -> dict[str, Any]:
        manifest = json.loads((folder / _MANIFEST).read_text())
        if manifest.get("format") != _FORMAT:
            raise BadRequest(
                f"checkpoint '{folder}' has format {manifest.get('format')}, this server reads {_FORMAT}"
            )
        return manifest

    @staticmethod
    def _copy_weights(module: Any, folder: Path, names: Sequence[str]) -> None:
        import torch
        from safetensors.torch import load_file

        saved = load_file(str(folder / _WEIGHTS))
        if sorted(saved) != sorted(names):
            raise BadRequest(f"checkpoint '{folder.name}' holds other tensors than this model trains")
        params = dict(module.named_parameters())
        with torch.no_grad():
            for name in names:
                params[name].copy_(saved[name])

    def load_weights(self, model_id: str, path: str, *, with_optimizer: bool) -> None:
        """Replace the model's trainable weights (and, ``with_optimizer``, its Adam state) with a saved
        checkpoint of the same base model and adapters; accumulated gradients are dropped."""
        import torch

        model = self._model(model_id)
        folder = self._resolve(path)
        manifest = self._read_manifest(folder)
        saved = ModelSpec.from_json(manifest["spec"])
        if saved != model.spec:
            raise BadRequest(f"checkpoint '{path}' is of {saved}, model '{model_id}' is {model.spec}")
        if with_optimizer and not (folder / _OPTIMIZER).is_file():
            raise BadRequest(f"checkpoint '{path}' was saved without optimizer state (weights for sampling)")
        with model.lock:
            self._copy_weights(model.module, folder, [n for n, _ in model.trainable])
            model.optimizer.zero_grad(set_to_none=True)
            model.pending_backwards = 0
            if with_optimizer:
                state = torch.load(folder / _OPTIMIZER, map_location=self.device, weights_only=True)
                model.optimizer.load_state_dict(state)
                model.steps = int(manifest.get("steps", 0))

    def create_model_from_state(self, path: str, *, with_optimizer: bool = False) -> str:
        """A new training model with a checkpoint's base model, adapters and weights (and, with
        ``with_optimizer``, its Adam state). Returns its model id."""
        folder = self._resolve(path)
        spec = ModelSpec.from_json(self._read_manifest(folder)["spec"])
        self._source(spec.base_model)
        model_id = self._add_model(spec, seed=self.seed)
        self.load_weights(model_id, path, with_optimizer=with_optimizer)
        return model_id

    # ------------------------------------------------------------------ samplers

    def sampler(
        self, *, model_id: str | None = None, path: str | None = None, base_model: str | None = None
    ) -> str:
        """A sampler id for frozen weights: a training model's weights now (``model_id``), saved weights
        (``path``) or a base model's own (``base_model``); exactly one of them."""
        if sum(x is not None for x in (model_id, path, base_model)) != 1:
            raise BadRequest("a sampler needs exactly one of model_id, path or base_model")
        sampler_id = self._next_id("sampler")
        if base_model is not None:
            self._source(base_model)
            self._pool.add(sampler_id, ModelSpec(base_model), None)
        elif path is not None:
            folder = self._resolve(path)
            self._pool.add(sampler_id, ModelSpec.from_json(self._read_manifest(folder)["spec"]), folder)
        else:
            model = self._model(model_id)
            relative = f"{model_id}/snapshots/{sampler_id}"
            with model.lock:
                self._write_checkpoint(model, self.store_dir / relative, with_optimizer=False)
            self._pool.add(sampler_id, model.spec, self.store_dir / relative, snapshot_of=model_id)
        return sampler_id

    def _check_tokens(self, base_model: str, tokens: Sequence[int], what: str) -> list[int]:
        ids = [int(t) for t in tokens]
        if not ids:
            raise BadRequest(f"{what} is empty")
        vocab = self._vocab_size(base_model)
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise BadRequest(f"{what} holds token id {bad}, outside the vocabulary of {vocab}")
        return ids

    def sample(
        self,
        sampler_id: str,
        prompt: Sequence[int],
        *,
        num_samples: int,
        max_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = -1,
        stop: Sequence[int] | Sequence[str] | str | None = None,
        seed: int | None = None,
        prompt_logprobs: bool = False,
    ) -> dict[str, Any]:
        """``num_samples`` continuations of ``prompt``: each with its tokens (the stop token included), their
        log-probabilities and a stop reason ("stop" or "length"); with ``prompt_logprobs`` also the prompt's
        (None for the first token).

        ``stop``: None stops at the model's EOS; a list of strings or token ids stops at those as well;
        an empty list disables every stop, EOS included (the Tinker client's rule). ``temperature`` 0 is
        greedy; ``top_k`` -1 and ``top_p`` 1 turn those filters off; a ``seed`` makes the draws repeatable.
        """
        from pydantic import ValidationError

        from skyrl_train.config import SamplingParams

        sampler = self._pool.get(sampler_id)
        ids = self._check_tokens(sampler.spec.base_model, prompt, "the prompt")
        if not isinstance(num_samples, int) or num_samples < 1:
            raise BadRequest(f"num_samples must be a positive integer, got {num_samples!r}")
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise BadRequest(f"max_tokens must be a positive integer, got {max_tokens!r}")
        if len(ids) >= self._context_length(sampler.spec.base_model):
            raise BadRequest(f"the prompt has {len(ids)} tokens, no room left in the model's context")
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        strings = [s for s in stops if isinstance(s, str)]
        token_ids = [int(s) for s in stops if not isinstance(s, str)]
        try:
            params = SamplingParams(
                max_generate_length=max_tokens,
                temperature=temperature,
                top_p=top_p,
                top_k=top_k if top_k > 0 else -1,
                stop=strings or None,
                stop_token_ids=token_ids or None,
                ignore_eos=stop is not None and not stops,
                seed=seed,
            )
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
            raise BadRequest(f"bad sampling parameters: {problems}") from None
        return self._pool.generate(sampler, ids, num_samples, params, prompt_logprobs=prompt_logprobs)

    def compute_logprobs(self, sampler_id: str, tokens: Sequence[int]) -> list[float | None]:
        """Each token's log-probability given the ones before it under the sampler's weights (None for the
        first)."""
        sampler = self._pool.get(sampler_id)
        ids = self._check_tokens(sampler.spec.base_model, tokens, "the sequence")
        return self._pool.logprobs(sampler, ids)

    def _sampler(self, sampler_id: str) -> _Sampler:
        return self._pool.get(sampler_id)

    @property
    def _engines(self) -> OrderedDict[tuple, Any]:
        """The samplers' live engines (see :class:`~skyrl_train.tinker.samplers.SamplerPool`)."""
        return self._pool.engines

    @property
    def _building(self) -> dict[tuple, threading.Event]:
        """The samplers' engines being made now."""
        return self._pool.building

    def close(self) -> None:
        """Stop every engine and forget every model (saved weights stay on disk)."""
        self._pool.close()
        with self._lock:
            self._models.clear()
