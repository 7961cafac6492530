"""What each RL step cost: CPU-, GPU- and environment-seconds, tokens, and the same per solved trajectory.

``cost/*`` metrics of a step (:func:`step_cost`), their sums over the run in ``summary.json`` and the report
(:class:`CostTotals`); ``skyrl-train view`` draws them with the other curves.

- ``cpu_s``: CPU time (user + system) of the trainer process and of its children that ended during the step
  (environment sandboxes, database services); work in other processes that outlive the step (a worker
  group, a vLLM server, a Docker container) is not in it;
- ``gpu_s``: the step's wall time times the GPUs this process sees when the run is placed on CUDA (0 on CPU);
- ``env_s``: seconds trajectories waited on their environments (sandbox and container calls included),
  summed over trajectories: they overlap in time;
- ``model_tokens`` and ``tokens``: tokens the model generated, and every token of the batch (prompts too);
- ``solved``: trajectories that did not end in error with a reward at or above the runner's pass threshold;
  ``*_per_solved`` divides by it (left out of a step that solved none).
"""

from __future__ import annotations

import dataclasses
import resource
from collections.abc import Sequence
from typing import Any

__all__ = ["CostTotals", "cpu_seconds", "step_cost"]

COSTS = ("cpu_s", "gpu_s", "env_s", "model_tokens", "tokens")


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its ended children so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def step_cost(
    trajectories: Sequence[Any], *, cpu_s: float, wall_s: float, gpus: int, pass_threshold: float
) -> dict[str, float]:
    """The ``cost/*`` metrics of a step that trained on ``trajectories``; see the module docstring."""
    costs = {
        "cpu_s": cpu_s,
        "gpu_s": wall_s * gpus,
        "env_s": sum(t.env_s for t in trajectories),
        "model_tokens": float(sum(t.num_model_tokens for t in trajectories)),
        "tokens": float(sum(len(t.prompt_ids) + len(t.response_ids) for t in trajectories)),
    }
    solved = sum(1 for t in trajectories if not t.is_error and t.reward >= pass_threshold)
    metrics = {f"cost/{k}": float(v) for k, v in costs.items()} | {"cost/solved": float(solved)}
    if solved:
        metrics |= {f"cost/{k}_per_solved": float(v) / solved for k, v in costs.items()}
    return metrics


@dataclasses.dataclass
class CostTotals:
    """The run's sums of the steps' costs (this process's steps: a resumed run counts from its resume)."""

    totals: dict[str, float] = dataclasses.field(
        default_factory=lambda: dict.fromkeys((*COSTS, "solved"), 0.0)
    )

    def add(self, metrics: dict[str, float]) -> None:
        for key in self.totals:
            self.totals[key] += metrics.get(f"cost/{key}", 0.0)

    def summary(self) -> dict[str, float]:
        """The totals, and each per solved trajectory when any was solved."""
        out = {k: round(v, 2) for k, v in self.totals.items()}
        if self.totals["solved"]:
            out |= {f"{k}_per_solved": round(self.totals[k] / self.totals["solved"], 2) for k in COSTS}
        return out
