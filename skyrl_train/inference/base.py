"""The inference-engine interface: token ids in; token ids, logprobs and a stop reason out.

Every engine (`hf`, `vllm`, `remote`) implements `InferenceEngine`. The generator sends many trajectories
concurrently, each with its own `generate` call, and keeps the token ids it gets back: it never
re-tokenises text, so what the engine returns is exactly what the policy is trained on.

Sampling parameters are the config's own type (:class:`skyrl_train.config.SamplingParams`, re-exported
here): `generator.sampling_params` is what the engines receive, with the per-turn changes the generator
makes (token budget, stop strings, seed).

The trainer builds its engine with `engine_class(generator.backend).from_config(generator, ...)`: each engine
reads its own settings from the generator section. This module imports nothing heavy; an engine's module is
imported only when it is chosen.
"""

from __future__ import annotations

import asyncio
import difflib
import importlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from skyrl_train.config import SamplingParams

if TYPE_CHECKING:
    import torch

    from skyrl_train.config import GeneratorConfig

__all__ = [
    "ENGINES",
    "GenerationOutput",
    "InferenceEngine",
    "SamplingParams",
    "StopReason",
    "engine_class",
    "make_engine",
    "register_engine",
]

StopReason = Literal["stop", "length", "abort"]


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

    @classmethod
    def from_config(
        cls,
        generator: GeneratorConfig,
        *,
        model_path: str,
        tokenizer: Any = None,
        model: Any = None,
        seed: int | None = None,
        device: str = "cpu",
    ) -> InferenceEngine:
        """Build the engine from the config's `generator` section.

        `model_path` is the policy's model, `model` the policy's own model object when the engine may share
        it (hf), `seed` the run's seed, `device` the training device. A custom engine (`register_engine`)
        that does not override this is constructed as `Class(model_path=..., model=..., tokenizer=...)`.
        """
        return cls(model_path=model_path, model=model, tokenizer=tokenizer)  # type: ignore[call-arg]

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


def engine_class(kind: str) -> type[InferenceEngine]:
    """The engine class registered as `kind` (its module is imported now)."""
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
    cls = engine_class(kind)
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
