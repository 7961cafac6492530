"""Environments in Ray actors (``generator.env_workers``), so that heavy ones (Docker containers, sandboxes)
step on other machines than the trainer.

An :class:`EnvActor` holds many environments of one worker and runs their calls on its threads (each
environment is called by one trajectory at a time). :class:`EnvActorPool` spreads new environments over its
actors (the least loaded living one) and replaces an actor that died. :class:`RemoteEnv` is what a
trajectory gets from the runner instead of the environment: its ``init``, ``step``, ``evaluate``,
``get_metrics`` and ``close`` call the actor, so the trajectory's code is unchanged. :class:`RemoteEnvRunner`
is the runner whose ``_make_env`` hook makes environments in the pool.

A call to an actor that died raises :class:`~skyrl_train.ray_layout.cluster.ActorLostError` naming the
actor, the environment and the call; the trajectory turns that into an error trajectory and the batch goes
on. Every call is bounded by ``generator.env_timeout_s`` (the trajectory's own deadline on the same call)
plus a margin.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Mapping
from typing import Any

from skyrl_train.rollout.runner import MultiTurnGenerator

__all__ = ["EnvActor", "EnvActorPool", "RemoteEnv", "RemoteEnvRunner"]

_MARGIN_S = 5.0  # beyond the trajectory's own deadline, so that its clearer timeout message comes first


class EnvActor:
    """The body of one environment actor: environments by id, made and called on the actor's threads."""

    def __init__(self) -> None:
        self.envs: dict[int, Any] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def pid(self) -> int:
        """The actor's process id."""
        return os.getpid()

    def make(self, env_class: str, env_config: Any, extras: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Make an environment; returns its id and what the trajectory reads off it before any call."""
        import skyrl_gym

        env = skyrl_gym.make(env_class, env_config=env_config, extras=extras)
        with self._lock:
            env_id = next(self._ids)
            self.envs[env_id] = env
        stop = getattr(env, "stop_strings", None)
        return env_id, {
            "stop_strings": list(stop) if isinstance(stop, (list, tuple)) else stop,
            "supports_deferred_verification": getattr(env, "supports_deferred_verification", False) is True,
            "name": type(getattr(env, "unwrapped", env)).__name__,
        }

    def call(self, env_id: int, method: str, args: tuple) -> Any:
        """``env.method(*args)``; ``close`` also forgets the environment."""
        env = self.envs[env_id]
        try:
            return getattr(env, method)(*args)
        finally:
            if method == "close":
                with self._lock:
                    self.envs.pop(env_id, None)

    def abandon(self, env_id: int) -> None:
        """Ask an environment to stop what it is doing (its ``abandon()``, when it has one)."""
        abandon = getattr(self.envs.get(env_id), "abandon", None)
        if callable(abandon):
            abandon()

    def num_envs(self) -> int:
        """Environments held now."""
        return len(self.envs)


class RemoteEnv:
    """An environment living in an :class:`EnvActor`: the methods a trajectory calls, made on the actor."""

    def __init__(self, pool: EnvActorPool, slot: int, env_id: int, info: Mapping[str, Any], env_class: str):
        self._pool = pool
        self._slot = slot
        self._actor = pool.actors[slot]
        self._env_id = env_id
        self._closed = False
        self.env_class = env_class
        self.stop_strings = info.get("stop_strings")
        self.supports_deferred_verification = bool(info.get("supports_deferred_verification"))
        self._name = info.get("name", env_class)

    def _call(self, method: str, *args: Any) -> Any:
        from skyrl_train.ray_layout.cluster import ActorLostError, get_one

        label = f"environment actor {self._slot} (holding {self._name})"
        try:
            return get_one(
                self._actor.call.remote(self._env_id, method, args), label, method, self._pool.call_timeout_s
            )
        except ActorLostError:
            self._pool.mark_lost(self._slot, self._actor)
            raise

    def init(self, prompt: Any) -> Any:
        """The environment's ``init``."""
        return self._call("init", prompt)

    def step(self, action: Any) -> Any:
        """The environment's ``step``."""
        return self._call("step", action)

    def evaluate(self) -> Any:
        """The environment's deferred verification."""
        return self._call("evaluate")

    def defer_verification(self) -> Any:
        """Ask the environment to verify in ``evaluate()``."""
        return self._call("defer_verification")

    def get_metrics(self) -> Any:
        """The environment's episode metrics."""
        return self._call("get_metrics")

    def abandon(self) -> None:
        """Ask the environment to stop its work (after a call overran); never raises."""
        try:
            self._actor.abandon.remote(self._env_id)
        except Exception:
            pass

    def close(self) -> None:
        """Close the environment on its actor (once)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call("close")
        finally:
            self._pool.released(self._slot)

    def __repr__(self) -> str:
        return f"RemoteEnv({self._name} on environment actor {self._slot})"


class EnvActorPool:
    """``num_workers`` environment actors; :meth:`make` puts a new environment on the least loaded one."""

    def __init__(
        self,
        num_workers: int,
        *,
        num_cpus: float = 1.0,
        call_timeout_s: float | None = 300.0,
        start_timeout_s: float = 600.0,
    ) -> None:
        from skyrl_train.ray_layout.cluster import connect

        if num_workers < 1:
            raise ValueError(f"an environment pool needs at least one actor, got {num_workers}")
        self._ray = connect()
        self._remote = self._ray.remote(EnvActor).options(num_cpus=num_cpus, max_concurrency=256)
        self.call_timeout_s = None if call_timeout_s is None else call_timeout_s + _MARGIN_S
        self.start_timeout_s = start_timeout_s
        self._lock = threading.Lock()
        self.actors = [self._remote.remote() for _ in range(num_workers)]
        self.load = [0] * num_workers
        self.replaced = 0
        """Actors started again after one died."""
        self._closed = False
        from skyrl_train.ray_layout.cluster import wait_all

        try:  # an actor the cluster cannot place fails here, not as trajectories timing out later
            labels = [f"environment actor {i} ({num_cpus:g} CPUs)" for i in range(num_workers)]
            wait_all([a.pid.remote() for a in self.actors], labels, "start", start_timeout_s)
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_plan(cls, plan: Any) -> EnvActorPool:
        """The pool of a :class:`~skyrl_train.ray_layout.plan.RayPlan` (``generator.env_workers`` actors)."""
        return cls(
            plan.env_workers,
            num_cpus=plan.env_worker_num_cpus,
            call_timeout_s=plan.env_timeout_s,
            start_timeout_s=plan.start_timeout_s,
        )

    def make(self, env_class: str, env_config: Any, extras: dict[str, Any]) -> RemoteEnv:
        """A new environment on the least loaded actor, as a :class:`RemoteEnv`."""
        from skyrl_train.ray_layout.cluster import ActorLostError, get_one

        with self._lock:
            slot = min(range(len(self.actors)), key=self.load.__getitem__)
            self.load[slot] += 1
            actor = self.actors[slot]
        label = f"environment actor {slot}"
        try:
            env_id, info = get_one(
                actor.make.remote(env_class, env_config, extras),
                label,
                f"make({env_class!r})",
                self.start_timeout_s,
            )
        except BaseException as error:
            self.released(slot)
            if isinstance(error, ActorLostError):
                self.mark_lost(slot, actor)
            raise
        return RemoteEnv(self, slot, env_id, info, env_class)

    def released(self, slot: int) -> None:
        """An environment of ``slot`` was closed."""
        with self._lock:
            self.load[slot] = max(0, self.load[slot] - 1)

    def mark_lost(self, slot: int, actor: Any) -> None:
        """The actor of ``slot`` died: start a new one there for the environments made from now on."""
        with self._lock:
            if self._closed or self.actors[slot] is not actor:
                return  # replaced already (several environments of it noticed)
            self.actors[slot] = self._remote.remote()
            self.load[slot] = 0
            self.replaced += 1

    def close(self) -> None:
        """Stop every actor (their environments were closed by their trajectories)."""
        with self._lock:
            self._closed = True
            actors, self.actors = self.actors, []
        for actor in actors:
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception:
                pass


class RemoteEnvRunner(MultiTurnGenerator):
    """The runner with its environments in an :class:`EnvActorPool` (``env_pool``); everything else is the
    :class:`~skyrl_train.rollout.runner.MultiTurnGenerator`'s."""

    def __init__(self, *args: Any, env_pool: EnvActorPool, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.env_pool = env_pool

    def _make_env(self, env_class: str, extras: dict[str, Any]) -> Any:
        return self.env_pool.make(env_class, self.env_configs.get(env_class), extras)
