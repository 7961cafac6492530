"""What goes wrong with Docker, said so that the user knows what to do, and the docker SDK imported lazily."""

from __future__ import annotations

from typing import Any

from skyrl_gym.runtime.docker.defaults import BUILD_HINT


class DockerUnavailable(RuntimeError):
    """The Docker engine (or the docker Python package) cannot be used; the message says what to do."""


class ImageNotFound(DockerUnavailable):
    """The image is not on the engine; the message names it and how to build it."""

    def __init__(self, image: str):
        super().__init__(f"image {image} not found; {BUILD_HINT}")
        self.image = image


def _docker_module() -> Any:
    try:
        import docker
    except ImportError as exc:
        raise DockerUnavailable(
            "the docker Python package is not installed: pip install 'skyrl[docker]'"
        ) from exc
    return docker


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) < 500 else text[:500] + "..."
