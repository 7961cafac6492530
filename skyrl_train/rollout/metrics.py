"""Batch metrics of a set of rollouts (rewards, pass rates, end states, the environments' own metrics)."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_train.rollout.records import END_STATES, TrajectoryResult

__all__ = ["rollout_metrics"]

logger = logging.getLogger("skyrl_train.rollout")


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def rollout_metrics(
    trajectories: Sequence[TrajectoryResult],
    *,
    pass_threshold: float = 1.0,
    wall_s: float | None = None,
    env_types: Mapping[str, type] | None = None,
) -> dict[str, float]:
    """Batch metrics; rewards and pass rates are over trajectories that did not end in error.

    Keys: ``generate/reward_mean``, ``pass_rate`` (``reward >= pass_threshold``), ``pass_at_n`` (groups with
    a pass), ``num_turns_mean``, ``response_length_mean`` (response tokens), ``model_tokens_mean``,
    ``end/<state>`` counts, ``error_count``, ``stop_reason/<reason>`` counts, ``wall_s``, ``tokens_per_s``,
    ``engine_s_mean``/``env_s_mean`` per trajectory; ``environment/<env>/<key>`` from each environment's
    ``aggregate_metrics`` (a plain mean of numeric keys when it has none).
    """
    scored = [t for t in trajectories if not t.is_error]
    metrics: dict[str, float] = {
        "generate/num_trajectories": float(len(trajectories)),
        "generate/reward_mean": _mean([t.reward for t in scored]),
        "generate/pass_rate": _mean([float(t.reward >= pass_threshold) for t in scored]),
        "generate/num_turns_mean": _mean([t.num_turns for t in trajectories]),
        "generate/response_length_mean": _mean([len(t.response_ids) for t in trajectories]),
        "generate/model_tokens_mean": _mean([t.num_model_tokens for t in trajectories]),
        "generate/error_count": float(len(trajectories) - len(scored)),
        "generate/engine_s_mean": _mean([t.generate_s for t in trajectories]),
        "generate/env_s_mean": _mean([t.env_s for t in trajectories]),
    }
    groups: dict[int, list[TrajectoryResult]] = {}
    for trajectory in scored:
        groups.setdefault(trajectory.group_id, []).append(trajectory)
    metrics["generate/pass_at_n"] = _mean(
        [float(any(t.reward >= pass_threshold for t in group)) for group in groups.values()]
    )
    for state in END_STATES:
        metrics[f"generate/end/{state}"] = float(sum(t.end == state for t in trajectories))
    for trajectory in trajectories:
        if trajectory.stop_reason is not None:
            key = f"generate/stop_reason/{trajectory.stop_reason}"
            metrics[key] = metrics.get(key, 0.0) + 1.0
    if wall_s is not None:
        metrics["generate/wall_s"] = float(wall_s)
        tokens = sum(t.num_model_tokens for t in trajectories)
        metrics["generate/tokens_per_s"] = tokens / wall_s if wall_s > 0 else 0.0
    by_env: dict[str, list[dict[str, Any]]] = {}
    for trajectory in scored:
        by_env.setdefault(trajectory.env_class, []).append(trajectory.env_metrics)
    for env_class, episodes in by_env.items():
        aggregate = getattr((env_types or {}).get(env_class), "aggregate_metrics", None)
        try:
            combined = aggregate(episodes) if callable(aggregate) else _numeric_means(episodes)
        except Exception:
            logger.warning("aggregate_metrics of %s failed:\n%s", env_class, traceback.format_exc())
            combined = _numeric_means(episodes)
        for key, value in combined.items():
            if isinstance(value, (int, float)):
                metrics[f"environment/{env_class}/{key}"] = float(value)
    return metrics


def _numeric_means(episodes: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    totals: dict[str, list[float]] = {}
    for episode in episodes:
        for key, value in episode.items():
            if isinstance(value, (int, float)):
                totals.setdefault(key, []).append(float(value))
    return {key: _mean(values) for key, values in totals.items()}
