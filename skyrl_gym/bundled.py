"""The bundled datasets that environments read, found by name: built on first use, cached, never imported.

An environment only reads its data. :data:`BUNDLED` maps each bundled dataset's name to the ``module:attr`` of
its :class:`Bundle` in :mod:`skyrl_gym.datasets`, the layer that builds it, so an environment asks for
``ensure_bundled("sql")`` by name and never imports the builder's code. :func:`ensure_bundled` builds the
dataset once into ``cache_root()/<name>/<prefix>-v<version>-seed<seed>/`` (see
:func:`skyrl_gym.envs.cache.build_once`: a complete folder or none, whoever builds at the same time). The
version hashes the builder's sources, so a change to the builder builds a new folder instead of reusing a
stale one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BUNDLED", "Bundle", "bundle", "bundled_dir", "ensure_bundled"]

BUNDLED: dict[str, str] = {
    "sql": "skyrl_gym.datasets.sql.synth.build:BUNDLE",
    "search": "skyrl_gym.datasets.search.build:BUNDLE",
}
"""Each bundled dataset's name and the ``module:attr`` of its :class:`Bundle`."""


@dataclass(frozen=True)
class Bundle:
    """How the datasets layer builds one bundled dataset."""

    prefix: str
    """The folder name's prefix under ``cache_root()/<name>``."""
    version: Callable[[], str]
    """The builder's version, with a hash of its sources."""
    build: Callable[[Path, Path, int], None]
    """``build(staging, target, seed)`` writes the dataset into ``staging``, which is then renamed to
    ``target`` (paths written into the files name ``target``)."""
    done: str
    """The file the build writes last: the folder is complete when it is there."""


def bundle(name: str) -> Bundle:
    """The :class:`Bundle` of the bundled dataset ``name``, its module imported on first use."""
    try:
        module, _, attr = BUNDLED[name].partition(":")
    except KeyError:
        raise KeyError(
            f"no bundled dataset {name!r}; the bundled ones are {', '.join(sorted(BUNDLED))}"
        ) from None
    return getattr(importlib.import_module(module), attr)


def bundled_dir(name: str, seed: int = 0) -> Path:
    """The folder of the bundled dataset ``name`` for ``seed`` (it may not be built yet)."""
    return _folder(name, bundle(name), seed)


def ensure_bundled(name: str, seed: int = 0) -> Path:
    """The folder of the bundled dataset ``name`` for ``seed``, built first unless the cache holds it."""
    from skyrl_gym.envs.cache import build_once

    found = bundle(name)
    target = _folder(name, found, seed)
    return build_once(target, lambda staging: found.build(staging, target, int(seed)), done=found.done)


def _folder(name: str, found: Bundle, seed: int) -> Path:
    from skyrl_gym.envs.cache import cache_root

    return cache_root() / name / f"{found.prefix}-v{found.version()}-seed{int(seed)}"
