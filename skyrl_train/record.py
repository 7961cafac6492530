"""A token-level record of the rollouts each training step trained on, in the run folder.

``run_dir/rollouts/step_000001.parquet`` (one file per RL step, Parquet: compact and columnar) holds one row
per recorded trajectory: the prompt's and the response's token ids, the loss mask, the sampler's log-probs,
the trainer's log-probs before the update, the advantage and the policy version of every response token, each
turn's span, action and reward, the chat messages (observations and tool results in place), the end state,
the timings, and the environment's identity (class, data source, and the task: the whole dataset row).
``rollouts/plan.json`` holds what a replay of the updates needs besides the config (the tracker's step of RL
step 0, the scheduler's length, whether the old log-probs come from the training forward).
``skyrl-train view RUN`` (:mod:`skyrl_train.viewer`) shows the record; ``skyrl-train replay RUN``
(:mod:`skyrl_train.replay`) reruns its updates and its episodes.

``trainer.record`` sets it: ``sample`` records a share of each step's trajectories (chosen by a hash of the
seed, the step and the index, so reruns record the same ones), ``max_mb`` stops recording once the folder
holds that much (the metric ``record/over_budget`` says so), and ``trainer_log_probs`` runs a forward pass of
the policy before the update when the step would not compute them anyway (one update per batch).
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyrl_train.config import Config

__all__ = ["RecordSettings", "RolloutRecorder", "read_plan", "read_rollouts"]

FOLDER = "rollouts"
PLAN_FILE = "plan.json"
JSON_COLUMNS = ("task", "actions", "messages", "final_observations", "env_metrics", "verification")
"""Columns stored as JSON text (nested values of any shape)."""


@dataclasses.dataclass(frozen=True)
class RecordSettings:
    """What :class:`RolloutRecorder` records (``trainer.record``)."""

    enabled: bool
    sample: float
    max_mb: float
    trainer_log_probs: bool
    seed: int

    @classmethod
    def from_config(cls, config: Config) -> RecordSettings:
        r = config.trainer.record
        return cls(r.enabled, r.sample, r.max_mb, r.trainer_log_probs, config.trainer.seed)


def _chosen(seed: int, step: int, index: int, share: float) -> bool:
    """Whether trajectory ``index`` of ``step`` is recorded: a hash below ``share`` (the same on every rerun)."""
    if share >= 1.0:
        return True
    return zlib.crc32(f"{seed}:{step}:{index}".encode()) / 2**32 < share


def _row_of(tensor: Any, i: int, n: int) -> list[float] | None:
    """The first ``n`` values of row ``i`` of a [B, T] tensor, as floats; None without a tensor."""
    return None if tensor is None else [float(x) for x in tensor[i, :n].tolist()]


class RolloutRecorder:
    """Writes each RL step's recorded trajectories to ``run_dir/rollouts``; see the module docstring."""

    def __init__(self, run_dir: str | Path, settings: RecordSettings, plan: dict[str, Any] | None = None):
        self.settings = settings
        self.plan = dict(plan or {})
        """Written to ``rollouts/plan.json`` with the first step recorded (see the module docstring)."""
        self.folder = Path(run_dir) / FOLDER
        self.bytes = (
            sum(p.stat().st_size for p in self.folder.glob("*.parquet")) if self.folder.exists() else 0
        )
        """Bytes in the folder (a resumed run counts what it recorded before)."""

    @property
    def wants_trainer_log_probs(self) -> bool:
        """Whether a step should compute the trainer's log-probs for the record when it has none."""
        s = self.settings
        return s.enabled and s.trainer_log_probs and self.bytes < s.max_mb * 2**20

    def record(
        self,
        step: int,
        trajectories: list[Any],
        batch: Any,
        tasks: dict[int, dict[str, Any]],
        trainer_log_probs: Any = None,
    ) -> dict[str, float]:
        """Record step ``step``'s ``trajectories`` (in ``batch``'s row order, advantages computed); ``tasks``
        maps a group id to its dataset row; ``trainer_log_probs`` ([B, T]) when the step has them apart from
        the batch. Returns metrics."""
        s = self.settings
        if not s.enabled:
            return {}
        if self.bytes >= s.max_mb * 2**20:
            return {"record/over_budget": 1.0, "record/trajectories": 0.0}
        import pyarrow as pa
        import pyarrow.parquet as pq

        if trainer_log_probs is None:
            trainer_log_probs = batch.old_log_probs
        rows = []
        for i, t in enumerate(trajectories):
            if not _chosen(s.seed, step, i, s.sample):
                continue
            n = len(t.response_ids)
            rows.append(
                {
                    "step": step,
                    "index": i,
                    "group_id": int(t.group_id),
                    "sample_index": int(t.sample_index),
                    "env_class": t.env_class,
                    "data_source": t.data_source,
                    "batch_size": len(trajectories),
                    "task": json.dumps(tasks.get(int(t.group_id)) or {}, default=str),
                    "reward": float(t.reward),
                    "turn_rewards": [float(r) for r in t.turn_rewards],
                    "end": t.end,
                    "truncated_by": t.truncated_by,
                    "error": t.error,
                    "stop_reason": t.stop_reason,
                    "num_turns": int(t.num_turns),
                    "prompt_ids": list(t.prompt_ids),
                    "response_ids": list(t.response_ids),
                    "loss_mask": [int(m) for m in t.loss_mask],
                    "sampler_logprobs": [float(x) for x in t.logprobs] if t.logprobs else None,
                    "trainer_logprobs": _row_of(trainer_log_probs, i, n),
                    "advantages": _row_of(batch.advantages, i, n),
                    "policy_versions": [int(v) for v in t.policy_versions] if t.policy_versions else None,
                    "turn_spans": [[int(a), int(b)] for a, b in t.turn_spans],
                    "actions": json.dumps(list(t.actions)),
                    "messages": json.dumps(t.messages, default=str),
                    "final_observations": json.dumps(t.final_observations, default=str),
                    "env_metrics": json.dumps(t.env_metrics, default=str),
                    "verification": json.dumps(t.verification, default=str),
                    "generate_s": float(t.generate_s),
                    "env_s": float(t.env_s),
                }
            )
        if not rows:
            return {"record/trajectories": 0.0}
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.plan and not (self.folder / PLAN_FILE).exists():
            (self.folder / PLAN_FILE).write_text(json.dumps(self.plan, indent=1) + "\n")
        path = self.folder / f"step_{step:06d}.parquet"
        tmp = path.with_suffix(".tmp")
        pq.write_table(pa.Table.from_pylist(rows), tmp, compression="zstd")
        tmp.replace(path)  # a reader never sees half a file; a rerun of the step replaces it
        size = path.stat().st_size
        self.bytes += size
        return {"record/trajectories": float(len(rows)), "record/bytes_per_trajectory": size / len(rows)}


def read_rollouts(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every recorded trajectory of a run, by step then index (the JSON columns parsed)."""
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for path in sorted((Path(run_dir) / FOLDER).glob("step_*.parquet")):
        for row in pq.read_table(path).to_pylist():
            for key in JSON_COLUMNS:
                row[key] = json.loads(row[key])
            rows.append(row)
    return rows


def read_plan(run_dir: str | Path) -> dict[str, Any]:
    """``rollouts/plan.json`` of a run ({} when it recorded nothing)."""
    path = Path(run_dir) / FOLDER / PLAN_FILE
    return json.loads(path.read_text()) if path.is_file() else {}
