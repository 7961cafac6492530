"""The inference engine as a Ray actor, and :class:`RayEngine`, the engine the runner talks to in its place.

:class:`EngineActor` builds the configured engine (``generator.backend``: the hf engine on CPU, vllm on a
GPU) inside an actor and serves its ``generate`` concurrently (an async actor: the calls of many
trajectories land in the engine's own batches). :class:`RayEngine` is an
:class:`~skyrl_train.inference.base.InferenceEngine` whose ``generate`` awaits the actor, so the runner and
the trajectories are unchanged. Weights reach the actor from the policy's training actors directly
(:meth:`RayEngine.sync_from`), or through the driver with ``update_weights``.

A dead actor or a call past ``trainer.placement.ray_call_timeout_s`` fails that call with an error that names
the actor and the call; :attr:`RayEngine.failure` keeps the first death, so that the trainer stops the step
and resumes from its checkpoint instead of training on a batch of error trajectories.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Sequence
from typing import Any

from skyrl_train.inference.base import GenerationOutput, InferenceEngine, SamplingParams

__all__ = ["EngineActor", "RayEngine"]

LABEL = "the inference engine actor"


class EngineActor:
    """The body of the engine actor: an engine built from the generator section, behind async methods."""

    def __init__(
        self, kind: str, generator: dict[str, Any], model_path: str, seed: int | None, device: str
    ) -> None:
        from skyrl_train.config import GeneratorConfig
        from skyrl_train.inference.base import engine_class

        if device.startswith("cuda"):
            device = "cuda:0"  # Ray shows the actor only its own GPUs
        self.engine = engine_class(kind).from_config(
            GeneratorConfig.model_validate(generator), model_path=model_path, seed=seed, device=device
        )

    def pid(self) -> int:
        """The actor's process id."""
        return os.getpid()

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[GenerationOutput]:
        """The engine's ``generate``."""
        return await self.engine.generate(prompts, params)

    async def load_weights(self, state: dict[str, Any]) -> int:
        """Load full (unsharded) weights by name; returns how many tensors were given."""
        await self.engine.update_weights(state.items())
        return len(state)

    async def sleep(self) -> None:
        """The engine's ``sleep`` (it shares the policy's GPUs: its memory goes back for the update)."""
        await self.engine.sleep()

    async def wake_up(self, tags: list[str] | None = None) -> None:
        """The engine's ``wake_up``."""
        await self.engine.wake_up(tags=tags)

    def close(self) -> None:
        """Close the engine."""
        self.engine.close()


class RayEngine(InferenceEngine):
    """An :class:`InferenceEngine` served by an :class:`EngineActor`; see the module docstring.

    ``actor_options`` are Ray's (resources, scheduling strategy); ``tokenizer`` is the driver's copy.
    """

    def __init__(
        self,
        *,
        kind: str,
        generator: Any,
        model_path: str,
        tokenizer: Any,
        seed: int | None,
        device: str,
        actor_options: dict[str, Any],
        start_timeout_s: float,
        call_timeout_s: float | None,
    ) -> None:
        from skyrl_train.ray_layout.cluster import connect, get_one

        ray = connect()
        self._tokenizer = tokenizer
        self.call_timeout_s = call_timeout_s
        self.failure: str | None = None
        """The first death of the actor seen by a call (None while it lives)."""
        self.actor = (
            ray.remote(EngineActor)
            .options(max_concurrency=1000, **actor_options)
            .remote(kind, generator.model_dump(), model_path, seed, device)
        )
        self._closed = False
        try:
            self.pid = get_one(self.actor.pid.remote(), LABEL, "start (loading the model)", start_timeout_s)
        except BaseException:
            self.close()
            raise

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    async def _await(self, ref: Any, what: str) -> Any:
        from skyrl_train.ray_layout.cluster import ActorLostError, ActorTimeoutError, describe_failure

        try:
            return await asyncio.wait_for(asyncio.wrap_future(ref.future()), self.call_timeout_s)
        except asyncio.TimeoutError:
            raise ActorTimeoutError(
                f"{LABEL} did not answer {what} within {self.call_timeout_s:g} s"
            ) from None
        except Exception as error:
            failure = describe_failure(error, f"{LABEL} (pid {self.pid})", what)
            if isinstance(failure, ActorLostError) and self.failure is None:
                self.failure = str(failure)
            raise failure from None

    async def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[GenerationOutput]:
        """Generate on the actor."""
        return await self._await(self.actor.generate.remote([list(p) for p in prompts], params), "generate")

    async def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Send full weights to the actor (through this process; :meth:`sync_from` avoids that)."""
        state = dict(named_tensors)
        if state:
            await self._await(self.actor.load_weights.remote(state), "update_weights")

    async def sleep(self) -> None:
        """Put the actor's engine to sleep."""
        await self._await(self.actor.sleep.remote(), "sleep")

    async def wake_up(self, tags: list[str] | None = None) -> None:
        """Wake the actor's engine (part of it with ``tags``)."""
        await self._await(self.actor.wake_up.remote(tags), "wake_up")

    def sync_from(self, policy: Any) -> None:
        """Load the policy's current weights: straight from its rank-0 actor when the policy is a
        :class:`~skyrl_train.training.workers.ray_group.RayWorkerGroup`, else through this process."""
        if hasattr(policy, "push_weights"):
            policy.push_weights(self.actor)
        else:
            asyncio.run(self.update_weights(policy.full_state_dict().items()))

    def raise_if_lost(self) -> None:
        """Raise the :class:`~skyrl_train.ray_layout.cluster.ActorLostError` of a death seen by a call."""
        from skyrl_train.ray_layout.cluster import ActorLostError

        if self.failure is not None:
            raise ActorLostError(self.failure)

    def close(self) -> None:
        """Close the engine and stop the actor (idempotent)."""
        if self._closed:
            return
        self._closed = True
        import ray

        try:
            ray.get(self.actor.close.remote(), timeout=30)
        except Exception:  # dead already, or stuck: killed below either way
            pass
        try:
            ray.kill(self.actor, no_restart=True)
        except Exception:
            pass
