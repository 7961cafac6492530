"""The frames on the pipes between the host and a program it runs in a sandbox (the Python session's driver, the
RLM REPL's driver, a warm interpreter's request): ``b"SKYRL"``, ten digits of length, a newline, then that many
bytes of one JSON object.

The host's side is here: :func:`send` and :func:`receive` hold a deadline, and :func:`receive` reads at most
the caller's limit and refuses anything but one JSON object, since the program on the other end runs code the
host does not trust. The programs in the sandbox write the same bytes with the standard library alone (they run
without this package).
"""

from __future__ import annotations

import json
import os
import select
import time
from typing import Any

__all__ = [
    "HEADER",
    "MAGIC",
    "ChannelClosed",
    "FrameError",
    "encode",
    "frame",
    "read_exactly",
    "receive",
    "send",
    "wait_readable",
    "wait_writable",
]

MAGIC = b"SKYRL"
HEADER = len(MAGIC) + 11
"""Bytes of a frame's header: the magic, ten digits of length, a newline."""
_CHUNK = 1 << 16


class FrameError(Exception):
    """What came over the pipe is not a frame of one JSON object within the limit."""


class ChannelClosed(ConnectionError):
    """The other end closed the pipe (it exited); an ``OSError``, as a write to a closed pipe is."""


def frame(data: bytes) -> bytes:
    """``data`` (a JSON object's bytes) as one frame."""
    return MAGIC + b"%010d\n" % len(data) + data


def encode(message: Any) -> bytes:
    """``message`` as one frame (JSON in ASCII)."""
    return frame(json.dumps(message).encode("ascii"))


def wait_readable(fd: int, timeout_s: float) -> bool:
    """Whether ``fd`` became readable (data or end of file) within ``timeout_s``. ``poll``, not ``select``: a
    trainer with more than 1024 open files has descriptors that ``select`` refuses."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0.0, timeout_s) * 1000))


def wait_writable(fd: int, timeout_s: float) -> bool:
    """Whether ``fd`` can take a write (or its reader is gone) within ``timeout_s``."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return bool(poller.poll(max(0.0, timeout_s) * 1000))


def send(fd: int, message: Any, deadline: float) -> None:
    """Write ``message`` as one frame to ``fd`` (non-blocking or not). ``TimeoutError`` when the other end does
    not take it before ``deadline`` (``time.monotonic()``), :class:`ChannelClosed` when it is gone."""
    view = memoryview(encode(message))
    while view:
        if not wait_writable(fd, deadline - time.monotonic()):
            raise TimeoutError("the other end did not take the message before the deadline")
        try:
            view = view[os.write(fd, view[:_CHUNK]) :]
        except BlockingIOError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            raise ChannelClosed("the other end closed its input") from None


def read_exactly(fd: int, n: int, deadline: float) -> bytes:
    """``n`` bytes from ``fd``; ``TimeoutError`` when they do not come before ``deadline``,
    :class:`ChannelClosed` at the end of the stream."""
    chunks: list[bytes] = []
    while n > 0:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer before the deadline")
        if not wait_readable(fd, left):
            continue
        try:
            chunk = os.read(fd, min(n, 1 << 20))
        except BlockingIOError:
            continue
        if not chunk:
            raise ChannelClosed("the other end exited")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def receive(fd: int, deadline: float, max_bytes: int) -> dict[str, Any]:
    """One frame from ``fd``: a JSON object of at most ``max_bytes``. :class:`FrameError` for anything else (a
    header that is not one, a longer message, JSON that does not parse or is not an object), ``TimeoutError``
    and :class:`ChannelClosed` as :func:`read_exactly`."""
    header = read_exactly(fd, HEADER, deadline)
    digits = header[len(MAGIC) : -1]
    if not header.startswith(MAGIC) or not digits.isdigit() or not header.endswith(b"\n"):
        raise FrameError(f"output that is not a frame: {header[:40]!r}")
    length = int(digits)
    if length > max_bytes:
        raise FrameError(f"a message of {length} bytes, over the limit of {max_bytes}")
    body = read_exactly(fd, length, deadline)
    try:
        message = json.loads(body)
    except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested thousands deep
        raise FrameError(f"a message that is not valid JSON ({type(exc).__name__})") from None
    if not isinstance(message, dict):
        raise FrameError(f"a message that is a JSON {type(message).__name__}, not an object")
    return message
