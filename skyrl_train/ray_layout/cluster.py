"""Joining a Ray cluster, placement groups, and waiting on actors with deadlines that name what they wait for.

Every wait of the Ray layout goes through :func:`wait_all` (or :func:`get_one`): it returns the values in
order, or raises at the first failure, so that a rank that died is reported at once instead of after its
peers' collective times out:

- an actor that died (killed, out of memory, its machine lost): :class:`ActorLostError` naming the actor
  and the call it was running;
- a call that raised: :class:`ActorCallError` with the actor's traceback;
- a deadline passed: :class:`ActorTimeoutError` naming the actor, the call and the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_train.training.workers.group import WorkerGroupError, WorkerLostError

__all__ = [
    "ActorCallError",
    "ActorLostError",
    "ActorTimeoutError",
    "PlacementGroups",
    "connect",
    "get_one",
    "import_ray",
    "wait_all",
]


class ActorLostError(WorkerLostError):
    """A Ray actor died while (or before) running a call."""


class ActorCallError(WorkerGroupError):
    """A call on a Ray actor raised; the message carries the actor's traceback."""


class ActorTimeoutError(WorkerGroupError, TimeoutError):
    """A Ray actor did not answer within its deadline."""


def import_ray() -> Any:
    """``import ray``, or an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as error:
        raise ImportError(
            "trainer.placement.backend=ray needs Ray: pip install 'skyrl[ray]' (or pip install ray)"
        ) from error
    return ray


def connect(address: str | None = None) -> Any:
    """Join the Ray cluster at ``address`` (``trainer.placement.ray_address``) unless this process already
    has; returns the ``ray`` module. ``None`` joins the cluster this machine runs (``ray start``) or starts
    a local one."""
    ray = import_ray()
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=True)
    return ray


def _death(error: BaseException) -> bool:
    import ray.exceptions as rex

    return isinstance(error, (rex.RayActorError, rex.ActorDiedError, rex.ActorUnavailableError))


def wait_all(refs: Sequence[Any], labels: Sequence[str], what: str, timeout_s: float | None) -> list[Any]:
    """The values of ``refs`` in order; ``labels[i]`` names the actor of ``refs[i]`` ("policy worker actor
    rank 1"), ``what`` the call ("train_step"). Raises at the first death, failure or the deadline."""
    ray = import_ray()
    index = {ref: i for i, ref in enumerate(refs)}
    values: dict[int, Any] = {}
    pending = list(refs)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while pending:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, pending = ray.wait(pending, num_returns=1, timeout=left)
        if not ready:
            late = ", ".join(labels[index[ref]] for ref in pending)
            raise ActorTimeoutError(f"{late} did not answer {what} within {timeout_s:g} s")
        ref = ready[0]
        i = index[ref]
        try:
            values[i] = ray.get(ref)
        except Exception as error:
            raise describe_failure(error, labels[i], what) from None
    return [values[i] for i in range(len(refs))]


def get_one(ref: Any, label: str, what: str, timeout_s: float | None) -> Any:
    """The value of one call; see :func:`wait_all`."""
    return wait_all([ref], [label], what, timeout_s)[0]


def describe_failure(error: BaseException, label: str, what: str) -> WorkerGroupError:
    """The error of the project for a Ray failure of ``label`` during ``what``."""
    import ray.exceptions as rex

    if _death(error):
        cause = str(error).strip().splitlines()
        detail = next(
            (line for line in cause if "died" in line or "exit" in line.lower()), cause[0] if cause else ""
        )
        return ActorLostError(f"{label} died during {what}: {detail.strip()}")
    if isinstance(error, rex.RayTaskError):
        return ActorCallError(f"{label} failed during {what}. Actor traceback:\n{error}")
    return ActorCallError(f"{label} failed during {what}: {type(error).__name__}: {error}")


class PlacementGroups:
    """The placement groups of a :class:`~skyrl_train.ray_layout.plan.RayPlan`, created and ready, or an
    error naming the group that the cluster could not place and what the cluster has free."""

    def __init__(self, groups: Mapping[str, list[dict[str, float]]], timeout_s: float):
        ray = import_ray()
        from ray.util.placement_group import placement_group, remove_placement_group

        self._remove = remove_placement_group
        self.groups: dict[str, Any] = {}
        try:
            for name, bundles in groups.items():
                self.groups[name] = placement_group(bundles, strategy="PACK", name=f"skyrl-{name}")
            for name, group in self.groups.items():
                ready, _ = ray.wait([group.ready()], timeout=timeout_s)
                if not ready:
                    raise ActorTimeoutError(
                        f"placement group {name!r} ({len(groups[name])} bundles of {groups[name][0]}) was not "
                        f"ready within {timeout_s:g} s; the cluster has {ray.available_resources()} free "
                        "(lower trainer.placement.ray_num_cpus_per_worker or add machines)"
                    )
        except BaseException:
            self.remove()
            raise

    def strategy(self, group: str, bundle: int) -> Any:
        """The scheduling strategy that puts an actor on bundle ``bundle`` of group ``group``."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(
            placement_group=self.groups[group],
            placement_group_bundle_index=bundle,
            placement_group_capture_child_tasks=True,
        )

    def remove(self) -> None:
        """Give the groups' resources back to the cluster (idempotent)."""
        groups, self.groups = self.groups, {}
        for group in groups.values():
            try:
                self._remove(group)
            except Exception:  # the cluster may be gone already
                pass
