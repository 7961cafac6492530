"""A server command run as a user runs it, for the tests that talk to it over HTTP."""

from __future__ import annotations

import contextlib
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

STOP_WAIT_S = 30.0
"""How long a server has to stop after SIGINT (it closes its model and store) before it is killed."""


@contextlib.contextmanager
def serving(
    cmd: Sequence[str],
    *,
    ready_url: str,
    log: Path,
    wait_s: float,
    ready: Callable[[Any], bool] = lambda response: response.status_code == 200,
    cwd: Path | None = None,
) -> Iterator[subprocess.Popen]:
    """``cmd`` in a process of its own while the block runs. First ``ready_url`` answers so that
    ``ready(response)`` holds, within ``wait_s`` (the server loads a model first: seconds, more on a busy
    machine); after the block the server gets SIGINT and is killed if it has not stopped within STOP_WAIT_S.
    Its output goes to the file ``log`` (a pipe nobody reads would fill and stop it)."""
    import httpx

    with log.open("w") as out:
        proc = subprocess.Popen(list(cmd), cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            assert proc.poll() is None, f"{shlex.join(cmd)} exited:\n{log.read_text()[-3000:]}"
            with contextlib.suppress(httpx.HTTPError, ValueError):
                if ready(httpx.get(ready_url, timeout=2)):
                    break
            assert time.monotonic() < deadline, f"{shlex.join(cmd)}: {ready_url} did not answer in {wait_s} s"
            time.sleep(0.5)
        yield proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
