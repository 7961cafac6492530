"""The inference-engine interface: token ids in; token ids, logprobs and a stop reason out.

Every engine (`hf`, `vllm`, `remote`) implements `InferenceEngine`. The generator sends many trajectories
concurrently, each with its own `generate` call, and keeps the token ids it gets back: it never
re-tokenises text, so what the engine returns is exactly what the policy is trained on.

This module imports nothing heavy; `make_engine` imports an engine's module only when it is chosen.
"""

from __future__ import annotations

import asyncio
import difflib
import importlib
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch

StopReason = Literal["stop", "length", "abort"]


@dataclass
class SamplingParams:
    """How to sample one response. The same object can be shared by many calls.

    `temperature=0` is greedy decoding. `top_k` of -1 (or 0), `top_p` of 1 and `min_p` of 0 disable those
    filters (`min_p` drops tokens less likely than min_p times the most likely one).
    `max_tokens` caps the new tokens of each response. Generation stops at the model's EOS token, at any
    of `stop_token_ids`, or as soon as the decoded response contains one of the `stop` strings; the
    response then ends with the token that completed the stop string (vLLM's
    `include_stop_str_in_output=True`), so the token ids stay a faithful record of what was generated.
    With a `seed`, response i of a call depends only on (seed, i, its prompt): rerunning gives the same
    tokens, and two prompts of the same call still get different random streams. `ignore_eos` keeps going
    past EOS (for benchmarks that need a fixed length).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    max_tokens: int = 256
    stop: list[str] | None = None
    seed: int | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if self.stop is not None:
            self.stop = [s for s in self.stop]
            if any(not isinstance(s, str) or not s for s in self.stop):
                raise ValueError(f"SamplingParams.stop must hold non-empty strings, got {self.stop!r}")
        if (
            not (isinstance(self.temperature, int | float) and math.isfinite(self.temperature))
            or self.temperature < 0
        ):
            raise ValueError(
                f"SamplingParams.temperature must be >= 0 (0 = greedy), got {self.temperature!r}"
            )
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or self.top_k < -1:
            raise ValueError(
                f"SamplingParams.top_k must be -1 (off), 0 (off) or a positive int, got {self.top_k!r}"
            )
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"SamplingParams.min_p must be in [0, 1], got {self.min_p!r}")
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"SamplingParams.max_tokens must be a positive int, got {self.max_tokens!r}")
        if self.seed is not None and not isinstance(self.seed, int):
            raise ValueError(f"SamplingParams.seed must be an int or None, got {self.seed!r}")
        if self.stop_token_ids is not None:
            self.stop_token_ids = [int(t) for t in self.stop_token_ids]

    @property
    def greedy(self) -> bool:
        """True when decoding is deterministic argmax (temperature 0)."""
        return self.temperature == 0


@dataclass
class GenerationOutput:
    """One response.

    `token_ids`: the generated tokens (not the prompt), including the EOS or stop-string tokens that ended it.
    `logprobs`: per generated token, its log-probability under the model's raw distribution (log-softmax of
    the logits at temperature 1, before top-k/top-p), which is what the trainer recomputes; None when the
    engine cannot provide them.
    `stop_reason`: "stop" (EOS, a stop token or a stop string), "length" (max_tokens or the model's context
    length), "abort" (the engine was closed or the request cancelled; the tokens so far are kept).
    `stop_string`: the stop string that ended it, when one did.
    """

    token_ids: list[int]
    logprobs: list[float] | None
    stop_reason: StopReason
    stop_string: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


class InferenceEngine(ABC):
    """An inference engine: async, batched, token in / token out, weights updated in place.

    Implementations: `HFEngine` (transformers, CPU or one GPU), `VLLMEngine` (GPU), `RemoteEngine`
    (any OpenAI-compatible `/v1/completions` server). Engines are safe to call from many coroutines at once;
    concurrent calls are batched together where the engine can.
    """

    @property
    @abstractmethod
    def tokenizer(self) -> Any:
        """The tokenizer whose ids the engine reads and writes."""

    @abstractmethod
    async def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[GenerationOutput]:
        """Generate one response per prompt (each a list of token ids), in order."""

    @abstractmethod
    async def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load new weights (Hugging Face parameter names, full unsharded tensors) in place.

        Requests in flight continue with the new weights from their next token on; callers normally update
        between rollout batches, when nothing is in flight.
        """

    async def sleep(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release accelerator memory between rollouts (vLLM sleep mode); a no-op where not supported."""

    async def wake_up(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Undo `sleep`; a no-op where not supported."""

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Stop the engine and free its resources; requests still in flight end with stop_reason "abort"."""

    def generate_sync(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[GenerationOutput]:
        """Blocking `generate`, for scripts and benchmarks; must not be called from a running event loop."""
        return asyncio.run(self.generate(prompts, params))

    def __enter__(self) -> InferenceEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# kind -> "module:Class"; make_engine imports the module only when that kind is chosen.
ENGINES: dict[str, str] = {
    "hf": "skyrl_train.inference.hf:HFEngine",
    "vllm": "skyrl_train.inference.vllm:VLLMEngine",
    "remote": "skyrl_train.inference.remote:RemoteEngine",
}


def register_engine(kind: str, entry_point: str) -> None:
    """Make a custom engine available to `make_engine(kind, ...)`; `entry_point` is "module:Class".

    The class is constructed as `Class(model_path=..., model=..., tokenizer=..., **options)`.
    """
    if ":" not in entry_point:
        raise ValueError(f"entry_point must look like 'package.module:Class', got {entry_point!r}")
    ENGINES[kind] = entry_point


def _engine_class(kind: str) -> type:
    if kind not in ENGINES:
        close = difflib.get_close_matches(kind, ENGINES, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ValueError(f"unknown inference engine '{kind}'; {hint}known: {', '.join(sorted(ENGINES))}")
    module_name, _, class_name = ENGINES[kind].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def make_engine(
    kind: str,
    *,
    model_path: str | None = None,
    model: Any = None,
    tokenizer: Any = None,
    **options: Any,
) -> InferenceEngine:
    """Build an inference engine by name.

    - "hf": runs `model` (a transformers model object, e.g. the policy itself, so weight sync is free) or
      loads `model_path`; options go to `HFEngine` (`max_batch_size`, `seed`, ...).
    - "vllm": loads `model_path` into vLLM (GPU only); options go to `VLLMEngine`
      (`tensor_parallel_size`, `gpu_memory_utilization`, `dtype`, `seed`, `enable_sleep_mode`, ...).
    - "remote": talks to `options["base_url"]` (an OpenAI-compatible server); `model_path` names the served
      model and the tokenizer to load.
    `model_path` accepts Hugging Face names, local folders and "embedded:smollm2-135m".
    """
    cls = _engine_class(kind)
    if kind == "hf":
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
    if kind == "vllm":
        if model_path is None:
            raise ValueError("make_engine('vllm') needs a model_path (vLLM loads the weights itself)")
        return cls(model_path, tokenizer=tokenizer, **options)
    if kind == "remote":
        if "base_url" not in options:
            raise ValueError("make_engine('remote') needs base_url, e.g. 'http://127.0.0.1:8000'")
        if tokenizer is None and model_path is not None:
            from skyrl_train.models import load_tokenizer

            tokenizer = load_tokenizer(model_path)
        return cls(
            options.pop("base_url"),
            tokenizer=tokenizer,
            model_name=options.pop("model_name", model_path),
            **options,
        )
    return cls(model_path=model_path, model=model, tokenizer=tokenizer, **options)
