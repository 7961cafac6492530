"""The inference-engine interface: token ids in; token ids, logprobs and a stop reason out.

Every engine (`hf`, `vllm`, `remote`) implements `InferenceEngine`. The generator sends many trajectories
concurrently, each with its own `generate` call, and keeps the token ids it gets back: it never
re-tokenises text, so what the engine returns is exactly what the policy is trained on.

Sampling parameters are the config's own type (:class:`skyrl_train.config.SamplingParams`, re-exported
here): `generator.sampling_params` is what the engines receive, with the per-turn changes the generator
makes (token budget, stop strings, seed).

Engines are chosen by name through one registry, :data:`ENGINES` (`generator.backend`): the trainer builds
its engine with `engine_class(generator.backend).from_config(generator, ...)`, each engine reading its own
settings from the generator section; `make_engine(kind, ...)` builds one outside a config through the
engine's own `create`. This module imports nothing heavy; an engine's module is imported only when it is
chosen.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from skyrl_gym.registries import Registry
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
    `policy_versions`: per generated token, the version of the weights that produced it (the engine's
    `policy_version` then: 0 for the weights it started with, one more per weight update); a response that
    was in flight across an update holds two versions. None when the engine does not track them.
    """

    token_ids: list[int]
    logprobs: list[float] | None
    stop_reason: StopReason
    stop_string: str | None = None
    policy_versions: list[int] | None = None
    metrics: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


class InferenceEngine(ABC):
    """An inference engine: async, batched, token in / token out, weights updated in place.

    Implementations: `HFEngine` (transformers, CPU or one GPU), `VLLMEngine` (GPU), `RemoteEngine`
    (any OpenAI-compatible `/v1/completions` server). Engines are safe to call from many coroutines at once;
    concurrent calls are batched together where the engine can.
    """

    runs_shared_model: ClassVar[bool] = False
    """Whether `from_config(model=...)` generates with the given model object itself, so that the policy's
    updates reach the engine without copying weights (the `hf` engine)."""

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

    async def wake_up(self, tags: list[str] | None = None) -> None:  # noqa: B027 - optional hook
        """Undo `sleep`; `tags` wakes part of it (vLLM: ``["weights"]`` before a weight sync, ``["kv_cache"]``
        after it), None all of it; a no-op where not supported."""

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

    @classmethod
    def create(
        cls, *, model_path: str | None = None, model: Any = None, tokenizer: Any = None, **options: Any
    ) -> InferenceEngine:
        """Build the engine outside a config (`make_engine`): `model_path`, a model object, a tokenizer and
        the engine's own keyword options. The default is `Class(model_path=..., model=..., tokenizer=...,
        **options)`; each built-in engine says what it needs."""
        return cls(model_path=model_path, model=model, tokenizer=tokenizer, **options)  # type: ignore[call-arg]

    def __enter__(self) -> InferenceEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


ENGINES: Registry[type[InferenceEngine]] = Registry(
    "inference engine",
    "generator.backend",
    builtins={
        "hf": "skyrl_train.inference.hf:HFEngine",
        "vllm": "skyrl_train.inference.vllm:VLLMEngine",
        "remote": "skyrl_train.inference.remote:RemoteEngine",
    },
)
"""Engine classes by name (``generator.backend``); a built-in's module is imported only when it is chosen."""


def register_engine(kind: str, engine: str | type[InferenceEngine], *, override: bool = False) -> None:
    """Make a custom engine available to `make_engine(kind, ...)` and `generator.backend`.

    `engine` is the class or its "module:Class" entry point (imported when first chosen). A custom engine
    is built by its `create` (default: `Class(model_path=..., model=..., tokenizer=..., **options)`).
    """
    if isinstance(engine, str):
        ENGINES.register_lazy(kind, engine, override=override)
    else:
        ENGINES.register(kind, engine, override=override)


def engine_class(kind: str) -> type[InferenceEngine]:
    """The engine class registered as `kind` (its module is imported now); a did-you-mean if none."""
    return ENGINES.get(kind)


def make_engine(
    kind: str,
    *,
    model_path: str | None = None,
    model: Any = None,
    tokenizer: Any = None,
    **options: Any,
) -> InferenceEngine:
    """Build an inference engine by name, with the engine's own `create`.

    - "hf": runs `model` (a transformers model object, e.g. the policy itself, so weight sync is free) or
      loads `model_path`; options go to `HFEngine` (`max_batch_size`, `seed`, ...).
    - "vllm": loads `model_path` into vLLM (GPU only); options go to `VLLMEngine`
      (`tensor_parallel_size`, `gpu_memory_utilization`, `dtype`, `seed`, `enable_sleep_mode`, ...).
    - "remote": talks to `options["base_url"]` (an OpenAI-compatible server); `model_path` names the served
      model and the tokenizer to load.
    `model_path` accepts Hugging Face names, local folders and "embedded:smollm2-135m".
    """
    return engine_class(kind).create(model_path=model_path, model=model, tokenizer=tokenizer, **options)
