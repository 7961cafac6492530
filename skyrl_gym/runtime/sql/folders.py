"""The query workers' private temporary folders, and the sweep that removes those of dead workers.

Each worker makes ``<tmp>/skyrl-sql-<worker pid>-<caller pid>-<random>`` (DuckDB's spill files, SQLite's
temporary files) and holds an exclusive ``flock`` on ``.owner`` inside it while it lives. The kernel drops the
lock when the worker dies however it dies, so :func:`sweep_stale_folders` (run whenever a database opens)
removes exactly the folders whose owner is gone, whatever reused its pid.

Standard library only: the worker process imports this module without the rest of the package.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import tempfile

__all__ = [
    "PRIVATE_PREFIX",
    "make_private_folder",
    "sweep_stale_folders",
]

PRIVATE_PREFIX = "skyrl-sql-"
"""Prefix of the workers' private temporary folders."""
OWNER_FILE = ".owner"


def make_private_folder(temp_root: str, caller: int) -> tuple[str, int]:
    """Make this worker's folder under ``temp_root`` and lock its ``.owner`` file; ``(folder, lock fd)``.

    The fd must stay open for the worker's life: the lock is what tells a sweep that the owner lives.
    """
    folder = tempfile.mkdtemp(prefix=f"{PRIVATE_PREFIX}{os.getpid()}-{caller}-", dir=temp_root)
    fd = os.open(os.path.join(folder, OWNER_FILE), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # held until this process ends, however it ends
    return folder, fd


def sweep_stale_folders(temp_root: str | None = None) -> int:
    """Remove the private folders of workers that are gone (see the module docstring); returns how many.

    A folder whose ``.owner`` lock can be taken has no living owner. One without a lock file (being made, or
    made by an older version) is removed only when the process its name starts with is gone.
    """
    root = temp_root or tempfile.gettempdir()
    uid = os.getuid()
    swept = 0
    try:
        entries = list(os.scandir(root))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.startswith(PRIVATE_PREFIX):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != uid:
                continue
        except OSError:
            continue
        owner = entry.name[len(PRIVATE_PREFIX) :].split("-", 1)[0]
        try:
            fd = os.open(os.path.join(entry.path, OWNER_FILE), os.O_RDWR | os.O_NOFOLLOW)
        except FileNotFoundError:
            if owner.isdigit() and int(owner) != os.getpid() and not _pid_alive(int(owner)):
                shutil.rmtree(entry.path, ignore_errors=True)
                swept += 1
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
        else:
            shutil.rmtree(entry.path, ignore_errors=True)
            swept += 1
        finally:
            os.close(fd)
    return swept


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
