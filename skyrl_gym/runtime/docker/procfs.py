"""What the host's ``/proc`` says about a process: when it started, whether it is a zombie, its children."""

from __future__ import annotations


def _process_start_ticks(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _is_zombie(pid: int) -> bool:
    """Whether host process ``pid`` has exited and waits to be reaped (``False`` when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def _child_pids(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(n) for n in handle.read().split()]
    except (OSError, ValueError):
        return []
