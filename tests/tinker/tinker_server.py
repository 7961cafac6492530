"""A Tinker server on 127.0.0.1 in this process (uvicorn on its own thread) for the tests."""

from __future__ import annotations

import contextlib
import socket
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
    from skyrl_train.tinker.server import TinkerService, serve_in_thread

    service = TinkerService(backend, store_dir, **service_kwargs)
    with serve_in_thread(service) as url:
        yield url, service
