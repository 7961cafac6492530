"""Staged jobs for the dispatcher tests: every stage is an ``asyncio.sleep`` and a shared ``Tracker`` counts.

The tracker records how many jobs are in each stage at once (and the most ever), how many set-up jobs wait for
generation, every release, and the containers (fake, counted) that jobs make or find in their worker's slot.
Nothing reads a clock: the tests assert on these counts.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import Any

from skyrl_train.rollout.dispatch import STAGES, WorkerSlot

HANG_S = 3600.0
"""How long a "hanging" stage sleeps: far past any deadline a test sets."""


class Tracker:
    """Counters shared by the jobs of one test."""

    def __init__(self) -> None:
        self.current = collections.Counter()
        self.peak = collections.Counter()
        self.entered = collections.Counter()
        self.waiting_for_generation = 0  # set-up done, generation not started
        self.peak_waiting_for_generation = 0
        self.set_up_or_waiting = 0  # in set-up or done with it, generation not started
        self.peak_set_up_or_waiting = 0
        self.releases = collections.Counter()
        self.containers: list[FakeContainer] = []
        self.generation_started = asyncio.Event()
        self.generation_order: list[int] = []
        self.waiting_for_evaluation = 0  # generation done, verification not started
        self.peak_waiting_for_evaluation = 0
        self.peak_in_any_stage = 0

    @contextlib.contextmanager
    def stage(self, name: str):
        """Count one job in stage ``name`` for the block's length."""
        self.current[name] += 1
        self.entered[name] += 1
        self.peak[name] = max(self.peak[name], self.current[name])
        self.peak_in_any_stage = max(self.peak_in_any_stage, sum(self.current.values()))
        try:
            yield
        finally:
            self.current[name] -= 1


class FakeContainer:
    """A resource that is expensive to make: counts how often it was used and closed."""

    def __init__(self, number: int):
        self.number = number
        self.uses = 0
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


class FakeJob:
    """A staged job whose stages sleep ``seconds[stage]``.

    ``raise_in`` / ``hang_in``: the stage that raises ``RuntimeError`` / sleeps ``HANG_S``. With
    ``keep_container`` the job takes the container kept in its slot (or makes one and keeps it there) and its
    release leaves it there for the next job of the same worker; without a slot it makes one and closes it on
    release. ``result`` is ``("ok", index)`` or ``("error", stage, message)``.
    """

    def __init__(
        self,
        index: int,
        tracker: Tracker,
        *,
        initialize_s: float = 0.0,
        generate_s: float = 0.0,
        evaluate_s: float = 0.0,
        raise_in: str | None = None,
        hang_in: str | None = None,
        keep_container: bool = False,
        release_raises: bool = False,
    ):
        self.index = index
        self.tracker = tracker
        self.seconds = {"initialize": initialize_s, "generate": generate_s, "evaluate": evaluate_s}
        self.raise_in = raise_in
        self.hang_in = hang_in
        self.keep_container = keep_container
        self.release_raises = release_raises
        self.error: tuple[str, str] | None = None
        self.ran: list[str] = []
        self.slot: WorkerSlot | None = None
        self.container: FakeContainer | None = None

    async def _stage(self, name: str) -> None:
        self.ran.append(name)
        with self.tracker.stage(name):
            if self.hang_in == name:
                await asyncio.sleep(HANG_S)
            await asyncio.sleep(self.seconds[name])
            if self.raise_in == name:
                raise RuntimeError(f"{name} broke in job {self.index}")

    async def initialize_trajectory(self, slot: WorkerSlot | None) -> None:
        self.slot = slot
        self.tracker.set_up_or_waiting += 1
        self.tracker.peak_set_up_or_waiting = max(
            self.tracker.peak_set_up_or_waiting, self.tracker.set_up_or_waiting
        )
        try:
            if self.keep_container and slot is not None:
                self.container = slot.resources.get("container")
            if self.container is None:
                self.container = FakeContainer(len(self.tracker.containers))
                self.tracker.containers.append(self.container)
                if self.keep_container and slot is not None:
                    slot.keep("container", self.container)
            self.container.uses += 1
            await self._stage("initialize")
        except BaseException:
            self.tracker.set_up_or_waiting -= 1
            raise
        self.tracker.waiting_for_generation += 1
        self.tracker.peak_waiting_for_generation = max(
            self.tracker.peak_waiting_for_generation, self.tracker.waiting_for_generation
        )

    async def generate_trajectory(self) -> None:
        self.tracker.waiting_for_generation -= 1
        self.tracker.set_up_or_waiting -= 1
        self.tracker.generation_order.append(self.index)
        self.tracker.generation_started.set()
        await self._stage("generate")
        self.tracker.waiting_for_evaluation += 1
        self.tracker.peak_waiting_for_evaluation = max(
            self.tracker.peak_waiting_for_evaluation, self.tracker.waiting_for_evaluation
        )

    async def evaluate_trajectory(self) -> None:
        self.tracker.waiting_for_evaluation -= 1
        await self._stage("evaluate")

    async def release(self) -> None:
        self.tracker.releases[self.index] += 1
        # a released container that no slot keeps is closed here
        if self.container is not None and not (self.keep_container and self.slot is not None):
            self.container.close()
        if self.release_raises:
            raise RuntimeError("release broke")

    def fail(self, stage: str, message: str) -> None:
        if self.error is None:
            self.error = (stage, message)

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def result(self) -> Any:
        return ("ok", self.index) if self.error is None else ("error", *self.error)


def stages_run_in_order(job: FakeJob) -> bool:
    """Whether the job's stages ran as a prefix of initialize -> generate -> evaluate."""
    return job.ran == list(STAGES[: len(job.ran)])
