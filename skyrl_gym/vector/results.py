"""What the vector API hands back: one result per environment, and a few counts per batch."""

from __future__ import annotations

import dataclasses
import traceback
from typing import Any

from skyrl_gym.budget import END_ERROR
from skyrl_gym.core import EnvStepOutput

__all__ = ["BatchStats", "InitResult", "error_output"]


@dataclasses.dataclass
class InitResult:
    """One environment's answer to ``init``/``reset``.

    ``observations`` and ``info`` are what the environment returned; when it failed (raised, timed out or
    returned something that is not ``(observations, info)``) they are ``[]`` and ``{}`` and ``error`` says why.
    """

    observations: Any
    info: dict[str, Any]
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the episode started."""
        return self.error is None


@dataclasses.dataclass(frozen=True)
class BatchStats:
    """Counts for the last batch call (``init``, ``reset``, ``step`` or ``close``) of a vector environment.

    ``ok``: calls that returned; ``errors``: calls that raised, returned something outside the contract or
    found their environment still busy with an abandoned call; ``timeouts``: calls given up at their
    deadline; ``skipped``: environments masked out or already done; ``wall_s``: seconds the batch took.
    """

    op: str
    ok: int = 0
    errors: int = 0
    timeouts: int = 0
    skipped: int = 0
    wall_s: float = 0.0


def error_output(message: str) -> EnvStepOutput:
    """The step result of an environment that failed: no observations, reward 0.0, done, ``end == "error"``."""
    return EnvStepOutput(
        observations=[], reward=0.0, done=True, metadata={"end": END_ERROR, "error": message}
    )


def describe(exc: BaseException) -> str:
    """``"ValueError: message"`` for an exception."""
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
