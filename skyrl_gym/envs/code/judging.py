"""What both judges share: the error for a sandbox that cannot run them, and the judge's signed report.

A harness gets a fresh key (``token``) over its stdin, hides its memory from the program under test, and writes
each line of its report as ``<MAC> <JSON>``: a keyed BLAKE2b of the JSON text (:data:`SIGNING`, pasted into the
harness). :func:`read_report` keeps only the lines whose MAC checks out, so the program cannot forge a line
(a printed imitation of a report, a line written to the host's pipe through ``/proc/1/fd/1``) or change one,
even by writing into the middle of a long line while the harness writes it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

__all__ = ["MAC_BYTES", "SIGNING", "JudgeUnavailable", "read_report", "sign"]

MAC_BYTES = 16

SIGNING = r"""
try:
    from _blake2 import blake2b  # what hashlib uses, without loading OpenSSL
except ImportError:
    from hashlib import blake2b

def signed_line(key, message):
    data = json.dumps(message)  # ASCII only, so the host reads back exactly these bytes
    return "%s %s\n" % (blake2b(data.encode(), key=key.encode(), digest_size=@MAC_BYTES@).hexdigest(), data)
""".replace("@MAC_BYTES@", str(MAC_BYTES))
"""The harness's side: ``signed_line(token, message)`` is one line of the report (standard library only)."""


class JudgeUnavailable(RuntimeError):
    """The sandbox could not run the judge: an infrastructure failure, never the program's fault, so the
    environment raises it (the episode ends in error) instead of scoring a wrong answer."""


def sign(token: str, data: str) -> str:
    """The MAC of a report line's JSON text ``data`` under ``token``."""
    return hashlib.blake2b(data.encode(), key=token.encode(), digest_size=MAC_BYTES).hexdigest()


def read_report(stdout: str, token: str) -> list[dict[str, Any]]:
    """The JSON objects of the lines a harness signed with ``token``, in order; every other line is skipped."""
    messages = []
    for line in stdout.split("\n"):
        mac, _, data = line.partition(" ")
        if len(mac) != 2 * MAC_BYTES or not data.isascii():
            continue
        if not hmac.compare_digest(mac, sign(token, data)):
            continue
        try:
            message = json.loads(data)
        except (ValueError, RecursionError):
            continue
        if isinstance(message, dict):
            messages.append(message)
    return messages
