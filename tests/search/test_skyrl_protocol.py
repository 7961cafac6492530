"""The search environment and tool speak SkyRL's protocol byte for byte: requests, observations, rewards, names.

Everything runs for real: BM25 over a small corpus, this project's retrieval server, and two strict servers on
127.0.0.1 that accept only one request form each (SkyRL's single-query server and Search-R1's batch server),
so that a request in the wrong form is refused as those servers refuse it.
"""

from __future__ import annotations

import ast
import json
import logging
import re
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from omegaconf import DictConfig

import skyrl_gym
import skyrl_gym.tools.search as search_tool
from skyrl_gym.envs.base_text_env import MissingGroundTruthError
from skyrl_gym.envs.search.env import SearchConfig, SearchEnv, SearchEnvConfig
from skyrl_gym.envs.search.retrieval import BM25Retriever, RemoteRetriever, Retriever, serve
from skyrl_gym.envs.search.utils import compute_score, em_check, extract_solution
from skyrl_gym.testing import check_env
from skyrl_gym.tools import SearchToolGroup
from skyrl_gym.tools.search import SearchSession, call_search_api

from .qa_corpus import task, write_corpus

ROOT = Path(__file__).resolve().parents[2]
TRUTH = {"target": ["Warsaw"]}
EXTRAS = {"reward_spec": {"method": "rule", "ground_truth": TRUTH}, "max_turns": 3}
REQUEST_ID = r"\[Search Request ID: [0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\] "


# -- servers ------------------------------------------------------------------------------------------------
class StrictServer(ThreadingHTTPServer):
    """A retrieval server that takes one request form only (``"query"`` or ``"queries"``), like SkyRL's
    FastAPI server (422 for anything else) or Search-R1's; it keeps every request body it received."""

    daemon_threads = True

    def __init__(self, retriever: Retriever, field: str):
        self.retriever = retriever
        self.field = field
        self.bodies: list[dict] = []
        super().__init__(("127.0.0.1", 0), _StrictHandler)
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/retrieve"

    def close(self) -> None:
        self.shutdown()
        self.thread.join()
        self.server_close()


class _StrictHandler(BaseHTTPRequestHandler):
    server: StrictServer

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        field = self.server.field
        valid = isinstance(body.get(field), str if field == "query" else list)
        if not valid:
            answer, status = {"detail": [{"loc": ["body", field], "msg": "Field required"}]}, 422
        else:
            queries = [body[field]] if field == "query" else body[field]
            hits = self.server.retriever.batch_search(queries, body.get("topk") or 3)
            answer = {"result": [[{"document": p.to_document(), "score": p.score} for p in h] for h in hits]}
            status = 200
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Broken(Retriever):
    kind = "broken"

    def __init__(self):
        self.calls = 0

    def batch_search(self, queries, topk=3):
        self.calls += 1
        raise RuntimeError("the index is gone")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.jsonl")


@pytest.fixture(scope="module")
def bm25(corpus: Path) -> BM25Retriever:
    return BM25Retriever.from_corpus(corpus)


@pytest.fixture(scope="module")
def ours(bm25: BM25Retriever):
    running = serve(bm25, port=0)
    yield running
    running.close()


@pytest.fixture()
def skyrl_server(bm25: BM25Retriever):
    running = StrictServer(bm25, "query")
    yield running
    running.close()


@pytest.fixture()
def search_r1_server(bm25: BM25Retriever):
    running = StrictServer(bm25, "queries")
    yield running
    running.close()


def post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def skyrl_env(url: str, extras: dict = EXTRAS, **env_config) -> SearchEnv:
    """Made the way SkyRL's trainer makes it: a DictConfig with SkyRL's four keys (plus any asked for)."""
    config = {"log_requests": False, "search_url": url, "topk": 3, "timeout": 30, **env_config}
    return skyrl_gym.make("search", env_config=DictConfig(config), extras=extras)


def expected_observation(hits) -> str:
    """SkyRL's observation for ``hits``, spelled out from the passages' contents."""
    text = "".join(f"Doc {n}: {p.contents.strip()}\n" for n, p in enumerate(hits, start=1))
    return "\n<information>" + json.dumps({"result": text}) + "</information>\n"


# -- requests -----------------------------------------------------------------------------------------------
def test_the_client_sends_skyrls_single_query_request_by_default(skyrl_server: StrictServer, bm25):
    env = skyrl_env(skyrl_server.url)
    output = env.step("<search> capital of Poland </search>")
    assert skyrl_server.bodies == [{"query": "capital of Poland", "topk": 3, "return_scores": True}]
    assert output["observations"][0]["content"] == expected_observation(bm25.search("capital of Poland", 3))


def test_the_search_r1_list_form_is_an_env_config_setting(search_r1_server: StrictServer, bm25):
    env = skyrl_env(search_r1_server.url, request_format="search_r1")
    output = env.step("<search>capital of Poland</search>")
    assert search_r1_server.bodies == [{"queries": ["capital of Poland"], "topk": 3, "return_scores": True}]
    assert output["observations"][0]["content"] == expected_observation(bm25.search("capital of Poland", 3))


def test_a_server_refusing_the_form_is_a_search_error_observation(search_r1_server: StrictServer):
    env = skyrl_env(search_r1_server.url)  # SkyRL's form, to a server that only takes the list
    content = env.step("<search>capital of Poland</search>")["observations"][0]["content"]
    result = json.loads(content[len("\n<information>") : -len("</information>\n")])["result"]
    assert re.fullmatch(
        "Search error: "
        + REQUEST_ID
        + "API Request Error: 422 Client Error: Unprocessable Entity for url: "
        + re.escape(search_r1_server.url),
        result,
    ), result
    assert len(search_r1_server.bodies) == 1  # a 4xx answer is not retried


def test_our_server_takes_both_forms_and_answers_each_in_its_shape(ours, bm25):
    status, single = post(ours.url, {"query": "capital of Poland", "topk": 2, "return_scores": True})
    assert status == 200 and len(single["result"]) == 1
    assert [hit["document"]["id"] for hit in single["result"][0]] == [
        p.id for p in bm25.search("capital of Poland", 2)
    ]
    status, batch = post(
        ours.url, {"queries": ["capital of Poland", "saxophone"], "topk": 2, "return_scores": True}
    )
    assert status == 200 and len(batch["result"]) == 2 and batch["result"][0] == single["result"][0]
    status, plain = post(ours.url, {"query": "saxophone"})  # without return_scores: documents alone
    assert status == 200 and "score" not in plain["result"][0][0] and "contents" in plain["result"][0][0]
    assert post(ours.url, {"query": ["a"]}) == (400, {"error": "'query' must be a string, got list"})
    assert post(ours.url, {"query": "a", "queries": ["b"]})[0] == 400
    assert "needs 'query'" in post(ours.url, {"topk": 3})[1]["error"]


def test_remote_retriever_speaks_both_forms_to_our_server(ours, bm25):
    queries = ["capital of Poland", "who invented the saxophone"]
    local = bm25.batch_search(queries, 3)
    for request_format in ("skyrl", "search_r1"):
        remote = RemoteRetriever(ours.url, request_format=request_format).batch_search(queries, 3)
        assert [[p.id for p in hits] for hits in remote] == [[p.id for p in hits] for hits in local]


# -- call_search_api ----------------------------------------------------------------------------------------
def test_call_search_api_returns_the_servers_json_or_skyrls_error_text(ours, bm25):
    response, error = call_search_api(ours.url, "capital of Poland", topk=2, log_requests=False)
    assert (
        error is None
        and response == post(ours.url, {"query": "capital of Poland", "topk": 2, "return_scores": True})[1]
    )

    response, error = call_search_api(ours.url, "x", topk=1000, log_requests=False)  # over the server's cap
    assert response is None
    assert re.fullmatch(
        REQUEST_ID + "API Request Error: 400 Client Error: Bad Request for url: " + re.escape(ours.url), error
    )

    down = serve(bm25)
    url = down.url
    down.close()
    session = SearchSession(retries=1, backoff_s=0.01)
    response, error = call_search_api(url, "x", timeout=2, log_requests=False, session=session)
    assert response is None and re.match(REQUEST_ID + "Connection Error: ", error), error


def test_call_search_api_retries_a_failing_server_then_says_so():
    broken = _Broken()
    running = serve(broken)
    try:
        session = SearchSession(retries=2, backoff_s=0.01)
        response, error = call_search_api(running.url, "x", log_requests=False, session=session)
    finally:
        running.close()
    assert response is None
    assert re.fullmatch(REQUEST_ID + r"API Request Error: Server Error \(500\) on attempt 3/3", error)
    assert broken.calls == 3


def test_call_search_api_sends_through_a_requests_session(ours):
    requests = pytest.importorskip("requests")
    with requests.Session() as session:
        response, error = call_search_api(ours.url, "saxophone", topk=1, log_requests=False, session=session)
    assert error is None and response["result"][0][0]["document"]["id"] == "saxophone"


def test_log_requests_logs_each_call(ours, caplog: pytest.LogCaptureFixture):
    group = SearchToolGroup(search_url=ours.url, log_requests=True)
    with caplog.at_level(logging.INFO, logger="skyrl_gym.tools.search"):
        group.search("saxophone")
    assert any("Calling search API at " + ours.url in r.getMessage() for r in caplog.records)
    caplog.clear()
    quiet = SearchToolGroup(search_url=ours.url, log_requests=False)
    with caplog.at_level(logging.INFO, logger="skyrl_gym.tools.search"):
        quiet.search("saxophone")
    assert caplog.records == []


def test_the_tool_group_calls_the_module_attribute(ours, monkeypatch: pytest.MonkeyPatch):
    calls = []
    real = search_tool.call_search_api

    def recording(
        retrieval_service_url, query, topk=3, return_scores=True, timeout=30, log_requests=True, session=None
    ):
        calls.append({"url": retrieval_service_url, "query": query, "topk": topk, "timeout": timeout})
        return real(retrieval_service_url, query, topk, return_scores, timeout, log_requests, session)

    monkeypatch.setattr(search_tool, "call_search_api", recording)  # what SkyRL's test patches
    env = skyrl_env(ours.url)
    output = env.step("<search>who invented the saxophone</search>")
    assert calls == [{"url": ours.url, "query": "who invented the saxophone", "topk": 3, "timeout": 30}]
    assert "Adolphe Sax" in output["observations"][0]["content"]


# -- observations -------------------------------------------------------------------------------------------
def test_nothing_found_and_search_errors_read_as_in_skyrl(ours, bm25):
    env = skyrl_env(ours.url)
    content = env.step("<search>zyxwv qqqq</search>")["observations"][0]["content"]
    assert content == '\n<information>{"result": "No search results found."}</information>\n'

    down = serve(bm25)
    url = down.url
    down.close()
    env = skyrl_env(url, timeout=2, retries=0)
    output = env.step("<search>capital of Poland</search>")
    content = output["observations"][0]["content"]
    assert re.fullmatch(
        r'\n<information>\{"result": "Search error: '
        + REQUEST_ID
        + r'Connection Error: [^"]+"\}</information>\n',
        content,
    ), content
    assert not output["done"] and output["reward"] == 0.0  # the episode goes on
    assert env.step("<answer>Warsaw</answer>")["reward"] == 1.0


def test_a_turn_without_a_complete_search_gets_an_empty_information_block(skyrl_server: StrictServer):
    env = skyrl_env(skyrl_server.url, {**EXTRAS, "max_turns": 5})
    for action in ("<search>Who is the president of France?", "Just plain text", "</search> x <search>"):
        output = env.step(action)
        assert output["observations"] == [{"role": "user", "content": "\n<information></information>\n"}]
        assert not output["done"] and output["reward"] == 0.0
    assert skyrl_server.bodies == []  # no request for a missing query


def test_a_failing_tool_shows_its_message_and_the_episode_goes_on(ours, monkeypatch: pytest.MonkeyPatch):
    env = skyrl_env(ours.url)

    def failing(name, *args, **kwargs):
        raise RuntimeError("Tool execution failed")

    monkeypatch.setattr(env.tool_group, "execute_tool", failing)
    output = env.step("<search>Test query</search>")
    assert output["observations"] == [{"role": "user", "content": "Tool execution failed"}]
    assert not output["done"] and output["reward"] == 0.0


def test_local_and_remote_tools_format_alike(ours, bm25):
    by_url = SearchToolGroup(search_url=ours.url, log_requests=False)
    local = SearchToolGroup(retriever=bm25)
    assert by_url.search_url == ours.url and local.search_url is None and local.retriever is bm25
    for query in ("capital of Poland", "zyxwv qqqq", ""):
        assert local.search(query) == by_url.search(query)
    assert local.search(None) == by_url.search(None) == ""


# -- the environment's attributes and turn rules ------------------------------------------------------------
def test_the_constructor_sets_what_skyrls_tests_read():
    env = skyrl_gym.make(
        "search",
        env_config=DictConfig(
            {"log_requests": True, "search_url": "http://custom.example.com/search", "topk": 5, "timeout": 60}
        ),
        extras={
            "reward_spec": {"method": "rule", "ground_truth": {"target": "Custom Answer"}},
            "max_turns": 5,
        },
    )
    assert isinstance(env, SearchEnv)
    assert env.ground_truth == {"target": "Custom Answer"} and env.max_turns == 5 and env.turns == 0
    assert env.chat_history == []
    group = env.tool_group
    assert group.get_name() == "SearchToolGroup" and group.get_tool_names() == ["search"]
    assert (group.search_url, group.topk, group.timeout, group.log_requests) == (
        "http://custom.example.com/search",
        5,
        60,
        True,
    )


@pytest.mark.parametrize(
    ("action", "query"),
    [
        ("<search>capital of Poland</search>", ["capital of Poland"]),
        ("<search>  spaced out  </search>", ["  spaced out  "]),
        ("<search>two\nlines</search>", ["two\nlines"]),
        ("no tags at all", [None]),
        ("<search>never closed", [None]),
        ("</search> closed before <search>", [None]),
        ("<search></search>", [""]),
        ("<search>first</search> <search>second</search>", ["first"]),
        ("<search>q</search> <answer>a</answer>", ["q"]),
        ("<search>a <search>b</search>", ["a <search>b"]),
    ],
)
def test_parse_action_takes_the_first_search_block(action: str, query: list):
    assert SearchEnv(None, EXTRAS)._parse_action(action) == query


@pytest.mark.parametrize(
    ("action", "turns", "done"),
    [
        ("<answer>Warsaw</answer>", 1, True),
        ("<search>q</search>", 1, False),
        ("<search>q</search>", 3, True),
        ("text", 2, False),
        ("<search>q</search> <answer>a</answer>", 1, True),
        ("</answer> then <answer>", 1, True),  # both tags present, in any order
        ("<answer>unclosed", 1, False),
    ],
)
def test_is_done_at_max_turns_or_with_both_answer_tags(action: str, turns: int, done: bool):
    env = SearchEnv(None, EXTRAS)
    env.turns = turns
    assert env._is_done(action) is done


def test_an_episode_keeps_skyrls_chat_history_and_metadata(ours):
    env = skyrl_env(ours.url)
    first = env.step("<search>Marie Curie birthplace</search>")
    assert first["metadata"]["tool_group"] == "SearchToolGroup" and first["metadata"]["tool_name"] == "search"
    assert first["metadata"]["tool_input"] == ["Marie Curie birthplace"]
    last = env.step("<answer>Warsaw</answer>")
    assert last["done"] and last["reward"] == 1.0 and last["observations"] == []
    assert [m["role"] for m in env.chat_history] == ["assistant", "user", "assistant"]
    assert env.chat_history[0]["content"] == "<search>Marie Curie birthplace</search>"
    assert env.chat_history[1] == first["observations"][0]
    assert env.chat_history[2]["content"] == "<answer>Warsaw</answer>" and env.turns == 2


# -- rewards ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("action", "target", "reward", "done"),
    [
        ("<answer>Warsaw</answer>", "Warsaw", 1.0, True),
        ("<answer>Krakow</answer>", "Warsaw", 0.0, True),  # no format score for a wrong answer
        ("<answer>  the warsaw.  </answer>", "Warsaw", 1.0, True),
        ("<answer>WARSAW</answer>", ["Warszawa", "Warsaw"], 1.0, True),
        ("<answer>Warsaw</answer>", "The Warsaw", 1.0, True),
        ("<answer></answer>", "Warsaw", 0.0, True),
        ("Warsaw, no tags", "Warsaw", 0.0, False),
    ],
)
def test_the_reward_is_exact_match_on_the_targets(action: str, target, reward: float, done: bool):
    env = SearchEnv(
        None, {"reward_spec": {"method": "rule", "ground_truth": {"target": target}}, "max_turns": 3}
    )
    output = env.step(action)
    assert (output["reward"], output["done"]) == (reward, done)
    assert isinstance(output["reward"], float)


def test_running_out_of_turns_scores_the_whole_conversation(bm25):
    env = SearchEnv(None, {**EXTRAS, "max_turns": 2})
    assert not env.step("<answer>Warsaw")["done"]  # an unclosed answer does not end the episode
    output = env.step("</answer>")  # the last turn closes it: the block spans the observation between
    assert output["done"] and output["metadata"]["end"] == "truncated"
    assert output["metadata"]["answer"] == "Warsaw\n<information></information>" and output["reward"] == 0.0


def test_skyrls_scoring_functions():
    assert extract_solution("<answer>Wrong</answer> <answer> Warsaw </answer>") == "Warsaw"
    assert extract_solution("<answer></answer>") == "" and extract_solution("<answer>open") is None
    assert extract_solution("<answer>two\nlines</answer>") == "two\nlines"
    assert em_check("The Warsaw!", "Warsaw") == 1 and em_check("Krakow", ["Warsaw", "Warszawa"]) == 0
    assert compute_score("<answer>warsaw</answer>", TRUTH) == 1.0
    assert compute_score("<answer>Krakow</answer>", TRUTH) == 0.0
    assert compute_score("<answer>Krakow</answer>", TRUTH, format_score=0.1) == 0.1
    assert compute_score("no answer", TRUTH, format_score=0.1) == 0


# -- names, configuration and tasks -------------------------------------------------------------------------
def test_search_env_config_is_skyrls_name_with_skyrls_fields():
    assert SearchEnvConfig is SearchConfig
    config = SearchEnvConfig(search_url="http://127.0.0.1:9/retrieve", topk=5, timeout=10, log_requests=True)
    env = SearchEnv(config, EXTRAS)
    assert (env.tool_group.search_url, env.tool_group.topk, env.tool_group.timeout) == (
        "http://127.0.0.1:9/retrieve",
        5,
        10,
    )
    defaults = SearchEnvConfig()
    assert (defaults.topk, defaults.timeout, defaults.log_requests, defaults.max_turns) == (3, 30, False, 2)
    assert defaults.on_search_error == "observe" and defaults.request_format == "skyrl"


def test_missing_reward_spec_or_ground_truth_fails_when_made():
    config = DictConfig({"search_url": "http://127.0.0.1:9/retrieve"})
    with pytest.raises(AssertionError, match="reward_spec field is required"):
        skyrl_gym.make("search", env_config=config, extras={"max_turns": 3})
    with pytest.raises(MissingGroundTruthError, match="ground_truth is required in reward_spec field"):
        skyrl_gym.make("search", env_config=config, extras={"reward_spec": {"method": "rule"}})
    with pytest.raises(ValueError, match="needs the answers"):
        SearchEnv(None, {"reward_spec": {"ground_truth": {"answers": ["Warsaw"]}}})


def test_without_extras_reset_draws_a_bundled_task():
    env = skyrl_gym.make("search")
    assert env.ground_truth is None and env.tool_group.retriever.kind == "bm25"
    output = env.step("<answer>x</answer>")  # no task yet: an error end that says what is missing
    assert output["metadata"]["end"] == "error" and "needs the answers" in output["metadata"]["error"]
    prompt, info = env.reset(seed=0)
    assert prompt and info["retriever"] == "bm25" and env.targets
    assert env.step(env.reference_action())["reward"] == 1.0


def test_the_tool_module_knows_no_environment():
    for relative in ("skyrl_gym/tools/search.py", "skyrl_gym/tools/__init__.py"):
        tree = ast.parse((ROOT / relative).read_text())
        imported = [
            node.module if isinstance(node, ast.ImportFrom) else alias.name
            for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for alias in node.names
        ]
        assert not [name for name in imported if name and name.startswith("skyrl_gym.envs")], relative
    assert skyrl_gym.tools.SearchToolGroup is search_tool.SearchToolGroup


def test_remote_search_passes_check_env_with_its_hostile_actions(ours):
    report = check_env(
        lambda: skyrl_gym.make("search", env_config={"search_url": ours.url, "log_requests": False}),
        tasks=[task("What is the capital of Poland?", ["Warsaw"])],
        actions=("<search>capital of Poland</search>", "<search>saxophone inventor</search>"),
        gymnasium_check=False,
    )
    assert report.ok and not report.skipped, report.summary()
