"""``RemoteRetriever``: the client of a Search-R1 / SkyRL retrieval server.

The protocol (Search-R1's ``retrieval_server.py``, which SkyRL's search tool calls)::

    POST {search_url}            # http://127.0.0.1:8000/retrieve
    {"queries": ["..."], "topk": 3, "return_scores": true}
    -> {"result": [[{"document": {"id": "...", "contents": "\\"Title\\"\\ntext"}, "score": 12.3}, ...], ...]}

Without scores each result is a plain list of documents; both are read. A URL without a path gets
``/retrieve``. Only the standard library is used (``urllib``). Connection failures, timeouts and 5xx answers
are retried with exponential backoff; then :class:`RetrievalError` says the server is down and how to start
one. A 4xx answer is not retried: the request itself is wrong.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from skyrl_gym.envs.search.retrieval.base import Passage, RetrievalError, Retriever, check_topk, clean_query

__all__ = ["DEFAULT_PATH", "RemoteRetriever", "parse_response"]

logger = logging.getLogger(__name__)

DEFAULT_PATH = "/retrieve"
"""The path a ``search_url`` without one gets."""
_START_HINT = (
    "start one with `python -m skyrl_gym.envs.search.retrieval.server --corpus <corpus.jsonl> --port 8000` "
    "or set env_config retriever='bm25' to search locally"
)


def _endpoint(search_url: str) -> str:
    if not isinstance(search_url, str) or not search_url.strip():
        raise ValueError(
            f"search_url must be an http(s) URL such as http://127.0.0.1:8000/retrieve, got {search_url!r}"
        )
    url = search_url.strip()
    if "://" not in url:
        url = "http://" + url
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"search_url must be an http(s) URL such as http://127.0.0.1:8000/retrieve, got {search_url!r}"
        )
    if parts.path in ("", "/"):
        parts = parts._replace(path=DEFAULT_PATH)
    return urllib.parse.urlunsplit(parts)


def _is_loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
    """Retrieval through a Search-R1-style HTTP server at ``search_url``.

    Args:
        search_url: the server's endpoint (``http://127.0.0.1:8000/retrieve``; a bare host gets ``/retrieve``).
        timeout: seconds one request may take.
        retries: further attempts after a connection failure, timeout or 5xx answer.
        backoff_s: the wait before the first retry; it doubles with each one.
        log_requests: log each request and its latency at INFO level.
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
    ):
        self.search_url = _endpoint(search_url)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be a non-negative integer, got {retries!r}")
        self.timeout = float(timeout)
        self.retries = retries
        self.backoff_s = float(backoff_s)
        self.log_requests = log_requests
        # a proxy configured for the outside world must not intercept a server on this machine
        handlers = [urllib.request.ProxyHandler({})] if _is_loopback(self.search_url) else []
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self) -> str:
        return f"RemoteRetriever({self.search_url!r})"

    def batch_search(self, queries: Sequence[str], topk: int = 3) -> list[list[Passage]]:
        """Ask the server for each query's ``topk`` passages (one request for the whole batch)."""
        check_topk(topk)
        if not queries:
            return []
        payload = {"queries": [clean_query(q) for q in queries], "topk": topk, "return_scores": True}
        return parse_response(self._post(payload), len(queries))

    def _post(self, payload: dict[str, Any]) -> Any:
        data = json.dumps(payload).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        last_error = ""
        attempts = self.retries + 1
        for attempt in range(attempts):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            request = urllib.request.Request(self.search_url, data=data, headers=headers, method="POST")
            started = time.perf_counter()
            try:
                with self._opener.open(request, timeout=self.timeout) as response:
                    body = response.read()
            except urllib.error.HTTPError as exc:
                detail = _error_detail(exc)
                if exc.code < 500 and exc.code != 429:
                    raise RetrievalError(
                        f"the search server at {self.search_url} refused the request: HTTP {exc.code}{detail}"
                    ) from None
                last_error = f"HTTP {exc.code}{detail}"
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                last_error = f"{type(reason).__name__}: {reason}" if not isinstance(reason, str) else reason
                if isinstance(reason, TimeoutError):
                    last_error = f"no answer within {self.timeout:g} s"
            else:
                if self.log_requests:
                    logger.info(
                        "search server %s answered %d queries in %.1f ms",
                        self.search_url,
                        len(payload["queries"]),
                        (time.perf_counter() - started) * 1000,
                    )
                try:
                    return json.loads(body)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    raise RetrievalError(
                        f"the search server at {self.search_url} did not answer JSON: {body[:120]!r}"
                    ) from None
            if self.log_requests:
                logger.warning(
                    "search request %d/%d to %s failed: %s",
                    attempt + 1,
                    attempts,
                    self.search_url,
                    last_error,
                )
        raise RetrievalError(
            f"the search server at {self.search_url} is unreachable after {attempts} attempt(s) ({last_error}); "
            + _START_HINT
        )


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read()
        body = json.loads(raw)
        message = body.get("error") if isinstance(body, dict) else None
        return f": {message}" if message else f": {raw[:200]!r}"
    except Exception:  # the detail is a courtesy; the status code says enough
        return ""
