"""``aime``: SkyRL's Minerva rule (1.0 / -1.0), its end-of-turn token cases, its ground-truth key, the task set."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import DictConfig

import skyrl_gym
from skyrl_gym.envs.aime import tasks
from skyrl_gym.envs.aime.env import AIMEEnv
from skyrl_gym.envs.aime.scoring import (
    compute_score,
    last_boxed_only_string,
    normalize_final_answer,
    remove_boxed,
)
from skyrl_gym.envs.base_text_env import MissingGroundTruthError
from skyrl_gym.testing import check_env, play_episode
from skyrl_gym.testing.strategies import episodes, text_actions


@pytest.mark.parametrize(
    "output, ground_truth, expected",
    [
        ("Answer: \\boxed{42}", "42", 1.0),
        ("Answer: 42", "42", 1.0),
        ("Answer: \\boxed{43}", "42", -1.0),
        ("Answer: \\boxed{\\frac{1}{2}}", "\\frac{1}{2}", 1.0),
        ("Answer: \\boxed{0.5}", "\\frac{1}{2}", -1.0),
        ("Answer: \\boxed{\\text{forty-two}}", "42", -1.0),
        # an end-of-turn token ends the answer at its '<'; without the '<' it is part of the answer
        ("<|im_start|>Answer: \\boxed{42}<|im_end|>", "42", 1.0),
        ("<|im_start|>Answer: \\boxed{42}im_end|>", "42", -1.0),
        ("Answer: \\boxed{42}<|eot_id|>", "42", 1.0),
        ("Answer: \\boxed{42}|eot_id|>", "42", -1.0),
    ],
)
def test_skyrl_cases_through_make_without_init(output, ground_truth, expected):
    env = skyrl_gym.make(
        "aime",
        env_config=DictConfig({"env_class": "aime"}),
        extras={"reward_model": {"method": "rule", "ground_truth": ground_truth}},
    )
    assert isinstance(env, AIMEEnv)
    step = env.step(output)
    assert step["reward"] == expected
    assert step["done"] is True and step["observations"] == []
    assert step["metadata"]["acc"] is (expected == 1.0)


def test_metadata_holds_the_normalised_prediction():
    env = AIMEEnv(extras={"reward_model": {"ground_truth": "1,000"}})
    step = env.step("The total is 1000 dollars.\nANSWER :  $1,000$ dollars")
    assert step["reward"] == 1.0 and step["metadata"] == {"acc": True, "pred": "1000"}
    missing = AIMEEnv(extras={"reward_model": {"ground_truth": "7"}}).step("I give up")
    assert missing["reward"] == -1.0 and missing["metadata"]["pred"] == "[INVALID]"


def test_only_the_last_answer_in_the_last_300_characters_counts():
    assert compute_score("Answer: 5\nWait, no.\nAnswer: 6", "6")["score"] == 1.0
    assert compute_score("Answer: 6\n" + "x" * 400, "6")["score"] == -1.0


@pytest.mark.parametrize(
    "raw, normalised",
    [
        ("x = 12", "12"),
        ("5 \\text{ cm}", "5"),
        ("\\frac12", "\\frac{1}{2}"),
        ("\\sqrt3", "\\sqrt{3}"),
        ("90^\\circ", "90"),
        ("$\\boxed{7}$", "7"),
        ("1,234", "1234"),
        ("1,2", "12"),
        ("(1,2)", "(1,2)"),
    ],
)
def test_normalize_final_answer(raw, normalised):
    assert normalize_final_answer(raw) == normalised


def test_strict_box_rule():
    assert compute_score("so \\boxed{12}", "12", strict_box_verify=True) == {
        "score": 1.0,
        "acc": True,
        "pred": "12",
    }
    assert compute_score("Answer: 12", "12", strict_box_verify=True)["score"] == -1.0
    assert last_boxed_only_string("\\boxed{\\frac{1}{2}} and") == "\\boxed{\\frac{1}{2}}"
    assert last_boxed_only_string("\\boxed{open") is None
    assert remove_boxed("\\boxed{x}") == "x"
    with pytest.raises(ValueError):
        remove_boxed("boxed")


def test_ground_truth_keys():
    assert AIMEEnv(extras={"reward_spec": {"ground_truth": "3"}}).step("Answer: 3")["reward"] == 1.0
    with pytest.raises(MissingGroundTruthError, match="reward_model field is required"):
        skyrl_gym.make("aime", extras={"reward_spec_typo": {}})
    with pytest.raises(MissingGroundTruthError, match="ground_truth is required in reward_model"):
        skyrl_gym.make("aime", extras={"reward_model": {"method": "rule"}})


# -- the generated problems -----------------------------------------------------------------------------------


def test_every_family_generates_verified_answers_in_range():
    # generation checks each closed-form answer against a brute-force count and raises on a mismatch
    for family, generate in tasks.FAMILIES.items():
        rng = random.Random(family)
        for _ in range(40):
            question, answer = generate(rng)
            assert 0 <= answer <= 999 and question.endswith(("?", "."))


def test_the_answer_check_catches_a_wrong_family():
    with pytest.raises(tasks.AnswerMismatch, match="closed form gave 3, brute force 4"):
        tasks._check("broken", 3, 4)


def test_task_set_is_deterministic_and_varied():
    first = [tasks.task_for_seed(seed) for seed in range(60)]
    assert first == [tasks.task_for_seed(seed) for seed in range(60)]
    families = {t["extras"]["extra_info"]["family"] for t in first}
    assert families == set(tasks.FAMILIES)
    assert all(t["prompt"][0]["content"].endswith(tasks.INSTRUCTION) for t in first)


def test_a_known_problem_and_the_oracle():
    env = skyrl_gym.make("aime")
    prompt, _ = env.reset(seed=2)
    assert "Find the remainder when 78^883 is divided by 1000." in prompt[0]["content"]
    assert env.ground_truth == str(pow(78, 883, 1000))
    step = env.step(env.reference_action())
    assert step["reward"] == 1.0 and step["metadata"]["end"] == "terminated"


def test_check_env():
    report = check_env(lambda: skyrl_gym.make("aime"))
    assert {"oracle-earns-full-reward", "noop-earns-nothing", "gymnasium-check-env"} <= set(report.passed)


@settings(max_examples=80, deadline=None)
@given(
    episodes(
        st.one_of(
            text_actions(),
            st.integers(0, 999).map(lambda n: f"Answer: {n}"),
            st.text(max_size=30).map(lambda t: f"Answer: \\boxed{{{t}}}<|im_end|>"),
        ),
        max_turns=2,
    )
)
def test_any_answer_scores_plus_or_minus_one(actions):
    outputs = play_episode(skyrl_gym.make("aime"), actions, seed=4)
    assert len(outputs) == 1 and outputs[0]["reward"] in (1.0, -1.0)
    assert isinstance(outputs[0]["metadata"]["pred"], str)
