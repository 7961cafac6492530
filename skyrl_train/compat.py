"""Earlier import paths of moved modules, kept for one release.

:data:`MOVED` maps each old dotted name to its new home, a package's old name covering its submodules
(``skyrl_train.workers.policy`` is ``skyrl_train.training.workers.policy``). An import finder, installed when
``skyrl_train`` is imported, answers an old name with the very module object of its new home, imported on
first use; ``sys.modules`` then holds it under both names, so an old import, ``isinstance`` checks and a
patch through the old name all reach the one module, and an old name costs nothing until it is used.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

__all__ = ["MOVED", "install", "new_name"]

MOVED: dict[str, str] = {
    # rollouts
    "skyrl_train.agent.registry": "skyrl_train.rollout.agents",
    "skyrl_train.agent": "skyrl_train.rollout",
    "skyrl_train.dispatch": "skyrl_train.rollout.dispatch",
    "skyrl_train.generator.base": "skyrl_train.rollout.records",
    "skyrl_train.generator.multi_turn": "skyrl_train.rollout",
    "skyrl_train.generator": "skyrl_train.rollout",
    # evaluation
    "skyrl_train.stage_eval": "skyrl_train.evaluation.stages",
    "skyrl_train.eval_stats": "skyrl_train.evaluation.stats",
    # training: tensors in, tensors out
    "skyrl_train.workers": "skyrl_train.training.workers",
    "skyrl_train.algorithms": "skyrl_train.training.algorithms",
    "skyrl_train.batch": "skyrl_train.training.batch",
    "skyrl_train.checkpoint": "skyrl_train.training.checkpoint",
    "skyrl_train.lora": "skyrl_train.training.lora",
    # the loop
    "skyrl_train.trainer": "skyrl_train.loop.trainer",
    "skyrl_train.async_training": "skyrl_train.loop.async_training",
    "skyrl_train.warmup": "skyrl_train.loop.warmup",
    "skyrl_train.dynamic_sampling": "skyrl_train.loop.dynamic_sampling",
    # inference
    "skyrl_train.weight_sync": "skyrl_train.inference.weight_sync",
}
"""Old dotted name -> new dotted name; the longest matching old prefix wins."""


_LONGEST_FIRST = sorted(MOVED, key=len, reverse=True)


def new_name(name: str) -> str | None:
    """The new home of an old module name (None: not a moved name)."""
    for old in _LONGEST_FIRST:
        if name == old or name.startswith(old + "."):
            return MOVED[old] + name[len(old) :]
    return None


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


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if not name.startswith("skyrl_train."):
            return None
        moved = new_name(name)
        if moved is None:
            return None
        return importlib.machinery.ModuleSpec(name, _Alias(moved))


def install() -> None:
    """Answer the old names (once per interpreter; ``skyrl_train/__init__.py`` calls it). The finder goes
    first: an old package's name is bound to the new package, whose ``__path__`` the file finders would
    search for the old submodule's name and run that file a second time as a module of its own."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
