"""Exceptions raised by skyrl_gym. Each message says what to do about it."""

from __future__ import annotations


class Error(Exception):
    """Base class of skyrl_gym's errors."""


class RegistrationError(Error):
    """An environment id is registered twice, or a registration is malformed."""


class UnknownEnvironmentError(Error, KeyError):
    """No environment is registered under the requested id."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class EpisodeNotStartedError(Error, RuntimeError):
    """``step`` was called before ``init`` or ``reset``."""


class EpisodeEndedError(Error, RuntimeError):
    """``step`` was called after the episode ended."""


class BudgetExceeded(Error):
    """A budget (turns, time, tool calls) ran out; the framework ends the episode as truncated."""

    def __init__(self, budget: str, message: str):
        super().__init__(message)
        self.budget = budget


class StepTimeout(BudgetExceeded):
    """A step took longer than its wall-clock budget."""


class ToolCallError(Error):
    """A tool call could not be parsed or run; environments turn it into an observation."""
