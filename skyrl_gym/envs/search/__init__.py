"""The search environment: Search-R1-style question answering over an offline passage corpus.

- :mod:`.env`: :class:`~skyrl_gym.envs.search.env.SearchEnv`, registered as ``search``, and its settings
  ``SearchConfig`` (SkyRL's ``SearchEnvConfig``); the tool it uses, ``SearchToolGroup``, lives in
  :mod:`skyrl_gym.tools.search`;
- :mod:`.scoring`: exact match and F1 after Search-R1's answer normalisation; :mod:`.utils`: the same
  under SkyRL's names (``extract_solution``, ``em_check``, ``compute_score``);
- :mod:`.retrieval`: BM25, dense, hybrid and remote retrievers, and a Search-R1-compatible server;
- :mod:`.tasks`: loading the bundled corpus and question sets (built by the datasets layer, ``skyrl_gym.datasets.search``).

Importing this package imports neither bm25s nor numpy nor sentence-transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "SearchConfig",
    "SearchEnv",
    "SearchEnvConfig",
    "SearchToolGroup",
    "compute_score",
    "em_check",
    "f1_score",
    "normalize_answer",
]

_LAZY = {
    "SearchConfig": "skyrl_gym.envs.search.env",
    "SearchEnv": "skyrl_gym.envs.search.env",
    "SearchEnvConfig": "skyrl_gym.envs.search.env",
    "SearchToolGroup": "skyrl_gym.tools.search",
    "compute_score": "skyrl_gym.envs.search.scoring",
    "em_check": "skyrl_gym.envs.search.scoring",
    "f1_score": "skyrl_gym.envs.search.scoring",
    "normalize_answer": "skyrl_gym.envs.search.scoring",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
