"""Terminal tasks in the Harbor / Terminal-Bench 2 folder format, and their images.

A task is a folder::

    my-task/
      instruction.md           what the agent is asked to do
      task.toml                [agent] timeout_sec, [verifier] timeout_sec, [environment] cpus, memory_mb (or
                               memory = "2G"), storage_mb, allow_internet, docker_image
      environment/Dockerfile   the container the agent works in (built once, cached by content)
      solution/solve.sh        the reference solution (optional)
      tests/test.sh            run after the episode; writes the reward to /logs/verifier/reward.txt

Users' existing folders run unchanged, within what this runtime enforces: commands run as an unprivileged
user (uid 1000) without network unless ``allow_internet`` is true, with the task's resources as limits.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from pathlib import Path
from typing import Any

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["TerminalTask", "find_tasks", "load_split", "load_task", "default_tasks_dir", "task_image"]

REPO_TASKS = Path(__file__).resolve().parents[3] / "datasets" / "terminal" / "tasks"


def default_tasks_dir() -> Path:
    """Where task folders are looked up by name: ``$SKYRL_TERMINAL_TASKS``, else the repository's
    ``datasets/terminal/tasks``."""
    return Path(os.environ.get("SKYRL_TERMINAL_TASKS") or REPO_TASKS)


def _size_mb(value: Any, default: int) -> int:
    """Harbor spells sizes as megabytes (``memory_mb = 2048``) or as text (``memory = "2G"``)."""
    if value is None:
        return default
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)[iI]?[bB]?\s*", str(value))
    if not match:
        raise ValueError(f"cannot read the size {value!r} (write 2048 or '2G')")
    scale = {"": 1, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}[match.group(2).lower()]
    return max(1, int(float(match.group(1)) * scale))


@dataclasses.dataclass(frozen=True)
class TerminalTask:
    """One task folder, read."""

    name: str
    path: Path
    instruction: str
    agent_timeout_s: float = 600.0
    verifier_timeout_s: float = 120.0
    cpus: float = 1.0
    memory_mb: int = 2048
    storage_mb: int = 1024
    allow_internet: bool = False
    docker_image: str | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def solution(self) -> str | None:
        """The text of ``solution/solve.sh``, if the task has one."""
        path = self.path / "solution" / "solve.sh"
        return path.read_text() if path.is_file() else None

    def test_files(self) -> dict[str, bytes]:
        """The files of ``tests/`` (relative path -> bytes), copied into the container only at verification."""
        root = self.path / "tests"
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def load_task(path: str | os.PathLike) -> TerminalTask:
    """Read the task folder at ``path``; a ``ValueError`` says what is missing."""
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"terminal task folder {str(root)!r} does not exist")
    for needed in ("instruction.md", "tests/test.sh"):
        if not (root / needed).is_file():
            raise ValueError(f"terminal task {root.name!r} has no {needed} (see the Harbor task format)")
    config: dict[str, Any] = {}
    if (root / "task.toml").is_file():
        config = tomllib.loads((root / "task.toml").read_text())
    agent, verifier = config.get("agent", {}), config.get("verifier", {})
    environment = config.get("environment", {})
    image = environment.get("docker_image")
    if image is None and not (root / "environment" / "Dockerfile").is_file():
        raise ValueError(f"terminal task {root.name!r} has neither environment/Dockerfile nor docker_image")
    return TerminalTask(
        name=root.name,
        path=root.resolve(),
        instruction=(root / "instruction.md").read_text(),
        agent_timeout_s=float(agent.get("timeout_sec", 600.0)),
        verifier_timeout_s=float(verifier.get("timeout_sec", 120.0)),
        cpus=float(environment.get("cpus", 1.0)),
        memory_mb=_size_mb(environment.get("memory_mb", environment.get("memory")), 2048),
        storage_mb=_size_mb(environment.get("storage_mb", environment.get("storage")), 1024),
        allow_internet=bool(environment.get("allow_internet", False)),
        docker_image=image,
        metadata=dict(config.get("metadata", {})),
    )


def find_tasks(root: str | os.PathLike | None = None) -> list[TerminalTask]:
    """Every task folder directly under ``root`` (default :func:`default_tasks_dir`), by name."""
    base = Path(root) if root is not None else default_tasks_dir()
    if not base.is_dir():
        return []
    return [load_task(p) for p in sorted(base.iterdir()) if (p / "instruction.md").is_file()]


def load_split(split: str, root: str | os.PathLike | None = None) -> list[TerminalTask]:
    """The tasks of a split (``train`` or ``test``): the names listed in ``<root>/../splits/<split>.txt``."""
    base = Path(root) if root is not None else default_tasks_dir()
    listing = base.parent / "splits" / f"{split}.txt"
    if not listing.is_file():
        raise ValueError(f"no split {split!r}: {listing} does not exist")
    names = [line.strip() for line in listing.read_text().splitlines() if line.strip()]
    return [load_task(base / name) for name in names]


def _folder_hash(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(folder)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
            digest.update(b"x" if os.access(path, os.X_OK) else b"-")
    return digest.hexdigest()[:16]


def task_image(task: TerminalTask, engine: Any = None) -> str:
    """The image the task runs in: its ``docker_image``, or its ``environment/`` built once and tagged by the
    folder's content (``skyrl-task/<name>:<hash>``), so that an unchanged task never builds twice."""
    if task.docker_image:
        return task.docker_image
    from skyrl_gym.runtime.docker import ImageNotFound, _docker_module
    from skyrl_gym.runtime.docker import engine as docker_engine

    docker = _docker_module()
    found = engine or docker_engine()
    folder = task.path / "environment"
    name = re.sub(r"[^a-z0-9._-]", "-", task.name.lower())
    tag = f"skyrl-task/{name}:{_folder_hash(folder)}"
    try:
        found.api.inspect_image(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    try:
        for _ in found.api.build(path=str(folder), tag=tag, rm=True, forcerm=True, decode=True):
            if "error" in _:
                raise RuntimeError(str(_["error"]).strip())
    except (RuntimeError, docker.errors.APIError, docker.errors.BuildError) as exc:
        text = str(exc)
        match = re.search(r"pull access denied for ([^,\s]+)|manifest for ([^\s]+) not found", text)
        if match or "local/" in text and "not found" in text:
            base = (match.group(1) or match.group(2)) if match else text
            raise ImageNotFound(base) from exc
        raise RuntimeError(
            f"building the image of terminal task {task.name!r} failed: {text[:1000]}"
        ) from exc
    return tag
