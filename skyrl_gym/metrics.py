"""Episode metrics aggregated into batch metrics, per environment (SkyRL's ``skyrl_gym.metrics``).

A trainer collects ``env.get_metrics()`` at the end of each episode and, per environment id, hands the list to
:func:`aggregate_for_environment`, which calls that environment class's ``aggregate_metrics``.
"""

from __future__ import annotations

from typing import Any

from skyrl_gym.envs.registration import load_env_creator, spec

__all__ = ["aggregate_for_environment", "default_aggregate_metrics"]


def default_aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, float]:
    """The mean of every numeric (or bool) key over the episodes that have it; other values are skipped."""
    columns: dict[str, list[float]] = {}
    for episode in metrics:
        for key, value in episode.items():
            if isinstance(value, (bool, int, float)):
                columns.setdefault(key, []).append(float(value))
    return {key: sum(values) / len(values) for key, values in columns.items()}


def aggregate_for_environment(env_name: str, metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """Aggregate ``metrics`` with the ``aggregate_metrics`` of the class registered as ``env_name``.

    An unknown id raises :class:`~skyrl_gym.errors.UnknownEnvironmentError` (a ``KeyError``) naming the closest
    ids; a creator without ``aggregate_metrics`` (a plain factory function) gets the default mean.
    """
    entry_point = spec(env_name).entry_point
    creator = entry_point if callable(entry_point) else load_env_creator(entry_point)
    aggregate = getattr(creator, "aggregate_metrics", None)
    return aggregate(metrics) if callable(aggregate) else default_aggregate_metrics(metrics)
