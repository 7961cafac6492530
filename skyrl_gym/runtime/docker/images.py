"""What an image holds, read from the engine: its configuration, and what it has in the work folder."""

from __future__ import annotations

import contextlib
from typing import Any

from skyrl_gym.runtime.docker.archives import _reroot
from skyrl_gym.runtime.docker.defaults import DEFAULT_USER, OWNER_LABEL, RUNTIME_LABEL
from skyrl_gym.runtime.docker.errors import DockerUnavailable, ImageNotFound, _docker_module


def inspect_image(api: Any, image: str) -> dict[str, Any]:
    """The engine's description of ``image`` (:class:`ImageNotFound`, naming how to build it, if it lacks it)."""
    docker = _docker_module()
    try:
        return api.inspect_image(image)
    except docker.errors.ImageNotFound:
        raise ImageNotFound(image) from None
    except docker.errors.APIError as exc:
        if getattr(exc, "status_code", None) == 404:
            raise ImageNotFound(image) from None
        raise DockerUnavailable(f"the Docker engine refused to inspect {image}: {exc}") from exc


def read_workdir(api: Any, owner: str, image: str, workdir: str) -> tuple[bytes, int, int]:
    """What ``image`` has in ``workdir``: a tar of the folder's contents, and the folder's owner uid and mode
    (read through a created, never started, container labelled as ``owner``'s)."""
    labels = {RUNTIME_LABEL: "probe", OWNER_LABEL: owner}
    created = api.create_container(image, command=["true"], labels=labels)
    try:
        stream, _ = api.get_archive(created["Id"], workdir)
        result = _reroot(b"".join(stream))
    except Exception:  # the image has no such folder: it starts empty
        result = (b"", int(DEFAULT_USER.split(":")[0]), 0o755)
    finally:
        with contextlib.suppress(Exception):
            api.remove_container(created["Id"], force=True, v=True)
    return result
