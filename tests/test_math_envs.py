"""The built-in arithmetic environments: scoring, the problem generator, both environments, the dataset."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env as gymnasium_check_env
from hypothesis import given, settings
from hypothesis import strategies as st

import skyrl_gym
from skyrl_gym.envs.math import MathEnv, MultiTurnMathEnv
from skyrl_gym.envs.math.scoring import Grade, extract_answer, grade, parse_number, score
from skyrl_gym.envs.math.tasks import KINDS, build_rows, generate_problem, split_of, task_for_seed
from skyrl_gym.guard import guard_of
from skyrl_gym.testing import check_env, play_episode
from skyrl_gym.testing.strategies import adversarial_actions, episodes, tag_actions, text_actions

REPO = Path(__file__).resolve().parents[1]


def row_extras(row: dict) -> dict:
    """What SkyRL hands an environment: every column but the prompt and the env class."""
    return {k: v for k, v in row.items() if k not in ("prompt", "env_class")}


def row_task(row: dict) -> dict:
    return {"prompt": row["prompt"], "extras": row_extras(row)}


def any_action() -> st.SearchStrategy[str]:
    """Answers in and out of the protocol, free text and the kit's hostile actions."""
    answers = st.integers(-100, 10**6).map(lambda n: f"#### {n}")
    return st.one_of(answers, tag_actions(["answer", "think"]), adversarial_actions(), text_actions(200))


# -- scoring ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("#### 42", "42"),
        ("so the answer is\n#### 42\n", "42"),
        ("\\boxed{42}", "42"),
        ("\\boxed{\\text{42}}", "\\text{42}"),
        ("\\boxed{1{,}234}", "1{,}234"),
        ("\\boxed{{7}} and more", "{7}"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{5} ... #### 6", "6"),
        ("#### 6 ... \\boxed{5}", "5"),
        ("#### 1\n#### 2", "2"),
        ("#### 3\nthen \\boxed{4", "3"),  # the unclosed box was cut off; the #### answer stands
        ("#### 3 apples, \\boxed{4", "3 apples, \\boxed{4"),  # the rest of the #### line
        ("\\boxed{4", None),
        ("the answer is 42", None),
        ("", None),
        (None, None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    ("answer", "value"),
    [
        ("42", 42),
        (" 42 ", 42),
        ("-7", -7),
        ("+7", 7),
        ("\u22125", -5),  # a unicode minus
        ("1,234", 1234),
        ("1,234,567", 1234567),
        ("42.0", 42),
        ("42.000", 42),
        ("$42", 42),
        ("$42$", 42),
        ("\\$1,000", 1000),
        ("25\\%", 25),
        ("**42**", 42),
        ("42 apples", 42),
        ("42.", 42),
        ("\\text{42}", 42),
        ("1{,}234", 1234),
        ("12,34", None),
        ("4 2", None),
        ("forty-two", None),
        ("42/3", None),
        ("", None),
        ("9" * 201, None),
        (42, 42),
        (True, None),
        (None, None),
    ],
)
def test_parse_number(answer, value):
    assert parse_number(answer) == value


def test_parse_number_keeps_fractions_apart_from_integers():
    assert str(parse_number("42.5")) == "42.5"
    assert parse_number("42.5") != 42


@pytest.mark.parametrize(
    ("text", "ground_truth", "reward"),
    [
        ("#### 42", "42", 1.0),
        ("#### 42", 42, 1.0),
        ("#### 42.0", "42", 1.0),
        ("#### $1,234", "1234", 1.0),
        ("$\\boxed{1234}$", "1,234", 1.0),
        ("\\boxed{-3}", "-3", 1.0),
        ("#### 41", "42", 0.0),
        ("#### 42.5", "42", 0.0),
        ("42", "42", 0.0),  # no answer marker
        ("", "42", 0.0),
        ("\\boxed{42} #### 41", "42", 0.0),
        ("#### 42", None, 0.0),
        ("#### 42", "not a number", 0.0),
        ("\\boxed{x+1}", "x+1", 1.0),  # a non-numeric ground truth compares as text
    ],
)
def test_score(text, ground_truth, reward):
    assert score(text, ground_truth) == reward


def test_grade_reports_the_parts():
    assert grade("work...\n#### 1,000.00", "1000") == Grade("1,000.00", 1000, format_valid=True, correct=True)
    assert grade("#### soon", "1000") == Grade("soon", None, format_valid=False, correct=False)
    assert grade("#### 7.5", 7) == Grade("7.5", "7.5", format_valid=True, correct=False)


@pytest.mark.parametrize(
    "text",
    [
        "x" * 1_000_000,
        "\\boxed{" * 150_000,
        "{" * 1_000_000 + "\\boxed{42}",
        "#" * 1_000_000,
        "#### " + "9" * 1_000_000,
        "\\boxed{" + "1" * 1_000_000 + "}",
        "\x00🙂\ud800" * 300_000,
        "<answer>1</answer>" * 50_000 + "#### 42",
    ],
)
@pytest.mark.timeout(60)  # a scan that backtracks or rescans is quadratic here: hours, not the 60 s allowed
def test_scoring_is_fast_and_total_on_adversarial_text(text):
    assert score(text, "42") in (0.0, 1.0)


@settings(max_examples=200, deadline=None)
@given(text_actions(), st.one_of(st.integers(), st.text(max_size=10), st.none()))
def test_score_never_raises(text, ground_truth):
    assert score(text, ground_truth) in (0.0, 1.0)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(-(10**12), 10**12), st.sampled_from(["#### {}", "\\boxed{{{}}}", "#### ${:,}", "#### {}.0"])
)
def test_score_accepts_every_integer_in_every_format(n, template):
    assert score("Reasoning.\n" + template.format(n), str(n)) == 1.0
    assert score("Reasoning.\n" + template.format(n + 1), str(n)) == 0.0


# -- the problem generator ---------------------------------------------------------------------------------


def test_generator_is_deterministic_for_a_seed():
    first = [generate_problem(random.Random(7)) for _ in range(3)]
    assert first == [generate_problem(random.Random(7)) for _ in range(3)]
    assert build_rows(50, seed=3) == build_rows(50, seed=3)
    assert build_rows(50, seed=3) != build_rows(50, seed=4)
    assert task_for_seed(11) == task_for_seed(11)
    assert task_for_seed(11) != task_for_seed(12)


def test_generator_covers_every_kind_with_whole_answers():
    rng = random.Random(0)
    problems = [generate_problem(rng) for _ in range(3000)]
    assert {p.kind for p in problems} == set(KINDS)
    assert all(isinstance(p.answer, int) and p.answer >= 0 for p in problems)
    assert all(str(p.answer) not in ("", "None") and p.question.endswith("?") for p in problems)
    assert len({p.question for p in problems}) > 2900  # paraphrases and numbers make few repeats


def test_train_and_test_share_no_question():
    train = build_rows(1000, seed=0, split="train")
    test = build_rows(200, seed=0, split="test")
    train_questions = {r["prompt"][-1]["content"] for r in train}
    test_questions = {r["prompt"][-1]["content"] for r in test}
    assert len(train_questions) == 1000 and len(test_questions) == 200
    assert not train_questions & test_questions
    # another seed draws other questions, still on the right side of the split
    assert all(split_of(r["prompt"][-1]["content"]) == "test" for r in build_rows(100, seed=9, split="test"))
    assert split_of(task_for_seed(5)["prompt"][-1]["content"]) == "train"


def test_rows_follow_skyrl_dataset_format():
    row = build_rows(1, seed=0, split="test", env_class="math_multi_turn", max_turns=4)[0]
    assert list(row) == ["data_source", "prompt", "env_class", "reward_spec", "extra_info", "max_turns"]
    assert row["data_source"] == "skyrl_math"
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert "####" in row["prompt"][0]["content"]
    assert row["reward_spec"]["method"] == "rule"
    assert parse_number(row["reward_spec"]["ground_truth"]) is not None
    assert row["extra_info"]["split"] == "test" and row["extra_info"]["index"] == 0
    assert row["extra_info"]["kind"] in KINDS
    assert row["max_turns"] == 4
    json.dumps(row)
    with pytest.raises(ValueError, match="split"):
        build_rows(1, split="validation")


# -- MathEnv ----------------------------------------------------------------------------------------------


def test_math_env_with_a_dataset_row():
    row = build_rows(1, seed=1, split="test")[0]
    answer = row["reward_spec"]["ground_truth"]
    env = skyrl_gym.make("math", extras=row_extras(row))
    observations, info = env.init(row["prompt"])
    assert observations == row["prompt"] and info == {}
    output = env.step(f"Let me work it out.\n#### {answer}")
    assert output["reward"] == 1.0 and output["done"] is True and output["observations"] == []
    assert output["metadata"] == {
        "parsed_answer": int(answer),
        "format_valid": True,
        "correct": True,
        "end": "terminated",
    }
    assert env.get_metrics() == {"turns": 1, "solved": True, "format_valid": True}


@pytest.mark.parametrize(
    ("action", "reward", "format_valid"),
    [("#### 41", 0.0, True), ("\\boxed{42}", 1.0, True), ("42", 0.0, False), ("", 0.0, False)],
)
def test_math_env_rewards(action, reward, format_valid):
    env = skyrl_gym.make("math", extras={"reward_spec": {"method": "rule", "ground_truth": "42"}})
    env.init([{"role": "user", "content": "What is 6 * 7?"}])
    output = env.step(action)
    assert output["reward"] == reward and output["done"] is True
    assert output["metadata"]["format_valid"] is format_valid
    with pytest.raises(skyrl_gym.EpisodeEndedError):
        env.step("#### 42")


def test_math_env_reset_by_seed_draws_a_generated_problem():
    env = skyrl_gym.make("math")
    observations, _ = env.reset(seed=3)
    assert observations == task_for_seed(3)["prompt"]
    assert env.reference_action() == f"#### {task_for_seed(3)['extras']['reward_spec']['ground_truth']}"
    assert env.step(env.reference_action())["reward"] == 1.0
    again, _ = env.reset(seed=3)
    assert again == observations
    assert env.step("#### -1")["reward"] == 0.0


def test_math_env_without_a_ground_truth_says_what_to_do():
    env = MathEnv()
    with pytest.raises(ValueError, match="reward_spec"):
        env.init([{"role": "user", "content": "1 + 1?"}])
    assert env.reference_action() is None


def test_math_env_in_gymnasium():
    env = gymnasium.make("skyrl_gym/math")
    gymnasium_check_env(env.unwrapped, skip_render_check=True)
    observation, info = env.reset(seed=0)
    assert "####" in observation and info["messages"][-1]["role"] == "user"
    answer = env.unwrapped.env.reference_action()
    _, reward, terminated, truncated, info = env.step(answer)
    assert (reward, terminated, truncated, info["correct"]) == (1.0, True, False, True)
    env.close()


def test_math_env_conforms():
    report = check_env(lambda: skyrl_gym.make("math"))
    assert report.ok and "oracle-earns-full-reward" in report.passed


def test_math_env_conforms_on_dataset_rows(skyrl_check_env):
    tasks = [row_task(r) for r in build_rows(3, seed=0, split="test")]
    skyrl_check_env(lambda: skyrl_gym.make("math"), tasks=tasks)


@settings(max_examples=30, deadline=None)
@given(episodes(any_action(), max_turns=2))
def test_math_env_survives_any_action(actions):
    outputs = play_episode(skyrl_gym.make("math"), actions, seed=0)
    assert len(outputs) == 1 and outputs[0]["done"]
    assert outputs[0]["reward"] in (0.0, 1.0)


# -- MultiTurnMathEnv -------------------------------------------------------------------------------------


def test_multi_turn_feedback_then_solve():
    row = build_rows(1, seed=2, split="test", env_class="math_multi_turn", max_turns=3)[0]
    answer = int(row["reward_spec"]["ground_truth"])
    env = skyrl_gym.make("math_multi_turn", extras=row_extras(row))
    env.init(row["prompt"])

    first = env.step("I think it is about that much.")
    assert (first["reward"], first["done"]) == (0.0, False)
    assert first["observations"][0]["role"] == "user"
    feedback = first["observations"][0]["content"]
    assert "#### N" in feedback and "2 turns left" in feedback

    second = env.step(f"#### {answer + 1}")
    assert second["observations"] == [
        {"role": "user", "content": f"Your answer {answer + 1} is incorrect. 1 turn left. Try again."}
    ]
    assert second["metadata"]["parsed_answer"] == answer + 1 and not second["done"]

    third = env.step(f"\\boxed{{{answer}}}")
    assert (third["reward"], third["done"], third["metadata"]["end"]) == (1.0, True, "terminated")
    assert env.get_metrics() == {"turns": 3, "solved": True, "format_valid": True, "distinct_answers": 2}


def test_multi_turn_runs_out_of_turns():
    extras = {"reward_spec": {"method": "rule", "ground_truth": "10"}, "max_turns": 2}
    env = skyrl_gym.make("math_multi_turn", extras=extras)
    env.init([{"role": "user", "content": "What is 5 + 5?"}])
    assert env.step("#### 9")["done"] is False
    last = env.step("#### 11")
    assert (last["reward"], last["done"], last["observations"]) == (0.0, True, [])
    assert last["metadata"]["end"] == "truncated" and last["metadata"]["truncated_by"] == "max_turns"
    assert guard_of(env).end == "truncated"


def test_multi_turn_max_turns_sources():
    assert MultiTurnMathEnv().max_turns == 3
    assert MultiTurnMathEnv(env_config={"max_turns": 5}).max_turns == 5
    assert MultiTurnMathEnv(env_config={"max_turns": 5}, extras={"max_turns": 2}).max_turns == 2
    assert skyrl_gym.make("math_multi_turn", env_config={"max_turns": 4}).unwrapped.max_turns == 4
    with pytest.raises(ValueError, match="max_turns"):
        MultiTurnMathEnv(extras={"max_turns": 0})


def test_multi_turn_reset_by_seed():
    env = skyrl_gym.make("math_multi_turn")
    observations, _ = env.reset(seed=8)
    assert "try again" in observations[0]["content"]
    outputs = play_episode(env, ["", "#### -1", env.reference_action()], seed=8)
    assert [o["reward"] for o in outputs] == [0.0, 0.0, 1.0]


def test_multi_turn_in_gymnasium():
    env = gymnasium.make("skyrl_gym/math_multi_turn")
    gymnasium_check_env(env.unwrapped, skip_render_check=True)
    env.reset(seed=1)
    observation, reward, terminated, truncated, _ = env.step("no idea")
    assert "turns left" in observation and (reward, terminated, truncated) == (0.0, False, False)
    env.step("#### -1")
    _, _, terminated, truncated, info = env.step("#### -2")
    assert (terminated, truncated, info["truncated_by"]) == (False, True, "max_turns")


def test_multi_turn_conforms(skyrl_check_env):
    skyrl_check_env(lambda: skyrl_gym.make("math_multi_turn"))
    rows = build_rows(2, seed=0, split="test", env_class="math_multi_turn", max_turns=2)
    tasks = [row_task(r) for r in rows]
    skyrl_check_env(lambda: skyrl_gym.make("math_multi_turn"), tasks=tasks)


@settings(max_examples=30, deadline=None)
@given(episodes(any_action(), max_turns=5))
def test_multi_turn_survives_any_episode(actions):
    outputs = play_episode(skyrl_gym.make("math_multi_turn"), actions, seed=1)
    assert len(outputs) <= 3
    assert all(not o["done"] for o in outputs[:-1])
    assert all(o["observations"] for o in outputs if not o["done"])


# -- the dataset script -----------------------------------------------------------------------------------


def run_build(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "datasets" / "math" / "build.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_dataset_script(tmp_path):
    result = run_build("--out", str(tmp_path / "math"), "--train", "300", "--test", "60", "--seed", "0")
    assert result.returncode == 0, result.stderr
    train = read_jsonl(tmp_path / "math" / "train.jsonl")
    test = read_jsonl(tmp_path / "math" / "test.jsonl")
    assert (len(train), len(test)) == (300, 60)
    assert train == build_rows(300, seed=0, split="train")
    assert not {r["prompt"][-1]["content"] for r in train} & {r["prompt"][-1]["content"] for r in test}
    assert {r["env_class"] for r in train + test} == {"math"}

    # the rows play as they are
    row = test[0]
    env = skyrl_gym.make(row["env_class"], extras=row_extras(row))
    env.init(row["prompt"])
    assert env.step(env.reference_action())["reward"] == 1.0


def test_dataset_script_multi_turn(tmp_path):
    result = run_build("--out", str(tmp_path), "--train", "5", "--test", "5", "--multi-turn", "--max-turns=2")
    assert result.returncode == 0, result.stderr
    rows = read_jsonl(tmp_path / "train.jsonl")
    assert {(r["env_class"], r["max_turns"]) for r in rows} == {("math_multi_turn", 2)}
    assert run_build("--out", str(tmp_path), "--train", "-1").returncode != 0


def test_dataset_script_writes_parquet_when_pyarrow_is_installed(tmp_path):
    parquet = pytest.importorskip("pyarrow.parquet")
    assert run_build("--out", str(tmp_path), "--train", "4", "--test", "2").returncode == 0
    assert parquet.read_table(tmp_path / "train.parquet").to_pylist() == read_jsonl(tmp_path / "train.jsonl")
