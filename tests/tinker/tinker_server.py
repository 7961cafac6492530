"""A Tinker server on 127.0.0.1 in this process (uvicorn on its own thread) for the tests."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tests.serving import serving


def free_port() -> int:
    """A port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(backend: Any, store_dir: Path, **service_kwargs: Any) -> Iterator[tuple[str, Any]]:
    """Serve ``backend`` on a free port; yields ``(base_url, service)`` and stops the server afterwards."""
    from skyrl_train.tinker.server import TinkerService, serve_in_thread

    service = TinkerService(backend, store_dir, **service_kwargs)
    with serve_in_thread(service) as url:
        yield url, service


@contextlib.contextmanager
def serve_command(
    store_dir: Path, extra: Sequence[str] = (), wait_s: float = 180
) -> Iterator[tuple[str, Any]]:
    """``skyrl-train serve`` as a user starts it (its own process, a free port); yields ``(base_url, process)``
    once its health check answers, and stops it with SIGINT afterwards (killed if it does not stop). Its output
    is in ``store_dir/serve.log``."""
    port = free_port()
    exe = shutil.which("skyrl-train", path=os.path.dirname(sys.executable))
    cmd = [exe] if exe else [sys.executable, "-m", "skyrl_train"]
    cmd += ["serve", "--port", str(port), "--store-dir", str(store_dir), *extra]
    url = f"http://127.0.0.1:{port}"
    store_dir.mkdir(parents=True, exist_ok=True)
    healthy = lambda response: response.json() == {"status": "ok"}  # noqa: E731
    # the model loads first: seconds, more on a busy machine
    with serving(
        cmd, ready_url=f"{url}/api/v1/healthz", ready=healthy, log=store_dir / "serve.log", wait_s=wait_s
    ) as proc:
        yield url, proc
