"""The one framing between the host and a program in a sandbox (``skyrl_gym.runtime.frames``), over real pipes:
what a driver writes is read back, and anything else is refused with a reason."""

from __future__ import annotations

import os
import threading
import time

import pytest

from skyrl_gym.runtime import frames


@pytest.fixture
def pipe():
    read, write = os.pipe()
    yield read, write
    for fd in (read, write):
        try:
            os.close(fd)
        except OSError:
            pass


def soon() -> float:
    return time.monotonic() + 30.0  # a bound for a pipe that already holds its bytes


def test_a_message_sent_is_the_message_received(pipe):
    read, write = pipe
    message = {"cell": 3, "output": "ünïcode\n" * 100, "error": None, "nested": [1, {"a": True}]}
    frames.send(write, message, soon())
    assert frames.receive(read, soon(), 1 << 20) == message
    # the bytes a driver in the sandbox writes with the standard library alone
    os.write(write, b'SKYRL0000000012\n{"op": "ok"}')
    assert frames.receive(read, soon(), 100) == {"op": "ok"}


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"HELLO0000000002\n{}", "not a frame"),
        (b"SKYRL00000000x2\n{}", "not a frame"),
        (b"SKYRL0000000002X{}", "not a frame"),
        (b"SKYRL0000001000\n" + b"{}" * 500, "over the limit of 100"),
        (b"SKYRL0000000005\n{nope", "not valid JSON (JSONDecodeError)"),
        (b"SKYRL0000000003\n[1]", "a JSON list, not an object"),
    ],
)
def test_anything_but_one_json_object_within_the_limit_is_refused(pipe, raw, reason):
    read, write = pipe
    os.write(write, raw)
    with pytest.raises(frames.FrameError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        frames.receive(read, soon(), 100)


def write_in_background(fd: int, data: bytes) -> threading.Thread:
    """Write ``data`` from another thread: a frame larger than the pipe holds is read while it is written."""

    def write_all() -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    writer = threading.Thread(target=write_all)
    writer.start()
    return writer


def test_json_nested_too_deep_is_refused(pipe):
    read, write = pipe
    writer = write_in_background(write, frames.frame(b"[" * 200_000))
    with pytest.raises(frames.FrameError, match="not valid JSON"):
        frames.receive(read, soon(), 1 << 20)
    writer.join()


def test_a_large_message_crosses_a_pipe_it_does_not_fit_in(pipe):
    read, write = pipe
    message = {"output": "x" * 1_000_000}
    writer = threading.Thread(target=frames.send, args=(write, message, soon()))
    writer.start()
    assert frames.receive(read, soon(), 2_000_000) == message
    writer.join()


def test_a_closed_pipe_and_a_silent_one_are_told_apart(pipe):
    read, write = pipe
    os.write(write, b"SKYRL00000")  # half a header, then the writer exits
    os.close(write)
    with pytest.raises(frames.ChannelClosed):
        frames.receive(read, soon(), 100)
    other_read, other_write = os.pipe()
    try:
        # nothing comes: the deadline ends the wait (one already past, so the verdict needs no clock)
        with pytest.raises(TimeoutError):
            frames.receive(other_read, time.monotonic() - 1.0, 100)
        os.close(other_read)
        with pytest.raises(frames.ChannelClosed):  # a write to a pipe nobody reads
            frames.send(other_write, {"op": "run"}, soon())
    finally:
        for fd in (other_read, other_write):
            try:
                os.close(fd)
            except OSError:
                pass
