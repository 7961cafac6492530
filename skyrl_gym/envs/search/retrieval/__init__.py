"""Retrievers for the search environment, one file each, all behind :class:`Retriever`.

- :class:`BM25Retriever` (``bm25``): lexical, bm25s; the index is saved next to the corpus.
- :class:`DenseRetriever` (``dense``): all-MiniLM-L6-v2 embeddings (offline), inner product with numpy.
- :class:`HybridRetriever` (``hybrid``): reciprocal rank fusion of BM25 and dense.
- :class:`RemoteRetriever` (``remote``): the client of a Search-R1 / SkyRL retrieval server.
- :mod:`.server`: a server with that API over a local index (``python -m skyrl_gym.envs.search.retrieval.server``).

:func:`get_retriever` builds a local retriever once per process per corpus, kind and settings, and hands the
same object to every caller after that (thread-safe). The kinds are :data:`RETRIEVERS`, a
:class:`~skyrl_gym.registries.Registry`: :func:`register_retriever` adds one of your own. Importing this package imports neither bm25s nor
numpy nor sentence-transformers; the classes load them when used.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skyrl_gym.envs.search.retrieval.base import (
    Passage,
    RetrievalError,
    Retriever,
    clean_query,
    format_passages,
    read_corpus,
)
from skyrl_gym.registries import Registry

__all__ = [
    "KINDS",
    "RETRIEVERS",
    "RetrieverKind",
    "BM25Retriever",
    "DenseRetriever",
    "HybridRetriever",
    "Passage",
    "RemoteRetriever",
    "RetrievalError",
    "Retriever",
    "clean_query",
    "clear_retriever_cache",
    "default_corpus_path",
    "format_passages",
    "get_retriever",
    "read_corpus",
    "register_retriever",
    "serve",
]


@dataclasses.dataclass(frozen=True)
class RetrieverKind:
    """How to build one kind of retriever: ``build(corpus_path, **options)`` (``corpus_path`` is ``None`` for a
    kind that needs no corpus), the option names it takes, and whether one object per corpus and options is
    shared by every caller (local indexes: yes; a client of a server: no)."""

    build: Callable[..., Retriever]
    options: frozenset[str]
    needs_corpus: bool = True
    shared: bool = True


RETRIEVERS: Registry[RetrieverKind] = Registry("retriever", "env_config.retriever")
"""The retriever kinds :func:`get_retriever` builds, by name."""


def register_retriever(
    name: str,
    build: Callable[..., Retriever],
    *,
    options: frozenset[str] | set[str] = frozenset(),
    needs_corpus: bool = True,
    shared: bool = True,
) -> None:
    """Make ``env_config.retriever: name`` build a retriever with ``build(corpus_path, **options)``."""
    RETRIEVERS.register(name, RetrieverKind(build, frozenset(options), needs_corpus, shared), override=True)


def _build_bm25(path: Path, **options: Any) -> Retriever:
    from skyrl_gym.envs.search.retrieval.bm25 import BM25Retriever

    return BM25Retriever.from_corpus(path, **options)


def _build_dense(path: Path, **options: Any) -> Retriever:
    from skyrl_gym.envs.search.retrieval.dense import DenseRetriever

    return DenseRetriever.from_corpus(path, **options)


def _build_hybrid(path: Path, **options: Any) -> Retriever:
    from skyrl_gym.envs.search.retrieval.hybrid import HybridRetriever

    shared = {k: options[k] for k in ("cache",) if k in options}
    lexical = get_retriever("bm25", path, **shared, **{k: options[k] for k in ("k1", "b") if k in options})
    dense = get_retriever(
        "dense", path, **shared, **{k: options[k] for k in ("model", "device", "batch_size") if k in options}
    )
    fusion = {k: options[k] for k in ("weights", "k", "depth") if k in options}
    return HybridRetriever([lexical, dense], **fusion)


def _build_remote(path: None, **options: Any) -> Retriever:
    from skyrl_gym.envs.search.retrieval.remote import RemoteRetriever

    if not options.get("search_url"):
        raise ValueError("the remote retriever needs search_url, e.g. http://127.0.0.1:8000/retrieve")
    return RemoteRetriever(options.pop("search_url"), **options)


register_retriever("bm25", _build_bm25, options={"k1", "b", "cache"})
register_retriever("dense", _build_dense, options={"model", "device", "cache", "batch_size"})
register_retriever(
    "hybrid",
    _build_hybrid,
    options={"model", "device", "cache", "batch_size", "k1", "b", "weights", "k", "depth"},
)
register_retriever(
    "remote",
    _build_remote,
    options={"search_url", "timeout", "retries", "backoff_s", "log_requests", "request_format"},
    needs_corpus=False,
    shared=False,
)

KINDS = tuple(RETRIEVERS.names())
"""The retriever kinds that ship with the package."""

_LAZY = {
    "BM25Retriever": "skyrl_gym.envs.search.retrieval.bm25",
    "DenseRetriever": "skyrl_gym.envs.search.retrieval.dense",
    "HybridRetriever": "skyrl_gym.envs.search.retrieval.hybrid",
    "RemoteRetriever": "skyrl_gym.envs.search.retrieval.remote",
    "serve": "skyrl_gym.envs.search.retrieval.server",
}

_lock = threading.Lock()
_retrievers: dict[tuple[Any, ...], Retriever] = {}
_building: dict[tuple[Any, ...], threading.Lock] = {}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def default_corpus_path() -> Path:
    """The bundled corpus (built on first use by :mod:`skyrl_gym.envs.search.tasks`)."""
    from skyrl_gym.envs.search import tasks

    tasks.ensure_dataset(seed=0)
    return Path(tasks.corpus_path(seed=0))


def _frozen(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


def get_retriever(
    kind: str = "bm25", corpus_path: str | os.PathLike[str] | None = None, **options: Any
) -> Retriever:
    """The retriever of ``kind`` over ``corpus_path`` (the bundled corpus when ``None``), built once.

    ``options`` go to the retriever: ``k1``, ``b`` (bm25); ``model``, ``device`` (dense); those and
    ``weights`` (bm25, dense), ``k``, ``depth`` (hybrid); ``search_url``, ``timeout``, ``retries``,
    ``log_requests``, ``request_format`` (remote, which needs no corpus and is not cached). A second call with the same
    arguments returns the same object, also from other threads; an index is never built twice at once.
    """
    entry = RETRIEVERS.get(kind)  # an unknown kind: UnknownNameError (a ValueError) with a did-you-mean
    unknown = sorted(set(options) - entry.options)
    if unknown:
        raise ValueError(
            f"option(s) {', '.join(unknown)} do not apply to the {kind} retriever; "
            f"it takes {', '.join(sorted(entry.options)) or 'none'}"
        )
    if not entry.needs_corpus:
        return entry.build(None, **options)
    if not entry.shared:
        return entry.build(Path(corpus_path) if corpus_path is not None else default_corpus_path(), **options)

    from skyrl_gym.envs.search.retrieval.base import corpus_key

    path = Path(corpus_path) if corpus_path is not None else default_corpus_path()
    key = (kind, corpus_key(path), _frozen(options))
    with _lock:
        found = _retrievers.get(key)
        if found is not None:
            return found
        building = _building.setdefault(key, threading.Lock())
    with building:  # one thread builds; the others wait for its result
        with _lock:
            found = _retrievers.get(key)
        if found is None:
            found = entry.build(path, **options)
            with _lock:
                _retrievers[key] = found
                _building.pop(key, None)
    return found


def clear_retriever_cache() -> None:
    """Forget every retriever :func:`get_retriever` built and every corpus read (saved indexes stay on disk)."""
    from skyrl_gym.envs.search.retrieval.base import forget_corpora

    with _lock:
        _retrievers.clear()
        _building.clear()
    forget_corpora()
