"""Latency of the search environment's retrieval, each number next to a baseline measured in the same run.

On the bundled corpus (WordNet + countryinfo passages) with the test split's questions as queries:

- BM25 index: building it vs loading the saved one (what a second process pays);
- BM25 per query: bm25s called directly (tokenise + retrieve) vs :class:`BM25Retriever` (ours adds query
  cleaning and passage objects), and per query in batches of 64;
- remote: :class:`RemoteRetriever` through our HTTP server on this machine vs the same retriever in process;
- environment: ``SearchEnv.step`` with a ``<search>`` vs the retriever call alone;
- dense and hybrid (on the first ``--dense-passages`` passages, since embedding the whole corpus on a CPU
  takes minutes): per query, against BM25 on the same subset.

    python benchmarks/search_latency.py [--queries 200 --topk 3 --dense-passages 500]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from skyrl_gym.envs.search import tasks
from skyrl_gym.envs.search.retrieval import (
    BM25Retriever,
    DenseRetriever,
    HybridRetriever,
    RemoteRetriever,
    clear_retriever_cache,
    read_corpus,
    serve,
)


def per_call_ms(fn: Callable[[str], object], queries: list[str]) -> float:
    """Mean milliseconds per query of one pass over ``queries``."""
    start = time.perf_counter()
    for query in queries:
        fn(query)
    return (time.perf_counter() - start) * 1000 / len(queries)


def compare(
    ours: Callable[[str], object], baseline: Callable[[str], object], queries: list[str], repeats: int = 3
) -> tuple[float, float]:
    """Median ms per query of both, their passes alternated so that a noisy machine hits both alike."""
    ours(queries[0]), baseline(queries[0])  # warm up
    runs = [(per_call_ms(ours, queries), per_call_ms(baseline, queries)) for _ in range(repeats)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def row(label: str, ours: float, baseline: float, unit: str = "ms") -> None:
    print(
        f"  {label:<52} {ours:9.3f} {unit}   baseline {baseline:9.3f} {unit}   ratio {ours / baseline:6.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--topk", type=int, default=3)
    parser.add_argument("--dense-passages", type=int, default=500, help="0 skips dense and hybrid")
    args = parser.parse_args()

    corpus = tasks.corpus_path()
    passages = read_corpus(corpus)
    queries = [r["question"] for r in tasks.load_split("test")][: args.queries]
    topk = args.topk
    print(f"corpus: {len(passages)} passages; {len(queries)} queries; topk={topk}")

    print("BM25 index (seconds)")
    build = seconds(lambda: BM25Retriever(passages))
    BM25Retriever.from_corpus(corpus)  # make sure a saved index exists
    clear_retriever_cache()  # a fresh process: the corpus is read and fingerprinted again
    load = seconds(lambda: BM25Retriever.from_corpus(corpus))
    row("load the saved index (vs build it)", load, build, "s ")
    bm25 = BM25Retriever.from_corpus(corpus)

    print("BM25 per query")
    import bm25s

    def raw(query: str) -> object:
        tokens = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)
        return bm25.index.retrieve(tokens, k=topk, show_progress=False)

    ours_ms, raw_ms = compare(lambda q: bm25.search(q, topk), raw, queries)
    row("BM25Retriever.search (vs bm25s directly)", ours_ms, raw_ms)
    batches = [queries[i : i + 64] for i in range(0, len(queries), 64)]
    start = time.perf_counter()
    for batch in batches:
        bm25.batch_search(batch, topk)
    batched_ms = (time.perf_counter() - start) * 1000 / len(queries)
    row("batch_search, 64 queries a call (vs bm25s one by one)", batched_ms, raw_ms)

    print("remote retrieval through our server on this machine")
    server = serve(bm25, port=0, topk=topk)
    try:
        client = RemoteRetriever(server.url)
        remote_ms, local_ms = compare(
            lambda q: client.search(q, topk), lambda q: bm25.search(q, topk), queries
        )
        row("RemoteRetriever.search (vs in process)", remote_ms, local_ms)
        batched = RemoteRetriever(server.url, request_format="search_r1")  # Search-R1's list form
        remote_batched = (
            seconds(lambda: [batched.batch_search(b, topk) for b in batches]) * 1000 / len(queries)
        )
        row("RemoteRetriever.batch_search, 64 a request (vs in process)", remote_batched, local_ms)
    finally:
        server.close()

    print("environment step with a search")
    import skyrl_gym

    task = tasks.default_task(0)
    extras = {**task["extras"], "max_turns": 10 * len(queries)}
    env = skyrl_gym.make("search", env_config={"topk": topk})
    env.reset(options={"prompt": task["prompt"], "extras": extras})
    step_ms, local_ms = compare(
        lambda q: env.step(f"<search>{q}</search>"), lambda q: bm25.search(q, topk), queries
    )
    env.close()
    row("SearchEnv.step('<search>...</search>') (vs retriever alone)", step_ms, local_ms)

    if args.dense_passages > 0:
        subset = passages[: args.dense_passages]
        print(f"dense and hybrid on the first {len(subset)} passages (CPU)")
        from skyrl_gym.envs.search.retrieval.dense import load_model

        load_model()  # the model loads once per process; time the embedding alone
        small_bm25 = BM25Retriever(subset)
        start = time.perf_counter()
        dense = DenseRetriever(subset)
        embed_s = time.perf_counter() - start
        print(f"  embedding {len(subset)} passages: {embed_s:.1f} s ({len(subset) / embed_s:.0f} passages/s)")

        def small(q: str) -> object:
            return small_bm25.search(q, topk)

        dense_ms, bm25_ms = compare(lambda q: dense.search(q, topk), small, queries, repeats=1)
        row("DenseRetriever.search (vs BM25, same passages)", dense_ms, bm25_ms)
        hybrid = HybridRetriever([small_bm25, dense])
        hybrid_ms, bm25_ms = compare(lambda q: hybrid.search(q, topk), small, queries, repeats=1)
        row("HybridRetriever.search (vs BM25, same passages)", hybrid_ms, bm25_ms)
        dense_batched = seconds(lambda: [dense.batch_search(b, topk) for b in batches]) * 1000 / len(queries)
        row("DenseRetriever.batch_search, 64 a call (vs BM25 one by one)", dense_batched, bm25_ms)
    print(f"(bundled corpus at {Path(corpus).parent})")


if __name__ == "__main__":
    main()
