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


def _parent_pid(pid: int) -> int | None:
    """The parent of host process ``pid`` (``None`` when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _child_pids(pid: int) -> list[int]:
    """The children of host process ``pid`` as its ``children`` file lists them: complete only while they
    are stopped or frozen (a child may be missed while others exit and are adopted)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(n) for n in handle.read().split()]
    except (OSError, ValueError):
        return []


def _first_started(pids: list[int]) -> int | None:
    """The process of ``pids`` that started first, among those still there (``None`` when none is).

    A listed process that is gone by the time its start is read (a zombie reaped meanwhile, one that exited)
    is left out rather than counted as the earliest: a container's listing of init's children changes while
    it is read, and the process that started first must not be mistaken for one of them.
    """
    starts = [(int(ticks), pid) for pid in pids if (ticks := _process_start_ticks(pid)) is not None]
    return min(starts)[1] if starts else None
