"""Fully asynchronous training (``trainer.mode=async``): generation never stops while the trainer updates.

Three parts, the trainer's own objects underneath:

- a :class:`RolloutProducer` runs the agent runner on a thread and event loop of its own and keeps up to
  ``trainer.fully_async.num_parallel_generation_workers`` groups (one prompt x ``n_samples_per_prompt``
  trajectories, one ``run`` of the configured dispatcher each) generating into a buffer of finished groups;
- a staleness gate (capacity control, as AReaL's and SkyRL's fully-async trainers do it): with ``B`` groups
  per step and ``K = max_staleness_steps``, a new group starts only while ``accepted + running <
  (updates + K + 1) * B``, so generation waits when the trainer lags (the wait is counted as held-back time),
  and the buffer never holds more than ``(K + 1) * B`` groups. Groups finish out of order, so the gate bounds
  staleness in aggregate only; a group whose oldest token is still more than ``K`` versions behind the
  policy when the trainer takes it is dropped (counted) and its capacity given back;
- :func:`run_async_loop`: each step takes ``train_batch_size`` finished groups, trains on them exactly as a
  synchronous step does (:meth:`~skyrl_train.loop.trainer.Trainer.train_step` with ``rollouts=``), then pushes the
  weights in flight: ``engine.pause()`` at a token boundary (running sequences keep their tokens), the update
  through the run's weight-sync strategy, ``engine.resume()`` (the held sequences recompute their KV with the
  new weights and go on), and the policy version goes up by one; the step then ends as a synchronous one does
  (:meth:`~skyrl_train.loop.trainer.Trainer.end_step`: evaluation, log, checkpoint, time budget). Every token keeps the version that made it
  (``TrajectoryResult.policy_versions``); the loss can correct for the older ones with the engine's
  behaviour log-probs (``trainer.algorithm.off_policy_correction``, :mod:`skyrl_train.training.algorithms.off_policy`).

With ``trainer.fully_async.ordered`` the ordering is fixed, for reproducible runs: step ``s`` takes the groups
of its own prompts in prompt order, and before a push the loop waits (:meth:`RolloutProducer.settle`) until
every group started under the version being replaced has finished, so each group is generated whole under
version ``max(0, s - K)`` and no push lands in flight.

The overlap is real on a CPU when the hf engine runs in its own process (``generator.engine_process=true``);
with the engine in this process its decode thread shares the interpreter with the trainer (torch releases the
GIL in its kernels, so they still overlap in part). The vLLM path is not wired for this mode.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from skyrl_train.rollout.records import GeneratorOutput

__all__ = [
    "AsyncPlan",
    "AsyncStats",
    "Group",
    "RolloutProducer",
    "push_weights_in_flight",
    "run_async_loop",
]

logger = logging.getLogger("skyrl_train.loop.async_training")


@dataclasses.dataclass(frozen=True)
class AsyncPlan:
    """The asynchronous mode's sizes, from ``trainer`` and ``trainer.fully_async``."""

    groups_per_step: int
    """B: groups (prompts) each training step takes (``trainer.train_batch_size``)."""
    max_staleness: int
    """K: most policy versions a group's oldest token may lag the policy it trains (``max_staleness_steps``)."""
    parallel_groups: int
    """Groups generated at once (``num_parallel_generation_workers``, default ``train_batch_size``)."""
    n_samples: int
    """Trajectories per group (``generator.n_samples_per_prompt``)."""
    ordered: bool = False
    """The reproducible ordering (``trainer.fully_async.ordered``): each step takes its own prompts' groups
    in prompt order, and a push waits for the groups of the version it replaces (:meth:`RolloutProducer.settle`)."""

    @classmethod
    def from_config(cls, config: Any) -> AsyncPlan:
        """The plan of ``config`` (a :class:`~skyrl_train.config.Config`)."""
        tr, fa = config.trainer, config.trainer.fully_async
        return cls(
            groups_per_step=tr.train_batch_size,
            max_staleness=fa.max_staleness_steps,
            parallel_groups=fa.num_parallel_generation_workers or tr.train_batch_size,
            n_samples=config.generator.n_samples_per_prompt,
            ordered=fa.ordered,
        )


@dataclasses.dataclass
class Group:
    """One finished group: a prompt's trajectories and the policy version it started under."""

    index: int
    """Its place in the run's stream of prompts (also its ``group_id``)."""
    row: Mapping[str, Any]
    """The dataset row."""
    output: GeneratorOutput
    """Its trajectories (and the runner's metrics of that one group)."""
    start_version: int
    """The policy version when it started."""

    @property
    def oldest_version(self) -> int:
        """The version of its oldest model token (the start version when it has none or the engine does not
        track versions)."""
        versions = [
            v for t in self.output.trajectories for v in (t.policy_versions or ()) if v is not None and v >= 0
        ]
        return min(versions) if versions else self.start_version


@dataclasses.dataclass
class AsyncStats:
    """Counters of a producer and its loop (totals over the run)."""

    groups_started: int = 0
    groups_finished: int = 0
    groups_consumed: int = 0
    groups_dropped_stale: int = 0
    """Groups taken more than K versions behind, dropped (their rows are not replayed)."""
    groups_unused: int = 0
    """Finished groups left over when the run ended (fewer than a step's worth, or the steps ran out)."""
    held_back_events: int = 0
    """Times generation had a free slot but waited for the trainer (the staleness bound)."""
    held_back_s: float = 0.0
    """Seconds generation spent held back by the staleness bound."""
    trainer_wait_s: float = 0.0
    """Seconds the trainer waited for finished groups."""
    pushes: int = 0
    """Weight pushes (one per step)."""
    inflight_pushes: int = 0
    """Pushes that found sequences running in the engine (their tokens kept across the update)."""

    def as_metrics(self) -> dict[str, float]:
        """The counters as ``async/<name>`` metrics."""
        return {f"async/{k}": float(v) for k, v in dataclasses.asdict(self).items()}


class RolloutProducer:
    """Generates groups continuously into a bounded buffer on a thread of its own (see the module docstring).

    ``runner``: an :class:`~skyrl_train.rollout.runner.AgentRunner` (``await runner.generate([row], n, params,
    group_offset=index)``). ``rows``: the prompts, in order (the producer stops when they run out).
    ``sampling``: the sampling parameters of the ``s``-th batch of groups (``index // groups_per_step``).
    ``version``: the policy version the engine holds now. Use as a context manager, or ``start()`` and
    ``stop()``; ``stop()`` cancels the groups in flight and joins the thread.
    """

    def __init__(
        self,
        runner: Any,
        rows: Iterator[Mapping[str, Any]],
        plan: AsyncPlan,
        sampling: Callable[[int], Any],
        *,
        version: int = 0,
        first_index: int = 0,
    ) -> None:
        self.runner = runner
        self.plan = plan
        self.stats = AsyncStats()
        self._rows = iter(rows)
        self._sampling = sampling
        self._version = int(version)
        self._base_version = int(version)
        self._next_index = int(first_index)
        self._lock = threading.Condition()
        self._ready: collections.deque[Group] = collections.deque()
        self._running = 0
        self._running_indices: set[int] = set()
        self._next_take = int(first_index)  # the ordered mode's next group for the trainer
        self._accepted = 0  # finished groups, consumed or waiting (dropped ones given back)
        self._finished = False
        self._stopping = False
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()

    # ---------------------------------------------------------------------------- the trainer's side
    def start(self) -> RolloutProducer:
        """Start generating (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._thread_main, name="rollout-producer", daemon=True)
            self._thread.start()
            self._started.wait(60)
        return self

    @property
    def version(self) -> int:
        """The policy version the producer starts new groups under."""
        return self._version

    @property
    def buffered(self) -> int:
        """Finished groups waiting for the trainer."""
        with self._lock:
            return len(self._ready)

    @property
    def alive(self) -> bool:
        """Whether the producer's thread is running."""
        return self._thread is not None and self._thread.is_alive()

    def capacity(self) -> int:
        """Most groups (finished, consumed included, or running) the staleness bound allows now."""
        updates = self._version - self._base_version
        return (updates + self.plan.max_staleness + 1) * self.plan.groups_per_step

    def set_version(self, version: int) -> None:
        """The engine holds ``version`` now (after a push): more groups may start."""
        with self._lock:
            self._version = int(version)
        self._wake_producer()

    def take(self, count: int) -> list[Group] | None:
        """``count`` finished groups within the staleness bound of the current version, in the order they
        finished; blocks until there are enough. None when the prompts ran out first (the groups waiting are
        counted as unused). Raises what stopped the producer, if something did."""
        started = time.perf_counter()
        taken: list[Group] = []
        try:
            with self._lock:
                while len(taken) < count:
                    while not self._has_next() and not self._finished and self._error is None:
                        self._lock.wait(1.0)
                    if self._error is not None:
                        raise RuntimeError("the rollout producer failed") from self._error
                    if not self._has_next():
                        self.stats.groups_unused += len(taken)
                        return None
                    group = self._pop_next()
                    if self._version - group.oldest_version > self.plan.max_staleness:
                        self.stats.groups_dropped_stale += 1
                        self._accepted -= 1  # its capacity goes to a fresh group
                        self._wake_producer()
                        continue
                    taken.append(group)
                self.stats.groups_consumed += len(taken)
            return taken
        finally:
            self.stats.trainer_wait_s += time.perf_counter() - started

    def _has_next(self) -> bool:
        """Whether the group the trainer takes next has finished (any group, in the default mode)."""
        if not self.plan.ordered:
            return bool(self._ready)
        return any(g.index == self._next_take for g in self._ready)

    def _pop_next(self) -> Group:
        """The next group for the trainer: the first to finish, or in the ordered mode the next by index."""
        if not self.plan.ordered:
            return self._ready.popleft()
        group = next(g for g in self._ready if g.index == self._next_take)
        self._ready.remove(group)
        self._next_take += 1
        return group

    def settle(self, below: int) -> None:
        """Block until every group with an index below ``below`` has finished (or the prompts ran out, or the
        producer failed or stopped): the ordered mode's wait before a push, so that no group generated under
        the version being replaced sees the new weights. The groups' own turn and trajectory limits bound it,
        as they bound a synchronous step's generation."""
        with self._lock:
            while not (self._finished or self._stopping or self._error is not None):
                if self._next_index >= below and not any(i < below for i in self._running_indices):
                    return
                self._lock.wait(1.0)

    def stop(self, timeout_s: float = 120.0) -> None:
        """Cancel the groups in flight, end the thread and count the finished groups left over."""
        with self._lock:
            self._stopping = True
        loop, main = self._loop, self._main
        if loop is not None and main is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(main.cancel)
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                raise RuntimeError(f"the rollout producer did not stop within {timeout_s:.0f} s")
        with self._lock:
            self.stats.groups_unused += len(self._ready)
            self._ready.clear()

    def __enter__(self) -> RolloutProducer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---------------------------------------------------------------------------- the producer's thread
    def _thread_main(self) -> None:
        try:
            asyncio.run(self._produce())
        except BaseException as error:  # reported to the trainer by take()
            if not isinstance(error, asyncio.CancelledError):
                logger.exception("the rollout producer failed")
                with self._lock:
                    self._error = error
        finally:
            with self._lock:
                self._finished = True
                self._lock.notify_all()
            self._started.set()

    def _wake_producer(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(wake.set)

    async def _produce(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._main = asyncio.current_task()
        self._started.set()
        tasks: set[asyncio.Task] = set()
        try:
            while await self._acquire():
                row = next(self._rows, None)
                if row is None:
                    break
                with self._lock:
                    index = self._next_index
                    self._next_index += 1
                    self._running += 1
                    self._running_indices.add(index)
                    self.stats.groups_started += 1
                    version = self._version
                task = asyncio.create_task(self._generate(index, row, version))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:  # the prompts ran out: the groups in flight still finish
                await asyncio.gather(*list(tasks))
        except asyncio.CancelledError:
            pass  # stop(): cancel what is in flight below
        finally:
            for task in list(tasks):
                task.cancel()
            if tasks:
                await asyncio.gather(*list(tasks), return_exceptions=True)

    async def _acquire(self) -> bool:
        """Wait for a free slot within the staleness bound; False when stopping."""
        held_since: float | None = None
        try:
            while True:
                self._wake.clear()
                with self._lock:
                    if self._stopping:
                        return False
                    slot = self._running < self.plan.parallel_groups
                    room = self._accepted + self._running < self.capacity()
                if slot and room:
                    return True
                if slot and held_since is None:  # only the bound holds generation back
                    held_since = time.perf_counter()
                    self.stats.held_back_events += 1
                await self._wake.wait()
        finally:
            if held_since is not None:
                self.stats.held_back_s += time.perf_counter() - held_since

    async def _generate(self, index: int, row: Mapping[str, Any], version: int) -> None:
        params = self._sampling(index // self.plan.groups_per_step)
        try:
            output = await self.runner.generate([row], self.plan.n_samples, params, group_offset=index)
        except BaseException as error:
            # the runner turns a trajectory's failure into an error trajectory: this is the runner failing
            with self._lock:
                self._running -= 1
                self._running_indices.discard(index)
                if not isinstance(error, asyncio.CancelledError):
                    self._error = error
                self._lock.notify_all()
            self._wake.set()
            raise
        with self._lock:
            self._running -= 1
            self._running_indices.discard(index)
            self._accepted += 1
            self.stats.groups_finished += 1
            self._ready.append(Group(index, row, output, version))
            self._lock.notify_all()
        self._wake.set()


def _engine_version(engine: Any) -> int:
    version = getattr(engine, "policy_version", 0)
    return int(version() if callable(version) else version or 0)


def push_weights_in_flight(trainer: Any) -> tuple[int, float]:
    """Push the policy's weights into the running engine: pause it at a token boundary, update through the
    run's weight-sync strategy (:meth:`~skyrl_train.loop.trainer.Trainer._sync_weights`), resume. Returns how many
    sequences the engine held across the update and the seconds the push took."""
    engine = trainer.engine
    start = time.perf_counter()
    pause = getattr(engine, "pause", None)
    held = int(pause() or 0) if pause is not None else 0
    try:
        trainer._sync_weights(check=False)
    finally:
        if pause is not None:
            engine.resume()
    if trainer.cfg.trainer.sync_weights:
        trainer._check_weights()  # the gate's probe needs the engine running
    return held, time.perf_counter() - start


def _staleness(groups: list[Group], version: int) -> dict[str, float]:
    lags = [version - g.oldest_version for g in groups]
    spans = [
        max(vs) - min(vs)
        for g in groups
        for t in g.output.trajectories
        if (vs := [v for v in (t.policy_versions or ()) if v is not None and v >= 0])
    ]
    return {
        "async/staleness_max": float(max(lags)),
        "async/staleness_mean": sum(lags) / len(lags),
        "async/trajectories_across_updates": float(sum(s > 0 for s in spans)),
    }


def _check_behaviour_log_probs(cfg: Any, trajectories: list[Any]) -> None:
    method = cfg.trainer.algorithm.off_policy_correction.method
    if method != "none" and any(t.logprobs is None for t in trajectories if not t.is_error):
        raise ValueError(
            f"trainer.algorithm.off_policy_correction.method={method!r} needs the engine's log-probs per token, "
            "and the engine reported none: use an engine that reports them (hf) or set method=none"
        )


def run_async_loop(trainer: Any, bar: Any, evals: list[dict[str, Any]]) -> str:
    """The training steps of ``trainer`` in the asynchronous mode, from its iterator's position until the
    data, the steps or the time run out; returns why it stopped (as the synchronous loop does). The producer
    is stopped (its thread joined, groups in flight cancelled) before this returns or raises."""
    from skyrl_train.rollout.metrics import rollout_metrics
    from skyrl_train.sampling import rollout_sampling

    cfg = trainer.cfg
    plan = AsyncPlan.from_config(cfg)
    rows = itertools.chain.from_iterable(trainer.iterator)
    producer = RolloutProducer(
        trainer.generator,
        rows,
        plan,
        lambda s: rollout_sampling(cfg, s),
        version=_engine_version(trainer.engine),
        first_index=trainer.step * plan.groups_per_step,
    )
    trainer.async_producer = producer
    with producer:
        while True:
            if trainer.step >= trainer.total_steps:
                return "max_steps"
            t0 = time.perf_counter()
            groups = producer.take(plan.groups_per_step)
            if groups is None:
                return "data"
            wait_s = time.perf_counter() - t0
            version = producer.version
            trajectories = [t for g in groups for t in g.output.trajectories]
            _check_behaviour_log_probs(cfg, trajectories)
            rollouts = GeneratorOutput(
                trajectories,
                rollout_metrics(
                    trajectories, pass_threshold=getattr(trainer.generator, "pass_threshold", 1.0)
                ),
            )
            metrics = trainer.train_step(
                [dict(g.row) for g in groups], rollouts=rollouts, tasks={g.index: dict(g.row) for g in groups}
            )
            if plan.ordered:
                # the groups of the steps up to K ahead were started under the version this push replaces:
                # they finish under it (the last steps' pushes wait only for groups a step will take)
                ahead = min(trainer.step + 1 + plan.max_staleness, trainer.total_steps)
                producer.settle(ahead * plan.groups_per_step)
            held, push_s = push_weights_in_flight(trainer)
            producer.stats.pushes += 1
            producer.stats.inflight_pushes += held > 0
            producer.set_version(_engine_version(trainer.engine))
            metrics.update(_staleness(groups, version))
            metrics.update(producer.stats.as_metrics())
            metrics.update(
                {
                    "async/policy_version": float(producer.version),
                    "async/push_held_sequences": float(held),
                    "async/buffered_groups": float(producer.buffered),
                    "time/generate_s": wait_s,  # the trainer's wait: generation itself ran meanwhile
                    "time/sync_s": push_s,
                    **trainer.last_weight_check,
                    "time/step_s": time.perf_counter() - t0,
                }
            )
            # the epoch of this step's prompts (the producer's iterator runs ahead of the trainer)
            epoch = float(trainer.step // max(1, trainer.iterator.batches_per_epoch))
            if trainer.end_step(metrics, bar, evals, epoch=epoch):
                return "max_wall_time_s"
