"""Budgets: the limits the framework enforces on every episode, declared in an environment's spec."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

__all__ = ["Budget", "END_TERMINATED", "END_TRUNCATED", "END_ERROR"]

END_TERMINATED = "terminated"
"""The task is over: the environment said so (a final answer, a solved task)."""
END_TRUNCATED = "truncated"
"""A budget ran out; ``metadata["truncated_by"]`` names which one."""
END_ERROR = "error"
"""The environment or its infrastructure failed; ``metadata["error"]`` says how. Never scored as a reward."""


@dataclasses.dataclass(frozen=True)
class Budget:
    """Limits on one episode. ``None`` means unlimited (or, for ``max_turns``, the environment's own)."""

    max_turns: int | None = None
    """Most ``step`` calls per episode; without it the environment's ``max_turns`` attribute counts."""
    step_timeout_s: float | None = None
    """Wall-clock seconds one ``step`` may take."""
    episode_timeout_s: float | None = None
    """Wall-clock seconds from ``init`` to the end of the episode."""
    max_tool_calls: int | None = None
    """Most tool calls (through ``BaseTextEnv._execute_tool``) per episode."""
    max_observation_chars: int | None = None
    """Longest content of one observation message; longer ones are cut with a note saying so."""
    max_action_chars: int | None = 1_000_000
    """Longest action (the model's text of one turn) passed to the environment; a longer one is answered by the
    framework with an observation saying so, without calling ``step`` (the turn counts). ``None``: no limit."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"Budget.{field.name} must be a number or None, got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"Budget.{field.name} must be a positive finite number, got {value!r}")

    @classmethod
    def coerce(cls, value: Budget | dict[str, Any] | None) -> Budget:
        """Accept a Budget, a dict of its fields or None; unknown keys are an error naming the valid ones."""
        if value is None:
            return cls()
        if isinstance(value, Budget):
            return value
        if isinstance(value, dict):
            names = {f.name for f in dataclasses.fields(cls)}
            unknown = sorted(set(value) - names)
            if unknown:
                raise TypeError(f"unknown budget field(s) {unknown}; valid fields: {sorted(names)}")
            return cls(**value)
        raise TypeError(f"a budget must be a Budget, a dict or None, got {type(value).__name__}")

    def merged(self, override: Budget | dict[str, Any] | None) -> Budget:
        """This budget with the fields that ``override`` sets replaced."""
        if override is None:
            return self
        if isinstance(override, Budget):
            changes = {f.name: getattr(override, f.name) for f in dataclasses.fields(override)}
            changes = {k: v for k, v in changes.items() if v is not None}
        else:
            changes = dict(Budget.coerce(override).__dict__)
            changes = {k: v for k, v in changes.items() if k in override}
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
