"""``gsm8k`` and ``gsm8k_multi_turn``: SkyRL's reward rules, observation texts and module names."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import DictConfig

import skyrl_gym
from skyrl_gym.envs.base_text_env import MissingGroundTruthError
from skyrl_gym.envs.gsm8k import tasks
from skyrl_gym.envs.gsm8k.env import GSM8kEnv
from skyrl_gym.envs.gsm8k.multi_turn_env import KEEP_GOING, LAST_TURN, GSM8kMultiTurnEnv
from skyrl_gym.envs.gsm8k.scoring import compute_score, extract_solution
from skyrl_gym.testing import check_env, play_episode
from skyrl_gym.testing.strategies import episodes, text_actions


def _row(ground_truth, **extras):
    return {"reward_spec": {"method": "rule", "ground_truth": ground_truth}, **extras}


# -- SkyRL's cases ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "output, ground_truth, expected",
    [
        ("The answer is #### 42", "42", 1.0),
        ("The answer is #### 42", "43", 0.0),
        ("The answer is 42", "42", 0.0),  # no '#### ': not an answer under the strict rule
    ],
)
def test_skyrl_cases_through_make_without_init(output, ground_truth, expected):
    env = skyrl_gym.make("gsm8k", env_config=DictConfig({"env_class": "gsm8k"}), extras=_row(ground_truth))
    assert isinstance(env, GSM8kEnv)
    output = env.step(output)
    assert output["reward"] == expected
    assert output["done"] is True and output["observations"] == []


# -- the strict and flexible rules --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, method, answer",
    [
        ("#### 1,234", "strict", "1234"),
        ("#### -7 apples", "strict", "-7"),
        ("first #### 3 then #### 4", "strict", "3"),  # the first marker counts
        ("####42", "strict", None),  # the space is part of the marker
        ("#### 42.", "strict", "42."),  # a full stop right after the number is read with it
        ("$#### 5$", "strict", "5"),
        ("it is 3, no, 12.5 in the end.", "flexible", "12.5"),  # the final "." alone is passed over
        ("so 1,000", "flexible", "1,000"),  # flexible keeps the commas
        ("nothing", "flexible", None),
    ],
)
def test_extract_solution(text, method, answer):
    assert extract_solution(text, method) == answer


def test_flexible_skips_lone_dots_and_keeps_a_trailing_full_stop():
    # "12.5." is one run; only a run that is just "." is passed over
    assert extract_solution("it is 12.5.", "flexible") == "12.5."
    assert extract_solution("3 . .", "flexible") == "3"
    assert extract_solution(". .", "flexible") == "."  # all runs are dots: SkyRL's loop ends on the first


def test_compute_score_compares_text_and_pays_the_format_score():
    assert compute_score("#### 42", "42") == 1.0
    assert compute_score("#### 42.0", "42") == 0.0  # text, not numbers, as in SkyRL
    assert compute_score("#### 41", "42", format_score=0.1) == 0.1
    assert compute_score("no answer", "42", format_score=0.1) == 0.0
    assert compute_score("#### 42", 42) == 1.0  # an int ground truth is compared as its decimal text
    assert compute_score(None, "42") == 0.0
    with pytest.raises(ValueError, match="strict"):
        compute_score("#### 1", "1", method="loose")


def test_flexible_method_from_env_config():
    env = GSM8kEnv(env_config={"method": "flexible"}, extras=_row("12"))
    assert env.step("I think it is 12")["reward"] == 1.0
    with pytest.raises(ValueError, match="did you mean 'method'"):
        GSM8kEnv(env_config={"methd": "flexible"}, extras=_row("12"))


def test_rows_without_a_ground_truth_are_refused_at_make():
    for extras in ({}, {"reward_spec": {"method": "rule"}}, {"max_turns": 2}):
        for env_id in ("gsm8k", "gsm8k_multi_turn"):
            with pytest.raises(MissingGroundTruthError):
                skyrl_gym.make(env_id, extras=extras)
    with pytest.raises(AssertionError):  # what SkyRL code catches
        skyrl_gym.make("gsm8k", extras={})


# -- multi-turn -------------------------------------------------------------------------------------------------


def test_multi_turn_observations_and_per_turn_rewards():
    env = skyrl_gym.make("gsm8k_multi_turn", extras=_row("42", max_turns=3))
    env.init([{"role": "user", "content": "q"}])
    first = env.step("#### 41")
    assert first["reward"] == pytest.approx(0.2 / 3)
    assert first["observations"] == [{"role": "user", "content": KEEP_GOING}]
    assert KEEP_GOING == (
        "Please provide your step-by-step reasoning, and also include a tentative numeric answer at the end "
        "in the exact format: '#### ANSWER'."
    )
    second = env.step("no idea")
    assert second["reward"] == 0.0 and not second["done"]
    assert second["observations"] == [
        {
            "role": "user",
            "content": "Now provide only the final numeric answer in the exact format: '#### ANSWER'.",
        }
    ]
    assert second["observations"][0]["content"] == LAST_TURN
    last = env.step("#### 40")
    assert last["done"] and last["observations"] == []
    assert last["metadata"]["end"] == "truncated" and last["metadata"]["truncated_by"] == "max_turns"
    assert env.get_metrics() == {"steps": 3}


def test_multi_turn_ends_on_the_right_answer():
    env = GSM8kMultiTurnEnv(extras=_row("7"))
    assert env.max_turns == 5  # SkyRL's default
    assert not env.step("#### 6")["done"]
    output = env.step("#### 7")
    assert output["reward"] == 1.0 and output["done"] and output["observations"] == []
    assert "end" not in output["metadata"]  # the framework names it terminated


def test_multi_turn_reads_max_turns_where_skyrl_does():
    assert GSM8kMultiTurnEnv(extras=_row("1", max_turns=2)).max_turns == 2
    assert GSM8kMultiTurnEnv(extras=_row("1", extra_info={"max_turns": 4})).max_turns == 4
    assert GSM8kMultiTurnEnv(env_config={"max_turns": 3}, extras=_row("1")).max_turns == 3
    with pytest.raises(ValueError, match="max_turns"):
        GSM8kMultiTurnEnv(extras=_row("1", max_turns=0))


def test_multi_turn_aggregate_metrics():
    assert GSM8kMultiTurnEnv.aggregate_metrics([{"steps": 1}, {"steps": 4}]) == {"avg_steps": 2.5}
    assert GSM8kMultiTurnEnv.aggregate_metrics([]) == {}


# -- tasks, oracle, no-op, conformance ----------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["gsm_symbolic", "procedural"])
def test_default_tasks_are_deterministic_and_solved_by_the_reference(source):
    env = skyrl_gym.make("gsm8k", env_config={"tasks": source})
    prompt, _ = env.reset(seed=11)
    again = skyrl_gym.make("gsm8k", env_config={"tasks": source})
    assert again.reset(seed=11)[0] == prompt
    assert prompt[-1]["content"].endswith(tasks.INSTRUCTION)
    assert env.extras["data_source"] == source
    reference = env.reference_action()
    assert reference.startswith("#### ")
    output = env.step(reference)
    assert output["reward"] == 1.0 and output["metadata"]["end"] == "terminated"


def test_noop_earns_nothing():
    env = skyrl_gym.make("gsm8k_multi_turn")
    env.reset(seed=3)
    total, done = 0.0, False
    while not done:
        output = env.step("")
        total, done = total + output["reward"], output["done"]
    assert total == 0.0 and env.turns == 5


def test_unknown_task_source_is_refused():
    with pytest.raises(ValueError, match="gsm_symbolic"):
        GSM8kEnv(env_config={"tasks": "gsm9k"})


@pytest.mark.parametrize("env_id", ["gsm8k", "gsm8k_multi_turn"])
def test_check_env(env_id):
    report = check_env(lambda: skyrl_gym.make(env_id))
    assert {"oracle-earns-full-reward", "noop-earns-nothing", "gymnasium-check-env"} <= set(report.passed)


@settings(max_examples=60, deadline=None)
@given(episodes(st.one_of(text_actions(), st.integers(-999, 999).map(lambda n: f"so #### {n}")), max_turns=6))
def test_any_episode_keeps_rewards_in_skyrls_range(actions):
    env = skyrl_gym.make("gsm8k_multi_turn")
    outputs = play_episode(env, actions, seed=5)
    per_turn = 0.2 / env.max_turns
    for output in outputs:
        assert output["reward"] in (0.0, 1.0) or output["reward"] == pytest.approx(per_turn)
    assert len(outputs) <= env.max_turns
