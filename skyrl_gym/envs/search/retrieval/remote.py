"""``RemoteRetriever``: a :class:`Retriever` over a SkyRL / Search-R1 retrieval server.

It speaks through :class:`skyrl_gym.tools.search.SearchSession`, the search tool's HTTP client: SkyRL's
request ``{"query": "...", "topk": 3, "return_scores": true}`` by default (one request a query), or
Search-R1's ``{"queries": [...], ...}`` with ``request_format="search_r1"`` (one request a batch). Either way
the answer is ``{"result": [[{"document": {"id", "contents": "\\"Title\\"\\ntext"}, "score": 12.3}, ...],
...]}``, one list per query; without scores each list holds the documents alone; both are read. A URL
without a path gets ``/retrieve``. Connection failures, timeouts and 5xx answers are retried with
exponential backoff; then :class:`RetrievalError` says the server is down and how to start one. A 4xx
answer is not retried: the request itself is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from skyrl_gym.envs.search.retrieval.base import Passage, RetrievalError, Retriever, check_topk, clean_query
from skyrl_gym.tools.search import (
    DEFAULT_PATH,
    SearchRequestError,
    SearchSession,
    normalize_search_url,
)

__all__ = ["DEFAULT_PATH", "START_HINT", "RemoteRetriever", "parse_response"]

START_HINT = (
    "start one with `python -m skyrl_gym.envs.search.retrieval.server --corpus <corpus.jsonl> --port 8000` "
    "or set env_config retriever='bm25' to search locally"
)
"""What to do when no search server answers."""


def parse_response(body: Any, n_queries: int) -> list[list[Passage]]:
    """Passages from a server's JSON answer (scored or not); :class:`RetrievalError` if it is malformed."""
    results = body.get("result") if isinstance(body, dict) else None
    if not isinstance(results, list) or len(results) != n_queries:
        got = len(results) if isinstance(results, list) else type(results).__name__
        raise RetrievalError(
            f"the search server's answer is not in the Search-R1 format: expected {{'result': [...]}} with "
            f"{n_queries} result list(s), got {got!r:.80}"
        )
    parsed = []
    for number, items in enumerate(results):
        if not isinstance(items, list):
            raise RetrievalError(f"the search server's result {number} is not a list of documents")
        passages = []
        for rank, item in enumerate(items):
            if not isinstance(item, dict):
                raise RetrievalError(f"the search server's result {number} holds a non-object: {item!r:.80}")
            if isinstance(item.get("document"), dict):
                document, score = item["document"], item.get("score")
            else:
                document, score = item, None
            try:
                score = None if score is None else float(score)
            except (TypeError, ValueError):
                raise RetrievalError(
                    f"the search server gave a score that is not a number: {score!r:.40}"
                ) from None
            passages.append(Passage.from_document(document, score, default_id=str(rank)))
        parsed.append(passages)
    return parsed


class RemoteRetriever(Retriever):
    """Retrieval through a SkyRL / Search-R1 HTTP server at ``search_url``.

    Args:
        search_url: the server's endpoint (``http://127.0.0.1:8000/retrieve``; a bare host gets ``/retrieve``).
        timeout: seconds one request may take.
        retries: further attempts after a connection failure, timeout or 5xx answer.
        backoff_s: the wait before the first retry; it doubles with each one.
        log_requests: log each request and its latency at INFO level.
        request_format: ``"skyrl"`` (``{"query": str}``, one request a query) or ``"search_r1"``
            (``{"queries": [...]}``, one request a batch).
    """

    kind = "remote"

    def __init__(
        self,
        search_url: str,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        log_requests: bool = False,
        request_format: str = "skyrl",
    ):
        self.search_url = normalize_search_url(search_url)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout = float(timeout)
        self.log_requests = log_requests
        self.session = SearchSession(request_format, retries=retries, backoff_s=backoff_s)

    @property
    def retries(self) -> int:
        """Further attempts after a failed request."""
        return self.session.retries

    @property
    def request_format(self) -> str:
        """``"skyrl"`` or ``"search_r1"``."""
        return self.session.request_format

    def __repr__(self) -> str:
        return f"RemoteRetriever({self.search_url!r}, request_format={self.request_format!r})"

    def batch_search(self, queries: Sequence[str], topk: int = 3) -> list[list[Passage]]:
        """Ask the server for each query's ``topk`` passages (one request a query, or one for all)."""
        check_topk(topk)
        if not queries:
            return []
        cleaned = [clean_query(q) for q in queries]
        if self.request_format == "search_r1":
            return parse_response(self._request(cleaned, topk), len(cleaned))
        return [parse_response(self._request(query, topk), 1)[0] for query in cleaned]

    def _request(self, query: str | list[str], topk: int) -> Any:
        try:
            return self.session.request(
                self.search_url, query, topk, True, self.timeout, log_requests=self.log_requests
            )
        except SearchRequestError as exc:
            if exc.kind == "API Response JSON Decode Error":
                raise RetrievalError(
                    f"the search server at {self.search_url} did not answer JSON: {exc.reason}"
                ) from None
            if not exc.retryable:
                raise RetrievalError(
                    f"the search server at {self.search_url} refused the request: {exc.reason}"
                ) from None
            raise RetrievalError(
                f"the search server at {self.search_url} is unreachable after {exc.attempts} attempt(s) "
                f"({exc.reason}); {START_HINT}"
            ) from None
