"""The cache where environments keep what they build on first use (datasets, indexes).

:func:`cache_root` is ``$SKYRL_GYM_CACHE``, else ``~/.cache/skyrl_gym``. :func:`build_once` builds a folder
there exactly once: into a temporary folder next to the final one, renamed into place when complete, so
threads and processes building at the same time never see half a result (the first rename wins, the others
use it) and a killed build leaves only a staging folder, removed by a later build.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["build_once", "cache_root"]

_lock = threading.Lock()


def cache_root() -> Path:
    """Where skyrl_gym caches what it builds: ``$SKYRL_GYM_CACHE``, else ``~/.cache/skyrl_gym``."""
    configured = os.environ.get("SKYRL_GYM_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "skyrl_gym"


def build_once(target: Path, build: Callable[[Path], None], done: str) -> Path:
    """``target``, built first by ``build(staging_folder)`` unless the file ``target / done`` (which the build
    writes last) shows it is complete already."""
    if (target / done).is_file():
        return target
    with _lock:
        if (target / done).is_file():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned_builds(target)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        staging.chmod(0o755)  # mkdtemp's folder is private; the cache is readable like any other
        try:
            build(staging)
            try:
                os.rename(staging, target)
            except OSError:
                if not (target / done).is_file():
                    raise  # not another builder's finished result: a real error
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _remove_abandoned_builds(target: Path, older_than_s: float = 3600.0) -> None:
    """Remove staging folders of builds that were killed (builds take seconds to a minute)."""
    for folder in target.parent.glob(f".{target.name}-*"):
        try:
            if time.time() - folder.stat().st_mtime > older_than_s:
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            pass
