"""The samplers of the Tinker backend: frozen weights served by this project's ``hf`` engine.

:class:`SamplerPool` belongs to a :class:`~skyrl_train.tinker.backend.TinkerBackend`, which decides what a
new sampler serves (a snapshot of a training model's weights now, saved weights, or a base model's own) and
hands it to the pool. The pool keeps the samplers by id and the newest snapshots of each model, and runs
the backend's checked ``sample`` and ``compute_logprobs`` requests on live engines: tokens, their
log-probabilities (log-softmax at temperature 1 of the sampling model, what a training forward recomputes)
and the prompt's log-probabilities. LoRA adapters are merged into a plain copy of the base model. At most
``max_live_samplers`` engines hold a model in memory; the others are rebuilt from their files on their next
request, by copying the weights into an idle engine of the same base model and adapters where there is one
(an RL loop's sampler of each step).

Locks: the sampler registry shares the backend's registry lock (one lock for models, samplers and the id
counter that engine seeds are drawn from); the engine registry has a lock of its own, and engines are made
outside it, so samplers whose engines are live go on while another engine loads.
"""

from __future__ import annotations

import shutil
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyrl_train.tinker.types import _WEIGHTS, BadRequest, ModelSpec, UnknownModel

if TYPE_CHECKING:
    import torch

    from skyrl_train.tinker.backend import TinkerBackend

__all__ = ["SamplerPool"]


class _Sampler:
    """A sampler: the files of the weights it serves (None: the base model's own); ``snapshot_of`` names
    the training model when the files are a snapshot only this sampler uses."""

    def __init__(self, sampler_id: str, spec: ModelSpec, path: Path | None, snapshot_of: str | None = None):
        self.sampler_id = sampler_id
        self.spec = spec
        self.path = path
        self.snapshot_of = snapshot_of

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.spec.base_model, str(self.path) if self.path is not None else None)


class _FileWeights(Mapping):
    """A base model's weights read on demand from its local safetensors files (memory-mapped, nothing
    loaded up front). ``aliases`` name where a weight the files leave out is stored instead (a tied output
    projection: the input embeddings)."""

    def __init__(self, handles: dict[str, Any], aliases: Mapping[str, str]) -> None:
        self._handles = handles
        self._aliases = dict(aliases)

    @classmethod
    def open(cls, source: str, aliases: Mapping[str, str]) -> _FileWeights | None:
        """The weights of ``source`` when it is a local folder of safetensors files, else None."""
        from safetensors import safe_open

        from skyrl_train.models import resolve_model_path

        folder = Path(resolve_model_path(source))
        files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
        if not files:
            return None
        handles = {}
        for file in files:
            handle = safe_open(str(file), framework="pt")
            for key in handle.keys():
                handles[key] = handle
        return cls(handles, aliases)

    def __getitem__(self, name: str) -> Any:
        if name not in self._handles:
            name = self._aliases.get(name, name)
        return self._handles[name].get_tensor(name)

    def __iter__(self):
        return iter(self._handles)

    def __len__(self) -> int:
        return len(self._handles)


def _tied_aliases(model: Any) -> dict[str, str]:
    """``{output projection weight name: input embedding weight name}``: where checkpoints of a model with
    tied embeddings keep the output projection's weight."""
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    names = {id(module): name for name, module in model.named_modules()}
    if head is None or embed is None or id(head) not in names or id(embed) not in names:
        return {}
    return {f"{names[id(head)]}.weight": f"{names[id(embed)]}.weight"}


class SamplerPool:
    """The samplers of one backend and the engines that serve them.

    ``backend`` provides the base models (sources, tokenizers, loading), the device, the seed, the registry
    lock and the settings: ``max_live_samplers`` (engines kept in memory at once), ``snapshots_per_model``
    (how many snapshots of a model's weights stay usable; older ones are deleted) and
    ``prefix_cache_tokens`` (each engine's prefix cache). Requests reach it checked by the backend.
    """

    def __init__(self, backend: TinkerBackend) -> None:
        self._backend = backend
        self._samplers: dict[str, _Sampler] = {}
        self._snapshots: dict[str, list[str]] = {}
        self.engines: OrderedDict[tuple, Any] = OrderedDict()
        """The live engines by sampler key (base model, weights folder), least recently used first."""
        self._engine_users: dict[tuple, int] = {}
        self._engine_specs: dict[tuple, ModelSpec] = {}
        self.building: dict[tuple, threading.Event] = {}
        """The engines being made now, by sampler key; each event is set once its engine is made (or not)."""
        self.stats = {"engines_built": 0, "engines_reused": 0}
        """How sampler engines were made: built (a model loaded) or reused (new weights copied in)."""
        self._lock = backend._lock  # the sampler registry, with the backend's models and id counter
        self._engine_lock = threading.Lock()  # the engine registry (engines are made outside it)

    # ------------------------------------------------------------------ the sampler registry

    def add(
        self, sampler_id: str, spec: ModelSpec, path: Path | None, snapshot_of: str | None = None
    ) -> None:
        """Register a sampler of the weights in ``path`` (None: the base model's own); ``snapshot_of``: the
        training model whose snapshot ``path`` is, which then counts among that model's kept snapshots."""
        sampler = _Sampler(sampler_id, spec, path, snapshot_of=snapshot_of)
        if snapshot_of is not None:
            self._keep_snapshot(snapshot_of, sampler_id)
        with self._lock:
            self._samplers[sampler_id] = sampler

    def _keep_snapshot(self, model_id: str, sampler_id: str) -> None:
        with self._lock:
            kept = self._snapshots.setdefault(model_id, [])
            kept.append(sampler_id)
            expired = kept[: -self._backend.snapshots_per_model]
            del kept[: -self._backend.snapshots_per_model]
            for old in expired:
                sampler = self._samplers.pop(old, None)
                if sampler is not None and sampler.path is not None:
                    shutil.rmtree(sampler.path, ignore_errors=True)

    def get(self, sampler_id: str) -> _Sampler:
        """The sampler of ``sampler_id``; UnknownModel when there is none."""
        with self._lock:
            sampler = self._samplers.get(sampler_id)
        if sampler is None:
            kept = self._backend.snapshots_per_model
            raise UnknownModel(
                f"unknown sampler '{sampler_id}' (never created, or one of a model's older snapshots, which "
                f"are kept {kept} at a time: save weights under a name to keep them)"
            )
        return sampler

    def unload(self, sampler_id: str) -> bool:
        """Forget a sampler (and close its engine when idle and no other sampler serves the same weights;
        delete its files when they are a snapshot). False when there is no such sampler."""
        with self._lock:
            sampler = self._samplers.pop(sampler_id, None)
            shared = sampler is not None and any(s.key == sampler.key for s in self._samplers.values())
        if sampler is None:
            return False
        with self._engine_lock:
            if not shared and self._engine_users.get(sampler.key, 0) == 0 and sampler.key in self.engines:
                self._drop_engine(sampler.key).close()
        if sampler.snapshot_of is not None and sampler.path is not None:
            with self._lock:
                kept = self._snapshots.get(sampler.snapshot_of, [])
                if sampler.sampler_id in kept:
                    kept.remove(sampler.sampler_id)
            shutil.rmtree(sampler.path, ignore_errors=True)  # nothing else can reach these files
        return True

    # ------------------------------------------------------------------ engines

    def _acquire_engine(self, sampler: _Sampler) -> Any:
        """The live engine of the sampler's weights, made when missing; the caller must release it.

        At the cap of live engines, an idle engine of the same base model and adapters gets the new weights
        copied into its model (the usual case in an RL loop: one sampler per step, the old one done with);
        otherwise the least recently used idle engine is closed and a new one built. Making an engine takes
        seconds and happens outside the lock, so samplers whose engines are live go on meanwhile; a second
        request for the same weights waits for the first one's engine.
        """
        key = sampler.key
        while True:
            with self._engine_lock:
                engine = self.engines.get(key)
                if engine is not None:
                    self.engines.move_to_end(key)
                    self._engine_users[key] = self._engine_users.get(key, 0) + 1
                    return engine
                pending = self.building.get(key)
                if pending is None:
                    self.building[key] = threading.Event()
                    donor = None
                    if len(self.engines) + len(self.building) > self._backend.max_live_samplers:
                        donor = self._take_idle_engine(sampler.spec)
                    if donor is None:
                        self._evict_idle(max(0, self._backend.max_live_samplers - len(self.building)))
                    break
            pending.wait()  # another request is making this engine: look again once it is done
        try:
            engine = self._refill(donor, sampler) if donor is not None else None
            if engine is None:
                engine = self._build_engine(sampler)
        except BaseException:
            with self._engine_lock:
                self.building.pop(key).set()
            raise
        with self._engine_lock:
            self.engines[key] = engine
            self._engine_specs[key] = sampler.spec
            self._engine_users[key] = self._engine_users.get(key, 0) + 1
            self.building.pop(key).set()
        return engine

    def _release_engine(self, sampler: _Sampler) -> None:
        with self._engine_lock:
            self._engine_users[sampler.key] -= 1
            self._evict_idle(self._backend.max_live_samplers)

    def _drop_engine(self, key: tuple) -> Any:
        self._engine_users.pop(key, None)
        self._engine_specs.pop(key, None)
        return self.engines.pop(key)

    def _evict_idle(self, keep: int) -> None:
        """Close least recently used engines nobody is using until at most ``keep`` remain."""
        for key in list(self.engines):
            if len(self.engines) <= keep:
                break
            if self._engine_users.get(key, 0) == 0:
                self._drop_engine(key).close()

    def _take_idle_engine(self, spec: ModelSpec) -> Any:
        """The least recently used idle engine of ``spec``, taken out of the registry; None if none."""
        for key in list(self.engines):
            if not self._engine_users.get(key, 0) and self._engine_specs.get(key) == spec:
                return self._drop_engine(key)
        return None

    def _refill(self, engine: Any, sampler: _Sampler) -> Any:
        """``engine`` holding the sampler's weights, copied into its model; None (the engine closed) when
        the base model's weights cannot be read from local safetensors files under the model's names."""
        base = _FileWeights.open(self._backend._source(sampler.spec.base_model), _tied_aliases(engine.model))
        try:
            if base is None:
                raise KeyError(sampler.spec.base_model)
            tensors = self._sampler_tensors(sampler, engine.model, base)
        except KeyError:
            engine.close()
            return None
        engine.load_weights(tensors.items())
        with self._lock:
            self.stats["engines_reused"] += 1
        return engine

    def _sampler_tensors(self, sampler: _Sampler, model: Any, base: Mapping[str, torch.Tensor]) -> dict:
        """The tensors (by the plain model's state-dict names) that give ``model`` the sampler's weights.

        ``base`` looks up the base model's original weights. LoRA adapters are merged as peft merges them,
        ``W0 + (B @ A) * alpha / rank``, into the weights they adapt (the others are the base's already, in a
        model of the same spec); a full fine-tune's weights are copied as saved; a base sampler's are the
        base weights.
        """
        from safetensors.torch import load_file

        from skyrl_train.training.lora import merge_adapter

        spec = sampler.spec
        if sampler.path is None:
            return {name: base[name] for name in model.state_dict()}
        saved = load_file(str(sampler.path / _WEIGHTS))
        if not spec.lora_rank:
            return saved
        device = self._backend.device
        prefix, suffix_a, suffix_b = "base_model.model.", ".lora_A.default.weight", ".lora_B.default.weight"
        scaling = spec.lora_alpha / spec.lora_rank
        merged = {}
        for name, a in saved.items():
            if not name.endswith(suffix_a):
                continue
            module = name[len(prefix) : -len(suffix_a)]
            b = saved[prefix + module + suffix_b]
            weight = f"{module}.weight"
            merged[weight] = merge_adapter(base[weight].to(device), a, b, scaling=scaling)
        return merged

    def _build_engine(self, sampler: _Sampler) -> Any:
        import torch

        from skyrl_train.inference.hf import HFEngine
        from skyrl_train.training.lora import untie_output_embeddings

        backend = self._backend
        spec = sampler.spec
        model = backend._load_base(spec.base_model)
        model.requires_grad_(False)
        if spec.lora_rank and spec.train_unembed:
            untie_output_embeddings(model)  # the same structure as the training model
        if sampler.path is not None:
            # every merged tensor is computed from the model's own base weights before any is overwritten
            tensors = self._sampler_tensors(sampler, model, model.state_dict())
            with torch.no_grad():
                params = model.state_dict(keep_vars=True)
                for name, tensor in tensors.items():
                    if name not in params:
                        raise BadRequest(
                            f"checkpoint '{sampler.path.name}' holds '{name}', which the model lacks"
                        )
                    params[name].copy_(tensor)
        model.eval()
        with self._lock:
            self.stats["engines_built"] += 1
            # drawn from the backend's id counter: every engine of a backend samples with its own seed
            backend._counter += 1
            engine_seed = backend.seed * 1_000_003 + backend._counter
        return HFEngine(
            model,
            backend._tokenizer(spec.base_model),
            prefix_cache_tokens=backend.prefix_cache_tokens,
            seed=engine_seed,
        )

    def close(self) -> None:
        """Stop every engine (the samplers stay and get new engines on their next request)."""
        with self._engine_lock:
            for engine in self.engines.values():
                engine.close()
            self.engines.clear()
            self._engine_users.clear()
            self._engine_specs.clear()

    # ------------------------------------------------------------------ requests

    def generate(
        self, sampler: _Sampler, ids: list[int], num_samples: int, params: Any, *, prompt_logprobs: bool
    ) -> dict[str, Any]:
        """``num_samples`` continuations of the prompt ``ids`` drawn with ``params`` (the engine's
        ``SamplingParams``) on the sampler's engine, and the prompt's log-probabilities when asked."""
        engine = self._acquire_engine(sampler)
        try:
            results = engine.generate_sync([ids] * num_samples, params)
            prompt_lps = self._engine_logprobs(engine, ids) if prompt_logprobs else None
        finally:
            self._release_engine(sampler)
        sequences = []
        for result in results:
            if result.stop_reason == "abort":
                raise RuntimeError("the sampling engine stopped before the request finished; retry it")
            sequences.append(
                {
                    "tokens": list(result.token_ids),
                    "logprobs": list(result.logprobs or []),
                    "stop_reason": result.stop_reason,
                }
            )
        return {"sequences": sequences, "prompt_logprobs": prompt_lps}

    @staticmethod
    def _engine_logprobs(engine: Any, ids: list[int]) -> list[float | None]:
        import torch

        logits = engine.logits(ids)
        scores = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:])[:, None]).squeeze(1)
        return [None, *(float(x) for x in scores)]

    def logprobs(self, sampler: _Sampler, ids: list[int]) -> list[float | None]:
        """Each token's log-probability given the ones before it under the sampler's weights (None for the
        first)."""
        engine = self._acquire_engine(sampler)
        try:
            return self._engine_logprobs(engine, ids)
        finally:
            self._release_engine(sampler)
