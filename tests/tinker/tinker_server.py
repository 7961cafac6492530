"""A Tinker server on 127.0.0.1 in this process (uvicorn on its own thread) for tests and benchmarks."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(backend: Any, store_dir: Path, **service_kwargs: Any) -> Iterator[tuple[str, Any]]:
    """Serve ``backend`` on a free port; yields ``(base_url, service)`` and stops the server afterwards."""
    import uvicorn

    from skyrl_train.tinker.server import TinkerService, create_app

    service = TinkerService(backend, store_dir, **service_kwargs)
    port = free_port()
    app = create_app(service)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="tinker-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the Tinker test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", service
    finally:
        server.should_exit = True
        thread.join(timeout=15)
