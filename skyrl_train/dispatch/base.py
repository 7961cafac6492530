"""The dispatcher interface: how many rollout coroutines run at once, and in what order they start.

A *job* is a zero-argument function that returns a coroutine (one trajectory, from environment start to its
end). A dispatcher awaits every job and returns their results in the order of the jobs. Strategies differ in
how they schedule the jobs (a bounded batch, a fixed pool of workers, a pipeline of stages); the generator
never depends on which one runs.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from skyrl_gym.registries import Registry

__all__ = ["Dispatcher", "DispatchStats", "Job", "make_dispatcher", "register_dispatcher", "DISPATCHERS"]

T = TypeVar("T")

Job = Callable[[], Awaitable[T]]
"""A zero-argument function returning an awaitable (usually an ``async def`` function's coroutine)."""


@dataclasses.dataclass
class DispatchStats:
    """What the last :meth:`Dispatcher.run` did: ``jobs`` run, the most ever in flight, its wall time."""

    jobs: int = 0
    max_in_flight: int = 0
    wall_s: float = 0.0


class Dispatcher(abc.ABC):
    """Runs rollout jobs concurrently; results come back in job order.

    A job that raises makes :meth:`run` raise once the jobs already started have been cancelled; rollout
    jobs are expected to catch their own failures and return them as results (an error trajectory).
    """

    name: str = "base"

    def __init__(self) -> None:
        self.stats = DispatchStats()
        """Counters of the last :meth:`run`."""

    @abc.abstractmethod
    async def run(self, jobs: Sequence[Job[T]]) -> list[T]:
        """Await every job and return their results, in the order of ``jobs``."""


DISPATCHERS: Registry[Callable[..., Dispatcher]] = Registry(
    "dispatcher",
    "generator.dispatcher",
    builtins={"async_batch": "skyrl_train.dispatch.async_batch:AsyncBatchDispatcher"},
)
"""Dispatcher factories by name; see :func:`register_dispatcher`."""


def register_dispatcher(name: str) -> Callable[[Callable[..., Dispatcher]], Callable[..., Dispatcher]]:
    """Class decorator: make a dispatcher available to :func:`make_dispatcher` (``generator.dispatcher``)."""
    return DISPATCHERS.register(name)


def make_dispatcher(name: str, **kwargs: Any) -> Dispatcher:
    """The dispatcher registered as ``name``, built with ``kwargs`` (e.g. ``max_concurrency=64``)."""
    return DISPATCHERS.get(name)(**kwargs)
