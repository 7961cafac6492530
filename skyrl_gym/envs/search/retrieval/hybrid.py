"""``HybridRetriever``: reciprocal rank fusion of several retrievers (BM25 and dense by default).

Each retriever ranks its best ``depth`` passages; a passage's fused score is
``sum(weight_i / (k + rank_i))`` over the retrievers that returned it (ranks from 1, ``k = 60`` as in
Cormack et al., 2009). Fusion needs ranks only, so lexical and embedding scores need no calibration.
"""

from __future__ import annotations

from collections.abc import Sequence

from skyrl_gym.envs.search.retrieval.base import Passage, Retriever, check_topk

__all__ = ["RRF_K", "HybridRetriever", "reciprocal_rank_fusion"]

RRF_K = 60
"""The rank offset of reciprocal rank fusion: larger values flatten the difference between ranks."""


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[Passage]], *, weights: Sequence[float] | None = None, k: float = RRF_K
) -> list[Passage]:
    """Fuse ranked lists of passages (best first) into one, best first, scored by weighted RRF.

    Passages are the same when their ``id`` is. Ties go to the passage with the better single rank, then
    to the one seen first (earlier lists first).
    """
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    fused: dict[str, list] = {}  # id -> [score, best rank, order seen, passage]
    for weight, ranking in zip(weights, rankings, strict=True):
        for rank, passage in enumerate(ranking, start=1):
            entry = fused.get(passage.id)
            if entry is None:
                entry = fused[passage.id] = [0.0, rank, len(fused), passage]
            entry[0] += weight / (k + rank)
            entry[1] = min(entry[1], rank)
    ordered = sorted(fused.values(), key=lambda e: (-e[0], e[1], e[2]))
    return [Passage(p.id, p.title, p.text, score) for score, _, _, p in ordered]


class HybridRetriever(Retriever):
    """Reciprocal rank fusion over ``retrievers`` (usually a :class:`BM25Retriever` and a
    :class:`DenseRetriever` of the same corpus), with one weight per retriever."""

    kind = "hybrid"

    def __init__(
        self,
        retrievers: Sequence[Retriever],
        *,
        weights: Sequence[float] | None = None,
        k: float = RRF_K,
        depth: int = 20,
    ):
        if not retrievers:
            raise ValueError("HybridRetriever needs at least one retriever")
        self.retrievers = list(retrievers)
        self.weights = [1.0] * len(self.retrievers) if weights is None else [float(w) for w in weights]
        if len(self.weights) != len(self.retrievers):
            raise ValueError(
                f"hybrid weights {list(self.weights)} do not match the {len(self.retrievers)} retrievers; "
                "give one weight per retriever (bm25, dense)"
            )
        if any(w < 0 for w in self.weights) or not any(w > 0 for w in self.weights):
            raise ValueError(f"hybrid weights must be >= 0 and not all 0, got {self.weights}")
        if k <= 0:
            raise ValueError(f"the RRF constant k must be positive, got {k}")
        self.k = k
        self.depth = check_topk(depth)

    def __len__(self) -> int:
        return max(len(r) for r in self.retrievers)

    def batch_search(self, queries: Sequence[str], topk: int = 3) -> list[list[Passage]]:
        """Each retriever's best ``max(topk, depth)`` passages, fused; the best ``topk`` of the fusion."""
        check_topk(topk)
        depth = max(topk, self.depth)
        per_retriever = [r.batch_search(queries, depth) for r in self.retrievers]
        return [
            reciprocal_rank_fusion([results[i] for results in per_retriever], weights=self.weights, k=self.k)[
                :topk
            ]
            for i in range(len(queries))
        ]
