"""What both judges share: the error for a sandbox that cannot run them, and reading a harness's report (only
its own lines, which carry a token the program under test never sees)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["JudgeUnavailable", "read_report"]


class JudgeUnavailable(RuntimeError):
    """The sandbox could not run the judge: an infrastructure failure, never the program's fault, so the
    environment raises it (the episode ends in error) instead of scoring a wrong answer."""


def read_report(stdout: str, token: str) -> list[dict[str, Any]]:
    """The JSON objects a harness wrote, one per line, that carry ``token``.

    The harness got the token over its stdin and hid its memory, so the program under test cannot know it:
    lines without it (a printed imitation of a report, a line written to the host's pipe through ``/proc``) are
    skipped, as are lines that are not JSON objects.
    """
    messages = []
    for line in stdout.splitlines():
        if token not in line:
            continue
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(message, dict) and message.get("token") == token:
            messages.append(message)
    return messages
