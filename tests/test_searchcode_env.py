"""``searchcode``: SkyRL's tool-call parsing, observation texts and reward, with the real sandbox and retriever."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import DictConfig

import skyrl_gym
from skyrl_gym.envs.base_text_env import MissingGroundTruthError
from skyrl_gym.envs.search.retrieval import default_corpus_path, get_retriever, serve
from skyrl_gym.envs.search.tasks import load_corpus
from skyrl_gym.envs.searchcode import tasks
from skyrl_gym.envs.searchcode.env import NO_INNER_TAG, NO_TOOL_BLOCK, SearchCodeEnv
from skyrl_gym.testing import check_env, play_episode
from skyrl_gym.testing.strategies import episodes, tag_actions, text_actions

TOOLS = [["search"], ["python"]]


def _env(ground_truth="random", max_turns=2, **config) -> SearchCodeEnv:
    return skyrl_gym.make(
        "searchcode",
        env_config=DictConfig({"env_class": "searchcode", **config}),
        extras={"reward_spec": {"method": "rule", "ground_truth": ground_truth}, "max_turns": max_turns},
    )


# -- SkyRL's cases ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "action, tool_name, tool_input",
    [
        ("<tool><search>how to reverse a string in Python</search></tool>", "search", ["how to reverse a string in Python"]),
        ("<tool><python>print('hello')</python></tool>", "python", ["print('hello')"]),
        ("<tool><search>binary search in Java</search></tool>", "search", ["binary search in Java"]),
    ],
)  # fmt: skip
def test_skyrl_parse_action(action, tool_name, tool_input):
    env = _env()
    group, name, argument = env._parse_action(action)
    assert (name, argument) == (tool_name, tool_input)
    assert group == {"search": "SearchToolGroup", "python": "PythonCodeExecutorToolGroup"}[tool_name]


@pytest.mark.parametrize(
    "action, expected",
    [
        ("<tool><python>print('hello world')</python></tool>", "hello world"),
        ("<tool><python>print(1 + 1)</python></tool>", "2"),
        (
            "<tool><python>raise ValueError('fail')</python></tool>",
            'Error executing Python code: Traceback (most recent call last):\n  File "<string>", line 1, in '
            "<module>\nValueError: fail",
        ),
    ],
)
def test_skyrl_python_execution(action, expected):
    env = _env()
    env.init([])
    output = env.step(action)
    assert output["observations"][0]["content"] == expected
    assert output["observations"][0]["role"] == "user"
    assert output["reward"] == 0.0 and output["done"] is False
    assert output["metadata"] == {
        "tool_group": "PythonCodeExecutorToolGroup",
        "tool_name": "python",
        "tool_input": [action[len("<tool><python>") : -len("</python></tool>")]],
        "tools": TOOLS,
    }


# -- the protocol -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "action, message",
    [
        ("no tool here", NO_TOOL_BLOCK),
        ("<tool><python>print(1)</python>", NO_TOOL_BLOCK),  # never closed
        ("<tool>print(1)</tool>", NO_INNER_TAG),
        ("<tool><python>print(1)</py></tool>", NO_INNER_TAG),
        (
            "<tool><calculator>1+1</calculator></tool>",
            "Tool 'calculator' not found in any registered tool group.",
        ),
    ],
)
def test_a_turn_without_a_valid_call_gets_skyrls_error_text(action, message):
    output = _env().step(action)
    assert output["observations"] == [{"role": "user", "content": message}]
    assert output["metadata"] == {"tool_group": None, "tool_name": None, "tool_input": "", "tools": TOOLS}
    assert NO_TOOL_BLOCK == "No <tool>...</tool> block found in action string."
    assert NO_INNER_TAG == "No valid inner tool tag found inside <tool> block."


def test_parsing_takes_the_first_tool_block_and_its_first_closed_tag():
    env = _env()
    action = (
        "<tool> <b>no</c> <python> x </python> <search>y</search> </tool> <tool><search>z</search></tool>"
    )
    assert env._parse_action(action) == ("PythonCodeExecutorToolGroup", "python", ["x"])


def test_a_program_that_prints_nothing_gets_no_observation():
    output = _env().step("<tool><python>x = 1</python></tool>")
    assert output["observations"] == [] and not output["done"]


def test_the_reward_reads_the_first_answer_in_the_whole_conversation():
    env = _env(ground_truth="42", max_turns=4)
    env.init([])
    computed = env.step("<tool><python>print(6 * 7)</python></tool>")
    assert computed["observations"][0]["content"] == "42" and computed["reward"] == 0.0
    final = env.step("So the answer is <solution>#### 42</solution>")
    assert final == {"observations": [], "reward": 1.0, "done": True, "metadata": {"end": "terminated"}}
    # an observation is part of the conversation too: a program that prints the marker counts first
    env = _env(ground_truth="7", max_turns=4)
    env.step("<tool><python>print('#### 6')</python></tool>")
    assert env.step("<solution>#### 7</solution>")["reward"] == 0.0


def test_the_episode_ends_after_max_turns_scored_and_named_truncated():
    env = _env(ground_truth="5")  # SkyRL's max_turns 2 from the row
    env.step("<tool><python>print(2 + 3)</python></tool>")
    last = env.step("I think #### 5 but no solution tag")
    assert last["done"] and last["reward"] == 1.0 and last["observations"] == []
    assert last["metadata"]["end"] == "truncated" and last["metadata"]["truncated_by"] == "max_turns"
    assert SearchCodeEnv(extras={"reward_spec": {"ground_truth": "1"}}).max_turns == 2
    assert (
        SearchCodeEnv(env_config={"max_turns": 3}, extras={"reward_spec": {"ground_truth": "1"}}).max_turns
        == 3
    )


def test_no_tool_runs_on_the_solution_turn():
    env = _env(ground_truth="1", max_turns=5)
    output = env.step("<tool><python>print('ran')</python></tool><solution>#### 1</solution>")
    assert output["observations"] == [] and output["done"] and output["reward"] == 1.0
    assert [m["role"] for m in env.chat_history] == ["assistant"]


def test_search_uses_the_local_retriever_by_default():
    env = _env(max_turns=3)
    env.init([])
    output = env.step("<tool><search>capital of France</search></tool>")
    content = output["observations"][0]["content"]
    result = json.loads(content)["result"]  # SkyRL's search tool answers {"result": "Doc 1: ..."}
    assert result.startswith("Doc 1: ") and "Paris" in result
    assert output["metadata"]["tool_name"] == "search"


def test_search_through_a_retrieval_server():
    server = serve(get_retriever("bm25"))
    try:
        env = _env(max_turns=3, search_url=server.url)
        assert env.search_tools.search_url == server.url
        output = env.step("<tool><search>capital of France</search></tool>")
    finally:
        server.close()
    assert "Paris" in json.loads(output["observations"][0]["content"])["result"]


def test_a_tool_call_budget_ends_the_episode_as_truncated():
    env = skyrl_gym.make(
        "searchcode",
        extras={"reward_spec": {"ground_truth": "1"}, "max_turns": 5},
        budget={"max_tool_calls": 1},
    )
    assert env.step("<tool><python>print(1)</python></tool>")["observations"][0]["content"] == "1"
    output = env.step("<tool><python>print(2)</python></tool>")
    assert output["done"] and output["metadata"]["truncated_by"] == "max_tool_calls"


def test_rows_without_a_ground_truth_are_refused_at_make():
    with pytest.raises(MissingGroundTruthError):
        skyrl_gym.make("searchcode", extras={"max_turns": 2})
    with pytest.raises(ValueError, match="did you mean 'python_timeout'"):
        SearchCodeEnv(env_config={"python_timeot": 1})


# -- the bundled questions ----------------------------------------------------------------------------------------


def _facts_in_corpus() -> dict[str, str]:
    return {row["id"]: row["text"] for row in load_corpus(default_corpus_path())}


def _number(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    assert found, (pattern, text)
    return int(found.group(1).replace(",", ""))


def test_every_answer_follows_from_the_corpus_as_written():
    corpus = _facts_in_corpus()
    kinds = set()
    for seed in range(40):
        extras = tasks.task_for_seed(seed)["extras"]
        kind, codes = extras["extra_info"]["kind"], extras["extra_info"]["countries"]
        kinds.add(kind)
        if kind == "calling_codes":
            found = [
                _number(r"calling code of .+? is \+(\d+)\.", corpus[f"country-{c}-economy"]) for c in codes
            ]
            expected = sum(found)
        elif kind == "total_area":
            expected = sum(
                _number(r"area of ([\d,]+) square", corpus[f"country-{c}-geography"]) for c in codes
            )
        elif kind == "population_gap":
            a, b = (
                _number(r"population of about ([\d,]+) people", corpus[f"country-{c}-overview"])
                for c in codes
            )
            expected = a - b
        else:
            (code,) = codes
            people = _number(r"population of about ([\d,]+) people", corpus[f"country-{code}-overview"])
            expected = people // _number(r"area of ([\d,]+) square", corpus[f"country-{code}-geography"])
        assert extras["reward_spec"]["ground_truth"] == str(expected)
    assert kinds == set(tasks.KINDS)


def test_a_bundled_question_solved_with_the_tools():
    env = skyrl_gym.make("searchcode")
    prompt, _ = env.reset(seed=0)
    assert prompt[0]["content"].startswith(tasks.instruction(tasks.MAX_TURNS))
    reference = env.reference_action()
    output = env.step(reference)
    assert output["reward"] == 1.0 and output["metadata"]["end"] == "terminated"


def test_check_env_with_hostile_tool_calls():
    report = check_env(lambda: skyrl_gym.make("searchcode"))
    assert {
        "oracle-earns-full-reward",
        "noop-earns-nothing",
        "model-failures-are-not-errors",
        "gymnasium-check-env",
    } <= set(report.passed)


_CALLS = st.one_of(
    st.tuples(st.sampled_from(["search", "python", "nope"]), text_actions(120)).map(
        lambda t: f"<tool><{t[0]}>{t[1]}</{t[0]}></tool>"
    ),
    st.integers(-50, 50).map(lambda n: f"<tool><python>print({n} * 2)</python></tool>"),
    tag_actions(["tool", "search", "python", "solution"]),
    text_actions(300),
)


@settings(max_examples=25, deadline=None)
@given(episodes(_CALLS, max_turns=5))
def test_any_episode_ends_in_an_observation_or_a_score(actions):
    env = skyrl_gym.make("searchcode")
    outputs = play_episode(env, actions, seed=3)
    assert all(o["reward"] == 0.0 for o in outputs[:-1])
    assert outputs[-1]["reward"] in (0.0, 1.0)
    for output in outputs:
        if not output["done"]:
            assert set(output["metadata"]) == {"tool_group", "tool_name", "tool_input", "tools"}
