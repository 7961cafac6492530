"""Fixtures of the Docker tests: the engine and the images they need, or a skip that says how to get them.

Under ``CI=true`` the repository's conftest turns such a skip into a failure: CI starts the engine and builds
the images (``.ci/run``), so a missing one there is a broken set-up, never a reason to pass.
"""

from __future__ import annotations

import pytest

IMAGES = ("local/terminal:latest", "local/python:latest")


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/docker/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.docker)


@pytest.fixture(scope="session")
def docker_engine():
    """This process's :class:`~skyrl_gym.runtime.docker.DockerEngine`, with the images built."""
    from skyrl_gym.runtime.docker import docker_available, engine

    ok, why = docker_available()
    if not ok:
        pytest.skip(f"no Docker engine: {why} (make docker, or images/start-dockerd.sh && images/build.sh)")
    found = engine()
    for image in IMAGES:
        try:
            found.api.inspect_image(image)
        except Exception:
            pytest.skip(f"image {image} not found; build it with images/build.sh")
    return found


def labelled(engine, owner: str | None = None) -> list[dict]:
    """Containers that carry the runtime's label (of one owner, when given)."""
    from skyrl_gym.runtime.docker import OWNER_LABEL, RUNTIME_LABEL

    label = f"{OWNER_LABEL}={owner}" if owner else RUNTIME_LABEL
    return engine.api.containers(all=True, filters={"label": label})
