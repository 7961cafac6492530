"""A retrieval server with SkyRL's and Search-R1's API over a local index (standard library only).

Endpoints:

- ``POST /retrieve`` takes either request form:

  - SkyRL's, one query: ``{"query": "...", "topk": 3, "return_scores": true}``, answered with
    ``{"result": [[{"document": {...}, "score": s}, ...]]}`` (one list, for the one query);
  - Search-R1's, a batch: ``{"queries": ["...", ...], "topk": 3, "return_scores": true}``, answered with
    ``{"result": [[...], [...], ...]}`` (one list per query, in order).

  Each document is ``{"id", "title", "text", "contents"}``; without ``return_scores`` (false unless given,
  as in both servers) each list holds the documents alone. ``topk`` defaults to the server's.
- ``GET /health`` answers ``{"status": "ok", "retriever": "bm25", "passages": N, "topk": 3}``.

A malformed request gets HTTP 400 with ``{"error": "..."}`` saying what is wrong; a failing retriever 500.
From the command line::

    python -m skyrl_gym.envs.search.retrieval.server --corpus corpus.jsonl --retriever bm25 --port 8000 --topk 3

(``--port 0`` picks a free port; the address is printed). In Python, :func:`serve` starts one in a thread.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from skyrl_gym.envs.search.retrieval.base import Retriever

__all__ = ["RetrievalServer", "main", "serve"]

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 8 << 20
"""Largest request body accepted (413 above it)."""
MAX_QUERIES = 4096
"""Most queries in one request."""


class RetrievalServer(ThreadingHTTPServer):
    """A threaded HTTP server answering SkyRL and Search-R1 retrieval requests with ``retriever``.

    ``url`` is the ``/retrieve`` endpoint to give a client; :meth:`start` serves in a daemon thread and
    :meth:`close` stops serving and frees the port.
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        retriever: Retriever,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        topk: int = 3,
        max_topk: int = 100,
        verbose: bool = False,
    ):
        self.retriever = retriever
        self.topk = topk
        self.max_topk = max_topk
        self.verbose = verbose
        self._thread: threading.Thread | None = None
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        """``http://host:port/retrieve``, the endpoint for ``search_url``."""
        host, port = self.server_address[:2]
        host = f"[{host}]" if ":" in str(host) else host
        return f"http://{host}:{port}/retrieve"

    def start(self) -> RetrievalServer:
        """Serve in a daemon thread; returns the server."""
        if self._thread is None:
            # a short poll interval makes close() prompt (shutdown waits for the next poll)
            self._thread = threading.Thread(
                target=self.serve_forever,
                kwargs={"poll_interval": 0.05},
                name="retrieval-server",
                daemon=True,
            )
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving (if started) and release the port. Safe to call twice."""
        if self._thread is not None:
            self.shutdown()
            self._thread.join()
            self._thread = None
        self.server_close()


def serve(retriever: Retriever, host: str = "127.0.0.1", port: int = 0, *, topk: int = 3) -> RetrievalServer:
    """Start a :class:`RetrievalServer` for ``retriever`` in a daemon thread (``port=0``: a free port)."""
    return RetrievalServer(retriever, host, port, topk=topk).start()


class _BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class _Handler(BaseHTTPRequestHandler):
    server: RetrievalServer
    protocol_version = "HTTP/1.1"  # keep-alive for pooled clients (SkyRL's requests.Session)
    timeout = 120  # an idle kept-alive connection is dropped after this many seconds

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        if self.server.verbose:
            logger.info("%s - %s", self.address_string(), format % args)

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path.split("?", 1)[0].rstrip("/") != "/health":
            self._send(404, {"error": f"no such endpoint {self.path!r}; use POST /retrieve or GET /health"})
            return
        server = self.server
        self._send(
            200,
            {
                "status": "ok",
                "retriever": server.retriever.kind,
                "passages": len(server.retriever),
                "topk": server.topk,
            },
        )

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path.split("?", 1)[0].rstrip("/") != "/retrieve":
            self._drain()
            self._send(404, {"error": f"no such endpoint {self.path!r}; POST to /retrieve"})
            return
        try:
            queries, topk, return_scores = self._read_request()
        except _BadRequest as exc:
            self._send(exc.status, {"error": str(exc)})
            return
        try:
            results = self.server.retriever.batch_search(queries, topk)
        except Exception as exc:  # the retriever failed, not the request: report it, keep serving
            logger.exception("retrieval failed")
            self._send(500, {"error": f"retrieval failed: {type(exc).__name__}: {exc}"})
            return
        if return_scores:
            result = [[{"document": p.to_document(), "score": p.score} for p in hits] for hits in results]
        else:
            result = [[p.to_document() for p in hits] for hits in results]
        self._send(200, {"result": result})

    def _drain(self) -> None:
        length = self.headers.get("Content-Length")
        if length and length.isdigit() and int(length) <= MAX_BODY_BYTES:
            self.rfile.read(int(length))
        else:
            self.close_connection = True

    def _read_request(self) -> tuple[list[str], int, bool]:
        length_header = self.headers.get("Content-Length")
        if length_header is None or not length_header.strip().isdigit():
            self.close_connection = True
            raise _BadRequest(411, "the request needs a Content-Length header")
        length = int(length_header)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            raise _BadRequest(
                413, f"the request body is {length} bytes; at most {MAX_BODY_BYTES} are accepted"
            )
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _BadRequest(400, f"the request body is not JSON ({exc})") from None
        if not isinstance(body, dict):
            raise _BadRequest(
                400,
                'the request body must be an object: {"query": "...", "topk": 3} (SkyRL) or '
                '{"queries": ["..."], "topk": 3} (Search-R1)',
            )
        if "query" in body and "queries" in body:
            raise _BadRequest(400, "give 'query' (one string) or 'queries' (a list of strings), not both")
        if "query" in body:
            if not isinstance(body["query"], str):
                raise _BadRequest(400, f"'query' must be a string, got {type(body['query']).__name__}")
            queries = [body["query"]]
        elif "queries" in body:
            queries = body["queries"]
            if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
                raise _BadRequest(400, "'queries' must be a list of strings")
        else:
            raise _BadRequest(
                400,
                "the request needs 'query' (a string, SkyRL's form) or 'queries' (a list, Search-R1's form)",
            )
        if len(queries) > MAX_QUERIES:
            raise _BadRequest(
                413, f"{len(queries)} queries in one request; at most {MAX_QUERIES} are accepted"
            )
        topk = body.get("topk")
        if topk is None:
            topk = self.server.topk
        if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= self.server.max_topk:
            raise _BadRequest(
                400, f"'topk' must be an integer from 1 to {self.server.max_topk}, got {topk!r}"
            )
        return_scores = body.get("return_scores", False)
        if not isinstance(return_scores, bool):
            raise _BadRequest(400, f"'return_scores' must be true or false, got {return_scores!r}")
        return queries, topk, return_scores


def main(argv: Sequence[str] | None = None) -> int:
    """Serve a corpus from the command line until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m skyrl_gym.envs.search.retrieval.server",
        description="Serve SkyRL's and Search-R1's retrieval API (POST /retrieve, GET /health) over a local index.",
    )
    parser.add_argument("--corpus", help="a JSONL corpus ({'id', 'contents'} rows); default: the bundled one")
    parser.add_argument("--retriever", choices=("bm25", "dense", "hybrid"), default="bm25")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--topk", type=int, default=3, help="passages per query when a request does not say")
    parser.add_argument(
        "--model", default=None, help="the embedding model of the dense and hybrid retrievers"
    )
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")

    from skyrl_gym.envs.search.retrieval import default_corpus_path, get_retriever

    corpus = args.corpus or str(default_corpus_path())
    options = {"model": args.model} if args.model and args.retriever != "bm25" else {}
    retriever = get_retriever(args.retriever, corpus, **options)
    server = RetrievalServer(retriever, args.host, args.port, topk=args.topk, verbose=args.verbose)
    print(f"serving {args.retriever} retrieval over {len(retriever)} passages at {server.url}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
