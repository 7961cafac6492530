"""Talking to a command started in a container (an exec) over its hijacked connection: stdin written, the
multiplexed stdout/stderr frames read and kept within bounds, and the marker that names the command's processes."""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import time
from typing import Any

_TOKEN_VAR = "SKYRL_EXEC"
"""The environment variable whose random value marks every process of one command (so that all can be killed)."""
_STREAM_HEADER = struct.Struct(">BxxxL")


def _raw(sock: Any) -> socket.socket:
    """The plain socket under what ``exec_start(socket=True)`` returns."""
    inner = getattr(sock, "_sock", sock)
    return inner


class _Output:
    """The first ``limit`` bytes of a stream and its last ``tail`` bytes; what lies between is counted."""

    def __init__(self, limit: int, tail: int = 0):
        self.limit, self.tail_limit = limit, tail
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_limit:
            self.tail += chunk
            del self.tail[: max(0, len(self.tail) - self.tail_limit)]

    @property
    def dropped(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        if not self.tail:
            return head
        tail = self.tail.decode("utf-8", errors="replace")
        if self.dropped:
            return f"{head}\n[... {self.dropped} bytes of output not shown ...]\n{tail}"
        return head + tail


def _pump(raw: socket.socket, stdin: bytes, out: _Output, err: _Output, deadline: float) -> bool:
    """Write ``stdin`` (then half-close), read the multiplexed stdout/stderr frames until the stream ends or
    ``deadline`` passes; returns whether the stream ended."""
    raw.setblocking(False)
    selector = selectors.DefaultSelector()
    selector.register(raw, selectors.EVENT_READ | (selectors.EVENT_WRITE if stdin else 0))
    pending = memoryview(stdin)
    if not stdin:
        with contextlib.suppress(OSError):
            raw.shutdown(socket.SHUT_WR)
    buffer = bytearray()
    ended = False
    try:
        while not ended:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for _, events in selector.select(left):
                if events & selectors.EVENT_WRITE and pending:
                    try:
                        pending = pending[raw.send(pending[:65536]) :]
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        pending = pending[:0]
                    if not pending:
                        with contextlib.suppress(OSError):
                            raw.shutdown(socket.SHUT_WR)
                        selector.modify(raw, selectors.EVENT_READ)
                if events & selectors.EVENT_READ:
                    try:
                        chunk = raw.recv(262144)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        chunk = b""
                    if not chunk:
                        ended = True
                        break
                    buffer += chunk
                    while len(buffer) >= 8:
                        kind, size = _STREAM_HEADER.unpack_from(buffer)
                        if len(buffer) < 8 + size:
                            break
                        (err if kind == 2 else out).add(bytes(buffer[8 : 8 + size]))
                        del buffer[: 8 + size]
    finally:
        selector.close()
    return ended


def _signal_code(code: int | None) -> int | None:
    """An exec's exit status as a RunResult has it: a command killed by signal N (128 + N) as -N."""
    if code is not None and 128 < code < 128 + 65:
        return -(code - 128)
    return code
