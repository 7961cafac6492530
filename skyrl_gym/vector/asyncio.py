"""The asyncio side of :mod:`skyrl_gym.vector`: coroutines that never block the event loop.

Every environment call runs on a daemon worker thread; the coroutine waits for it with its own deadline
(counted from when the call started), so a slow or hung environment holds up neither the loop nor the other
environments. The semantics are :class:`~skyrl_gym.vector.threaded.VectorEnv`'s: results in input order,
and an exception or a timeout becomes an error result for that environment only.

- :class:`AsyncVectorEnv`: ``await vec.ainit(prompts)``, ``await vec.astep(actions)``, ``await vec.aclose()``.
- :func:`ainit`, :func:`astep` and :func:`aclose`: one environment, the same guarantees, no vector needed;
  :func:`acall` runs any blocking call (making an environment, say) the same way.

A call that overruns its deadline is abandoned and the environment's ``abandon()`` is called, so that what it
was running (a query, an interpreter) stops instead of holding resources.

Cancelling a coroutine gives up on the calls it waits for (they run on, abandoned, in their threads) and
marks their environments done.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from skyrl_gym._threads import Call, CallTimedOut, DaemonPool
from skyrl_gym.core import Env, EnvStepOutput, abandon_quietly
from skyrl_gym.vector.results import InitResult, error_output
from skyrl_gym.vector.threaded import (
    VectorEnv,
    _Batch,
    _init_value_problem,
    _per_env_timeouts,
    _step_value_problem,
    failure_message,
)

__all__ = ["AsyncVectorEnv", "CallTimedOut", "aclose", "acall", "ainit", "astep"]


class AsyncVectorEnv(VectorEnv):
    """A :class:`VectorEnv` for asyncio callers: ``ainit``, ``areset``, ``astep`` and ``aclose`` are coroutines.

    The constructor is :class:`VectorEnv`'s. It calls factories synchronously: build the vector before the
    loop starts, or with ``await asyncio.to_thread(make_vec, ..., asynchronous=True)``. The blocking methods
    (``init``, ``step``...) still work, from outside the loop.
    """

    async def ainit(
        self, prompts: Sequence[Any], mask: Sequence[bool] | None = None
    ) -> list[InitResult | None]:
        """:meth:`VectorEnv.init`, awaited."""
        batch = self._plan_init(prompts, mask)
        return self._settle_init(batch, await self._arun(batch))

    async def areset(
        self,
        seeds: int | Sequence[int | None] | None = None,
        options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        mask: Sequence[bool] | None = None,
    ) -> list[InitResult | None]:
        """:meth:`VectorEnv.reset`, awaited."""
        batch = self._plan_reset(seeds, options, mask)
        return self._settle_init(batch, await self._arun(batch))

    async def astep(
        self, actions: Sequence[Any], mask: Sequence[bool] | None = None
    ) -> list[EnvStepOutput | None]:
        """:meth:`VectorEnv.step`, awaited."""
        batch = self._plan_step(actions, mask)
        return self._settle_step(batch, await self._arun(batch))

    async def aclose(self) -> None:
        """:meth:`VectorEnv.close`, awaited. Calling it again does nothing."""
        if self._closed:
            return
        batch = self._plan_close()
        self._settle_close(batch, await self._arun(batch))

    async def __aenter__(self) -> AsyncVectorEnv:
        return self

    async def __aexit__(self, *exc: Any) -> bool:
        await self.aclose()
        return False

    async def _arun(self, batch: _Batch) -> list[Call]:
        submitted = [_submit(self._pool, job.fn) for job in batch.jobs]
        calls = [call for call, _ in submitted]
        try:
            await asyncio.gather(
                *(
                    _settled(call, job.timeout_s, changed)
                    for (call, changed), job in zip(submitted, batch.jobs, strict=True)
                )
            )
        except BaseException:
            for call in calls:
                call.cancel()
            self._interrupted(batch, calls)
            raise
        return calls


async def astep(env: Env, action: Any, timeout_s: float | None = None) -> EnvStepOutput:
    """``env.step(action)`` on a daemon thread, awaited; never raises for the environment's failures.

    A step that raises, takes longer than ``timeout_s`` (counted from when it started) or returns something
    that is not a dict comes back as :func:`~skyrl_gym.vector.results.error_output`. After a timeout the step
    runs on, abandoned: do not call ``env`` again; close it.
    """
    timeout_s = _per_env_timeouts("timeout_s", timeout_s, 1)[0]
    call = await _call_one(functools.partial(env.step, action), timeout_s)
    outcome = call.outcome
    assert outcome is not None
    if outcome.timed_out:
        abandon_quietly(env)
    message = failure_message("step", outcome, timeout_s)
    problem = None if message is not None else _step_value_problem(outcome.value)
    if message is None and problem is None:
        return outcome.value
    return error_output(message or f"step {problem}")


async def ainit(env: Env, prompt: Any, timeout_s: float | None = None) -> InitResult:
    """``env.init(prompt)`` on a daemon thread, awaited; a failure or a timeout is an :class:`InitResult` error."""
    timeout_s = _per_env_timeouts("timeout_s", timeout_s, 1)[0]
    call = await _call_one(functools.partial(env.init, prompt), timeout_s)
    outcome = call.outcome
    assert outcome is not None
    if outcome.timed_out:
        abandon_quietly(env)
    message = failure_message("init", outcome, timeout_s)
    problem = None if message is not None else _init_value_problem(outcome.value)
    if message is not None or problem is not None:
        return InitResult([], {}, error=message or f"init {problem}")
    observations, info = outcome.value
    return InitResult(observations, info)


async def aclose(env: Env, timeout_s: float | None = None) -> str | None:
    """``env.close()`` on a daemon thread, awaited: ``None`` when it closed, else what went wrong.

    A close that raises is reported; one that takes longer than ``timeout_s`` is abandoned (after
    ``env.abandon()``) and reported, so a hung close never holds up the caller.
    """
    timeout_s = _per_env_timeouts("timeout_s", timeout_s, 1)[0]
    call = await _call_one(env.close, timeout_s)
    outcome = call.outcome
    assert outcome is not None
    if outcome.timed_out:
        abandon_quietly(env)
    return failure_message("close", outcome, timeout_s)


async def acall(
    fn: Callable[[], Any], timeout_s: float | None = None, *, on_late: Callable[[Any], None] | None = None
):
    """``fn()`` on a daemon thread, awaited: its value, its exception, or :class:`CallTimedOut` after
    ``timeout_s`` (counted from when it started).

    A call that finishes after it was given up on hands its value to ``on_late`` (e.g. to close an
    environment that was made too late), on the thread it ran on.
    """
    timeout_s = _per_env_timeouts("timeout_s", timeout_s, 1)[0]
    lock = threading.Lock()
    state = {"given_up": False}

    def run() -> Any:
        value = fn()
        with lock:
            late = state["given_up"]
        if late and on_late is not None:
            on_late(value)
        return value

    call = await _call_one(run, timeout_s)
    outcome = call.outcome
    assert outcome is not None
    if outcome.timed_out:
        with lock:
            state["given_up"] = True
        raise CallTimedOut(f"the call did not return within {timeout_s:g} s")
    if outcome.error is not None:
        raise outcome.error
    return outcome.value


_shared_pool: DaemonPool | None = None
_shared_pool_lock = threading.Lock()


def _pool_for_single_calls() -> DaemonPool:
    """The daemon pool behind :func:`astep` and :func:`ainit`: unbounded, idle threads reused."""
    global _shared_pool
    with _shared_pool_lock:
        if _shared_pool is None:
            _shared_pool = DaemonPool(None, name="skyrl-gym-async")
        return _shared_pool


async def _call_one(fn: Callable[[], Any], timeout_s: float | None) -> Call:
    call, changed = _submit(_pool_for_single_calls(), fn)
    await _settled(call, timeout_s, changed)
    return call


def _submit(pool: DaemonPool, fn: Callable[[], Any]) -> tuple[Call, asyncio.Event]:
    """Submit ``fn``; the event is set on the running loop each time the call starts or finishes."""
    loop = asyncio.get_running_loop()
    changed = asyncio.Event()

    def notify() -> None:  # runs in the worker thread
        try:
            loop.call_soon_threadsafe(changed.set)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    return pool.submit(fn, on_change=notify), changed


async def _settled(call: Call, timeout_s: float | None, changed: asyncio.Event) -> None:
    """Wait until ``call`` has an outcome, expiring it ``timeout_s`` after it started; cancelling cancels it."""
    try:
        while True:
            changed.clear()  # before reading the call's state, so that no change is missed
            if call.outcome is not None:
                return
            started_at = call.started_at
            if timeout_s is None or started_at is None:
                await changed.wait()
                continue
            left = started_at + timeout_s - time.monotonic()
            if left <= 0:
                call.expire()
                continue
            try:
                await asyncio.wait_for(changed.wait(), left)
            except asyncio.TimeoutError:
                pass
    except BaseException:
        call.cancel()
        raise
