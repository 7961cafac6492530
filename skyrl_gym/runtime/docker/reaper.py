"""Clean-up of containers whose owner died: each container is labelled with the process that started it
(``host:pid:start``); the next engine start on this machine removes those of dead owners, and a small reaper
process removes this process's containers when it dies, even by SIGKILL."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from typing import Any

from skyrl_gym.runtime.docker.defaults import OWNER_LABEL, RUNTIME_LABEL
from skyrl_gym.runtime.docker.procfs import _process_start_ticks


def owner_label(host: str, pid: int) -> str:
    """The owner label of process ``pid`` of ``host``: its start time tells it from a later process of that id."""
    return f"{host}:{pid}:{_process_start_ticks(pid)}"


def _owner_alive(owner: str, host: str) -> bool:
    """Whether the process named by an owner label (``host:pid:start``) still runs; other hosts' count as alive."""
    parts = owner.split(":")
    if len(parts) != 3 or parts[0] != host:
        return True
    try:
        pid = int(parts[1])
    except ValueError:
        return False
    return _process_start_ticks(pid) == parts[2]


def sweep_dead_owners(api: Any, host: str) -> int:
    """Remove the containers of owners on ``host`` that died (killed before they could clean up); how many."""
    swept = 0
    try:
        found = api.containers(all=True, filters={"label": RUNTIME_LABEL}, quiet=False)
    except Exception:
        return swept
    for info in found:
        owner = (info.get("Labels") or {}).get(OWNER_LABEL, "")
        if not _owner_alive(owner, host):
            with contextlib.suppress(Exception):
                api.remove_container(info["Id"], force=True, v=True)
                swept += 1
    return swept


# Run by the reaper process: waits for its stdin to close (its parent died, however) and removes what the parent
# left. The standard library and the docker package only.
_REAPER = r"""
import os, signal, sys
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)
while os.read(0, 4096):
    pass
import docker
client = docker.DockerClient(base_url=sys.argv[1])
for c in client.containers.list(all=True, filters={"label": "%s=%s" % (sys.argv[2], sys.argv[3])}):
    try:
        c.remove(force=True, v=True)
    except Exception:
        pass
"""


def start_reaper(base_url: str, owner: str) -> subprocess.Popen:
    """The reaper process for the containers labelled ``owner`` on the engine at ``base_url``; it acts when the
    pipe to its stdin closes, that is when this process ends."""
    return subprocess.Popen(
        [sys.executable, "-c", _REAPER, base_url, OWNER_LABEL, owner],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
