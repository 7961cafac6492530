"""``VectorEnv``: N environments initialised and stepped concurrently, on daemon threads.

One batch call (``init``, ``reset``, ``step``) runs every environment's call at the same time and returns
one result per environment, in the order of the inputs. Failures stay with the environment that had them:

- an exception in one environment's call becomes an error result for that environment only
  (``metadata["end"] == "error"`` and ``metadata["error"]`` with the exception for ``step``;
  :class:`~skyrl_gym.vector.results.InitResult` with ``error`` set for ``init``/``reset``);
- each call has its own deadline (``step_timeout_s``, ``init_timeout_s``), counted from when that call
  started; a call past it becomes an error result ``"step timed out after X s"`` and its environment is done.

A call that timed out cannot be stopped (Python cannot kill a thread): it runs on in a daemon thread, which
never blocks interpreter exit, and its result is dropped. Until it returns, its environment refuses new calls
with an error result, because its state is whatever that call leaves behind.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from skyrl_gym._threads import Call, DaemonPool, Job, Outcome, run_all, submit_all, wait_all
from skyrl_gym.core import Env, EnvStepOutput, abandon_quietly
from skyrl_gym.errors import EpisodeNotStartedError, Error
from skyrl_gym.vector.results import BatchStats, InitResult, describe, error_output

__all__ = ["VectorEnv"]

logger = logging.getLogger("skyrl_gym.vector")

Timeouts = float | Sequence[float | None] | None
"""One deadline in seconds for every environment, one per environment, or ``None`` for no deadline."""


@dataclass
class _Batch:
    """One batch call being planned and run: which environments are called, and which are answered at once."""

    op: str
    started_at: float = field(default_factory=time.monotonic)
    indices: list[int] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    refused: dict[int, str] = field(default_factory=dict)
    skipped: int = 0

    def add(self, index: int, fn: Callable[[], Any], timeout_s: float | None) -> None:
        self.indices.append(index)
        self.jobs.append(Job(fn, timeout_s))


class _LateClose:
    """Calls a factory; if the caller gave up waiting (``abandon``), closes what it returns afterwards."""

    def __init__(self, factory: Callable[[], Any]):
        self.factory = factory
        self._lock = threading.Lock()
        self._abandoned = False
        self._made: Any = None

    def __call__(self) -> Any:
        env = self.factory()
        with self._lock:
            if not self._abandoned:
                self._made = env
                return env
        _close_quietly(env)
        return env

    def abandon(self) -> None:
        with self._lock:
            self._abandoned = True
            made, self._made = self._made, None
        if made is not None:  # it arrived between the deadline and now
            _close_quietly(made)


def _close_quietly(env: Any) -> None:
    if _is_env(env):
        try:
            env.close()
        except Exception:
            logger.warning("closing %s, made after its factory timed out, failed", env, exc_info=True)


class VectorEnv:
    """N environments initialised and stepped concurrently on daemon threads.

    Args:
        env_fns: environments, or zero-argument factories that make them (called concurrently, each within
            ``init_timeout_s``; if one fails, the others are closed and the error is raised).
        max_workers: most calls running at once (default: one per environment). Calls beyond it wait for a
            free worker, and their deadline starts when they start.
        step_timeout_s: deadline of each ``step`` call, one for all or one per environment; ``None``: none.
        init_timeout_s: deadline of each factory, ``init`` and ``reset`` call; ``None``: none.
        close_timeout_s: how long ``close`` waits for each environment's ``close``.

    Not thread-safe: make one batch call at a time. Also a context manager (``close`` on exit).
    """

    def __init__(
        self,
        env_fns: Sequence[Env | Callable[[], Env]],
        *,
        max_workers: int | None = None,
        step_timeout_s: Timeouts = None,
        init_timeout_s: Timeouts = None,
        close_timeout_s: float | None = 10.0,
    ):
        items = list(env_fns)
        if not items:
            raise ValueError("a VectorEnv needs at least one environment (env_fns is empty)")
        n = len(items)
        self._step_timeouts = _per_env_timeouts("step_timeout_s", step_timeout_s, n)
        self._init_timeouts = _per_env_timeouts("init_timeout_s", init_timeout_s, n)
        self._close_timeout = _per_env_timeouts("close_timeout_s", close_timeout_s, 1)[0]
        self._pool = DaemonPool(n if max_workers is None else max_workers, name="skyrl-gym-vector")
        self._closed = False
        self._envs = self._build(items)
        self._dones = [True] * n
        self._started = False
        self._abandoned: list[Call | None] = [None] * n
        self.last_stats: BatchStats | None = None
        """Counts of the last batch call (ok, errors, timeouts, skipped); ``None`` before the first."""

    # -- what it holds ----------------------------------------------------------------------------------
    @property
    def num_envs(self) -> int:
        """How many environments there are."""
        return len(self._envs)

    @property
    def envs(self) -> list[Env]:
        """The environments, in order (a copy of the list)."""
        return list(self._envs)

    @property
    def dones(self) -> list[bool]:
        """Per environment: its episode is over (or never started, or its last call failed)."""
        return list(self._dones)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    # -- batch calls ----------------------------------------------------------------------------------
    def init(self, prompts: Sequence[Any], mask: Sequence[bool] | None = None) -> list[InitResult | None]:
        """Start an episode in every environment (or those where ``mask`` is true) with its prompt.

        Returns one :class:`InitResult` per environment (``None`` where masked out), in order. An environment
        that failed to start has ``error`` set and stays done.
        """
        batch = self._plan_init(prompts, mask)
        return self._settle_init(batch, self._run(batch))

    def reset(
        self,
        seeds: int | Sequence[int | None] | None = None,
        options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        mask: Sequence[bool] | None = None,
    ) -> list[InitResult | None]:
        """Gymnasium-style ``reset`` of every environment (or those where ``mask`` is true).

        ``seeds``: one int (environment ``i`` gets ``seed + i``), one per environment, or ``None``.
        ``options``: one dict for all (for example ``{"prompt": ...}``) or one per environment.
        Returns what :meth:`init` returns.
        """
        batch = self._plan_reset(seeds, options, mask)
        return self._settle_init(batch, self._run(batch))

    def step(self, actions: Sequence[Any], mask: Sequence[bool] | None = None) -> list[EnvStepOutput | None]:
        """Play one turn in every environment whose episode runs; return their outputs in order.

        An environment that is masked out (``mask[i]`` false) or already done is not stepped and gets
        ``None``; its action is ignored. Stepping the whole batch after some episodes ended is therefore
        fine. A step that raised, timed out or returned something that is not a dict gets an error result
        (:func:`~skyrl_gym.vector.results.error_output`) and its environment is done.
        """
        batch = self._plan_step(actions, mask)
        return self._settle_step(batch, self._run(batch))

    def close(self) -> None:
        """Close every environment (concurrently, each within ``close_timeout_s``). Calling it again does nothing.

        An environment still busy with a call that timed out is closed anyway: closing is what releases
        whatever that call waits on (a container, a connection).
        """
        if self._closed:
            return
        batch = self._plan_close()
        self._settle_close(batch, run_all(self._pool, batch.jobs))

    def __enter__(self) -> VectorEnv:
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{sum(not d for d in self._dones)} running"
        return f"{type(self).__name__}(num_envs={self.num_envs}, {state})"

    # -- planning: which environment gets which call (shared with AsyncVectorEnv) ---------------------------
    def _plan_init(self, prompts: Sequence[Any], mask: Sequence[bool] | None) -> _Batch:
        self._check_open()
        prompts = self._per_env("prompts", prompts)
        batch = _Batch("init")
        for i in self._selected(mask, batch):
            batch.add(i, functools.partial(self._envs[i].init, prompts[i]), self._init_timeouts[i])
        self._started = True
        return batch

    def _plan_reset(self, seeds: Any, options: Any, mask: Sequence[bool] | None) -> _Batch:
        self._check_open()
        if seeds is None or (isinstance(seeds, int) and not isinstance(seeds, bool)):
            seeds = [None if seeds is None else seeds + i for i in range(self.num_envs)]
        seeds = self._per_env("seeds", seeds)
        if options is None or isinstance(options, Mapping):
            options = [options] * self.num_envs
        options = self._per_env("options", options)
        batch = _Batch("reset")
        for i in self._selected(mask, batch):
            reset = functools.partial(self._envs[i].reset, seed=seeds[i], options=options[i])
            batch.add(i, reset, self._init_timeouts[i])
        self._started = True
        return batch

    def _plan_step(self, actions: Sequence[Any], mask: Sequence[bool] | None) -> _Batch:
        self._check_open()
        actions = self._per_env("actions", actions)
        if not self._started:
            raise EpisodeNotStartedError("VectorEnv.step() called before init(prompts) or reset()")
        batch = _Batch("step")
        for i in self._selected(mask, batch, skip_done=True):
            batch.add(i, functools.partial(self._envs[i].step, actions[i]), self._step_timeouts[i])
        return batch

    def _plan_close(self) -> _Batch:
        self._closed = True
        batch = _Batch("close")
        for env in self._envs:
            batch.add(len(batch.indices), env.close, self._close_timeout)
        return batch

    def _selected(self, mask: Sequence[bool] | None, batch: _Batch, skip_done: bool = False) -> list[int]:
        """Indices to call: masked in (and not done, with ``skip_done``), and not still running a call that
        timed out (those are refused with an error result)."""
        mask = [True] * self.num_envs if mask is None else self._per_env("mask", mask)
        selected = []
        for i, wanted in enumerate(mask):
            if not wanted or (skip_done and self._dones[i]):
                batch.skipped += 1
            elif self._abandoned[i] is not None and not self._abandoned[i].stopped.is_set():
                batch.refused[i] = (
                    f"environment {i} is still running an earlier call that timed out; "
                    "it takes no new calls until that call returns (close it or make a new one)"
                )
            else:
                self._abandoned[i] = None
                selected.append(i)
        return selected

    # -- running (AsyncVectorEnv has its own) ---------------------------------------------------------
    def _run(self, batch: _Batch) -> list[Call]:
        changed = threading.Condition()

        def notify() -> None:
            with changed:
                changed.notify_all()

        calls = submit_all(self._pool, batch.jobs, notify)
        try:
            wait_all(calls, [job.timeout_s for job in batch.jobs], changed)
        except BaseException:
            self._interrupted(batch, calls)
            raise
        return calls

    def _interrupted(self, batch: _Batch, calls: Sequence[Call]) -> None:
        """The caller stopped waiting (KeyboardInterrupt, a cancelled task): the envs it called are done."""
        for i, call in zip(batch.indices, calls, strict=True):
            if batch.op != "close":
                self._dones[i] = True
                if not call.stopped.is_set():
                    self._abandoned[i] = call
        if batch.op == "close":
            self._pool.shutdown()

    # -- settling: outcomes into results (shared with AsyncVectorEnv) ------------------------------------
    def _settle_init(self, batch: _Batch, calls: Sequence[Call]) -> list[InitResult | None]:
        results: list[InitResult | None] = [None] * self.num_envs
        counts = {"ok": 0, "errors": 0, "timeouts": 0}
        for i, message in batch.refused.items():
            results[i] = InitResult([], {}, error=message)
            self._dones[i] = True
            counts["errors"] += 1
        for i, call, job in zip(batch.indices, calls, batch.jobs, strict=True):
            value, message = self._unpack(batch.op, i, call, job, counts, _init_value_problem)
            if message is None:
                observations, info = value
                results[i] = InitResult(observations, info)
                self._dones[i] = False
                counts["ok"] += 1
            else:
                results[i] = InitResult([], {}, error=message)
                self._dones[i] = True
        self.last_stats = self._stats(batch, counts)
        return results

    def _settle_step(self, batch: _Batch, calls: Sequence[Call]) -> list[EnvStepOutput | None]:
        results: list[EnvStepOutput | None] = [None] * self.num_envs
        counts = {"ok": 0, "errors": 0, "timeouts": 0}
        for i, message in batch.refused.items():
            results[i] = error_output(message)
            self._dones[i] = True
            counts["errors"] += 1
        for i, call, job in zip(batch.indices, calls, batch.jobs, strict=True):
            value, message = self._unpack(batch.op, i, call, job, counts, _step_value_problem)
            if message is None:
                results[i] = value
                self._dones[i] = bool(value.get("done", False))
                counts["ok"] += 1
            else:
                results[i] = error_output(message)
                self._dones[i] = True
        self.last_stats = self._stats(batch, counts)
        return results

    def _settle_close(self, batch: _Batch, calls: Sequence[Call]) -> None:
        counts = {"ok": 0, "errors": 0, "timeouts": 0}
        for i, call, job in zip(batch.indices, calls, batch.jobs, strict=True):
            _, message = self._unpack(batch.op, i, call, job, counts, lambda value: None)
            counts["ok"] += message is None
        self._dones = [True] * self.num_envs
        self._pool.shutdown()
        self.last_stats = self._stats(batch, counts)

    def _unpack(
        self,
        op: str,
        i: int,
        call: Call,
        job: Job,
        counts: dict[str, int],
        value_problem: Callable[[Any], str | None],
    ) -> tuple[Any, str | None]:
        """``(value, None)`` for a call that returned a good value, else ``(None, message)``; counts and logs."""
        outcome = call.outcome
        assert outcome is not None
        message = failure_message(op, outcome, job.timeout_s)
        if message is None:
            problem = value_problem(outcome.value)
            if problem is None:
                return outcome.value, None
            message = f"{op} {problem}"
        if outcome.timed_out:
            self._abandoned[i] = call
            abandon_quietly(self._envs[i])
            counts["timeouts"] += 1
        else:
            counts["errors"] += 1
        logger.warning("environment %d: %s", i, message, exc_info=outcome.error)
        return None, message

    def _stats(self, batch: _Batch, counts: dict[str, int]) -> BatchStats:
        return BatchStats(
            op=batch.op, skipped=batch.skipped, wall_s=time.monotonic() - batch.started_at, **counts
        )

    # -- helpers ----------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise Error(f"{type(self).__name__} is closed; make a new one")

    def _per_env(self, name: str, values: Any) -> list[Any]:
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence):
            raise TypeError(
                f"{name} must be a list with one entry per environment, got {type(values).__name__}"
            )
        if len(values) != self.num_envs:
            raise ValueError(
                f"{name} has {len(values)} entries; expected one per environment ({self.num_envs})"
            )
        return list(values)

    def _build(self, items: list[Any]) -> list[Env]:
        """Keep the environments given; call the factories given, concurrently, each within its init timeout."""
        envs: list[Any] = list(items)
        made: list[int] = []
        for i, item in enumerate(items):
            if not _is_env(item):
                if not callable(item):
                    raise TypeError(f"env_fns[{i}] is neither an environment nor a factory: {item!r}")
                made.append(i)
        if not made:
            return envs
        late = {i: _LateClose(items[i]) for i in made}
        calls = run_all(self._pool, [Job(late[i], self._init_timeouts[i]) for i in made])
        failure: BaseException | None = None
        for i, call in zip(made, calls, strict=True):
            outcome = call.outcome
            assert outcome is not None
            if outcome.timed_out:
                late[i].abandon()  # an environment the factory returns later is closed, not leaked
                problem: BaseException | None = Error(
                    f"making environment {i} timed out after {self._init_timeouts[i]:g} s"
                )
            elif outcome.error is not None:
                problem = Error(f"making environment {i} failed: {describe(outcome.error)}")
                problem.__cause__ = outcome.error
            elif not _is_env(outcome.value):
                problem = TypeError(
                    f"env_fns[{i}] returned {type(outcome.value).__name__}, not an environment"
                )
            else:
                problem = None
            envs[i] = outcome.value if problem is None else None
            failure = failure or problem
        if failure is not None:
            for env in envs:
                if env is not None:
                    try:
                        env.close()
                    except Exception:  # the construction failure is what the caller needs to see
                        logger.warning(
                            "closing %s after a failed VectorEnv construction failed", env, exc_info=True
                        )
            self._closed = True
            self._pool.shutdown()
            raise failure
        return envs


def failure_message(op: str, outcome: Outcome, timeout_s: float | None) -> str | None:
    """``"step timed out after X s"``, ``"step failed: ValueError: ..."``, or ``None`` for a call that returned."""
    if outcome.timed_out:
        return f"{op} timed out after {timeout_s:g} s"
    if outcome.error is not None:
        return f"{op} failed: {describe(outcome.error)}"
    return None


def _init_value_problem(value: Any) -> str | None:
    if isinstance(value, tuple) and len(value) == 2:
        return None
    return f"returned {type(value).__name__}, expected (observations, info)"


def _step_value_problem(value: Any) -> str | None:
    if isinstance(value, Mapping):
        return None
    return f"returned {type(value).__name__}, expected a dict (EnvStepOutput)"


def _is_env(obj: Any) -> bool:
    """An environment instance (a ``skyrl_gym.Env`` or anything with ``init`` and ``step``), not a class."""
    if isinstance(obj, Env):
        return True
    return (
        not isinstance(obj, type)
        and callable(getattr(obj, "step", None))
        and callable(getattr(obj, "init", None))
    )


def _per_env_timeouts(name: str, value: Timeouts, n: int) -> list[float | None]:
    values = list(value) if isinstance(value, Sequence) else [value] * n
    if len(values) != n:
        raise ValueError(f"{name} has {len(values)} entries; expected one per environment ({n})")
    for v in values:
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{name} must be a number of seconds or None, got {v!r}")
        if not math.isfinite(v) or v <= 0:
            raise ValueError(f"{name} must be a positive finite number of seconds, got {v!r}")
    return values
