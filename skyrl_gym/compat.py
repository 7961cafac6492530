"""SkyRL's module paths and this project's earlier ones, answered by one import finder.

- :data:`SKYRL` maps each of SkyRL's ``skyrl_gym`` module paths whose code lives here under another name to
  that module (``skyrl_gym.error`` is :mod:`skyrl_gym.errors`; ``skyrl_gym.envs.gsm8k.utils`` is
  :mod:`skyrl_gym.envs.gsm8k.scoring`): kept, since ``skyrl_gym`` is a drop-in for SkyRL's.
- :data:`MOVED` maps each earlier dotted name of a ``skyrl_gym`` module to its new home, for one release (the
  SQL query service left the SQL environment for :mod:`skyrl_gym.runtime.sql`:
  ``skyrl_gym.envs.sql.db_client`` is ``skyrl_gym.runtime.sql.client``; each environment's task set is its
  ``tasks`` module: ``skyrl_gym.envs.sql.data`` is ``skyrl_gym.envs.sql.tasks``).

:class:`MovedModules`, installed when ``skyrl_gym`` is imported, answers such a name with the very module object
of its home, imported on first use; ``sys.modules`` then holds it under both names, so an import by either
name, ``isinstance`` checks and a patch through either name all reach the one module, and a name costs nothing
until it is used. ``skyrl_train.compat`` uses the same finder for its own table.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

__all__ = ["MOVED", "SKYRL", "MovedModules", "install", "new_name"]

SKYRL: dict[str, str] = {
    "skyrl_gym.error": "skyrl_gym.errors",
    "skyrl_gym.envs.gsm8k.utils": "skyrl_gym.envs.gsm8k.scoring",
    "skyrl_gym.envs.aime.utils": "skyrl_gym.envs.aime.scoring",
    "skyrl_gym.envs.lcb.livecodebench": "skyrl_gym.envs.lcb.scoring",
}
"""SkyRL's module path -> the module here that holds its code (kept: a drop-in for SkyRL's ``skyrl_gym``)."""

MOVED: dict[str, str] = {
    # the SQL query service: skyrl_gym.runtime.sql
    "skyrl_gym.envs.sql.database": "skyrl_gym.runtime.sql.database",
    "skyrl_gym.envs.sql.safety": "skyrl_gym.runtime.sql.guard",
    "skyrl_gym.envs.sql.db_base": "skyrl_gym.runtime.sql.base",
    "skyrl_gym.envs.sql.db_client": "skyrl_gym.runtime.sql.client",
    "skyrl_gym.envs.sql.db_duckdb": "skyrl_gym.runtime.sql.duckdb_engine",
    "skyrl_gym.envs.sql.db_sqlite": "skyrl_gym.runtime.sql.sqlite_engine",
    "skyrl_gym.envs.sql.db_folders": "skyrl_gym.runtime.sql.folders",
    "skyrl_gym.envs.sql.db_frames": "skyrl_gym.runtime.sql.frames",
    "skyrl_gym.envs.sql.db_pool": "skyrl_gym.runtime.sql.pool",
    "skyrl_gym.envs.sql.db_serve": "skyrl_gym.runtime.sql.serve",
    "skyrl_gym.envs.sql.db_values": "skyrl_gym.runtime.sql.values",
    "skyrl_gym.envs.sql.db_worker": "skyrl_gym.runtime.sql.worker",
    "skyrl_gym.envs.sql.db_zygote": "skyrl_gym.runtime.sql.zygote",
    # the row format is the contract between the datasets that write rows and the envs and trainers that read them
    "skyrl_gym.datasets.rows": "skyrl_gym.rows",
    # every environment's task set is its tasks module
    "skyrl_gym.envs.sql.data": "skyrl_gym.envs.sql.tasks",
    "skyrl_gym.envs.search.data": "skyrl_gym.envs.search.tasks",
    "skyrl_gym.envs.terminal.task": "skyrl_gym.envs.terminal.tasks",
    "skyrl_gym.envs.code.problems": "skyrl_gym.envs.code.tasks",
    "skyrl_gym.envs.swe.instance": "skyrl_gym.envs.swe.tasks",
}
"""Old dotted name -> new dotted name; the longest matching old prefix wins."""


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target
        self._spec: Any = None

    def create_module(self, spec: Any) -> ModuleType:
        module = importlib.import_module(self.target)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module ran under its new name already. The import system has just set its ``__spec__`` to
        the alias's: the module's own goes back, so that ``reload``, ``__spec__.parent`` and tools that read
        the spec see the module as it is."""
        module.__spec__ = self._spec


class MovedModules(importlib.abc.MetaPathFinder):
    """An import finder that answers the old names in ``moved`` (old dotted name -> new; an old package's
    name covers its submodules) with the modules of their new homes. ``prefix`` is what every old name
    starts with: other names are declined at once, so the finder costs other imports nothing."""

    def __init__(self, prefix: str, moved: Mapping[str, str]) -> None:
        self.prefix = prefix
        self.moved = dict(moved)
        self._longest_first = sorted(self.moved, key=len, reverse=True)
        outside = [old for old in self.moved if not old.startswith(prefix)]
        if outside:
            raise ValueError(f"moved names outside {prefix!r}: {outside}")

    def new_name(self, name: str) -> str | None:
        """The new home of an old module name (None: not a moved name)."""
        for old in self._longest_first:
            if name == old or name.startswith(old + "."):
                return self.moved[old] + name[len(old) :]
        return None

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if not name.startswith(self.prefix):
            return None
        moved = self.new_name(name)
        if moved is None:
            return None
        return importlib.machinery.ModuleSpec(name, _Alias(moved))

    def install(self) -> None:
        """Put this finder first on ``sys.meta_path`` (once per prefix and interpreter). First, because an old
        package's name is bound to the new package, whose ``__path__`` the file finders would search for the
        old submodule's name and run that file a second time as a module of its own."""
        if not any(isinstance(f, MovedModules) and f.prefix == self.prefix for f in sys.meta_path):
            sys.meta_path.insert(0, self)


_FINDER = MovedModules("skyrl_gym.", {**SKYRL, **MOVED})
new_name = _FINDER.new_name


def install() -> None:
    """Answer SkyRL's module paths and ``skyrl_gym``'s earlier ones (``skyrl_gym/__init__.py`` calls it)."""
    _FINDER.install()
