"""Earlier import paths of moved modules, kept for one release.

:func:`alias_modules` makes an old dotted name the very module object of its new home (``sys.modules``
holds both names), so an old import, ``isinstance`` checks and a patch through the old name all reach the one
module. Each old package's ``__init__`` calls it for its former submodules.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping

__all__ = ["alias_modules"]


def alias_modules(old_package: str, moved: Mapping[str, str]) -> None:
    """Register ``<old_package>.<name>`` as the module ``moved[name]`` for each entry (``name`` may be
    dotted: ``"tools.sql"``), and set it as an attribute of its old parent."""
    for name, target in moved.items():
        module = importlib.import_module(target)
        old = f"{old_package}.{name}"
        sys.modules[old] = module
        parent, _, attr = old.rpartition(".")
        setattr(sys.modules[parent], attr, module)
