"""``BM25Retriever``: lexical retrieval with bm25s (Lucene's BM25, English stopwords removed).

Titles and texts are indexed together. :meth:`BM25Retriever.from_corpus` saves the index next to the corpus
(``<corpus>.bm25-<fingerprint>/``, bm25s's own format) and loads it from there in later processes. A query
that shares no word with the corpus (after stopwords) finds nothing, rather than ``topk`` passages at score 0.
"""

from __future__ import annotations

import hashlib
import logging
import os
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

__all__ = ["BM25Retriever"]

logger = logging.getLogger(__name__)

_INDEX_FORMAT = 1
"""Bumped when the tokenisation or the saved layout changes, so that old saved indexes are not reused."""


def _tokenize(texts: list[str], *, return_ids: bool) -> Any:
    import bm25s

    return bm25s.tokenize(texts, lower=True, stopwords="en", return_ids=return_ids, show_progress=False)


def _indexed_text(passage: Passage) -> str:
    return f"{passage.title}\n{passage.text}"


class BM25Retriever(Retriever):
    """BM25 over a list of passages (``k1`` and ``b`` as in Lucene; bm25s's ``lucene`` variant).

    Build it from passages in memory, ``BM25Retriever(passages)``, or from a corpus file with
    :meth:`from_corpus`, which also saves and reloads the index.
    """

    kind = "bm25"

    def __init__(self, passages: Sequence[Passage], *, k1: float = 1.5, b: float = 0.75, index: Any = None):
        self.passages = list(passages)
        if not self.passages:
            raise ValueError("BM25Retriever needs at least one passage")
        if index is None:
            import bm25s

            index = bm25s.BM25(k1=k1, b=b, method="lucene")
            index.index(
                _tokenize([_indexed_text(p) for p in self.passages], return_ids=True), show_progress=False
            )
        self.index = index

    @classmethod
    def from_corpus(
        cls, path: str | os.PathLike[str], *, k1: float = 1.5, b: float = 0.75, cache: bool = True
    ) -> BM25Retriever:
        """BM25 over a JSONL corpus; with ``cache``, the index is loaded from disk or built and saved."""
        passages = read_corpus(path)
        if not cache:
            return cls(passages, k1=k1, b=b)
        settings = hashlib.blake2b(f"{_INDEX_FORMAT}:{k1}:{b}".encode(), digest_size=4).hexdigest()
        name = f"{Path(path).stem}.bm25-{corpus_fingerprint(path)[:16]}-{settings}"
        saved = find_artifact(path, name)
        if saved is not None:
            import bm25s

            try:
                index = bm25s.BM25.load(str(saved), load_corpus=False)
                if index.scores["num_docs"] == len(passages):
                    return cls(passages, index=index)
                logger.warning("the saved BM25 index %s does not match its corpus; rebuilding it", saved)
            except (OSError, ValueError, KeyError) as exc:
                logger.warning("could not load the saved BM25 index %s (%s); rebuilding it", saved, exc)
        retriever = cls(passages, k1=k1, b=b)
        publish_artifact(path, name, lambda staging: retriever.index.save(str(staging)))
        return retriever

    def __len__(self) -> int:
        return len(self.passages)

    def batch_search(self, queries: Sequence[str], topk: int = 3) -> list[list[Passage]]:
        """The best ``topk`` passages for each query by BM25 score; passages scoring 0 are left out."""
        check_topk(topk)
        if not queries:
            return []
        tokens = _tokenize([clean_query(q) for q in queries], return_ids=False)
        documents, scores = self.index.retrieve(tokens, k=min(topk, len(self.passages)), show_progress=False)
        results = []
        for row_documents, row_scores in zip(documents, scores, strict=True):
            results.append(
                [
                    _with_score(self.passages[int(i)], float(s))
                    for i, s in zip(row_documents, row_scores, strict=True)
                    if s > 0
                ]
            )
        return results


def _with_score(passage: Passage, score: float) -> Passage:
    return Passage(passage.id, passage.title, passage.text, score)
