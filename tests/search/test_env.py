"""The search environment: scoring, whole episodes on a real BM25 index, remote search, conformance."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import skyrl_gym
from skyrl_gym.envs.search.env import EMPTY_QUERY, INVALID_ACTION, SearchConfig, SearchEnv, SearchToolGroup
from skyrl_gym.envs.search.retrieval import BM25Retriever, serve
from skyrl_gym.envs.search.scoring import (
    compute_score,
    em_check,
    extract_answer,
    f1_score,
    normalize_answer,
    subem_check,
    targets_of,
)
from skyrl_gym.testing import check_env, play_episode
from skyrl_gym.testing.strategies import adversarial_actions, episodes, tag_actions

from .qa_corpus import task as make_task
from .qa_corpus import write_corpus

CAPITAL = make_task("What is the capital of the country where Marie Curie was born?", ["Warsaw"])
MOUNTAIN = make_task("Which is the highest mountain in Africa?", ["Mount Kilimanjaro", "Kilimanjaro"])
INVENTOR = make_task("Who invented the saxophone?", ["Adolphe Sax"])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.jsonl")


@pytest.fixture(scope="module")
def server(corpus: Path):
    running = serve(BM25Retriever.from_corpus(corpus), port=0)
    yield running
    running.close()


def make(corpus: Path, task: dict = CAPITAL, **env_config) -> skyrl_gym.Env:
    env = skyrl_gym.make("search", env_config={"corpus_path": str(corpus), **env_config})
    env.reset(options={"prompt": task["prompt"], "extras": task["extras"]})
    return env


def result_of(content: str) -> str:
    """The result text inside SkyRL's observation ``\\n<information>{"result": ...}</information>\\n``."""
    assert content.startswith("\n<information>") and content.endswith("</information>\n"), content
    return json.loads(content[len("\n<information>") : -len("</information>\n")])["result"]


# -- scoring ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  a  Tale of   Two Cities ", "tale of two cities"),
        ("AN apple, an orange", "apple orange"),
        ("U.S.A.", "usa"),
        ("theatre", "theatre"),  # an article only as a whole word
        ("Ünïcode Straße", "ünïcode straße"),
        ("", ""),
    ],
)
def test_normalize_answer(text: str, normalised: str):
    assert normalize_answer(text) == normalised


@pytest.mark.parametrize(
    ("prediction", "targets", "em", "f1"),
    [
        ("Warsaw", ["Warsaw"], 1, 1.0),
        ("the warsaw.", ["Warsaw"], 1, 1.0),
        ("Kilimanjaro", ["Mount Kilimanjaro", "Kilimanjaro"], 1, 1.0),
        ("Mount Kilimanjaro in Tanzania", ["Mount Kilimanjaro"], 0, 2 * (2 / 4) * 1 / (2 / 4 + 1)),
        ("Sax", ["Adolphe Sax"], 0, 2 * 1 * 0.5 / 1.5),
        ("Dodoma", ["Warsaw", "Kilimanjaro"], 0, 0.0),
        ("", ["Warsaw"], 0, 0.0),
        ("the", ["a"], 1, 1.0),  # both normalise to nothing
        ("Warsaw", "Warsaw", 1, 1.0),  # a bare string is one target
    ],
)
def test_em_and_f1(prediction: str, targets, em: int, f1: float):
    assert em_check(prediction, targets) == em
    assert f1_score(prediction, targets) == pytest.approx(f1)


def test_targets_come_from_skyrl_rows_also_read_from_parquet():
    import numpy as np

    assert targets_of({"target": ["Warsaw", "Warszawa"]}) == ["Warsaw", "Warszawa"]
    assert targets_of({"target": np.array(["Warsaw"], dtype=object)}) == ["Warsaw"]
    assert targets_of("Warsaw") == ["Warsaw"] and targets_of(None) == [] and targets_of(1928) == ["1928"]
    assert subem_check("it is Warsaw, Poland", {"target": ["Warsaw"]}) == 1


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("<think>x</think><answer> Warsaw </answer>", "Warsaw"),
        ("<answer>Paris</answer> then <answer>Warsaw</answer>", "Warsaw"),
        ("<answer>Warsaw</answer> and <answer>unclosed", "Warsaw"),
        ("</answer> <answer>", None),
        ("<answer>unclosed", None),
        ("no tags", None),
        ("<answer><answer>1</answer></answer>", "<answer>1"),  # the regex <answer>(.*?)</answer>, as in SkyRL
    ],
)
def test_extract_answer(text: str, answer: str | None):
    assert extract_answer(text) == answer


def test_compute_score_is_skyrls():
    truth = {"target": ["Warsaw"]}
    assert compute_score("<answer>warsaw</answer>", truth) == 1.0
    assert compute_score("<answer>Paris</answer>", truth) == 0.0
    assert compute_score("Warsaw", truth) == 0.0
    assert compute_score("<answer>Paris</answer>", truth, format_score=0.1) == 0.1
    # no penalty for many answer tags, as in SkyRL: the last one counts
    assert compute_score("<answer>x</answer>" * 10 + "<answer>Warsaw</answer>", truth) == 1.0
    assert compute_score("<answer>Sax</answer>", ["Adolphe Sax"], metric="f1") == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="'em' or 'f1'"):
        compute_score("<answer>x</answer>", truth, metric="bleu")


# -- episodes -----------------------------------------------------------------------------------------------


def test_the_reference_answer_earns_one(corpus: Path):
    env = make(corpus)
    assert env.reference_action() == "<answer>Warsaw</answer>"
    output = env.step(env.reference_action())
    assert output["reward"] == 1.0 and output["done"] and output["observations"] == []
    assert output["metadata"] == {
        "turn": 1,
        "action": "answer",
        "answer": "Warsaw",
        "em": 1.0,
        "f1": 1.0,
        "searches": 0,
        "end": "terminated",
    }


def test_a_search_turn_shows_the_supporting_passage_then_the_answer_scores(corpus: Path):
    env = make(corpus, max_turns=3)
    output = env.step("<think>Where was she born?</think>\n<search> Marie Curie born in Warsaw </search>")
    assert output["reward"] == 0.0 and not output["done"]
    [message] = output["observations"]
    assert message["role"] == "user"
    result = result_of(message["content"])
    assert result.startswith('Doc 1: "Marie Curie"\nMarie Curie was a physicist') and "\nDoc 2: " in result
    metadata = output["metadata"]
    assert metadata["action"] == "search" and metadata["query"] == "Marie Curie born in Warsaw"
    assert metadata["doc_ids"][:2] == ["curie", "warsaw"] and metadata["search_error"] is None
    assert (metadata["tool_group"], metadata["tool_name"], metadata["tool_input"]) == (
        "SearchToolGroup",
        "search",
        [" Marie Curie born in Warsaw "],  # what the model wrote between the tags, as SkyRL reports it
    )
    content = env.step("<search>capital of Poland</search>")["observations"][0]["content"]
    assert result_of(content).startswith('Doc 1: "Warsaw"\nWarsaw is the capital and largest city of Poland.')
    output = env.step("<think>Warsaw.</think><answer>warsaw</answer>")
    assert output["reward"] == 1.0 and output["metadata"]["searches"] == 2
    assert env.unwrapped.get_metrics() == {
        "turns": 3,
        "searches": 2,
        "search_errors": 0,
        "answered": True,
        "em": 1.0,
        "f1": 1.0,
    }


def test_a_wrong_answer_earns_zero_and_f1_mode_gives_partial_credit(corpus: Path):
    output = make(corpus, INVENTOR).step("<answer>Paris</answer>")
    assert output["reward"] == 0.0 and output["done"] and output["metadata"]["em"] == 0.0
    output = make(corpus, INVENTOR, reward="f1").step("<answer>Sax</answer>")
    assert output["reward"] == pytest.approx(2 / 3) and output["metadata"]["em"] == 0.0
    assert make(corpus, MOUNTAIN).step("<answer>kilimanjaro</answer>")["reward"] == 1.0  # any target


def test_actions_without_a_valid_tag_get_an_empty_information_block(corpus: Path):
    env = make(corpus, max_turns=10)
    for action in ("I think it is Warsaw.", "<search>capital of", "</search> Poland <search>"):
        output = env.step(action)
        assert output["observations"][0]["content"] == "\n<information></information>\n"
        assert output["metadata"]["action"] == "invalid" and output["metadata"]["tool_input"] == [None]
    output = env.step("<search>   </search>")  # an empty query is searched, as SkyRL sends it
    assert result_of(output["observations"][0]["content"]) == "No search results found."
    assert output["metadata"]["doc_ids"] == [] and output["metadata"]["search_error"] is None
    assert env.unwrapped.get_metrics()["searches"] == 1


def test_invalid_action_explain_tells_the_protocol(corpus: Path):
    env = make(corpus, max_turns=10, invalid_action="explain")
    output = env.step("I think it is Warsaw.")
    assert (
        output["observations"][0]["content"] == INVALID_ACTION and output["metadata"]["action"] == "invalid"
    )
    assert "<search> and </search>" in INVALID_ACTION and "<answer> and </answer>" in INVALID_ACTION
    content = env.step("<search>capital of")["observations"][0]["content"]
    assert "<search> was opened but not closed" in content and "<answer>" in content
    assert env.step("<search>   </search>")["observations"][0]["content"] == EMPTY_QUERY
    content = env.step("<search>zyxwv qqqq</search>")["observations"][0]["content"]
    assert content == '\n<information>{"result": "No search results found."}</information>\n'
    assert env.unwrapped.get_metrics()["searches"] == 1  # the empty query was not a search


def test_observation_format_search_r1_shows_plain_passages(corpus: Path):
    env = make(corpus, max_turns=3, observation_format="search_r1")
    content = env.step("<search>capital of Poland</search>")["observations"][0]["content"]
    assert content.startswith('\n<information>Doc 1(Title: "Warsaw") Warsaw is the capital and largest city')
    assert content.endswith("\n</information>\n") and content.count("Doc ") == 3
    content = env.step("<search>zyxwv qqqq</search>")["observations"][0]["content"]
    assert content == "\n<information>No search results found.</information>\n"


def test_running_out_of_turns_ends_truncated_with_nothing(corpus: Path):
    env = make(corpus, make_task("?", ["Warsaw"], max_turns=2))
    assert not env.step("<search>Poland</search>")["done"]
    output = env.step("<search>Warsaw</search>")  # the last turn: no search runs
    assert output["done"] and output["reward"] == 0.0 and output["observations"] == []
    assert output["metadata"]["end"] == "truncated" and output["metadata"]["truncated_by"] == "max_turns"
    assert env.unwrapped.get_metrics()["searches"] == 1


def test_max_turns_comes_from_extras_then_env_config_then_two_as_in_skyrl(corpus: Path):
    extras = CAPITAL["extras"]
    assert SearchEnv({"corpus_path": str(corpus)}, extras).max_turns == 2
    assert SearchEnv({"corpus_path": str(corpus), "max_turns": 5}, extras).max_turns == 5
    assert SearchEnv({"corpus_path": str(corpus), "max_turns": 5}, {**extras, "max_turns": 6}).max_turns == 6


def test_a_no_op_earns_nothing(corpus: Path):
    env = skyrl_gym.make("search", env_config={"corpus_path": str(corpus)})
    outputs = play_episode(env, [""] * 10, task=CAPITAL)
    assert len(outputs) == 2 and sum(o["reward"] for o in outputs) == 0.0


@pytest.mark.parametrize(("kind", "options"), [("dense", {}), ("hybrid", {"hybrid_weights": [1.0, 2.0]})])
def test_dense_and_hybrid_retrievers_serve_the_environment(corpus: Path, kind: str, options: dict):
    env = make(corpus, retriever=kind, **options)
    output = env.step("<search>which organelle makes energy for cells</search>")
    assert result_of(output["observations"][0]["content"]).startswith('Doc 1: "Mitochondrion"\n')
    assert env.unwrapped.tool_group.retriever.kind == kind


# -- remote search ------------------------------------------------------------------------------------------


def test_a_search_url_means_remote_search_with_the_same_passages(corpus: Path, server):
    local = make(corpus).step("<search>Marie Curie born in Warsaw</search>")
    env = skyrl_gym.make(
        "search", env_config={"search_url": server.url, "topk": 3, "timeout": 5, "log_requests": False}
    )
    _, info = env.reset(options={"prompt": CAPITAL["prompt"], "extras": CAPITAL["extras"]})
    assert info["retriever"] == "remote"
    remote = env.step("<search>Marie Curie born in Warsaw</search>")
    assert remote["observations"] == local["observations"]
    assert remote["metadata"]["doc_ids"] == local["metadata"]["doc_ids"]
    assert env.step("<answer>Warsaw</answer>")["reward"] == 1.0


def test_a_search_server_that_is_down_ends_the_episode_as_an_error(corpus: Path):
    running = serve(BM25Retriever.from_corpus(corpus))
    url = running.url
    running.close()
    env = make(corpus, search_url=url, retries=0, timeout=2, on_search_error="error")
    output = env.step("<search>capital of Poland</search>")
    assert output["done"] and output["metadata"]["end"] == "error"
    error = output["metadata"]["error"]
    assert "Connection Error" in error and url in error and "retrieval.server" in error


def test_a_search_server_that_is_down_is_an_observation_by_default(corpus: Path):
    running = serve(BM25Retriever.from_corpus(corpus))
    url = running.url
    running.close()
    env = make(corpus, search_url=url, retries=0, timeout=2)
    output = env.step("<search>capital of Poland</search>")
    assert not output["done"] and output["metadata"].get("end") is None
    result = result_of(output["observations"][0]["content"])
    assert result.startswith("Search error: [Search Request ID: ") and "Connection Error: " in result
    assert output["metadata"]["search_error"] in result
    assert env.step("<answer>Warsaw</answer>")["reward"] == 1.0  # the episode goes on
    assert env.unwrapped.get_metrics()["search_errors"] == 1


def test_the_search_tool_group_works_the_skyrl_way(corpus: Path, server):
    from skyrl_gym.tools import SearchToolGroup as SkyRLImport  # where SkyRL code imports it from

    assert SkyRLImport is SearchToolGroup
    group = SearchToolGroup(search_url=server.url, topk=2, timeout=5, log_requests=False)  # SkyRL's signature
    assert group.get_name() == "SearchToolGroup" and group.get_tool_names() == ["search"]
    text = json.loads(group.execute_tool("search", "capital of Poland"))["result"]
    assert text.startswith('Doc 1: "Warsaw"\n') and text.count("Doc ") == 2
    assert group.get_tool_schemas()[0]["function"]["parameters"]["required"] == ["query"]
    env = make(corpus)
    wrapped = env.unwrapped._execute_tool("SearchToolGroup", "search", ["capital of Poland"])
    assert result_of(wrapped).startswith('Doc 1: "Warsaw"\n')


# -- configuration ------------------------------------------------------------------------------------------


def test_env_config_refuses_nonsense():
    with pytest.raises(ValueError, match=r"'top_k' \(did you mean 'topk'\?\)"):
        SearchConfig.from_env_config({"top_k": 5})
    with pytest.raises(
        ValueError, match=r"unknown retriever 'google' \(env_config.retriever\).*Registered: bm25"
    ):
        SearchConfig(retriever="google")
    with pytest.raises(ValueError, match="did you mean 'hybrid'"):
        SearchConfig(retriever="hybird")
    with pytest.raises(ValueError, match="needs env_config.search_url"):
        SearchConfig(retriever="remote")
    with pytest.raises(ValueError, match="reward must be one of 'em', 'f1'"):
        SearchConfig(reward="bleu")
    with pytest.raises(ValueError, match="request_format must be one of 'skyrl', 'search_r1'"):
        SearchConfig(request_format="list")
    with pytest.raises(ValueError, match="invalid_action must be one of"):
        SearchConfig(invalid_action="ignore")
    with pytest.raises(ValueError, match="topk must be a positive integer"):
        SearchConfig(topk=0)
    assert SearchConfig(search_url="http://h:1/retrieve").retriever_kind == "remote"
    assert SearchConfig(search_url="http://h:1/retrieve", retriever="bm25").retriever_kind == "bm25"
    assert SearchConfig().retriever_kind == "bm25"


def test_starting_without_answers_says_what_is_missing(corpus: Path):
    with pytest.raises(ValueError, match="needs the answers"):
        SearchEnv({"corpus_path": str(corpus)}).init([{"role": "user", "content": "?"}])


def test_a_missing_corpus_is_a_clear_error_when_the_env_is_made(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="gone.jsonl"):
        SearchEnv({"corpus_path": str(tmp_path / "gone.jsonl")}, CAPITAL["extras"])


def test_importing_the_environment_stays_light():
    code = (
        "import sys, json, skyrl_gym.envs.search, skyrl_gym.envs.search.env, skyrl_gym.envs.search.scoring;"
        "print(json.dumps([m for m in ('bm25s', 'sentence_transformers', 'torch') if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


# -- conformance and property tests -------------------------------------------------------------------------


def test_check_env_with_explicit_tasks(corpus: Path):
    report = check_env(
        lambda: skyrl_gym.make("search", env_config={"corpus_path": str(corpus)}),
        tasks=[CAPITAL, MOUNTAIN, INVENTOR],
        actions=("<think>look</think><search>capital of Poland</search>", "<search>Adolphe Sax</search>"),
        gymnasium_check=False,
    )
    assert report.ok and not report.skipped, report.summary()


@pytest.mark.slow
def test_check_env_on_the_bundled_corpus_with_seeds_and_gymnasium():
    report = check_env(
        lambda: skyrl_gym.make("search"),
        seeds=(0, 1),
        actions=("<search>capital of France</search>", "hello"),
    )
    assert report.ok and not report.skipped, report.summary()
    env = gymnasium.make("skyrl_gym/search")
    observation, info = env.reset(seed=3)
    assert isinstance(observation, str) and "<search>" in observation and info["retriever"] == "bm25"
    observation, reward, terminated, truncated, info = env.step("<search>capital of France</search>")
    assert (
        '<information>{"result": "Doc 1: ' in observation and reward == 0.0 and not (terminated or truncated)
    )
    observation, reward, terminated, truncated, info = env.step(env.unwrapped.env.reference_action())
    assert reward == 1.0 and terminated and not truncated
    env.close()


QUERIES = st.one_of(
    st.sampled_from(
        ["capital of Poland", "Warsaw", "Kilimanjaro", "", " ", "the", "\x00", "\ud800", "9" * 5000]
    ),
    st.text(max_size=40),
)


@settings(max_examples=40)
@given(
    actions=episodes(
        st.one_of(tag_actions(["search", "answer", "think"], inner=QUERIES), adversarial_actions(["search"]))
    )
)
def test_adversarial_episodes_get_observations_and_rewards_in_range(corpus: Path, actions: list[str]):
    env = skyrl_gym.make("search", env_config={"corpus_path": str(corpus)})
    outputs = play_episode(env, actions, task=CAPITAL)
    env.close()
    for output in outputs:
        assert output["reward"] in (0.0, 1.0)
        assert output["done"] or output["observations"][0]["content"].strip()
