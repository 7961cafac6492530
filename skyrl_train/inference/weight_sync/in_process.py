"""``in_process``: the engine lives in the trainer's process and copies the tensors into its model in place.

An hf engine that shares the policy's own module needs no copy at all (its ``load_weights`` skips tensors
that already are its storage); it still bumps its policy version and drops KV computed with old weights.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from skyrl_train.inference.weight_sync.base import SyncReport, WeightSync, run_blocking

__all__ = ["InProcessSync"]


class InProcessSync(WeightSync):
    """Hand the tensors to the engine object in this process (``load_weights`` or ``update_weights``)."""

    name = "in_process"
    engine_in_process = True

    def push(
        self, engine: Any, named_tensors: Iterable[tuple[str, Any]], *, version: int | None = None
    ) -> SyncReport:
        """Copy the tensors into ``engine``'s model between two of its decode steps."""
        if getattr(engine, "is_engine_process", False):
            raise ValueError(
                "generator.weight_sync_backend=in_process needs the engine in the trainer's process, but it "
                "runs in its own (generator.engine_process=true): use shared_memory or gloo"
            )
        tensors = list(named_tensors)
        load = getattr(engine, "load_weights", None)
        if load is not None:
            load(tensors, version=version)
        else:
            run_blocking(engine.update_weights(tensors))
        size = sum(t.numel() * t.element_size() for _, t in tensors)
        return SyncReport(len(tensors), size, getattr(engine, "policy_version", None))
