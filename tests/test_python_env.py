"""The ``python`` environment: code runs in the real sandbox, answers are scored by reasoning-gym's scorers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env as gymnasium_check_env
from hypothesis import given, settings
from hypothesis import strategies as st

import skyrl_gym
from skyrl_gym.envs.python import PythonEnv, PythonEnvConfig
from skyrl_gym.envs.python.protocol import cap_output, output_block, parse_action
from skyrl_gym.envs.python.scoring import check_reward_spec, plain_answer, score_answer
from skyrl_gym.envs.python.tasks import TASKS, build_rows, default_task, split_of
from skyrl_gym.runtime import available_backends
from skyrl_gym.testing import check_env, play_episode
from skyrl_gym.testing.strategies import adversarial_actions, episodes, tag_actions

REPO = Path(__file__).resolve().parents[1]
BIG = str(2**100)


def rule_task(ground_truth: str = BIG, max_turns: int | None = None) -> dict:
    extras: dict = {"reward_spec": {"method": "rule", "ground_truth": ground_truth}}
    if max_turns is not None:
        extras["max_turns"] = max_turns
    return {"prompt": [{"role": "user", "content": "What is 2 to the power 100?"}], "extras": extras}


def started(task: dict | None = None, **make_kwargs) -> skyrl_gym.Env:
    task = task or rule_task()
    env = skyrl_gym.make("python", **make_kwargs)
    env.reset(options={"prompt": task["prompt"], "extras": task["extras"]})
    return env


def row_extras(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in ("prompt", "env_class")}


def content(output: dict) -> str:
    [message] = output["observations"]
    assert message["role"] == "user"
    return message["content"]


def fenced(code: str) -> str:
    return f"Let me compute.\n```python\n{code}\n```"


@pytest.fixture(scope="module")
def rows() -> dict[str, dict]:
    """One test-split row of every task."""
    return {name: build_rows(1, seed=0, split="test", tasks=[name])[0] for name in TASKS}


# -- the oracle, the no-op, scoring ------------------------------------------------------------------------------


def test_the_boxed_ground_truth_earns_one_on_every_task(rows):
    for name, row in rows.items():
        env = skyrl_gym.make("python", extras=row_extras(row))
        env.init(row["prompt"])
        output = env.step(env.reference_action())
        assert output["reward"] == 1.0, (name, row["reward_spec"]["ground_truth"], output["metadata"])
        assert output["done"] and output["metadata"]["end"] == "terminated"
        assert output["metadata"]["correct"] and output["metadata"]["action"] == "answer"
        env.close()


@pytest.mark.parametrize("seed", [0, 6, 9, 12])
def test_reset_by_seed_draws_a_task_the_reference_solves(seed):
    env = skyrl_gym.make("python")
    observations, info = env.reset(seed=seed)
    assert observations[0]["role"] == "system" and "\\boxed{ANSWER}" in observations[0]["content"]
    assert info["task"] == list(TASKS)[seed % len(TASKS)] and info["sandbox"] == available_backends()[0]
    output = env.step(f"I have worked it out.\n\n{env.reference_action()}")
    assert output["reward"] == 1.0 and output["done"]
    assert env.get_metrics()["solved"] is True


def test_a_no_op_earns_nothing_and_the_episode_ends_at_max_turns():
    outputs = play_episode(skyrl_gym.make("python"), [""] * 10, task=rule_task())
    assert len(outputs) == 5 and sum(o["reward"] for o in outputs) == 0.0
    assert "No code to run and no final answer found" in content(outputs[0])
    assert "4 turns left" in content(outputs[0])
    assert "1 turn left: give your final answer now" in content(outputs[3])
    last = outputs[-1]
    assert last["observations"] == [] and last["metadata"]["end"] == "truncated"
    assert last["metadata"]["truncated_by"] == "max_turns"


def test_code_on_the_last_turn_is_not_run_and_the_episode_is_truncated():
    env = started(rule_task(max_turns=2))
    env.step(fenced("y = 1"))
    output = env.step(fenced("print(y)"))
    assert output["done"] and output["reward"] == 0.0 and output["metadata"]["code_blocks"] == 0
    assert output["metadata"]["truncated_by"] == "max_turns"


@pytest.mark.parametrize(
    ("answer", "reward"),
    [
        (f"\\boxed{{{BIG}}}", 1.0),
        ("\\boxed{1267650600228229401496703205377}", 0.0),
        ("$\\boxed{x = " + BIG + "}$", 1.0),
    ],
)
def test_a_rule_row_is_scored_by_number(answer, reward):
    env = started()
    output = env.step(f"The result is {answer}.")
    assert output["reward"] == reward and output["done"]
    assert output["metadata"]["score"] == reward and output["metadata"]["parsed_answer"] in answer


def test_each_task_scores_right_one_and_wrong_below_one(rows):
    for name, row in rows.items():
        spec = row["reward_spec"]
        assert score_answer(spec["ground_truth"], spec) == 1.0, name
        wrong = score_answer("-987654321", spec)
        assert 0.0 <= wrong < 0.5, (name, wrong)
        assert score_answer(None, spec) == 0.0
        # parquet stores entry and config as JSON text
        text_spec = {**spec, "entry": json.dumps(spec["entry"]), "config": json.dumps(spec["config"])}
        assert score_answer(spec["ground_truth"], text_spec) == 1.0, name


def test_without_partial_credit_a_wrong_answer_earns_zero(rows):
    for name in ("gsm_symbolic", "prime_factorization", "gcd", "fraction_simplification"):
        row = rows[name]
        for partial, expected in ((True, lambda r: 0.0 <= r < 1.0), (False, lambda r: r == 0.0)):
            env = skyrl_gym.make("python", env_config={"partial_credit": partial}, extras=row_extras(row))
            env.init(row["prompt"])
            output = env.step("\\boxed{-987654321}")
            assert expected(output["reward"]), (name, partial, output["reward"])
            assert output["metadata"]["correct"] is False
            env.close()


def test_latex_answers_are_read_plainly(rows):
    def spec(name: str) -> dict:
        return rows[name]["reward_spec"]

    numerator, denominator = spec("dice")["ground_truth"].split("/")
    assert score_answer(f"\\frac{{{numerator}}}{{{denominator}}}", spec("dice")) == 1.0
    factors = spec("prime_factorization")["ground_truth"]
    assert score_answer(factors.replace("×", "\\times"), spec("prime_factorization")) == 1.0
    weekday = spec("calendar_arithmetic")["ground_truth"]
    assert score_answer(f"\\text{{{weekday}}}", spec("calendar_arithmetic")) == 1.0
    value = spec("simple_equations")["entry"]["answer"]
    variable = spec("simple_equations")["entry"]["metadata"]["variable"]
    assert score_answer(f"{variable} = {value}", spec("simple_equations")) == 1.0


@pytest.mark.parametrize(
    ("latex", "plain"),
    [
        ("\\frac{3}{4}", "3/4"),
        ("\\dfrac{10}{7}", "10/7"),
        ("2 \\times 3 \\times 7", "2 × 3 × 7"),
        ("\\text{Friday}", "Friday"),
        ("$42$", "42"),
        ("1{,}234", "1,234"),
        ("x = 13", "13"),
        ("\\left(3 + 2i\\right)", "(3 + 2i)"),
        ("-0.5, 2", "-0.5, 2"),
    ],
)
def test_plain_answer(latex, plain):
    assert plain_answer(latex) == plain


@pytest.mark.parametrize(
    ("reward_spec", "message"),
    [
        ({"method": "rule"}, "ground_truth"),
        ({"method": "exact", "ground_truth": "1"}, "unknown reward_spec method"),
        ({"method": "reasoning_gym", "ground_truth": "1"}, "'task'"),
        ({"method": "reasoning_gym", "ground_truth": "1", "task": "gcd"}, "'entry'"),
        ({"method": "reasoning_gym", "ground_truth": "1", "task": "gcd", "entry": "{oops"}, "not JSON"),
    ],
)
def test_a_malformed_reward_spec_says_what_to_fix(reward_spec, message):
    with pytest.raises(ValueError, match=message):
        check_reward_spec(reward_spec)
    with pytest.raises(ValueError, match=message):
        PythonEnv(extras={"reward_spec": reward_spec})


def test_without_a_reward_spec_init_says_what_to_do():
    env = PythonEnv()
    with pytest.raises(ValueError, match="reward_spec"):
        env.init([{"role": "user", "content": "1 + 1?"}])
    assert env.reference_action() is None
    env.close()


# -- code in the real sandbox ---------------------------------------------------------------------------------


def test_a_multi_turn_episode_runs_code_in_the_sandbox():
    env = started()
    output = env.step(fenced("print(2**100)") + "\n```output")
    assert output["reward"] == 0.0 and not output["done"]
    assert content(output) == f"```output\n{BIG}\n```\nYou have 4 turns left."
    metadata = output["metadata"]
    assert metadata["action"] == "code" and metadata["code_blocks"] == 1
    assert metadata["sandbox"] == available_backends()[0] and metadata["persistent"] is True
    assert not (metadata["timed_out"] or metadata["crashed"] or metadata["errors"])
    json.dumps(metadata)
    output = env.step("<python>import sympy\nprint(sympy.factorint(2**100 - 1)[3])</python>")
    assert content(output).startswith("```output\n1\n```")
    output = env.step(f"So the answer is \\boxed{{{BIG}}}.")
    assert output["reward"] == 1.0 and output["done"]
    assert env.get_metrics() == {
        "turns": 3,
        "code_blocks": 2,
        "code_errors": 0,
        "timeouts": 0,
        "answered": True,
        "solved": True,
        "score": 1.0,
    }
    env.close()


def test_state_persists_across_turns_like_a_notebook():
    env = started()
    assert content(env.step(fenced("x = 5"))).startswith("```output\n(no output)\n```")
    assert content(env.step(fenced("print(x * 2)"))).startswith("```output\n10\n```")
    assert content(env.step("<python>x + 1</python>")).startswith("```output\n6\n```")  # echoed
    env.close()


def test_each_block_is_a_fresh_program_when_not_persistent():
    env = started(env_config={"persistent": False})
    env.step(fenced("x = 5\nprint(x)"))
    output = env.step(fenced("print(x)"))
    assert "NameError: name 'x' is not defined" in content(output)
    assert output["metadata"]["errors"] == 1 and output["metadata"]["persistent"] is False
    env.close()


def test_all_blocks_of_a_reply_run_in_order():
    env = started(env_config={"max_blocks_per_turn": 2})
    reply = "First:\n```python\na = 3\n```\nthen\n<python>print(a * 2)</python>\nand\n```py\nprint(a)\n```"
    output = env.step(reply)
    assert content(output) == (
        "```output\n(no output)\n```\n```output\n6\n```\n"
        "[1 more code block(s) not run: at most 2 run per reply.]\nYou have 4 turns left."
    )
    assert output["metadata"]["code_blocks"] == 2 and output["metadata"]["code_blocks_found"] == 3
    env.close()


def test_an_infinite_loop_times_out_and_the_next_turn_works():
    env = started(env_config={"cell_timeout_s": 1})
    env.step(fenced("x = 1"))
    output = env.step(fenced("while True:\n    pass") + "\n" + fenced("print('never')"))
    text = content(output)
    assert "TimeoutError" in text and "earlier variables are gone" in text
    assert "[1 more code block(s) not run after the timeout.]" in text and "never" not in text
    assert output["metadata"]["timed_out"] and output["metadata"]["restarted"]
    output = env.step(fenced("print(x)"))
    assert "NameError" in content(output)  # the state went with the killed interpreter
    assert content(env.step(fenced("print('still here')"))).startswith("```output\nstill here\n```")
    assert env.get_metrics()["timeouts"] == 1
    env.close()


def test_a_fresh_program_times_out_too():
    env = started(env_config={"cell_timeout_s": 1, "persistent": False})
    output = env.step(fenced("while True:\n    pass"))
    assert "TimeoutError: the code did not finish in 1 s" in content(output)
    assert output["metadata"]["timed_out"] and not output["metadata"]["errors"]
    env.close()


@pytest.mark.parametrize("persistent", [True, False])
def test_errors_come_back_as_tracebacks(persistent):
    env = started(env_config={"persistent": persistent})
    output = env.step(fenced("def f(:\n    pass"))
    assert "SyntaxError" in content(output) and output["metadata"]["errors"] == 1
    output = env.step(fenced("print('before')\n1 / 0"))
    text = content(output)
    assert "before" in text and "Traceback" in text and "ZeroDivisionError: division by zero" in text
    env.close()


def test_long_output_is_capped_with_a_note():
    env = started(env_config={"max_output_chars": 300})
    output = env.step(fenced("print('a' * 10_000 + 'END')"))
    text = content(output)
    assert "characters cut" in text and text.rstrip().endswith("You have 4 turns left.")
    assert "END" in text and len(text) < 500 and output["metadata"]["output_truncated"]
    env.close()


def test_backticks_in_the_output_get_a_longer_fence():
    env = started()
    text = content(env.step(fenced("print('`' * 3)")))
    assert text.startswith("````output\n```\n````")
    env.close()


def test_an_answer_ends_the_episode_without_running_code():
    env = started()
    output = env.step(fenced("print(1)") + f"\nFinal: \\boxed{{{BIG}}}")
    assert output["done"] and output["reward"] == 1.0
    assert output["metadata"]["code_blocks"] == 0 and output["metadata"]["code_blocks_found"] == 1


def test_a_boxed_answer_inside_code_does_not_count():
    env = started()
    output = env.step(fenced(f"print('\\\\boxed{{{BIG}}}')"))
    assert not output["done"] and "\\boxed{" in content(output)


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        ("<python>print(1)", "The <python> block was not closed"),
        ("```python\nprint(1)\n", "The ```python block was not closed"),
        ("so \\boxed{12", "\\boxed{ was not closed"),
        ("<python>   </python>", "(empty code block: nothing to run)"),
    ],
)
def test_broken_replies_are_explained(reply, said):
    env = started()
    output = env.step(reply)
    assert said in content(output) and not output["done"]
    env.close()


def test_close_stops_the_interpreter():
    env = started()
    env.step(fenced("x = 1"))
    session = env.unwrapped.interpreter._session
    process = session._process.popen
    env.close()
    env.close()
    assert process.poll() is not None and env.unwrapped.interpreter._session is None


# -- settings --------------------------------------------------------------------------------------------------


def test_max_turns_comes_from_extras_then_env_config_then_five():
    assert PythonEnv(extras=rule_task()["extras"]).max_turns == 5
    assert PythonEnv({"max_turns": 3}, rule_task()["extras"]).max_turns == 3
    assert PythonEnv({"max_turns": 3}, rule_task(max_turns=7)["extras"]).max_turns == 7


@pytest.mark.parametrize(
    ("env_config", "message"),
    [
        ({"cell_timeout": 5}, "did you mean 'cell_timeout_s'"),
        ({"cell_timeout_s": 0}, "cell_timeout_s must be a positive number"),
        ({"persistent": "yes"}, "persistent must be true or false"),
        ({"max_blocks_per_turn": 0}, "max_blocks_per_turn must be a positive integer"),
        ({"sandbox": "docker-in-the-sky"}, "unknown sandbox backend"),
    ],
)
def test_bad_settings_are_refused_with_a_fix(env_config, message):
    with pytest.raises(ValueError, match=message):
        PythonEnv(env_config, rule_task()["extras"])


@pytest.mark.parametrize("persistent", [True, False])
def test_the_process_backend_runs_code_too(persistent):
    config = PythonEnvConfig(persistent=persistent, sandbox="process")
    env = PythonEnv(config, rule_task()["extras"])
    assert env.interpreter.backend == "process" and env.interpreter.persistent is persistent
    env.init(rule_task()["prompt"])
    output = env.step(fenced("print(6 * 7)"))
    assert content(output).startswith("```output\n42\n```") and output["metadata"]["sandbox"] == "process"
    env.close()


# -- conformance, Gymnasium, properties ---------------------------------------------------------------------------


def test_python_env_conforms():
    report = check_env(lambda: skyrl_gym.make("python"), seeds=(0, 16))
    assert report.ok and "oracle-earns-full-reward" in report.passed
    assert "gymnasium-check-env" in report.passed


def test_python_env_in_gymnasium():
    env = gymnasium.make("skyrl_gym/python")
    gymnasium_check_env(env.unwrapped, skip_render_check=True)
    observation, info = env.reset(seed=2)
    assert "```python" in observation and info["messages"][-1]["role"] == "user"
    observation, reward, terminated, truncated, _ = env.step(fenced("print(6 * 7)"))
    assert observation.startswith("```output\n42\n```") and (reward, terminated, truncated) == (
        0.0,
        False,
        False,
    )
    answer = env.unwrapped.env.reference_action()
    _, reward, terminated, truncated, info = env.step(answer)
    assert (reward, terminated, truncated, info["correct"]) == (1.0, True, False, True)
    env.close()


def any_reply() -> st.SearchStrategy[str]:
    """Protocol tags, hostile text, fenced blocks of random code and boxed answers."""
    code = st.one_of(
        st.text(max_size=60), st.sampled_from(["print(1)", "x = 2", "x", "import os", "raise SystemExit(3)"])
    )
    return st.one_of(
        tag_actions(["python", "think"]),
        adversarial_actions(["python"]),
        code.map(fenced),
        st.text(max_size=30).map(lambda t: f"\\boxed{{{t}}}"),
    )


@settings(max_examples=20, deadline=None)
@given(episodes(any_reply(), max_turns=3))
def test_python_env_survives_any_episode(actions):
    env = skyrl_gym.make("python", env_config={"cell_timeout_s": 2})
    outputs = play_episode(env, actions, task=rule_task())
    for output in outputs:
        assert 0.0 <= output["reward"] <= 1.0
        if not output["done"]:
            assert content(output).endswith("turns left.")
        else:
            assert output["metadata"]["action"] == "answer" or output["metadata"]["end"] == "truncated"
    env.close()


# -- the protocol -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "codes", "answer"),
    [
        ("```python\nprint(1)\n```", ["print(1)"], None),
        ("```Python3\na = 1\n```\n<python>b = 2</python>", ["a = 1", "b = 2"], None),
        ("````py\nprint('```')\n````\n\\boxed{\\frac{1}{2}}", ["print('```')"], "\\frac{1}{2}"),
        ("<python>print('\\boxed{1}')</python> and \\boxed{ 2 }", ["print('\\boxed{1}')"], "2"),
        ("```\nnot python\n```\n\\boxed{3}", [], "3"),
        ("\\boxed{1} then \\boxed{2}", [], "2"),
        ("```python\nprint(1)\n```\n```output", ["print(1)"], None),
        ("<python>print(1)", [], None),
        ("`" * 100_000, [], None),
        ("<python>1</python>" * 2000, ["1"] * 2000, None),
        ("\\boxed{" * 100_000, [], None),
    ],
)
def test_parse_action(reply, codes, answer):
    parsed = parse_action(reply)
    assert [block.code for block in parsed.blocks] == codes and parsed.answer == answer


def test_output_helpers():
    assert output_block("1") == "```output\n1\n```"
    assert output_block("a ```` b") == "`````output\na ```` b\n`````"
    assert cap_output("abc", 10) == ("abc", False)
    text, cut = cap_output("x" * 50 + "TAIL", 30)
    assert (
        cut and text.startswith("x" * 20) and text.endswith("TAIL") and "[... 24 characters cut ...]" in text
    )


# -- tasks and the dataset script --------------------------------------------------------------------------------


def test_default_tasks_are_deterministic_and_cycle_through_the_tasks():
    first, again = default_task(5), default_task(5)
    assert first == again and first["extras"]["reward_spec"]["task"] == list(TASKS)[5]
    assert default_task(5 + len(TASKS))["extras"]["reward_spec"]["task"] == list(TASKS)[5]
    assert split_of(first["prompt"][1]["content"]) == "test"


def test_build_rows_are_deterministic_distinct_and_in_their_split():
    rows = build_rows(12, seed=4, split="train", tasks=["gcd", "lcm", "dice"])
    assert rows == build_rows(12, seed=4, split="train", tasks=["gcd", "lcm", "dice"])
    questions = [r["prompt"][1]["content"] for r in rows]
    assert len(set(questions)) == 12 and all(split_of(q) == "train" for q in questions)
    assert [r["reward_spec"]["task"] for r in rows[:3]] == ["gcd", "lcm", "dice"]
    row = rows[0]
    assert (
        row["env_class"] == "python" and row["data_source"] == "reasoning_gym/gcd" and row["max_turns"] == 5
    )
    assert row["reward_spec"]["config"] == TASKS["gcd"].config
    assert row["extra_info"] == {
        "task": "gcd",
        "kind": "number theory",
        "split": "train",
        "index": 0,
        "seed": 4,
        "source_index": row["extra_info"]["source_index"],
    }
    json.dumps(rows)
    with pytest.raises(ValueError, match="unknown task"):
        build_rows(1, tasks=["polynomial_multiplication"])


def test_importing_the_environment_does_not_import_reasoning_gym():
    code = "import sys, skyrl_gym.envs.python.env; print('reasoning_gym' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_build_script_writes_disjoint_splits_that_play(tmp_path):
    script = REPO / "datasets" / "python" / "build.py"
    args = [
        "--out",
        str(tmp_path),
        "--train",
        "8",
        "--test",
        "4",
        "--seed",
        "1",
        "--tasks",
        "gcd,products,dice",
    ]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "train: 8 rows" in done.stdout and "test: 4 rows" in done.stdout
    assert "  gcd" in done.stdout and "  dice" in done.stdout
    train = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    test = [json.loads(line) for line in (tmp_path / "test.jsonl").read_text().splitlines()]
    assert not {r["prompt"][1]["content"] for r in train} & {r["prompt"][1]["content"] for r in test}
    import pyarrow.parquet as pq

    parquet_rows = pq.read_table(tmp_path / "test.parquet").to_pylist()
    assert isinstance(parquet_rows[0]["reward_spec"]["entry"], str)
    for row in [test[0], parquet_rows[-1]]:
        env = skyrl_gym.make("python", extras=row_extras(row))
        env.init(row["prompt"])
        assert env.step(env.reference_action())["reward"] == 1.0
        env.close()
