"""The :class:`~skyrl_gym.runtime.Sandbox` interface on Docker: a fresh container for each run."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_gym.runtime.base import FileMap, Limits, RunResult, Sandbox, SandboxProcess
from skyrl_gym.runtime.docker.container import DockerContainer
from skyrl_gym.runtime.docker.defaults import DEFAULT_IMAGE, DEFAULT_USER
from skyrl_gym.runtime.docker.errors import DockerUnavailable
from skyrl_gym.runtime.docker.pool import ContainerPool


class DockerSandbox(Sandbox):
    """The :class:`~skyrl_gym.runtime.Sandbox` interface on Docker: each :meth:`run` gets a fresh container
    (from the pool when ``pool`` > 0), removed at its end, so nothing outlives a run.

    For an episode that keeps state between commands, take a long-lived container with :meth:`container`.

    Args:
        image, cpus, disk_mb, network, user: see :class:`DockerContainer`.
        limits: the default limits of each run.
        python: the interpreter inside the image (default ``python3``).
        pool: containers kept started ahead of time.
    """

    name = "docker"
    isolation = "container"

    def __init__(
        self,
        limits: Limits | None = None,
        python: str | None = None,
        warm: int = 0,
        *,
        image: str = DEFAULT_IMAGE,
        cpus: float | None = 1.0,
        disk_mb: int = 512,
        network: bool = False,
        user: str = DEFAULT_USER,
        pool: int = 0,
    ):
        if warm:
            raise ValueError("the docker sandbox keeps started containers with pool=N, not warm interpreters")
        super().__init__(limits, python, 0)
        self.image = image
        self.options = {"image": image, "cpus": cpus, "disk_mb": disk_mb, "network": network, "user": user}
        self.pool = ContainerPool(pool, limits=self.limits, **self.options) if pool else None

    def default_python(self) -> str:
        return "python3"

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info.update(image=self.image, pool=self.pool.size if self.pool else 0)
        info["enforced"] = {
            "memory": "cgroup (container)",
            "processes": "cgroup pids (container)",
            "cpu": f"{self.options['cpus']} cores" if self.options["cpus"] else "none",
            "network": "bridge" if self.options["network"] else "none (loopback only)",
            "filesystem": f"read-only image, memory-backed writable places of {self.options['disk_mb']} MB",
            "user": self.options["user"],
            "capabilities": "all dropped, no-new-privileges",
        }
        return info

    def container(self, limits: Limits | None = None, **overrides: Any) -> DockerContainer:
        """A started container for an episode (the caller removes it); from the pool when it fits."""
        if self.pool is not None and not overrides and (limits is None or limits == self.limits):
            return self.pool.acquire()
        return DockerContainer(limits=limits or self.limits, **{**self.options, **overrides})

    def close(self) -> None:
        super().close()
        if self.pool is not None:
            self.pool.close()

    def run(
        self,
        command: Sequence[str],
        *,
        files: FileMap | None = None,
        stdin: str | bytes | None = None,
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
    ) -> RunResult:
        limits = limits or self.limits
        start = time.monotonic()
        try:
            box = self.container(limits)
        except DockerUnavailable as exc:
            return RunResult("", str(exc), None, backend=self.name, isolation=self.isolation,
                             duration_s=time.monotonic() - start)  # fmt: skip
        try:
            if files:
                box.put_files(files)
            return box.exec(
                list(command), timeout_s=limits.timeout_s, stdin=stdin, env=env,
                max_output_bytes=limits.max_output_bytes,
            )  # fmt: skip
        finally:
            box.remove()

    def spawn(
        self,
        command: Sequence[str],
        *,
        files: FileMap | None = None,
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
        stderr_to_stdout: bool = False,
    ) -> SandboxProcess:
        """A long-running command in a fresh container, with pipes (through the ``docker`` command-line
        client, whose ``exec -i`` gives a process with plain pipes, as persistent sessions need); killing the
        process removes the container."""
        import shutil

        cli = shutil.which("docker")
        if cli is None:
            raise OSError("persistent sessions in the docker sandbox need the docker command-line client")
        box = self.container(limits)
        try:
            if files:
                box.put_files(files)
            args = [cli, "exec", "-i", "-w", box.workdir, "-u", box.user]
            for key, value in (env or {}).items():
                args += ["-e", f"{key}={value}"]
            popen = subprocess.Popen(
                [*args, box.id, *command],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if stderr_to_stdout else subprocess.PIPE,
                start_new_session=True,
            )
        except BaseException:
            box.remove()
            raise

        def release() -> None:
            with contextlib.suppress(OSError):
                popen.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=5)
            box.remove()

        process = SandboxProcess(popen, self.name, release)
        process.container = box  # type: ignore[attr-defined]
        return process

    def _killed_for_memory(self, process: SandboxProcess) -> bool:
        box = getattr(process, "container", None)
        return bool(box is not None and box.oom_killed())
