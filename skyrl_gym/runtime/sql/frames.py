"""Frames on the pipes between a caller and its query worker: an 8-byte length, then a pickle.

The worker trusts its caller and unpickles plainly (:func:`recv_frame`). The caller reads at most the
request's size limit and unpickles with :class:`ValueUnpickler`, which allows only the classes a query value
may be (dates, decimals, UUIDs, sets), so a worker cannot make it build anything else.

Standard library only: the worker process imports this module without the rest of the package.
"""

from __future__ import annotations

import os
import pickle
import struct
from typing import Any

__all__ = [
    "FRAME_SLACK",
    "HEADER",
    "ValueUnpickler",
    "read_exactly",
    "recv_frame",
    "send_frame",
    "write_all",
]

FRAME_SLACK = 1 << 20
"""Bytes an answer may exceed its rows' ``max_bytes`` by (its columns, counts and pickle framing)."""
HEADER = struct.Struct(">Q")
"""A frame's header: the length of the pickle that follows, 8 bytes big-endian."""


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (a pipe takes a large write in several pieces)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def send_frame(fd: int, message: Any) -> None:
    """Send ``message`` as one frame (header and pickle in one write)."""
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    write_all(fd, HEADER.pack(len(payload)) + payload)


def recv_frame(fd: int) -> Any:
    """One frame from ``fd`` (the worker's side: the caller is trusted); ``EOFError`` when it closed."""
    header = read_exactly(fd, HEADER.size)
    (size,) = HEADER.unpack(header)
    return pickle.loads(read_exactly(fd, size))


def read_exactly(fd: int, size: int) -> bytes:
    """``size`` bytes from ``fd``, blocking; ``EOFError`` when it closes first."""
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


SAFE_CLASSES = {
    ("datetime", "date"),
    ("datetime", "datetime"),
    ("datetime", "time"),
    ("datetime", "timedelta"),
    ("datetime", "timezone"),
    ("decimal", "Decimal"),
    ("uuid", "UUID"),
    ("uuid", "SafeUUID"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "complex"),
    ("builtins", "bytearray"),
}


class ValueUnpickler(pickle.Unpickler):
    """The caller's unpickler: builds only the classes in :data:`SAFE_CLASSES` (besides plain data)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in SAFE_CLASSES:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a query worker sent a {module}.{name}, which is not a query value")
