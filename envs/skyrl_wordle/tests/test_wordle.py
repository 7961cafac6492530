"""Tests of the Wordle environment: pinned feedback, whole episodes, and property tests with the kit."""

from __future__ import annotations

import collections
import subprocess
import sys
from importlib.metadata import entry_points

import gymnasium
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from skyrl_wordle.env import MAX_GUESSES, WordleEnv, load_words, parse_guess, score_guess

import skyrl_gym
from skyrl_gym.testing import play_episode
from skyrl_gym.testing.strategies import adversarial_actions, episodes, tag_actions, text_actions

C, P, A = "correct", "present", "absent"


def secret(word: str, **extras) -> dict:
    return {"reward_spec": {"method": "rule", "ground_truth": word}, **extras}


PROMPT = [{"role": "user", "content": "Guess the secret word."}]


def any_action() -> st.SearchStrategy[str]:
    """Real guesses, the tag protocol done right and wrong, free text and the kit's hostile actions."""
    guesses = st.sampled_from(load_words()).map(lambda w: f"<guess>{w}</guess>")
    return st.one_of(guesses, tag_actions(["guess"]), adversarial_actions(["guess"]), text_actions(100))


# -- the rules of the game --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("guess", "target", "marks"),
    [
        ("crane", "crane", [C, C, C, C, C]),
        ("react", "crane", [P, P, C, P, A]),
        ("papal", "apple", [P, P, C, A, P]),  # only one 'a' in apple: the second is absent
        ("eerie", "speed", [P, P, A, A, A]),  # two 'e's in speed: the third is absent
        ("speed", "eerie", [A, A, P, P, A]),
        ("sheep", "sleep", [C, A, C, C, C]),
        ("mouse", "brick", [A, A, A, A, A]),
    ],
)
def test_score_guess(guess, target, marks):
    assert score_guess(guess, target) == marks


@pytest.mark.parametrize(
    ("action", "guess"),
    [
        ("<guess>crane</guess>", "crane"),
        ("I think... <guess> Crane </guess>", "crane"),
        ("<GUESS>SLATE</GUESS>", "slate"),
        ("<guess>one</guess> no, <guess>two</guess>", "two"),
        ("<guess><guess>inner</guess></guess>", "inner"),
        ("<guess>unclosed", None),
        ("</guess><guess>", None),
        ("<guess>crane</guess> or maybe <guess>", "crane"),  # a last tag left open: the closed one counts
        ("crane", None),
        ("", None),
    ],
)
def test_parse_guess(action, guess):
    assert parse_guess(action) == guess


def test_word_list():
    words = load_words()
    assert len(words) >= 300 and len(set(words)) == len(words)
    assert all(len(w) == 5 and w.isascii() and w.isalpha() and w.islower() for w in words)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(load_words()), st.sampled_from(load_words()))
def test_marks_agree_with_letter_counts(guess, target):
    marks = score_guess(guess, target)
    assert all((m == C) == (g == t) for m, g, t in zip(marks, guess, target, strict=True))
    # letters marked correct or present are exactly the letters the two words share
    shared = sum((collections.Counter(guess) & collections.Counter(target)).values())
    assert sum(m != A for m in marks) == shared
    assert score_guess(target, target) == [C] * 5


# -- whole episodes ---------------------------------------------------------------------------------------


def test_found_through_the_entry_point():
    names = {e.name: e.value for e in entry_points(group="skyrl_gym.envs")}
    assert names.get("wordle") == "skyrl_wordle:register_envs"
    # a fresh interpreter finds it by importing skyrl_gym alone
    code = "import skyrl_gym; print(skyrl_gym.make('wordle')); print(skyrl_gym.spec('wordle').entry_point)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.split() == ["WordleEnv<wordle>", "skyrl_wordle.env:WordleEnv"]


def test_solving_in_three_guesses():
    env = skyrl_gym.make("wordle", extras=secret("crane"))
    env.init(PROMPT)
    first = env.step("Start with vowels. <guess>audio</guess>")
    assert first["observations"] == [
        {"role": "user", "content": "AUDIO: A=present U=absent D=absent I=absent O=absent. 5 guesses left."}
    ]
    assert (first["reward"], first["done"], first["metadata"]["marks"]) == (0.0, False, [P, A, A, A, A])
    second = env.step("<guess>react</guess>")
    assert second["metadata"]["marks"] == [P, P, C, P, A]
    last = env.step("<guess>crane</guess>")
    assert (last["reward"], last["done"], last["metadata"]["end"]) == (1.0, True, "terminated")
    assert env.get_metrics() == {"solved": True, "turns": 3, "invalid_guesses": 0}


def test_malformed_guesses_cost_a_turn_and_say_why():
    env = skyrl_gym.make("wordle", extras=secret("crane"))
    env.init(PROMPT)
    assert "no <guess>" in env.step("crane")["observations"][0]["content"]
    output = env.step("<guess>cat</guess>")
    assert output["observations"][0]["content"].startswith("'cat' is not a 5-letter word.")
    assert output["metadata"] == {"guess": None, "valid": False}
    assert env.get_metrics()["invalid_guesses"] == 2


def test_out_of_guesses_ends_truncated():
    env = skyrl_gym.make("wordle", extras=secret("crane"))
    env.init(PROMPT)
    outputs = [env.step("<guess>mouse</guess>") for _ in range(MAX_GUESSES)]
    assert [o["done"] for o in outputs] == [False] * (MAX_GUESSES - 1) + [True]
    assert "1 guess left" in outputs[-2]["observations"][0]["content"]
    last = outputs[-1]
    assert last["reward"] == 0.0 and last["observations"] == []
    assert last["metadata"] | {"marks": None} == {
        "guess": "mouse",
        "valid": True,
        "marks": None,
        "end": "truncated",
        "truncated_by": "max_turns",
        "secret": "crane",
    }


def test_an_outside_turn_budget_is_what_the_model_is_told():
    env = skyrl_gym.make("wordle", extras=secret("crane"), budget={"max_turns": 3})
    env.init(PROMPT)
    outputs = [env.step("<guess>mouse</guess>") for _ in range(3)]
    told = [o["observations"][0]["content"] for o in outputs]
    assert [t.rsplit(": ", 1)[1] for t in told] == [
        "M=absent O=absent U=absent S=absent E=correct. 2 guesses left.",
        "M=absent O=absent U=absent S=absent E=correct. 1 guess left.",
        "M=absent O=absent U=absent S=absent E=correct. 0 guesses left.",
    ]
    # the end is still the budget's truncation, never the environment's own end
    assert [o["done"] for o in outputs] == [False, False, True]
    assert outputs[-1]["metadata"]["end"] == "truncated"
    assert outputs[-1]["metadata"]["truncated_by"] == "max_turns"
    assert "secret" not in outputs[-1]["metadata"]
    # a malformed guess is told the budget's count too; a budget above the row's own changes nothing
    env.reset(options={"extras": secret("crane")})
    assert env.step("no guess")["observations"][0]["content"].endswith(" 2 guesses left.")
    roomy = skyrl_gym.make("wordle", extras=secret("crane", max_turns=3), budget={"max_turns": 10})
    roomy.init(PROMPT)
    assert roomy.step("<guess>mouse</guess>")["observations"][0]["content"].endswith(" 2 guesses left.")


def test_without_an_outside_budget_the_text_is_the_rows_count():
    env = skyrl_gym.make("wordle", extras=secret("crane"))
    env.init(PROMPT)
    told = [env.step("<guess>mouse</guess>")["observations"][0]["content"] for _ in range(2)]
    assert [t.rsplit(". ", 1)[1] for t in told] == ["5 guesses left.", "4 guesses left."]
    assert env.unwrapped.turns_left_by_budget is None


def test_row_settings():
    env = skyrl_gym.make("wordle", extras=secret("Crane", max_turns=2))
    assert (env.unwrapped.target, env.unwrapped.max_turns) == ("crane", 2)
    strict = skyrl_gym.make("wordle", env_config={"dictionary_only": True}, extras=secret("crane"))
    strict.init(PROMPT)
    assert "not in the word list" in strict.step("<guess>zzzzz</guess>")["observations"][0]["content"]
    with pytest.raises(ValueError, match="5 letters a-z"):
        WordleEnv(extras=secret("cranes"))
    with pytest.raises(ValueError, match="secret word"):
        WordleEnv().init(PROMPT)


def test_reset_by_seed_and_reference_action():
    env = skyrl_gym.make("wordle")
    first, _ = env.reset(seed=4)
    word = env.unwrapped.target
    assert word in load_words() and word not in first[-1]["content"]
    assert env.reference_action() == f"<guess>{word}</guess>"
    env.reset(seed=4)
    assert env.unwrapped.target == word
    assert len({WordleEnv().sample_task(s)["extras"]["reward_spec"]["ground_truth"] for s in range(50)}) > 30


def test_gymnasium_make():
    env = gymnasium.make("skyrl_gym/wordle")
    observation, info = env.reset(seed=0)
    assert "<guess>word</guess>" in observation
    observation, reward, terminated, truncated, info = env.step("<guess>slate</guess>")
    assert observation.startswith("SLATE: ") and (reward, terminated, truncated) == (0.0, False, False)
    env.close()


# -- the test kit -----------------------------------------------------------------------------------------


def test_conforms(skyrl_check_env):
    report = skyrl_check_env(lambda: skyrl_gym.make("wordle"))
    assert "oracle-earns-full-reward" in report.passed and "gymnasium-check-env" in report.passed


@settings(max_examples=40, deadline=None)
@given(episodes(any_action(), max_turns=8))
def test_any_episode_follows_the_rules(actions):
    outputs = play_episode(skyrl_gym.make("wordle"), actions, seed=0)
    assert len(outputs) <= MAX_GUESSES
    assert all(o["reward"] == 0.0 and len(o["observations"]) == 1 for o in outputs if not o["done"])
    assert outputs[-1]["reward"] in (0.0, 1.0)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.lists(st.sampled_from(load_words()), max_size=MAX_GUESSES - 1))
def test_the_secret_word_always_wins(seed, wrong_guesses):
    env = skyrl_gym.make("wordle")
    env.reset(seed=seed)
    word = env.unwrapped.target
    guesses = [f"<guess>{w}</guess>" for w in wrong_guesses if w != word] + [env.reference_action()]
    outputs = play_episode(env, guesses, seed=seed)
    assert outputs[-1]["reward"] == 1.0 and outputs[-1]["metadata"]["end"] == "terminated"
    assert sum(o["reward"] for o in outputs) == 1.0
