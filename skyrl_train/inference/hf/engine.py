"""`HFEngine`: a transformers model as an inference engine, fast enough to train on with two CPU cores.

One worker thread owns the model and runs a continuous-batching decode loop. Every `generate` call, from any
coroutine or thread, puts its prompts on a queue; the loop admits queued prompts between decode steps (after
waiting `batch_wait_s` when it was idle, so a burst of calls lands in one batch), prefills them together and
merges them into the running batch; finished sequences leave the batch at once. So the many trajectories a
generator runs concurrently share every forward pass, and no sequence waits for the longest one.

On a CPU the forward pass reads every weight once per step whatever the batch size, so batching is where the
speed comes from; three more things matter for multi-turn rollouts:
- the KV cache lives in preallocated buffers that are appended to in place (:mod:`.cache`; transformers'
  DynamicCache concatenates, copying the whole cache on every token);
- a prefix cache keeps the KV of recent prompts and finished responses; the next turn's prompt (history +
  response + observation) then prefills only its new tokens, and the samples of a group share their prompt's
  prefill;
- prefill computes logits for the last position only.

Weights can change while requests are in flight. `pause()` stops the decode loop at a token boundary (the
running sequences keep their tokens and KV), `update_weights` loads new tensors (the engine's
`policy_version` goes up by one), `resume()` continues: the running sequences' KV is recomputed with the
new weights from the tokens they hold (one prefill of their history), so each goes on exactly as the new
model would from its prefix. Every token carries the version that produced it
(`GenerationOutput.policy_versions`). An `update_weights` without a pause does the same between two steps.

The package's modules: :mod:`.engine` (this class: submission, the worker thread, weights), :mod:`.scheduler`
(the running batch: admission, prefill, decode steps), :mod:`.cache` (KV slabs, the prefix cache) and
:mod:`.sampling` (per-row sampling and stop rules). Results match one-at-a-time generation up to
floating-point rounding.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import random
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

from skyrl_train.inference.base import GenerationOutput, InferenceEngine, SamplingParams
from skyrl_train.inference.hf.cache import PrefixCache
from skyrl_train.inference.hf.sampling import StopRule, eos_token_ids
from skyrl_train.inference.hf.scheduler import Request, RunningBatch, Seq

__all__ = ["DEFAULT_PREFIX_CACHE_TOKENS", "HFEngine"]

logger = logging.getLogger("skyrl_train.inference.hf")

_STRIP_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.")

DEFAULT_PREFIX_CACHE_TOKENS = 32768
"""Token budget of the prefix cache when it is on (SmolLM2-135M keeps 46 KB per token: up to 1.5 GB)."""


class HFEngine(InferenceEngine):
    """Batched generation with a transformers causal LM (CPU or one GPU); see the module docstring.

    `model`: a decoder-only transformers model with a standard attention KV cache (Llama, Qwen2, Mistral,
    SmolLM, ...). It may be the policy model itself: then `update_weights` with the policy's own tensors is a
    no-op, and the engine sees every optimizer step at once (call `update_weights` or `reset_prefix_cache`
    after a step so cached prefixes computed with the old weights are dropped; changes made with in-place
    tensor ops are also detected on their own). Generation runs in eval mode and under
    `torch.inference_mode`; do not train the shared model while a generation is in flight.
    `max_batch_size`: most sequences decoded together. `max_prefill_tokens`: most (padded) tokens per
    prefill forward. `batch_wait_s`: how long an idle engine waits to collect a burst of calls.
    `prefix_cache_tokens`: token budget of the prefix cache (0 disables it; SmolLM2-135M keeps 46 KB per
    token, so the default 32768 holds up to 1.5 GB). `seed`: seeds the sampling of requests without their
    own `SamplingParams.seed`. `max_model_len`: context length (default: the config's
    `max_position_embeddings`); a response that reaches it ends with stop_reason "length".
    The engine owns a worker thread: `close()` it (or use it as a context manager) when done.

    Logprobs are those of the sampled tokens under the model's raw distribution: log-softmax of the logits
    at temperature 1, before top-k/top-p (vLLM's default), i.e. what the trainer's forward pass recomputes.
    """

    runs_shared_model = True

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_batch_size: int = 64,
        max_prefill_tokens: int = 4096,
        batch_wait_s: float = 0.005,
        prefix_cache_tokens: int = DEFAULT_PREFIX_CACHE_TOKENS,
        seed: int | None = None,
        max_model_len: int | None = None,
    ) -> None:
        if max_batch_size < 1 or max_prefill_tokens < 1:
            raise ValueError("max_batch_size and max_prefill_tokens must be positive")
        self._model = model
        self._tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.max_prefill_tokens = max_prefill_tokens
        self.batch_wait_s = batch_wait_s
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.max_model_len = max_model_len or getattr(config, "max_position_embeddings", None) or 1 << 30
        self._vocab_size = model.get_input_embeddings().num_embeddings
        self._device = next(model.parameters()).device
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self._pad_id = int(pad) if pad is not None else 0
        self._eos_ids = eos_token_ids(model, tokenizer)
        self._rng = torch.Generator(device=self._device)
        self._rng.manual_seed(seed if seed is not None else random.SystemRandom().randrange(1 << 62))

        forward_params = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in forward_params else "past_key_values"
        self._logits_kwarg = next(
            (k for k in ("logits_to_keep", "num_logits_to_keep") if k in forward_params), None
        )

        self._prefix = PrefixCache(prefix_cache_tokens)
        self._weights_signature: tuple | None = None
        self._pending: list[Seq] = []
        self._cv = threading.Condition()
        self._model_lock = threading.Lock()  # held for each step and each weight update
        self._closed = False
        self._thread: threading.Thread | None = None
        self._paused = False
        self._parked = False  # the worker is waiting between steps (paused or idle)
        self._stale_kv = False  # weights changed under running sequences: recompute their KV first
        self.stats = {
            "steps": 0,
            "prefills": 0,
            "generated_tokens": 0,
            "prefill_tokens": 0,
            "reused_tokens": 0,
            "pauses": 0,
            "resumes": 0,
            "weight_updates": 0,
            "recomputed_rows": 0,
        }
        self._batch = RunningBatch(
            self._forward,
            self._prefix,
            StopRule(tokenizer),
            self._rng,
            pad_id=self._pad_id,
            device=self._device,
            max_prefill_tokens=max_prefill_tokens,
            stats=self.stats,
        )

    @classmethod
    def from_config(
        cls,
        generator: Any,
        *,
        model_path: str,
        tokenizer: Any = None,
        model: Any = None,
        seed: int | None = None,
        device: str = "cpu",
    ) -> HFEngine:
        """Build from the config's `generator` section.

        `model` (the policy's own model, shared: weight sync is free) is used as given; without it the
        engine loads `model_path` in `generator.model_dtype` on `device`. `max_num_seqs` caps the decode
        batch, `max_num_batched_tokens` the tokens of one prefill, `prefix_cache_tokens` the prefix cache's
        budget, and `enable_prefix_caching=false` turns the prefix cache off. With `generator.engine_process`
        the engine runs in a process of its own (an :class:`~skyrl_train.inference.process.EngineProcess`,
        which loads `model_path` there, never the policy's object) and receives weights by
        `generator.weight_sync_backend`.
        """
        from skyrl_train.models import load_model, load_tokenizer

        if generator.engine_process:
            from skyrl_train.inference.process import EngineProcess

            return EngineProcess(  # type: ignore[return-value]
                model_path,
                tokenizer=tokenizer,
                weight_sync_backend=generator.weight_sync_backend or "shared_memory",
                dtype=generator.model_dtype,
                device=device,
                max_batch_size=generator.max_num_seqs,
                max_prefill_tokens=generator.max_num_batched_tokens,
                prefix_cache_tokens=generator.prefix_cache_tokens if generator.enable_prefix_caching else 0,
                seed=seed,
            )
        if model is None:
            model = load_model(model_path, dtype=generator.model_dtype, device=device)
        if tokenizer is None:
            tokenizer = load_tokenizer(model_path)
        return cls(
            model,
            tokenizer,
            max_batch_size=generator.max_num_seqs,
            max_prefill_tokens=generator.max_num_batched_tokens,
            prefix_cache_tokens=generator.prefix_cache_tokens if generator.enable_prefix_caching else 0,
            seed=seed,
        )

    @classmethod
    def create(
        cls, *, model_path: str | None = None, model: Any = None, tokenizer: Any = None, **options: Any
    ) -> HFEngine:
        """Run `model` (e.g. the policy itself) or load `model_path` (options `dtype`, default float32, and
        `device`, default cpu); the tokenizer is loaded from `model_path` when not given. The other options
        go to the constructor."""
        from skyrl_train.models import load_model, load_tokenizer

        if model is None:
            if model_path is None:
                raise ValueError("make_engine('hf') needs a model object or a model_path")
            model = load_model(
                model_path, dtype=options.pop("dtype", "float32"), device=options.pop("device", "cpu")
            )
        if tokenizer is None:
            if model_path is None:
                raise ValueError(
                    "make_engine('hf', model=...) needs a tokenizer or a model_path to load it from"
                )
            tokenizer = load_tokenizer(model_path)
        return cls(model, tokenizer, **options)

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def model(self) -> Any:
        return self._model

    @property
    def policy_version(self) -> int:
        """Version of the weights in use: 0 at start, one more per weight update (or the version given)."""
        return self._batch.policy_version

    @property
    def paused(self) -> bool:
        """Whether `pause()` holds the decode loop."""
        return self._paused

    # ----------------------------------------------------------------- public API

    async def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[GenerationOutput]:
        """Generate one response per prompt; concurrent calls share forward passes."""
        request = self._submit(prompts, params)
        return await asyncio.wrap_future(request.future)

    def submit(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> concurrent.futures.Future[list[GenerationOutput]]:
        """Queue a generation and return at once: the future resolves to one output per prompt."""
        return self._submit(prompts, params).future

    def pause(self, wait: bool = True) -> int:
        """Stop the decode loop at the next token boundary; returns how many sequences it holds.

        Running sequences keep their tokens and KV; new calls queue up. With ``wait=False`` (e.g. from
        inside a step) it only asks, and the loop stops after the step in progress.
        """
        with self._cv:
            if not self._paused:
                self._paused = True
                self.stats["pauses"] += 1
            self._cv.notify_all()
            while wait and not self._parked and self._thread is not None and not self._closed:
                if threading.current_thread() is self._thread:
                    break
                self._cv.wait()
            return len(self._batch.rows)

    def resume(self) -> None:
        """Let the decode loop go on; sequences that ran across a weight update first recompute their KV."""
        with self._cv:
            if self._paused:
                self._paused = False
                self.stats["resumes"] += 1
            self._cv.notify_all()

    def logits(self, token_ids: Sequence[int]) -> torch.Tensor:
        """The model's next-token logits (float32, ``[len(token_ids), vocab]``) at every position of one
        sequence, with the weights in use: what the engine samples from, to compare with a trainer's model."""
        ids = torch.tensor([list(token_ids)], dtype=torch.long, device=self._device)
        with self._model_lock, torch.inference_mode(), self._eval_mode():
            out = self._model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
        return out.logits[0].float().cpu()

    def generate_sync(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[GenerationOutput]:
        """Blocking `generate`; safe from any thread, including one running an event loop elsewhere."""
        return self._submit(prompts, params).future.result()

    async def update_weights(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], *, version: int | None = None
    ) -> None:
        """Copy new weights into the model in place, between decode steps; see `load_weights`."""
        await asyncio.to_thread(self.load_weights, named_tensors, version=version)

    def load_weights(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], *, version: int | None = None
    ) -> int:
        """Blocking weight update between two decode steps; returns how many tensors were copied.

        Names are the model's state-dict names (wrapper prefixes like `module.` are stripped). A tensor that
        already is the model's own storage (a shared policy model) is skipped, so sharing costs nothing.
        The prefix cache is cleared either way, `policy_version` becomes `version` (default: one more), and
        sequences in flight recompute their KV with the new weights before their next token.
        """
        targets = self._model.state_dict(keep_vars=True)
        copied = 0
        with self._model_lock, torch.no_grad():
            for name, tensor in named_tensors:
                key = name
                for prefix in _STRIP_PREFIXES:
                    key = key.replace(prefix, "")
                target = targets.get(key)
                if target is None:
                    sample = ", ".join(list(targets)[:3])
                    raise KeyError(
                        f"update_weights: '{name}' is not in the engine's model (names look like {sample})"
                    )
                if hasattr(tensor, "full_tensor"):  # a DTensor shard from FSDP
                    tensor = tensor.full_tensor()
                if tuple(target.shape) != tuple(tensor.shape):
                    raise ValueError(
                        f"update_weights: '{name}' has shape {tuple(tensor.shape)}, the model's is {tuple(target.shape)}"
                    )
                if target.data_ptr() == tensor.data_ptr() and target.device == tensor.device:
                    continue
                target.copy_(tensor)
                copied += 1
            self._prefix.clear()
            self._weights_signature = None
            batch = self._batch
            batch.policy_version = batch.policy_version + 1 if version is None else int(version)
            self.stats["weight_updates"] += 1
            self._stale_kv = bool(batch.rows)
        return copied

    def reset_prefix_cache(self) -> None:
        """Forget cached prefixes (call after changing the shared model's weights outside `update_weights`)."""
        with self._model_lock:
            self._prefix.clear()

    def close(self) -> None:
        """Stop the worker; sequences still running or queued end with stop_reason "abort"."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=60)
        with self._cv:
            leftover, self._pending = self._pending, []
        for seq in leftover:
            seq.request.done(seq.index, seq.output())

    # ----------------------------------------------------------------- submission (caller's thread)

    def _submit(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> Request:
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
        future: concurrent.futures.Future = concurrent.futures.Future()
        request = Request(future, [None] * len(prompts), len(prompts))
        if not prompts:
            future.set_result([])
            return request
        eos_ids = set() if params.ignore_eos else self._eos_ids
        stop_ids = frozenset(eos_ids | set(params.stop_token_ids or ()))
        stop_window = max((len(s.encode("utf-8")) for s in params.stop or ()), default=0) + 4
        seqs = []
        for i, prompt in enumerate(prompts):
            ids = [int(t) for t in prompt]
            if not ids:
                raise ValueError(f"prompt {i} is empty; an engine needs at least one token to continue from")
            bad = next((t for t in ids if not 0 <= t < self._vocab_size), None)
            if bad is not None:
                raise ValueError(
                    f"prompt {i} holds token id {bad}, outside the model's vocabulary of {self._vocab_size}"
                )
            room = self.max_model_len - len(ids)
            if room < 1:
                raise ValueError(
                    f"prompt {i} has {len(ids)} tokens; the model's context is {self.max_model_len}, "
                    "so there is no room to generate (end the trajectory as context-exhausted)"
                )
            generator = None
            if params.seed is not None:
                generator = torch.Generator(device=self._device)
                generator.manual_seed((params.seed * 0x9E3779B1 + i) % (1 << 63))
            seqs.append(
                Seq(request, i, ids, params, generator, min(params.max_tokens, room), stop_ids, stop_window)
            )
        with self._cv:
            if self._closed:
                raise RuntimeError("the engine is closed")
            self._pending.extend(seqs)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hf-engine", daemon=True)
                self._thread.start()
            self._cv.notify_all()
        return request

    # ----------------------------------------------------------------- worker thread

    def _run(self) -> None:
        batch = self._batch
        while True:
            with self._cv:
                while (self._paused or (not self._pending and not batch.rows)) and not self._closed:
                    self._parked = True
                    self._cv.notify_all()  # a pause() waiting for the token boundary
                    self._cv.wait()
                self._parked = False
                if self._closed:
                    break
                idle = not batch.rows
            if idle and self.batch_wait_s > 0:
                time.sleep(self.batch_wait_s)  # let a burst of concurrent calls arrive
            with self._cv:
                room = self.max_batch_size - len(batch.rows)
                admitted, self._pending = self._pending[:room], self._pending[room:]
            admitted = [s for s in admitted if not s.request.future.done()]
            try:
                with self._model_lock, torch.inference_mode(), self._eval_mode():
                    batch.drop_cancelled()
                    if self._stale_kv:
                        self._stale_kv = False
                        self.stats["recomputed_rows"] += batch.recompute()
                    if admitted:
                        self._check_weights()
                        batch.admit(admitted)
                    if batch.rows:
                        batch.decode_step()
            except Exception as error:  # a failed step fails its requests, and the engine goes on
                logger.exception("HFEngine step failed")
                for seq in batch.rows + admitted:
                    seq.request.fail(error)
                batch.clear()
        for seq in batch.rows:
            seq.request.done(seq.index, seq.output())
        batch.clear()

    @contextlib.contextmanager
    def _eval_mode(self) -> Iterator[None]:
        was_training = self._model.training
        if was_training:
            self._model.eval()
        try:
            yield
        finally:
            if was_training:
                self._model.train()

    def _forward(self, input_ids, attention_mask, position_ids, cache, last_only: bool) -> torch.Tensor:
        kwargs = {self._cache_kwarg: cache}
        if last_only and self._logits_kwarg is not None:
            kwargs[self._logits_kwarg] = 1
        out = self._model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **kwargs,
        )
        return out.logits[:, -1, :].float()

    def _check_weights(self) -> None:
        """Drop cached prefixes computed with other weights (a shared model changed in place)."""
        signature = tuple((p.data_ptr(), p._version) for p in self._model.parameters())
        if signature != self._weights_signature:
            self._prefix.clear()
            self._weights_signature = signature
