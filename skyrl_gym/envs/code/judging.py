"""What both judges share: the error for a sandbox that cannot run them, and reading a harness's report."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["JudgeUnavailable", "read_report"]


class JudgeUnavailable(RuntimeError):
    """The sandbox could not run the judge: an infrastructure failure, never the program's fault, so the
    environment raises it (the episode ends in error) instead of scoring a wrong answer."""


def read_report(stdout: str) -> list[dict[str, Any]]:
    """The JSON objects a harness wrote, one per line; lines that are not JSON objects are skipped."""
    messages = []
    for line in stdout.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict):
            messages.append(message)
    return messages
