"""The run's evaluations: evaluation sets scored question by question before training, after the warm-up,
during RL and after it, so that a run can say how much each stage changed and how sure that is.

``data.eval_sets`` names each set, its files and the stages that evaluate it::

    data:
      val_data: [data/text2sql/validation.parquet]
      eval_sets:
        heldout: {paths: [data/text2sql/heldout.parquet]}
        chinook: {paths: [data/text2sql/chinook.parquet], stages: [before, after_rl]}

``data.val_data`` is one more set, named ``val``, evaluated at every stage the trainer's settings call for
(``trainer.eval_before_train``, ``trainer.sft_warmup.eval_after``, every ``trainer.eval_interval`` steps, and
after RL); its metrics keep the plain ``eval/`` prefix (``eval/accuracy``, ``eval/pass@k``) where a named set's
are ``eval/<name>/...``. Every set is played and scored the same way (:func:`~skyrl_train.evaluation.passk.play_rows`
and :func:`~skyrl_train.evaluation.passk.score_trajectories`).

At each stage every question is rolled out ``generator.eval_n_samples_per_prompt`` times with the evaluation
sampling settings (a set's own ``n_samples`` and ``temperature`` replace them: greedy accuracy and mean@8 at
temperature 1 over the same files are two sets); a question's outcome is the share of its samples that earned
the full reward (error samples left out). :meth:`StageEvaluator.summary` turns the outcomes into the stage table: per set and stage, n, accuracy
and its standard error, per level (``trainer.eval_breakdown_column``); the paired change between consecutive
stages and from the first to the last, with its standard error (:mod:`skyrl_train.evaluation.stats`); the
behaviour shares; and a few example episodes of the first set, before and after.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from skyrl_train.evaluation.passk import play_rows, score_trajectories
from skyrl_train.evaluation.stats import behaviour_shares, episode_behaviour, mean_se, paired_change

__all__ = ["STAGES", "VAL_SET", "EvalSet", "StageEvaluator", "StageRecord"]

STAGES = {
    "before": "before",
    "after_warmup": "after warm-up",
    "during_rl": "during RL",
    "after_rl": "after RL",
}
"""Stage keys of ``data.eval_sets.*.stages`` and the labels the summary uses (``during_rl``: every
``trainer.eval_interval`` steps)."""

VAL_SET = "val"
"""The name of ``data.val_data``'s set."""

EXAMPLE_CHARS = 600
"""Longest message text kept in an example episode."""


@dataclasses.dataclass
class EvalSet:
    """One named evaluation set: its rows and the stages that evaluate it."""

    name: str
    rows: list[dict[str, Any]]
    stages: tuple[str, ...]
    n_samples: int | None = None
    """Samples per question (``None``: the evaluator's)."""
    params: Any = None
    """Sampling parameters (``None``: the evaluator's)."""
    prefix: str | None = None
    """The prefix of its metrics (``None``: ``eval/<name>``)."""

    @property
    def metrics_prefix(self) -> str:
        return self.prefix or f"eval/{self.name}"


@dataclasses.dataclass
class StageRecord:
    """The outcome of one set at one stage, question by question (the question's index in its set)."""

    stage: str
    step: int
    outcomes: dict[int, float]
    """Share of the question's scored samples that were correct."""
    episodes: dict[int, list[dict[str, str]]]
    """The first sample's turns after the prompt, per question."""
    flags: dict[int, dict[str, bool]]
    """The first sample's behaviour (:func:`~skyrl_train.evaluation.stats.episode_behaviour`), per question."""
    behaviour: dict[str, Any]
    errors: int
    """Samples that ended in an error (left out of the outcomes)."""
    seconds: float
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    """The set's scores at this stage (:func:`~skyrl_train.evaluation.passk.score_trajectories`: accuracy,
    pass@k, valid format, reward, length) under its prefix."""


class StageEvaluator:
    """Runs the stage evaluations of a run and keeps their per-question outcomes; see the module docstring."""

    def __init__(
        self,
        sets: Sequence[EvalSet],
        params: Any,
        *,
        n_samples: int = 1,
        batch_size: int = 16,
        breakdown_column: str | None = "extra_info.level",
        examples: int = 3,
    ):
        self.sets = list(sets)
        self.params = params
        self.n_samples = n_samples
        self.batch_size = batch_size
        self.breakdown_column = breakdown_column
        self.examples = examples
        self.records: dict[str, list[StageRecord]] = {s.name: [] for s in self.sets}
        self.skipped: dict[str, list[str]] = {}
        """Sets left out because a file was missing, with those files."""
        self.outcomes_path: Any = None
        """A file that gets one JSON line per set and stage, its per-question outcomes (``None``: none), so
        that two runs evaluated on the same questions can be paired later (the trainer's is the run folder's
        ``eval_outcomes.jsonl``)."""

    @classmethod
    def from_config(cls, config: Any, val_rows: Sequence[dict[str, Any]] = ()) -> StageEvaluator:
        """The evaluator of ``data.eval_sets`` with the run's evaluation sampling settings, and ``val_rows``
        (``data.val_data``'s rows, which a missing file does not skip: the trainer read them) as the set
        :data:`VAL_SET`, last.

        A named set with a missing file is skipped with a warning and named in the summary
        (``eval_sets_skipped``): a recipe's sets are built by its data step, and a run with other data (a test,
        a benchmark) trains on.
        """
        import logging
        from pathlib import Path

        from skyrl_train.evaluation.passk import read_rows
        from skyrl_train.sampling import eval_sampling

        sets, skipped = [], {}
        for name, spec in config.data.eval_sets.items():
            missing = [path for path in spec.paths if not Path(path).exists()]
            if missing:
                logging.getLogger(__name__).warning(
                    "evaluation set %r skipped: %s not found (the main job builds it: make main, or "
                    "datasets/sql/build_compact.py --heldout N)",
                    name,
                    ", ".join(missing),
                )
                skipped[name] = missing
                continue
            rows = [row for path in spec.paths for row in read_rows(path)]
            params = None
            if spec.temperature is not None:
                params = eval_sampling(config).model_copy(update={"temperature": spec.temperature})
            sets.append(EvalSet(name, rows, tuple(spec.stages), spec.n_samples, params))
        if val_rows:
            if VAL_SET in config.data.eval_sets:
                raise ValueError(
                    f"data.eval_sets.{VAL_SET}: the name of data.val_data's set; name it otherwise"
                )
            sets.append(EvalSet(VAL_SET, list(val_rows), tuple(STAGES), prefix="eval"))
        evaluator = cls(
            sets,
            eval_sampling(config),
            n_samples=config.generator.eval_n_samples_per_prompt,
            batch_size=config.trainer.eval_batch_size,
            breakdown_column=config.trainer.eval_breakdown_column,
        )
        evaluator.skipped = skipped
        return evaluator

    def __bool__(self) -> bool:
        return bool(self.sets or self.skipped)

    def run(
        self, generator: Any, stage: str, step: int, only: Sequence[str] | None = None
    ) -> dict[str, float]:
        """Evaluate every set that names ``stage`` (of ``only``, where given) with ``generator``; the
        tracker's metrics, under each set's prefix: its scores (``accuracy``, ``accuracy/<level>``, ``pass@k``,
        ``valid_format_rate``, ...: :func:`~skyrl_train.evaluation.passk.score_trajectories`), the behaviour
        shares (``queried_first``, ``self_corrected``) and ``errors``; and its seconds
        (``time/eval_s`` for ``val``, ``time/eval_<set>_s``)."""
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; stages are {list(STAGES)}")
        metrics: dict[str, float] = {}
        for eval_set in self.sets:
            if stage not in eval_set.stages or (only is not None and eval_set.name not in only):
                continue
            record = self._evaluate(generator, eval_set, stage, step)
            self.records[eval_set.name].append(record)
            if self.outcomes_path is not None:
                self._append_outcomes(eval_set, record)
            prefix = eval_set.metrics_prefix
            metrics.update(record.metrics)
            for key in ("queried_first", "self_corrected"):
                if record.behaviour[key] is not None:
                    metrics[f"{prefix}/{key}"] = record.behaviour[key]
            metrics[f"{prefix}/errors"] = float(record.errors)
            metrics[f"time/{prefix.replace('/', '_')}_s"] = record.seconds
        return metrics

    def _append_outcomes(self, eval_set: EvalSet, record: StageRecord) -> None:
        import json

        line = {
            "set": eval_set.name,
            "stage": record.stage,
            "step": record.step,
            "outcomes": {str(i): v for i, v in sorted(record.outcomes.items())},
            "levels": {str(i): self._level(eval_set.rows[i]) for i in sorted(record.outcomes)},
        }
        with open(self.outcomes_path, "a") as f:
            f.write(json.dumps(line) + "\n")

    def _evaluate(self, generator: Any, eval_set: EvalSet, stage: str, step: int) -> StageRecord:
        start = time.perf_counter()
        rows = eval_set.rows
        n_samples = eval_set.n_samples or self.n_samples
        params = self.params if eval_set.params is None else eval_set.params
        trajectories = play_rows(generator, rows, params, n_samples, self.batch_size)
        threshold = getattr(generator, "pass_threshold", 1.0)
        samples: dict[int, list[float]] = {}
        episodes: dict[int, list[dict[str, str]]] = {}
        flags: dict[int, dict[str, bool]] = {}
        played: list[tuple[dict[str, Any], str, bool]] = []
        errors = 0
        for t in sorted(trajectories, key=lambda t: (t.group_id, t.sample_index)):
            if t.is_error:
                errors += 1
                continue
            ok = t.reward >= threshold
            turns = [dict(m) for m in t.messages[len(rows[t.group_id]["prompt"]) :]]
            samples.setdefault(t.group_id, []).append(float(ok))
            episodes.setdefault(t.group_id, turns)
            flags.setdefault(t.group_id, episode_behaviour(t.env_metrics, t.end))
            played.append((t.env_metrics, t.end, ok))
        outcomes = {i: sum(v) / len(v) for i, v in samples.items()}
        return StageRecord(
            stage=stage,
            step=step,
            outcomes=outcomes,
            episodes=episodes,
            flags=flags,
            behaviour=behaviour_shares(played),
            errors=errors,
            seconds=time.perf_counter() - start,
            metrics=score_trajectories(
                trajectories, rows, n_samples, threshold, self.breakdown_column, eval_set.metrics_prefix
            ),
        )

    def _level(self, row: dict[str, Any]) -> str | None:
        from skyrl_train.data import row_value

        if not self.breakdown_column:
            return None
        value = row_value(row, self.breakdown_column)
        return None if value is None or value == "" else str(value)

    def _levels(self, eval_set: EvalSet, record: StageRecord) -> dict[str, dict[str, Any]]:
        by_level: dict[str, list[float]] = {}
        for i, outcome in record.outcomes.items():
            level = self._level(eval_set.rows[i])
            if level is not None:
                by_level.setdefault(level, []).append(outcome)
        return {level: mean_se(values) for level, values in sorted(by_level.items())}

    def _change(self, eval_set: EvalSet, a: StageRecord, b: StageRecord) -> dict[str, Any]:
        change = {"from": STAGES[a.stage], "to": STAGES[b.stage], **paired_change(a.outcomes, b.outcomes)}
        levels: dict[str, dict[str, Any]] = {}
        for level in sorted({lv for i in a.outcomes if (lv := self._level(eval_set.rows[i])) is not None}):
            keep = {i for i in a.outcomes if self._level(eval_set.rows[i]) == level}
            levels[level] = paired_change(
                {i: v for i, v in a.outcomes.items() if i in keep},
                {i: v for i, v in b.outcomes.items() if i in keep},
            )
        change["levels"] = levels
        return change

    def summary(self) -> dict[str, Any]:
        """The stage table of every set (``eval_sets``) and the example episodes (``examples``)."""
        table: dict[str, Any] = {}
        for eval_set in self.sets:
            records = self.records[eval_set.name]
            stages = []
            for record in records:
                overall = mean_se(list(record.outcomes.values()))
                stages.append(
                    {
                        "stage": STAGES[record.stage],
                        "step": record.step,
                        "n": overall["n"],
                        "accuracy": overall["mean"],
                        "se": overall["se"],
                        "levels": self._levels(eval_set, record),
                        "errors": record.errors,
                        "behaviour": record.behaviour,
                        "seconds": round(record.seconds, 1),
                    }
                )
            pairs = list(zip(records, records[1:], strict=False))
            if len(records) > 2:
                pairs.append((records[0], records[-1]))
            table[eval_set.name] = {
                "questions": len(eval_set.rows),
                "stages": stages,
                "changes": [self._change(eval_set, a, b) for a, b in pairs],
            }
        return {"eval_sets": table, "eval_sets_skipped": self.skipped, "examples": self._examples()}

    def _examples(self) -> list[dict[str, Any]]:
        """Up to ``examples`` questions of the first set played at its first and last stage: those whose
        outcome changed first, then those that ran a query, then the rest."""
        if not self.sets or len(self.records[self.sets[0].name]) < 2:
            return []
        eval_set = self.sets[0]
        first, last = self.records[eval_set.name][0], self.records[eval_set.name][-1]
        common = [i for i in sorted(first.episodes) if i in last.episodes]

        def rank(i: int) -> tuple[int, int]:
            changed = first.outcomes[i] != last.outcomes[i]
            queried = last.flags[i]["queried_first"]
            return (0 if changed else 1, 0 if queried else 1)

        out = []
        for i in sorted(common, key=rank)[: self.examples]:
            row = eval_set.rows[i]
            out.append(
                {
                    "set": eval_set.name,
                    "question": (row.get("extra_info") or {}).get("question"),
                    "db_id": row.get("db_id"),
                    "level": self._level(row),
                    "gold": (row.get("reward_spec") or {}).get("ground_truth"),
                    "episodes": [
                        {
                            "stage": STAGES[record.stage],
                            "correct": record.outcomes[i],
                            "turns": [
                                {
                                    "role": m.get("role", ""),
                                    "content": str(m.get("content", ""))[:EXAMPLE_CHARS],
                                }
                                for m in record.episodes[i]
                            ],
                        }
                        for record in (first, last)
                    ],
                }
            )
        return out
