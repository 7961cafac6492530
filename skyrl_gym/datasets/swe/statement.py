"""Problem statements written from what the tests say, the way a user reports a failing suite.

A statement names the project and the failing tests and quotes their failure messages (the exception line
and pytest's explanation of a failed assert); it never looks at the patch. As a guard, a message that
happens to quote a line the bug changed is left out, and the builder's paths, temporary folders and object
addresses are cut, so the same bug gives the same statement on every run.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence

__all__ = ["changed_lines", "problem_statement"]

#: at most this many failing tests are quoted with their messages, and this many named in all
QUOTED_TESTS = 4
NAMED_TESTS = 12
MESSAGE_CHARS = 600

_OPENINGS = (
    "After installing {project} {version} from source, part of its own test suite fails.",
    "The test suite of {project} {version} is not green: some tests fail on the current code.",
    "Running the tests of {project} {version} shows failures that should not be there.",
)
_CLOSING = (
    "The tests are right; the library code is wrong. Find the cause and fix it in the source, without "
    "changing the tests, so that these tests pass and the rest of the suite keeps passing."
)


def changed_lines(patch: str, min_chars: int = 6) -> list[str]:
    """The stripped text of the lines a unified diff removes or adds (headers excluded), long enough to matter."""
    lines = []
    for line in patch.splitlines():
        if line.startswith(("+++", "---")) or not line.startswith(("+", "-")):
            continue
        text = line[1:].strip()
        if len(text) >= min_chars:
            lines.append(text)
    return lines


# what differs from run to run: object addresses, temporary folders, file metadata, the current time
_VOLATILE = (
    (re.compile(r"\b0x[0-9a-fA-F]{6,}\b"), "0x..."),
    (re.compile(r"/tmp/pytest-of-[^/\s]+/pytest-\d+/"), "<tmp>/"),
    (re.compile(r"/tmp/(?:tmp|skyrl-)[\w.-]+"), "<tmp>"),
    # a file's inode and times, and the clock read to the microsecond
    (re.compile(r"os\.stat_result\([^)]*\)"), "os.stat_result(...)"),
    (re.compile(r"datetime\.datetime\((?:\d+, ){6}\d+\)"), "datetime.datetime(...)"),
)


def _clean_message(message: str, work_dir: str | None) -> str:
    if work_dir:
        message = message.replace(work_dir.rstrip("/") + "/", "").replace(work_dir, ".")
    for pattern, replacement in _VOLATILE:
        message = pattern.sub(replacement, message)
    message = message.strip()
    if len(message) > MESSAGE_CHARS:
        message = message[:MESSAGE_CHARS].rstrip() + " ..."
    return message


def problem_statement(
    project: str,
    version: str,
    failing: Sequence[str],
    messages: Mapping[str, str],
    bug_patch: str,
    work_dir: str | None = None,
) -> str:
    """A statement for the tests ``failing`` (node ids) with their failure ``messages``.

    ``bug_patch`` is read only to leave out a message that quotes a changed line; ``work_dir`` (the
    builder's copy of the repository) is cut from messages.
    """
    if not failing:
        raise ValueError("a problem statement needs at least one failing test")
    failing = sorted(failing)
    forbidden = changed_lines(bug_patch)
    pick = int(hashlib.sha256("\n".join(failing).encode()).hexdigest(), 16)
    parts = [_OPENINGS[pick % len(_OPENINGS)].format(project=project, version=version), ""]
    count = len(failing)
    parts.append(f"{count} failing test{'s' if count != 1 else ''}:" if count > 1 else "The failing test:")
    parts.append("")
    for index, nodeid in enumerate(failing[:NAMED_TESTS]):
        parts.append(f"- {nodeid}")
        if index < QUOTED_TESTS:
            message = _clean_message(messages.get(nodeid, ""), work_dir)
            if message and not any(line in message for line in forbidden):
                parts.extend("    " + line for line in message.splitlines())
    if count > NAMED_TESTS:
        parts.append(f"- ... and {count - NAMED_TESTS} more")
    parts.extend(["", _CLOSING])
    return "\n".join(parts) + "\n"
