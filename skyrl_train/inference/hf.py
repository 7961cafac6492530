"""`HFEngine`: a transformers model as an inference engine, fast enough to train on with two CPU cores.

One worker thread owns the model and runs a continuous-batching decode loop. Every `generate` call, from any
coroutine or thread, puts its prompts on a queue; the loop admits queued prompts between decode steps (after
waiting `batch_wait_s` when it was idle, so a burst of calls lands in one batch), prefills them together and
merges them into the running batch; finished sequences leave the batch at once. So the many trajectories a
generator runs concurrently share every forward pass, and no sequence waits for the longest one.

On a CPU the forward pass reads every weight once per step whatever the batch size, so batching is where the
speed comes from; three more things matter for multi-turn rollouts:
- the KV cache lives in preallocated buffers that are appended to in place (transformers' DynamicCache
  concatenates, copying the whole cache on every token);
- a prefix cache keeps the KV of recent prompts and finished responses; the next turn's prompt (history +
  response + observation) then prefills only its new tokens, and the samples of a group share their prompt's
  prefill;
- prefill computes logits for the last position only.

Sequences are left padded with holes allowed (an attention mask and explicit position ids keep each row
exactly what it would be alone). Results match one-at-a-time generation up to floating-point rounding.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import inspect
import logging
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from skyrl_train.inference.base import GenerationOutput, InferenceEngine, SamplingParams

logger = logging.getLogger(__name__)

_STRIP_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.")

DEFAULT_PREFIX_CACHE_TOKENS = 32768
"""Token budget of the prefix cache when it is on (SmolLM2-135M keeps 46 KB per token: up to 1.5 GB)."""


class _SlabLayer(DynamicLayer):
    """One layer's KV cache in a preallocated buffer `[batch, heads, capacity, head_dim]`.

    Appending writes in place and returns views; the buffer grows by `growth` extra columns when full.
    """

    def __init__(
        self,
        keys: torch.Tensor | None = None,
        values: torch.Tensor | None = None,
        length: int = 0,
        growth: int = 0,
    ) -> None:
        super().__init__()
        self._kbuf, self._vbuf, self._len, self._growth = keys, values, length, growth
        if keys is not None:
            self.is_initialized = True
            self.device = keys.device
            self._refresh()

    def _refresh(self) -> None:
        self.keys = self._kbuf[:, :, : self._len]
        self.values = self._vbuf[:, :, : self._len]

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        b, h, _, d = key_states.shape
        self._kbuf = key_states.new_zeros(b, h, 0, d)
        self._vbuf = value_states.new_zeros(b, value_states.shape[1], 0, value_states.shape[-1])
        self._len = 0
        self.device = key_states.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self._len + key_states.shape[-2]
        if end > self._kbuf.shape[-2]:
            self._kbuf = _grow(self._kbuf, self._len, end + self._growth)
            self._vbuf = _grow(self._vbuf, self._len, end + self._growth)
        self._kbuf[:, :, self._len : end] = key_states
        self._vbuf[:, :, self._len : end] = value_states
        self._len = end
        self._refresh()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._len

    @property
    def buffers(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._kbuf, self._vbuf


def _grow(buf: torch.Tensor, used: int, capacity: int) -> torch.Tensor:
    new = buf.new_zeros(*buf.shape[:2], capacity, buf.shape[-1])
    new[:, :, :used] = buf[:, :, :used]
    return new


def _cache_of(layers: list[_SlabLayer] | None) -> DynamicCache:
    cache = DynamicCache()
    if layers:
        cache.layers = layers
    cache.layer_class_to_replicate = _SlabLayer
    return cache


@dataclass(eq=False)
class _Request:
    """One `generate` call: its sequences resolve the future together."""

    future: concurrent.futures.Future
    outputs: list[GenerationOutput | None]
    remaining: int

    def done(self, index: int, output: GenerationOutput) -> None:
        self.outputs[index] = output
        self.remaining -= 1
        if self.remaining == 0 and not self.future.done():
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                self.future.set_result(list(self.outputs))

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                self.future.set_exception(error)


@dataclass(eq=False)
class _Seq:
    """One sequence being generated (a prompt of a request)."""

    request: _Request
    index: int
    prompt: list[int]
    params: SamplingParams
    generator: torch.Generator | None
    max_new: int
    stop_ids: frozenset[int]
    stop_window: int
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str | None = None
    stop_string: str | None = None
    cached_tokens: int = 0

    def output(self) -> GenerationOutput:
        return GenerationOutput(
            token_ids=list(self.tokens),
            logprobs=list(self.logprobs),
            stop_reason=self.finish or "abort",  # type: ignore[arg-type]
            stop_string=self.stop_string,
            metrics={"prompt_tokens": len(self.prompt), "cached_prompt_tokens": self.cached_tokens},
        )


class _PrefixCache:
    """KV of recent token sequences, reused when a new prompt starts with the same tokens.

    Entries are compact per-layer `(keys [heads, n, head_dim], values)`, evicted least recently used first
    once they hold more than `max_tokens` tokens. An entry that is a prefix of a newer one is dropped.
    """

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.entries: OrderedDict[int, tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]] = (
            OrderedDict()
        )
        self.total = 0
        self._next_id = 0

    def clear(self) -> None:
        self.entries.clear()
        self.total = 0

    def lookup(self, prompt: torch.Tensor) -> tuple[int, list[tuple[torch.Tensor, torch.Tensor]] | None]:
        """Longest reusable prefix of `prompt` (at most all but its last token) and the entry holding it."""
        best, best_id = 0, None
        limit = prompt.numel() - 1
        for eid, (tokens, _) in self.entries.items():
            n = min(tokens.numel(), limit)
            if n <= best:
                continue
            eq = tokens[:n] == prompt[:n]
            common = n if bool(eq.all()) else int(eq.to(torch.int8).argmin())
            if common > best:
                best, best_id = common, eid
        if best_id is None:
            return 0, None
        self.entries.move_to_end(best_id)
        return best, self.entries[best_id][1]

    def insert(self, tokens: torch.Tensor, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        n = tokens.numel()
        if self.max_tokens <= 0 or n > self.max_tokens or n == 0:
            return
        for eid, (old, _) in list(self.entries.items()):
            m = old.numel()
            if m <= n and torch.equal(old, tokens[:m]):
                del self.entries[eid]
                self.total -= m
            elif m > n and torch.equal(old[:n], tokens):
                self.entries.move_to_end(eid)  # already covered by a longer entry
                return
        self.entries[self._next_id] = (tokens, kv)
        self._next_id += 1
        self.total += n
        while self.total > self.max_tokens:
            _, (old, _) = self.entries.popitem(last=False)
            self.total -= old.numel()


@dataclass
class _Prefill:
    """A prefilled group of new sequences, before it joins the running batch."""

    layers: list[_SlabLayer]
    mask: torch.Tensor  # [rows, length]
    seqs: list[_Seq]
    rows: list[int]  # row of `layers` that holds each seq's KV


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
        self._decoder: Any = None  # the worker thread's own tokenizer copy, made when it first needs one
        self.max_batch_size = max_batch_size
        self.max_prefill_tokens = max_prefill_tokens
        self.batch_wait_s = batch_wait_s
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.max_model_len = max_model_len or getattr(config, "max_position_embeddings", None) or 1 << 30
        self._vocab_size = model.get_input_embeddings().num_embeddings
        self._device = next(model.parameters()).device
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self._pad_id = int(pad) if pad is not None else 0
        self._eos_ids = _eos_token_ids(model, tokenizer)
        self._rng = torch.Generator(device=self._device)
        self._rng.manual_seed(seed if seed is not None else random.SystemRandom().randrange(1 << 62))

        forward_params = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in forward_params else "past_key_values"
        self._logits_kwarg = next(
            (k for k in ("logits_to_keep", "num_logits_to_keep") if k in forward_params), None
        )

        self._prefix = _PrefixCache(prefix_cache_tokens)
        self._weights_signature: tuple | None = None
        self._rows: list[_Seq] = []  # the running batch, row order
        self._cache: DynamicCache | None = None
        self._mask: torch.Tensor | None = None
        self._pending: list[_Seq] = []
        self._cv = threading.Condition()
        self._model_lock = threading.Lock()  # held for each step and each weight update
        self._closed = False
        self._thread: threading.Thread | None = None
        self.stats = {
            "steps": 0,
            "prefills": 0,
            "generated_tokens": 0,
            "prefill_tokens": 0,
            "reused_tokens": 0,
        }

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
        batch, `max_num_batched_tokens` the tokens of one prefill, and `enable_prefix_caching=false` turns
        the prefix cache off.
        """
        from skyrl_train.models import load_model, load_tokenizer

        if model is None:
            model = load_model(model_path, dtype=generator.model_dtype, device=device)
        if tokenizer is None:
            tokenizer = load_tokenizer(model_path)
        return cls(
            model,
            tokenizer,
            max_batch_size=generator.max_num_seqs,
            max_prefill_tokens=generator.max_num_batched_tokens,
            prefix_cache_tokens=DEFAULT_PREFIX_CACHE_TOKENS if generator.enable_prefix_caching else 0,
            seed=seed,
        )

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def model(self) -> Any:
        return self._model

    # ----------------------------------------------------------------- public API

    async def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[GenerationOutput]:
        """Generate one response per prompt; concurrent calls share forward passes."""
        request = self._submit(prompts, params)
        return await asyncio.wrap_future(request.future)

    def generate_sync(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[GenerationOutput]:
        """Blocking `generate`; safe from any thread, including one running an event loop elsewhere."""
        return self._submit(prompts, params).future.result()

    async def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy new weights into the model in place, between decode steps; see `load_weights`."""
        await asyncio.to_thread(self.load_weights, named_tensors)

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Blocking weight update; returns how many tensors were copied.

        Names are the model's state-dict names (wrapper prefixes like `module.` are stripped). A tensor that
        already is the model's own storage (a shared policy model) is skipped, so sharing costs nothing.
        The prefix cache is cleared either way.
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

    def _submit(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> _Request:
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
        future: concurrent.futures.Future = concurrent.futures.Future()
        request = _Request(future, [None] * len(prompts), len(prompts))
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
                _Seq(request, i, ids, params, generator, min(params.max_tokens, room), stop_ids, stop_window)
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
        while True:
            with self._cv:
                while not self._pending and not self._rows and not self._closed:
                    self._cv.wait()
                if self._closed:
                    break
                idle = not self._rows
            if idle and self.batch_wait_s > 0:
                time.sleep(self.batch_wait_s)  # let a burst of concurrent calls arrive
            with self._cv:
                room = self.max_batch_size - len(self._rows)
                admitted, self._pending = self._pending[:room], self._pending[room:]
            admitted = [s for s in admitted if not s.request.future.done()]
            try:
                with self._model_lock, torch.inference_mode(), self._eval_mode():
                    self._drop_cancelled()
                    if admitted:
                        self._admit(admitted)
                    if self._rows:
                        self._decode_step()
            except Exception as error:  # a failed step fails its requests, and the engine goes on
                logger.exception("HFEngine step failed")
                for seq in self._rows + admitted:
                    seq.request.fail(error)
                self._rows, self._cache, self._mask = [], None, None
        for seq in self._rows:
            seq.request.done(seq.index, seq.output())
        self._rows, self._cache, self._mask = [], None, None

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

    def _drop_cancelled(self) -> None:
        if any(s.request.future.done() for s in self._rows):
            keep = [i for i, s in enumerate(self._rows) if not s.request.future.done()]
            self._rebuild(keep, None)

    def _check_weights(self) -> None:
        signature = tuple((p.data_ptr(), p._version) for p in self._model.parameters())
        if signature != self._weights_signature:
            self._prefix.clear()
            self._weights_signature = signature

    def _admit(self, seqs: list[_Seq]) -> None:
        """Prefill new sequences (identical prompts once, cached prefixes reused) and merge them in."""
        self._check_weights()
        groups: dict[tuple[int, ...], list[_Seq]] = {}
        for seq in seqs:
            groups.setdefault(tuple(seq.prompt), []).append(seq)
        items = []
        for members in groups.values():
            prompt = torch.tensor(members[0].prompt, dtype=torch.long)
            reused, kv = self._prefix.lookup(prompt)
            items.append((prompt, reused, kv, members))
        items.sort(key=lambda item: item[0].numel() - item[1])
        chunk: list = []
        for item in items:
            new_tokens = item[0].numel() - item[1]
            longest = max([new_tokens] + [c[0].numel() - c[1] for c in chunk])
            if chunk and longest * (len(chunk) + 1) > self.max_prefill_tokens:
                self._merge(self._prefill(chunk))
                chunk = []
            chunk.append(item)
        if chunk:
            self._merge(self._prefill(chunk))

    def _prefill(self, items: list) -> _Prefill:
        k = len(items)
        past = max(item[1] for item in items)
        new = max(item[0].numel() - item[1] for item in items)
        device = self._device
        mask = torch.zeros(k, past + new, dtype=torch.long, device=device)
        input_ids = torch.full((k, new), self._pad_id, dtype=torch.long, device=device)
        position_ids = torch.zeros(k, new, dtype=torch.long, device=device)
        for i, (prompt, reused, _, _) in enumerate(items):
            n = prompt.numel() - reused
            mask[i, past - reused : past] = 1
            mask[i, past + new - n :] = 1
            input_ids[i, new - n :] = prompt[reused:].to(device)
            position_ids[i, new - n :] = torch.arange(reused, prompt.numel(), device=device)
        layers = None
        if past:
            ref = next(kv for _, reused, kv, _ in items if reused)
            layers = []
            for layer, (k_ref, v_ref) in enumerate(ref):
                kbuf = k_ref.new_zeros(k, k_ref.shape[0], past + new, k_ref.shape[-1])
                vbuf = v_ref.new_zeros(k, v_ref.shape[0], past + new, v_ref.shape[-1])
                for i, (_, reused, kv, _) in enumerate(items):
                    if reused:
                        kbuf[i, :, past - reused : past] = kv[layer][0][:, :reused]
                        vbuf[i, :, past - reused : past] = kv[layer][1][:, :reused]
                layers.append(_SlabLayer(kbuf, vbuf, length=past))
        cache = _cache_of(layers)
        logits = self._forward(input_ids, mask, position_ids, cache, last_only=True)
        self.stats["prefills"] += 1
        self.stats["prefill_tokens"] += sum(item[0].numel() - item[1] for item in items)
        self.stats["reused_tokens"] += sum(item[1] for item in items)
        prefill = _Prefill(list(cache.layers), mask, [], [])
        for i, (prompt, reused, _, members) in enumerate(items):
            if self._prefix.max_tokens > 0 and reused < prompt.numel() - 1:
                self._prefix.insert(prompt, self._row_kv(prefill.layers, i, mask[i]))
            for seq in members:
                seq.cached_tokens = reused
                prefill.seqs.append(seq)
                prefill.rows.append(i)
        rows = torch.tensor(prefill.rows, device=device)
        self._sample_and_check(logits.index_select(0, rows), prefill.seqs)
        return prefill

    def _merge(self, prefill: _Prefill) -> None:
        """Drop finished rows from the running batch and append the prefilled sequences still going."""
        self._finish_rows(prefill.seqs, prefill.layers, prefill.mask, prefill.rows)
        live = [(s, r) for s, r in zip(prefill.seqs, prefill.rows, strict=True) if s.finish is None]
        keep = [i for i, s in enumerate(self._rows) if s.finish is None]
        new = (
            _Prefill(prefill.layers, prefill.mask, [s for s, _ in live], [r for _, r in live])
            if live
            else None
        )
        self._rebuild(keep, new)

    def _rebuild(self, keep: list[int], new: _Prefill | None) -> None:
        """Re-lay the batch: rows `keep` of the running batch, then `new`'s sequences, right aligned."""
        if new is None and len(keep) == len(self._rows):
            return
        parts = []  # (layers, mask, row index tensor)
        if keep and self._cache is not None:
            parts.append((self._cache.layers, self._mask, torch.tensor(keep, device=self._device)))
        if new is not None:
            parts.append((new.layers, new.mask, torch.tensor(new.rows, device=self._device)))
        seqs = [self._rows[i] for i in keep] + (new.seqs if new is not None else [])
        if not seqs:
            self._rows, self._cache, self._mask = [], None, None
            return
        trimmed = []
        for layers, mask, index in parts:
            sub = mask.index_select(0, index)
            used = sub.any(0).nonzero()
            start = int(used[0]) if used.numel() else sub.shape[1]
            trimmed.append((layers, sub[:, start:], index, start))
        length = max(sub.shape[1] for _, sub, _, _ in trimmed)
        growth = min(512, max(64, max(s.max_new - len(s.tokens) for s in seqs)))
        mask = torch.zeros(len(seqs), length, dtype=torch.long, device=self._device)
        row = 0
        for _, sub, _, _ in trimmed:
            mask[row : row + sub.shape[0], length - sub.shape[1] :] = sub
            row += sub.shape[0]
        new_layers = []
        for layer_idx in range(len(trimmed[0][0])):
            kref, vref = trimmed[0][0][layer_idx].buffers
            kbuf = kref.new_zeros(len(seqs), kref.shape[1], length + growth, kref.shape[-1])
            vbuf = vref.new_zeros(len(seqs), vref.shape[1], length + growth, vref.shape[-1])
            row = 0
            for layers, sub, index, start in trimmed:
                width = sub.shape[1]
                src_k, src_v = layers[layer_idx].buffers
                end = start + width
                kbuf[row : row + len(index), :, length - width : length] = src_k[index, :, start:end]
                vbuf[row : row + len(index), :, length - width : length] = src_v[index, :, start:end]
                row += len(index)
            new_layers.append(_SlabLayer(kbuf, vbuf, length=length, growth=growth))
        self._rows, self._cache, self._mask = seqs, _cache_of(new_layers), mask

    def _decode_step(self) -> None:
        rows = self._rows
        device = self._device
        last = torch.tensor([[s.tokens[-1]] for s in rows], device=device)
        positions = torch.tensor([[len(s.prompt) + len(s.tokens) - 1] for s in rows], device=device)
        self._mask = torch.cat([self._mask, self._mask.new_ones(len(rows), 1)], dim=1)
        logits = self._forward(last, self._mask, positions, self._cache, last_only=False)
        self.stats["steps"] += 1
        self._sample_and_check(logits, rows)
        if any(s.finish for s in rows):
            self._finish_rows(rows, self._cache.layers, self._mask, list(range(len(rows))))
            self._rebuild([i for i, s in enumerate(rows) if s.finish is None], None)

    def _finish_rows(self, seqs: list[_Seq], layers, mask: torch.Tensor, rows: list[int]) -> None:
        """Deliver finished sequences and keep their KV (prompt + response minus its last token) for reuse."""
        for seq, row in zip(seqs, rows, strict=True):
            if seq.finish is None:
                continue
            if self._prefix.max_tokens > 0 and len(seq.tokens) > 1:
                tokens = torch.tensor(seq.prompt + seq.tokens[:-1], dtype=torch.long)
                self._prefix.insert(tokens, self._row_kv(layers, row, mask[row]))
            seq.request.done(seq.index, seq.output())

    @staticmethod
    def _row_kv(layers, row: int, mask_row: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """One row's KV over its real tokens, compact: per layer `(keys [heads, n, head_dim], values)`."""
        index = mask_row.nonzero().squeeze(1)
        out = []
        for layer in layers:
            kbuf, vbuf = layer.buffers
            out.append((kbuf[row].index_select(1, index), vbuf[row].index_select(1, index)))
        return out

    def _sample_and_check(self, logits: torch.Tensor, seqs: list[_Seq]) -> None:
        tokens, logprobs = self._sample(logits, seqs)
        for seq, token, logprob in zip(seqs, tokens.tolist(), logprobs.tolist(), strict=True):
            seq.tokens.append(token)
            seq.logprobs.append(logprob)
            self.stats["generated_tokens"] += 1
            self._check_stop(seq, token)

    def _sample(self, logits: torch.Tensor, seqs: list[_Seq]) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample one token per row with its own temperature / top-k / min-p / top-p; logprobs at temperature 1."""
        logprobs_all = torch.log_softmax(logits, dim=-1)
        tokens = logits.argmax(dim=-1)
        sampled = [i for i, s in enumerate(seqs) if not s.params.greedy]
        if sampled:
            index = torch.tensor(sampled, device=logits.device)
            temps = torch.tensor([seqs[i].params.temperature for i in sampled], device=logits.device)
            x = logits.index_select(0, index) / temps[:, None]
            vocab = x.shape[-1]
            ks = torch.tensor(
                [seqs[i].params.top_k if 0 < seqs[i].params.top_k < vocab else vocab for i in sampled],
                device=logits.device,
            )
            filtered = ks < vocab
            if bool(filtered.any()):
                kth = torch.topk(x, int(ks[filtered].max()), dim=-1).values
                thresholds = kth.gather(1, (ks.clamp(max=kth.shape[-1]) - 1)[:, None]).squeeze(1)
                thresholds = thresholds.masked_fill(~filtered, float("-inf"))
                x = x.masked_fill(x < thresholds[:, None], float("-inf"))
            min_ps = torch.tensor([seqs[i].params.min_p for i in sampled], device=logits.device)
            if bool((min_ps > 0).any()):
                floor = x.max(dim=-1, keepdim=True).values + torch.log(min_ps)[:, None]
                x = x.masked_fill(x < floor, float("-inf"))
            ps = torch.tensor([seqs[i].params.top_p for i in sampled], device=logits.device)
            if bool((ps < 1).any()):
                sorted_x, order = torch.sort(x, dim=-1, descending=True)
                probs = torch.softmax(sorted_x, dim=-1)
                mass_before = probs.cumsum(dim=-1) - probs
                sorted_x = sorted_x.masked_fill(mass_before >= ps[:, None], float("-inf"))
                x = torch.full_like(x, float("-inf")).scatter(1, order, sorted_x)
            # Inverse-CDF sampling: one uniform draw per row, from the row's own generator when it has a seed.
            cdf = torch.softmax(x, dim=-1).cumsum(dim=-1)
            uniform = torch.empty(len(sampled), device=logits.device)
            shared = [j for j, i in enumerate(sampled) if seqs[i].generator is None]
            if shared:
                uniform[shared] = torch.rand(len(shared), generator=self._rng, device=logits.device)
            for j, i in enumerate(sampled):
                if seqs[i].generator is not None:
                    uniform[j] = torch.rand(1, generator=seqs[i].generator, device=logits.device)
            # 1 - u lies in (0, 1], so the search never lands on a zero-probability token at the start.
            targets = ((1.0 - uniform) * cdf[:, -1])[:, None]
            draws = torch.searchsorted(cdf, targets).squeeze(1).clamp(max=vocab - 1)
            tokens[index] = draws
        logprobs = logprobs_all.gather(1, tokens[:, None]).squeeze(1)
        return tokens, logprobs

    def _stop_decoder(self) -> Any:
        # The worker decodes stop-string windows; its own copy avoids sharing the Rust tokenizer across threads
        # (copied on first use: a large vocabulary takes a while to copy, and many engines never need it).
        if self._decoder is None:
            try:
                self._decoder = copy.deepcopy(self._tokenizer)
            except Exception:
                self._decoder = self._tokenizer
        return self._decoder

    def _check_stop(self, seq: _Seq, token: int) -> None:
        if token in seq.stop_ids:
            seq.finish = "stop"
            return
        if seq.params.stop:
            text = self._stop_decoder().decode(seq.tokens[-seq.stop_window :], skip_special_tokens=False)
            hits = [(text.find(s), s) for s in seq.params.stop if s in text]
            if hits:
                seq.finish, seq.stop_string = "stop", min(hits)[1]
                return
        if len(seq.tokens) >= seq.max_new:
            seq.finish = "length"


def _eos_token_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    generation_config = getattr(model, "generation_config", None)
    eos = getattr(generation_config, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, list | tuple):
        ids.update(int(e) for e in eos)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids
