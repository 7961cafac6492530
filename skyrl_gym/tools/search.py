"""``SearchToolGroup``: the ``search`` tool, over a retrieval server or over any local retriever.

The wire protocol, SkyRL's by default::

    POST http://127.0.0.1:8000/retrieve
    {"query": "capital of Poland", "topk": 3, "return_scores": true}
    -> {"result": [[{"document": {"id": "...", "contents": "\\"Warsaw\\"\\nWarsaw is ..."}, "score": 12.3}, ...]]}

and Search-R1's list form with ``request_format="search_r1"``: ``{"queries": [...], "topk": 3,
"return_scores": true}``, answered with one result list per query. :func:`call_search_api` sends one query
and returns ``(response_json, None)`` or ``(None, error_message)``; it retries connection failures, timeouts
and 5xx/429 answers with exponential backoff, and never raises for a failed request.

What the model reads, SkyRL's way: the tool returns ``json.dumps({"result": text})`` where ``text`` is
``"Doc 1: <contents>\\n"`` per passage, ``"No search results found."`` when nothing matched, or ``"Search
error: <message>"`` when the request failed; a ``None`` query returns ``""``. The environment wraps that in
``<information>...</information>``. ``observation_format="search_r1"`` gives Search-R1's plain lines
instead (``Doc 1(Title: "Warsaw") Warsaw is ...``), without the JSON wrapper.

A local retriever (an object with ``search(query, topk)`` returning passages that have ``to_document()`` and
``score``, or documents as dicts) goes through the same formatting: its hits are put in the server's
response shape first. Requests go through :class:`skyrl_gym.http_client.HttpClient`; this module knows no
environment.
"""

from __future__ import annotations

import http
import json
import logging
import time
import urllib.parse
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from skyrl_gym.http_client import HttpClient, NoAnswer, retryable_status
from skyrl_gym.tools.core import ToolGroup, tool

__all__ = [
    "DEFAULT_PATH",
    "DEFAULT_SEARCH_URL",
    "DEFAULT_TIMEOUT",
    "NO_RESULTS",
    "OBSERVATION_FORMATS",
    "REQUEST_FORMATS",
    "PassageSource",
    "SearchRequestError",
    "SearchSession",
    "SearchToolGroup",
    "call_search_api",
    "format_search_response",
    "normalize_search_url",
]

logger = logging.getLogger(__name__)

DEFAULT_SEARCH_URL = "http://127.0.0.1:8000/retrieve"
"""Where SkyRL's search tool looks for a retrieval server when it is given no URL."""
DEFAULT_PATH = "/retrieve"
"""The path a search URL without one gets."""
DEFAULT_TIMEOUT = 30
"""Seconds one request may take."""
DEFAULT_RETRIES = 3
"""Further attempts after a failed one. SkyRL makes 10 attempts 1, 2, ... 9 s apart (45 s of waiting for a
server that is down); 3 retries 0.5, 1 and 2 s apart keep a failing step well inside a step budget."""
DEFAULT_BACKOFF_S = 0.5
"""The wait before the first retry; it doubles with each one."""
REQUEST_FORMATS = ("skyrl", "search_r1")
"""``skyrl``: ``{"query": str, ...}`` (SkyRL's server); ``search_r1``: ``{"queries": [str], ...}``."""
OBSERVATION_FORMATS = ("skyrl", "search_r1")
"""``skyrl``: ``{"result": "Doc 1: ..."}`` as JSON text; ``search_r1``: ``Doc 1(Title: ...) ...`` lines."""
NO_RESULTS = "No search results found."
"""The result text when the server found nothing."""


# -- the HTTP client ------------------------------------------------------------------------------------------
class SearchRequestError(Exception):
    """A request to a retrieval server failed (after its retries, when the failure was worth retrying).

    ``kind`` is SkyRL's category (``Connection Error``, ``Timeout Error``, ``API Request Error``, ``API Response
    JSON Decode Error``) and ``str(error)`` is ``"<kind>: <detail>"``, SkyRL's text. ``reason`` says it in a
    few words (``HTTP 500: retrieval failed ...``, ``no answer within 30 s``), ``status`` is the HTTP status
    (``None`` when no answer came), ``attempts`` how many requests were sent.
    """

    def __init__(self, kind: str, detail: str, *, reason: str, status: int | None = None, attempts: int = 1):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.reason = reason
        self.status = status
        self.attempts = attempts

    @property
    def retryable(self) -> bool:
        """Whether another attempt could succeed: no answer, or a 5xx / 429 answer."""
        if self.kind in ("Connection Error", "Timeout Error"):
            return True
        return self.status is not None and (self.status >= 500 or self.status == 429)


def normalize_search_url(search_url: str) -> str:
    """``search_url`` as an http(s) URL with a path (a bare ``host:port`` gets ``http://`` and ``/retrieve``).

    Raises ``ValueError`` for anything that is not an http(s) URL.
    """
    if not isinstance(search_url, str) or not search_url.strip():
        raise ValueError(
            f"search_url must be an http(s) URL such as {DEFAULT_SEARCH_URL}, got {search_url!r}"
        )
    url = search_url.strip()
    if "://" not in url:
        url = "http://" + url
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"search_url must be an http(s) URL such as {DEFAULT_SEARCH_URL}, got {search_url!r}"
        )
    if parts.path in ("", "/"):
        parts = parts._replace(path=DEFAULT_PATH)
    return urllib.parse.urlunsplit(parts)


def _server_message(raw: bytes) -> str:
    """What a failing server said: its JSON ``error`` field, else the start of its body."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    if isinstance(body, dict) and body.get("error"):
        return str(body["error"])
    if isinstance(body, dict) and body.get("detail"):  # FastAPI's validation errors
        return json.dumps(body["detail"])[:200]
    return repr(raw[:200]) if raw else ""


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


class SearchSession:
    """How requests reach retrieval servers: the request format, the retry policy and the transport.

    Args:
        request_format: ``"skyrl"`` sends ``{"query": str}``; ``"search_r1"`` sends ``{"queries": [str]}``.
        retries: further attempts after a connection failure, a timeout or a 5xx / 429 answer.
        backoff_s: the wait before the first retry; it doubles with each one.
        transport: a ``requests.Session``-like object (``post(url, data=, headers=, timeout=)`` returning a
            response with ``status_code`` and ``content``) to send through; ``None``: the project's HTTP client
            (:mod:`skyrl_gym.http_client`: httpx, with no proxy for servers on this machine).

    One session may be shared by threads: it keeps no per-request state.
    """

    def __init__(
        self,
        request_format: str = "skyrl",
        *,
        retries: int = DEFAULT_RETRIES,
        backoff_s: float = DEFAULT_BACKOFF_S,
        transport: Any = None,
    ):
        if request_format not in REQUEST_FORMATS:
            raise ValueError(
                f"request_format must be one of {', '.join(REQUEST_FORMATS)}, got {request_format!r}"
            )
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be a non-negative integer, got {retries!r}")
        if isinstance(backoff_s, bool) or not isinstance(backoff_s, (int, float)) or backoff_s < 0:
            raise ValueError(f"backoff_s must be a number of seconds >= 0, got {backoff_s!r}")
        if transport is not None and not callable(getattr(transport, "post", None)):
            raise TypeError(
                f"transport must have a post() method like requests.Session, got {type(transport).__name__}"
            )
        self.request_format = request_format
        self.retries = retries
        self.backoff_s = float(backoff_s)
        self.transport = transport
        self._http = HttpClient(retries=retries, backoff_s=backoff_s)

    def __repr__(self) -> str:
        return f"SearchSession({self.request_format!r}, retries={self.retries})"

    def payload(self, query: str | Sequence[str], topk: int, return_scores: bool) -> dict[str, Any]:
        """The request body for ``query`` (one string, or several in the ``search_r1`` format)."""
        if self.request_format == "search_r1":
            queries = [query] if isinstance(query, str) else list(query)
            return {"queries": queries, "topk": topk, "return_scores": return_scores}
        if not isinstance(query, str):
            raise TypeError(
                "the skyrl request format sends one query a request; use request_format='search_r1'"
            )
        return {"query": query, "topk": topk, "return_scores": return_scores}

    def request(
        self,
        url: str,
        query: str | Sequence[str],
        topk: int = 3,
        return_scores: bool = True,
        timeout: float = DEFAULT_TIMEOUT,
        log_requests: bool = False,
        log_prefix: str = "",
    ) -> Any:
        """POST ``query`` to ``url`` and return the decoded JSON answer; :class:`SearchRequestError` if it fails.

        Connection failures, timeouts and 5xx / 429 answers are retried; other 4xx answers and answers that
        are not JSON are not (the request itself, or the server, is wrong).
        """
        endpoint = normalize_search_url(url)
        data = json.dumps(self.payload(query, topk, return_scores)).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        started = time.perf_counter()

        def before_attempt(attempt: int, attempts: int) -> None:
            nonlocal started
            started = time.perf_counter()
            if log_requests:
                logger.info(
                    "%sAttempt %d/%d: Calling search API at %s", log_prefix, attempt, attempts, endpoint
                )

        def after_failure(attempt: int, attempts: int, reason: str) -> None:
            logger.warning("%sattempt %d/%d failed: %s", log_prefix, attempt, attempts, reason)

        try:
            reply = self._http.post(
                endpoint,
                data,
                headers=headers,
                timeout=timeout,
                send=self._send_through_transport if self.transport is not None else None,
                before_attempt=before_attempt,
                after_failure=after_failure,
            )
        except NoAnswer as exc:
            kind = "Timeout Error" if exc.kind == "timeout" else "Connection Error"
            error = SearchRequestError(kind, exc.reason, reason=exc.reason, attempts=exc.attempts)
            logger.warning("%s%s", log_prefix, error)
            raise error from None
        status, raw, attempt, attempts = reply.status, reply.content, reply.attempts, self.retries + 1
        if status >= 400:
            message = _server_message(raw)
            reason = f"HTTP {status}: {message}" if message else f"HTTP {status}"
            if retryable_status(status):
                detail = f"Server Error ({status}) on attempt {attempt}/{attempts}"
                error = SearchRequestError(
                    "API Request Error", detail, reason=reason, status=status, attempts=attempt
                )
                logger.warning("%s%s", log_prefix, error)
                raise error
            detail = f"{status} Client Error: {_phrase(status)} for url: {endpoint}"
            raise SearchRequestError(
                "API Request Error", detail, reason=reason, status=status, attempts=attempt
            )
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            text = raw[:200].decode("utf-8", "replace")
            raise SearchRequestError(
                "API Response JSON Decode Error",
                f"{exc}, Response: {text}",
                reason=f"the answer is not JSON: {raw[:120]!r}",
                status=status,
                attempts=attempt,
            ) from None
        if log_requests:
            logger.info(
                "%sSearch API call successful on attempt %d (%.1f ms)",
                log_prefix,
                attempt,
                (time.perf_counter() - started) * 1000,
            )
        return body

    def _send_through_transport(
        self, url: str, data: bytes, headers: Mapping[str, str], timeout: float
    ) -> tuple[int, bytes]:
        response = self.transport.post(url, data=data, headers=dict(headers), timeout=timeout)
        return int(response.status_code), bytes(response.content)

    def close(self) -> None:
        """Close the session's connections (a later request opens new ones)."""
        self._http.close()


def call_search_api(
    retrieval_service_url: str,
    query: str,
    topk: int = 3,
    return_scores: bool = True,
    timeout: float = DEFAULT_TIMEOUT,
    log_requests: bool = True,
    session: SearchSession | Any | None = None,
) -> tuple[dict[str, Any] | None, str | None]:
    """Ask a retrieval server for ``query``'s ``topk`` passages; SkyRL's function and signature.

    Returns ``(response_json, None)`` on success and ``(None, error_message)`` when the request failed after
    its retries; it does not raise for a failed request. The error message starts with ``[Search Request ID:
    <uuid>]`` and names the failure as SkyRL does (``Connection Error: ...``, ``Timeout Error: ...``, ``API
    Request Error: Server Error (500) on attempt 4/4``...). ``session`` is a :class:`SearchSession` (request
    format and retries), a ``requests.Session`` to send through, or ``None`` for a default session.
    """
    log_prefix = f"[Search Request ID: {uuid.uuid4()}] "
    if session is None:
        session = SearchSession()
    elif not isinstance(session, SearchSession):
        session = SearchSession(transport=session)
    try:
        body = session.request(
            retrieval_service_url,
            query,
            topk=topk,
            return_scores=return_scores,
            timeout=timeout,
            log_requests=log_requests,
            log_prefix=log_prefix,
        )
    except SearchRequestError as exc:
        logger.error("%sAPI Request Failed after %d attempts: %s", log_prefix, exc.attempts, exc)
        return None, f"{log_prefix}{exc}"
    except ValueError as exc:  # a malformed URL: nothing was sent
        return None, f"{log_prefix}API Request Error: {exc}"
    return body, None


# -- turning a response into what the model reads -------------------------------------------------------------
def _document(item: Any) -> Mapping[str, Any]:
    """The document of one hit: ``{"document": {...}, "score": s}`` or a bare document."""
    if isinstance(item, Mapping) and isinstance(item.get("document"), Mapping):
        return item["document"]
    if isinstance(item, Mapping):
        return item
    raise TypeError(f"a search hit must be an object, got {type(item).__name__}")


def _contents(document: Mapping[str, Any]) -> str:
    if "contents" in document:
        return str(document["contents"])
    if "title" in document or "text" in document:  # a corpus row with separate fields
        return f'"{document.get("title", "")}"\n{document.get("text", "")}'
    raise KeyError("contents")


def _passages_text(hits: Sequence[Any], observation_format: str) -> str:
    lines = []
    for number, item in enumerate(hits, start=1):
        contents = _contents(_document(item))
        if observation_format == "skyrl":
            lines.append(f"Doc {number}: {contents.strip()}\n")
        else:  # Search-R1: the first line of the contents is the title
            title, _, text = contents.partition("\n")
            lines.append(f"Doc {number}(Title: {title}) {text}\n")
    return "".join(lines)


def format_search_response(
    response: Any, error: str | None, observation_format: str = "skyrl"
) -> tuple[str, dict[str, Any]]:
    """What the ``search`` tool returns for a server's ``response`` (or its ``error``), and facts about it.

    The facts: ``status`` (``success``, ``no_results``, ``api_error``, ``processing_error`` or
    ``unknown_api_state``, SkyRL's names), ``total_results``, the ``doc_ids`` shown (``None`` where a
    document has no id) and ``search_error`` (the failure, or ``None``).
    """
    if observation_format not in OBSERVATION_FORMATS:
        raise ValueError(
            f"observation_format must be one of {', '.join(OBSERVATION_FORMATS)}, got {observation_format!r}"
        )
    facts: dict[str, Any] = {"status": "unknown", "total_results": 0, "doc_ids": [], "search_error": None}
    if error:
        text = f"Search error: {error}"
        facts.update(status="api_error", search_error=error)
    elif response:
        try:
            per_query = response.get("result", [])
            hits = [item for query_hits in per_query for item in query_hits]
            if hits:
                text = "\n---\n".join(
                    _passages_text(query_hits, observation_format) for query_hits in per_query
                )
                ids = [_document(item).get("id") for item in hits]
                facts.update(
                    status="success",
                    total_results=len(hits),
                    doc_ids=[None if i is None else str(i) for i in ids],
                )
            else:  # no result list, or empty ones: SkyRL says so for the former, and so do we for both
                text = NO_RESULTS
                facts["status"] = "no_results"
        except Exception as exc:  # a server answering in another shape: tell the model, as SkyRL does
            text = f"Error processing search results: {exc}"
            facts.update(status="processing_error", search_error=text)
    else:
        text = "Unknown API state (no response and no error message)."
        facts.update(status="unknown_api_state", search_error=text)
    if observation_format == "skyrl":
        text = json.dumps({"result": text})
    return text, facts


# -- the tool group -------------------------------------------------------------------------------------------
class PassageSource(Protocol):
    """A local retriever: ``search(query, topk)`` returns hits, best first, each a passage with
    ``to_document()`` (a dict with ``contents`` or ``title``/``text``, and ``id``) and ``score``, or a dict."""

    def search(self, query: str, topk: int = 3) -> Sequence[Any]: ...


def _check_positive(value: Any, name: str, kind: type | tuple[type, ...]) -> None:
    if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


class SearchToolGroup(ToolGroup):
    """SkyRL's search tool group: name ``"SearchToolGroup"``, one tool ``search(query)``.

    ``SearchToolGroup(search_url=..., topk=3, timeout=30, log_requests=True)`` asks a retrieval server
    through :func:`call_search_api` (looked up on this module at each call, so patching it takes effect);
    with neither ``search_url`` nor ``retriever`` it asks :data:`DEFAULT_SEARCH_URL`, as SkyRL does.
    ``SearchToolGroup(retriever=r)`` searches the local retriever ``r`` instead (``search_url`` is then
    ``None``). Both return what :func:`format_search_response` makes of the result; ``last`` holds its facts
    for the most recent call.

    Keyword-only settings: ``request_format`` (``"skyrl"`` or ``"search_r1"``), ``retries`` and ``backoff_s``
    of the HTTP client, and ``observation_format`` (``"skyrl"`` or ``"search_r1"``).
    """

    def __init__(
        self,
        search_url: str | None = None,
        topk: int = 3,
        timeout: float = DEFAULT_TIMEOUT,
        log_requests: bool = True,
        *,
        retriever: PassageSource | None = None,
        request_format: str = "skyrl",
        retries: int = DEFAULT_RETRIES,
        backoff_s: float = DEFAULT_BACKOFF_S,
        observation_format: str = "skyrl",
    ):
        if retriever is not None and search_url is not None:
            raise ValueError("give SearchToolGroup a search_url or a retriever, not both")
        if retriever is not None and not callable(getattr(retriever, "search", None)):
            raise TypeError(
                f"retriever must have a search(query, topk) method, got {type(retriever).__name__}"
            )
        if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
            raise ValueError(f"topk must be a positive integer, got {topk!r}")
        _check_positive(timeout, "timeout", (int, float))
        if observation_format not in OBSERVATION_FORMATS:
            raise ValueError(
                f"observation_format must be one of {', '.join(OBSERVATION_FORMATS)}, got {observation_format!r}"
            )
        super().__init__(name="SearchToolGroup")
        self.retriever = retriever
        self.topk = topk
        self.timeout = timeout
        self.log_requests = bool(log_requests)
        self.observation_format = observation_format
        self.last: dict[str, Any] = {}
        if retriever is None:
            self.search_url: str | None = DEFAULT_SEARCH_URL if search_url is None else search_url
            normalize_search_url(self.search_url)  # a malformed URL fails here, not at the first search
            parts = urllib.parse.urlsplit(self.search_url)
            self.base_url: str | None = f"{parts.scheme}://{parts.netloc}"
            self.session: SearchSession | None = SearchSession(
                request_format, retries=retries, backoff_s=backoff_s
            )
        else:
            self.search_url = self.base_url = None
            self.session = None

    def __repr__(self) -> str:
        source = self.search_url if self.retriever is None else repr(self.retriever)
        return f"SearchToolGroup({source}, topk={self.topk})"

    @tool
    def search(self, query: str) -> str:
        """Search for passages about the query and return the best ones.

        Args:
            query: what to search for.
        """
        if query is None:  # the model's turn held no complete <search> block
            self.last = {"status": "no_query", "total_results": 0, "doc_ids": [], "search_error": None}
            return ""
        query = str(query).strip()
        if self.retriever is not None:
            response, error = self._search_locally(query)
        else:
            try:
                response, error = call_search_api(
                    retrieval_service_url=self.search_url,
                    query=query,
                    topk=self.topk,
                    timeout=self.timeout,
                    log_requests=self.log_requests,
                    session=self.session,
                )
            except Exception as exc:  # a replaced call_search_api that raises: still an observation
                response, error = None, f"API Request Exception during batch search: {exc}"
        text, self.last = format_search_response(response, error, self.observation_format)
        return text

    def _search_locally(self, query: str) -> tuple[dict[str, Any] | None, str | None]:
        try:
            hits = self.retriever.search(query, self.topk)
            entries = []
            for hit in hits:
                if hasattr(hit, "to_document"):
                    entries.append({"document": hit.to_document(), "score": getattr(hit, "score", None)})
                else:
                    entries.append(hit)
        except Exception as exc:  # the retriever failed: an observation like a failed request
            return None, f"{type(exc).__name__}: {exc}"
        return {"result": [entries]}, None
