"""The ``docker`` backend: a long-lived container per episode, on the Docker engine (docker SDK, imported lazily).

    from skyrl_gym.runtime.docker import DockerContainer

    with DockerContainer("local/terminal:latest") as box:      # started here, removed at the end
        shell = box.shell()                                     # one bash whose state lives across commands
        shell.run("cd /tmp && X=6").exit_code                   # 0
        shell.run("echo $((X * 7)) in $PWD").output            # '42 in /tmp\\n'
        box.exec(["python3", "-c", "print(1)"], timeout_s=5)    # a RunResult, like every sandbox's

What every container gets (see :class:`DockerContainer`):

- limits: memory (swap included), CPUs, processes (``pids``), the largest file (``RLIMIT_FSIZE``) and disk: the
  root file system is read-only and every writable place (the work folder, ``/tmp``, ``/var/tmp``, ``/run``,
  the home folder, ``/logs``, ``/tests``) is a memory-backed file system of at most ``disk_mb``, charged to the
  container's memory limit, so nothing an episode writes reaches the host's disk or outlives the container.
  The work folder starts with what the image has there (copied in when the container starts);
- no network (``network_mode="none"``: loopback only) unless asked for; every capability dropped;
  ``no-new-privileges``; a non-root user (uid 1000 by default); an init process that reaps zombies; never the
  Docker socket inside;
- labels (:data:`RUNTIME_LABEL`, :data:`OWNER_LABEL`) naming the process that started it: the next engine start
  of any process on this machine removes the containers of owners that died, and a small reaper process removes
  this process's containers when it dies, even by SIGKILL. A container also ends by itself after
  ``lifetime_s`` (its first process is ``sleep``) and is then removed by the engine (``auto_remove``).

A command that outruns its timeout is killed with everything it started (found by a marker in their
environment, the container paused meanwhile so that a fork bomb cannot outrun the kill); the container and the
shell stay usable. A command killed by the memory limit says so (``oom``). A missing image is named with the
command that builds it. Container starts are rate-limited and concurrent commands bounded, per process
(:func:`configure`), so that 64 episodes starting at once do not overload the engine; a
:class:`ContainerPool` keeps containers started ahead of time.

Where each part lives: ``client`` (the engine connection, its limits and clean-up), ``start_gate`` (the start
rate), ``reaper`` (removing what dead processes left), ``images`` (what an image holds), ``container`` (one
container's life, commands and files), ``exec_io`` (a command's streams), ``shell`` (the persistent bash),
``pool`` (containers started ahead of time), ``sandbox`` (the ``Sandbox`` interface).
"""

from __future__ import annotations

# the private and constant names are re-exported too: code and tests import them from here
from skyrl_gym.runtime.docker.client import DockerEngine, configure, docker_available, engine
from skyrl_gym.runtime.docker.container import DockerContainer
from skyrl_gym.runtime.docker.defaults import (  # noqa: F401
    BUILD_HINT,
    DEFAULT_IMAGE,
    DEFAULT_LIFETIME_S,
    DEFAULT_USER,
    OWNER_LABEL,
    RUNTIME_LABEL,
)
from skyrl_gym.runtime.docker.errors import DockerUnavailable, ImageNotFound, _docker_module  # noqa: F401
from skyrl_gym.runtime.docker.pool import ContainerPool
from skyrl_gym.runtime.docker.sandbox import DockerSandbox
from skyrl_gym.runtime.docker.shell import ShellResult, ShellSession
from skyrl_gym.runtime.docker.start_gate import _StartGate  # noqa: F401

__all__ = [
    "DEFAULT_IMAGE",
    "ContainerPool",
    "DockerContainer",
    "DockerEngine",
    "DockerSandbox",
    "DockerUnavailable",
    "ImageNotFound",
    "ShellResult",
    "ShellSession",
    "configure",
    "docker_available",
    "engine",
]
