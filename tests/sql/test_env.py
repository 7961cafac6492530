"""The text2sql environment: whole episodes against real DuckDB and SQLite databases.

The default protocol is SkyRL-SQL's (its byte-level texts are pinned in ``test_skyrl_protocol.py``); tests of
this package's own texts and rules make the environment with ``protocol: strict``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shopdb import ENGINES, SHOP_QUESTIONS, sha256_of, shop_task
from test_safety import HOSTILE, temp_entries

import skyrl_gym
from skyrl_gym.envs.sql import Text2SQLEnv
from skyrl_gym.envs.sql.env import Text2SQLConfig, format_result
from skyrl_gym.runtime.sql.database import close_idle_databases
from skyrl_gym.testing import check_env, play_episode
from skyrl_gym.testing.strategies import episodes, tag_actions

COUNT_ORDERS = "SELECT COUNT(*) FROM orders"
STRICT = {"protocol": "strict"}


def make(task: dict, **kwargs) -> skyrl_gym.Env:
    env = skyrl_gym.make("text2sql", **kwargs)
    env.reset(options={"prompt": task["prompt"], "extras": task["extras"]})
    return env


def solution(sql: str) -> str:
    return f"<think>I have checked the data.</think>\n<solution>{sql}</solution>"


# -- the oracle, wrong answers, bad format ------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_the_gold_query_as_solution_earns_one_on_every_question(shop_files, engine):
    for question, gold in SHOP_QUESTIONS:
        env = make(shop_task(shop_files[engine], gold, question))
        output = env.step(env.reference_action())
        assert output["reward"] == 1.0, (gold, output["metadata"])
        assert output["done"] and output["metadata"]["end"] == "terminated"
        assert output["metadata"]["correct"] and output["metadata"]["format_valid"]
        env.close()


@pytest.mark.parametrize("protocol", ["skyrl", "strict"])
@pytest.mark.parametrize("engine", ENGINES)
def test_the_reference_episode_runs_the_query_then_answers(shop_files, engine, protocol):
    for question, gold in SHOP_QUESTIONS:
        env = make(shop_task(shop_files[engine], gold, question), env_config={"protocol": protocol})
        check, answer = env.reference_episode()
        assert check.startswith("<think>") and check.endswith(f"<sql>{gold}</sql>")
        assert answer.startswith("<think>") and answer.endswith(f"<solution>{gold}</solution>")
        first = env.step(check)
        assert not first["done"] and first["metadata"]["action"] == "sql" and first["reward"] == 0.0
        assert first["metadata"].get("error_kind") is None, first["metadata"]
        last = env.step(answer)
        assert last["reward"] == 1.0 and last["metadata"]["end"] == "terminated", (gold, last["metadata"])
        env.close()
    # one turn allowed: the single reference action
    env = make(shop_task(shop_files[engine], COUNT_ORDERS, max_turns=1))
    assert env.reference_episode() == [env.reference_action()]
    env.close()


def test_the_reference_plan_names_the_gold_tables():
    from skyrl_gym.envs.sql.env import sql_hint

    assert sql_hint("SELECT COUNT(*) FROM orders") == "Use the table orders."
    join = "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id JOIN items i ON i.order_id = o.id"
    assert sql_hint(join) == "Use the tables customers, orders and items."
    assert sql_hint("SELECT 1") == sql_hint("not sql at all (") == "Write the query."


@pytest.mark.parametrize("engine", ENGINES)
def test_a_wrong_query_earns_zero_and_a_failing_one_too(shop_files, engine):
    for answer in ("SELECT COUNT(*) FROM customers", "SELECT COUNT(*) FROM nowhere", "DELETE FROM orders"):
        env = make(shop_task(shop_files[engine], COUNT_ORDERS))
        output = env.step(solution(answer))
        assert output["reward"] == 0.0 and output["done"]
        assert output["metadata"]["format_valid"] and not output["metadata"]["correct"]
        env.close()


@pytest.mark.parametrize(
    "answer",
    [
        f"<solution>{COUNT_ORDERS}</solution>",  # no <think>
        f"<think>x</think><solution>{COUNT_ORDERS}</solution><solution>{COUNT_ORDERS}</solution>",
        f"<think>x</think><solution><sql>{COUNT_ORDERS}</sql></solution>",
        f"<think>x</think><solution>{COUNT_ORDERS} <think>sure</think></solution>",
        f"<think>x</think><solution>{COUNT_ORDERS} </SQL></solution>",
    ],
)
@pytest.mark.parametrize("protocol", ["skyrl", "strict"])
def test_a_broken_format_earns_the_penalty(shop_files, answer, protocol):
    env = make(shop_task(shop_files["duckdb"], COUNT_ORDERS), env_config={"protocol": protocol})
    output = env.step(answer)
    assert output["reward"] == -1.0 and output["done"]
    assert output["metadata"]["format_valid"] is False
    env.close()


def test_an_empty_solution_scores_zero_by_default_and_the_penalty_when_strict(shop_files):
    env = make(shop_task(shop_files["duckdb"], COUNT_ORDERS))
    output = env.step("<think>x</think><solution> </solution>")
    assert output["reward"] == 0.0 and output["metadata"]["format_valid"] is True
    env = make(shop_task(shop_files["duckdb"], COUNT_ORDERS), env_config=STRICT)
    assert env.step("<think>x</think><solution></solution>")["reward"] == -1.0


def test_the_format_rule_covers_the_whole_episode(shop_files):
    task = shop_task(shop_files["sqlite"], COUNT_ORDERS)
    # SkyRL's rule: a turn after an observation starts with <think>
    env = make(task)
    env.step("<think>Count the orders.</think><sql>SELECT COUNT(*) FROM orders</sql>")
    assert env.step(f"<solution>{COUNT_ORDERS}</solution>")["reward"] == -1.0
    env = make(task)
    env.step("<think>Count the orders.</think><sql>SELECT COUNT(*) FROM orders</sql>")
    assert env.step(f"\n <think>15.</think><solution>{COUNT_ORDERS}</solution>")["reward"] == 1.0
    # strict: the <think> of an earlier turn counts
    env = make(task, env_config=STRICT)
    env.step("<think>Count the orders.</think><sql>SELECT COUNT(*) FROM orders</sql>")
    assert env.step(f"<solution>{COUNT_ORDERS}</solution>")["reward"] == 1.0
    # both: a stray <solution> opened earlier breaks the format
    for config in (None, STRICT):
        env = make(task, env_config=config)
        env.step("<think>hmm</think> maybe <solution> later")
        assert env.step(f"<think>now</think><solution>{COUNT_ORDERS}</solution>")["reward"] == -1.0


def test_penalty_and_think_requirement_are_configurable(shop_files):
    task = shop_task(shop_files["duckdb"], COUNT_ORDERS)
    env = make(task, env_config={"format_penalty": -0.25})
    assert env.step(f"<solution>{COUNT_ORDERS}</solution>")["reward"] == -0.25
    env = make(task, env_config={"require_think": False})
    assert env.step(f"<solution>{COUNT_ORDERS}</solution>")["reward"] == 1.0


# -- multi-turn episodes -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_a_query_gets_skyrls_observation_with_the_turns_left(shop_files, engine):
    path = shop_files[engine]
    env = make(shop_task(path, COUNT_ORDERS))
    output = env.step(
        "<think>Look first.</think>\n<sql>SELECT name, country FROM customers ORDER BY id</sql>"
    )
    assert output["reward"] == 0.0 and not output["done"]
    [message] = output["observations"]
    assert message["role"] == "user"
    table = "\n".join(
        [
            "           0       1",
            "     Ann Lee  France",
            "   Bob Stone Germany",
            "Chloé Martin  France",
            "   Dev Patel    None",
            "   Eve Adams   Spain",
            " Finn O'Neil Ireland",
            "    Gus Berg Germany",
            "   Hana Sato    None",
        ]
    )
    reminder = "<reminder>You have 4 turns left to complete the task.</reminder>"
    assert message["content"] == f"\n\n<observation>{table}\n{reminder}</observation>\n\n"
    sql = "SELECT name, country FROM customers ORDER BY id"
    assert output["metadata"] == {
        "turn": 1,
        "tool_group": "SQLCodeExecutorToolGroup",
        "tool_name": "sql",
        "tool_input": ("shop", sql, 4),
        "action": "sql",
        "sql": sql,
        "error_kind": None,
        "rows": 8,
        "rows_shown": 8,
        "truncated": False,
        "transpiled_from": None,
    }
    json.dumps(output["metadata"])
    output = env.step("<think>typo</think><sql>SELECT nme FROM customers</sql>")
    content = output["observations"][0]["content"]
    assert (
        content.startswith("\n\n<observation>Error executing SQL: ")
        and output["metadata"]["error_kind"] == "schema"
    )
    assert f", db file: {Path(path).name}\n<reminder>You have 3 turns left" in content
    assert str(Path(path).parent) not in content  # the file's name only: no host path reaches the model
    output = env.step("<think>drop</think><sql>DROP TABLE orders</sql>")
    assert "DROP statements are not allowed" in output["observations"][0]["content"]
    assert output["metadata"]["error_kind"] == "unsafe"
    output = env.step("<think>count</think><sql>SELECT COUNT(*) FROM orders</sql>")
    assert output["observations"][0]["content"] == (
        "\n\n<observation> 0\n15\n<reminder>You have 1 turns left to complete the task.</reminder></observation>\n\n"
    )
    output = env.step(solution(COUNT_ORDERS))
    assert output["reward"] == 1.0 and output["done"]
    assert env.get_metrics() == {
        "turns": 5,
        "queries": 4,
        "query_errors": 2,
        "empty_results": 0,
        "solved": True,
        "format_valid": True,
    }


@pytest.mark.parametrize("engine", ENGINES)
def test_a_misspelt_statement_is_a_syntax_error_not_a_forbidden_one(shop_files, engine):
    env = make(shop_task(shop_files[engine], COUNT_ORDERS))
    for typo in ("SELEC * FROM orders", "SELCT COUNT(*) FROM orders", "COUNT orders"):
        output = env.step(f"<think>typo</think><sql>{typo}</sql>")
        content = output["observations"][0]["content"]
        assert output["metadata"]["error_kind"] == "syntax", (typo, content)
        assert "could not be parsed" in content and "not allowed" not in content
    output = env.step("<think>drop</think><sql>DROP TABLE orders</sql>")
    assert output["metadata"]["error_kind"] == "unsafe"
    assert "DROP statements are not allowed" in output["observations"][0]["content"]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_query_gets_a_table_with_column_names_when_strict(shop_files, engine):
    env = make(shop_task(shop_files[engine], COUNT_ORDERS), env_config=STRICT)
    output = env.step(
        "<think>Look first.</think>\n<sql>SELECT name, country FROM customers ORDER BY id</sql>"
    )
    assert output["reward"] == 0.0 and not output["done"]
    [message] = output["observations"]
    assert message["role"] == "user"
    content = message["content"]
    assert content.startswith("<observation>\nname | country\nAnn Lee | France\n")
    assert "Dev Patel | NULL" in content and "(8 rows)" in content
    assert "</observation>" in content and "4 turns left" in content
    assert output["metadata"] == {
        "turn": 1,
        "tool_group": "SQLCodeExecutorToolGroup",
        "tool_name": "sql",
        "tool_input": ("shop", "SELECT name, country FROM customers ORDER BY id", 4),
        "action": "sql",
        "sql": "SELECT name, country FROM customers ORDER BY id",
        "error_kind": None,
        "rows": 8,
        "rows_shown": 8,
        "truncated": False,
        "transpiled_from": None,
    }
    json.dumps(output["metadata"])
    # errors come back as observations the model can fix
    output = env.step("<sql>SELECT nme FROM customers</sql>")
    assert "Error:" in output["observations"][0]["content"] and output["metadata"]["error_kind"] == "schema"
    output = env.step("<sql>DROP TABLE orders</sql>")
    assert "DROP statements are not allowed" in output["observations"][0]["content"]
    assert output["metadata"]["error_kind"] == "unsafe"
    output = env.step("<sql>SELECT COUNT(*) FROM orders</sql>")
    assert "1 turn left" in output["observations"][0]["content"]
    output = env.step(solution(COUNT_ORDERS))
    assert output["reward"] == 1.0 and output["done"]
    assert env.get_metrics() == {
        "turns": 5,
        "queries": 4,
        "query_errors": 2,
        "empty_results": 0,
        "solved": True,
        "format_valid": True,
    }


def test_actions_without_a_query_get_skyrls_invalid_action_message(shop_files):
    from skyrl_gym.tools.sql import INVALID_ACTION

    env = make(shop_task(shop_files["duckdb"], COUNT_ORDERS))
    for action in (
        "I think the answer is 15.",
        "<sql>SELECT 1",
        "</sql>SELECT 1<sql>",
        "<SQL>SELECT 1</SQL>",
    ):
        output = env.step(action)
        assert output["observations"][0]["content"].startswith(
            f"\n\n<observation>{INVALID_ACTION}\n<reminder>"
        )
        assert output["metadata"]["action"] == "none" and output["metadata"]["tool_input"][1] is None
    assert env.get_metrics()["queries"] == 0


def test_actions_without_a_query_are_told_what_to_write_when_strict(shop_files):
    env = make(shop_task(shop_files["duckdb"], COUNT_ORDERS), env_config=STRICT)
    output = env.step("I think the answer is 15.")
    assert "No query found" in output["observations"][0]["content"]
    assert output["metadata"]["action"] == "none"
    output = env.step("<sql>SELECT 1")
    assert "<sql> was opened but not closed" in output["observations"][0]["content"]
    output = env.step("<sql>   </sql>")
    assert "empty" in output["observations"][0]["content"]


def test_running_out_of_turns_ends_truncated_with_the_penalty(shop_files):
    task = shop_task(shop_files["duckdb"], COUNT_ORDERS, max_turns=2)
    env = make(task)
    assert not env.step("<sql>SELECT 1</sql>")["done"]
    output = env.step("<sql>SELECT 2</sql>")
    assert output["done"] and output["reward"] == -1.0 and output["observations"] == []
    assert output["metadata"]["end"] == "truncated" and output["metadata"]["truncated_by"] == "max_turns"
    env = make(task, env_config={"no_solution_reward": 0.0})
    env.step("")
    assert env.step("")["reward"] == 0.0


def test_max_turns_comes_from_extras_then_env_config_then_five(shop_files):
    path = shop_files["sqlite"]
    assert Text2SQLEnv(extras=shop_task(path, COUNT_ORDERS)["extras"]).max_turns == 5
    assert Text2SQLEnv({"max_turns": 3}, shop_task(path, COUNT_ORDERS)["extras"]).max_turns == 3
    assert Text2SQLEnv({"max_turns": 3}, shop_task(path, COUNT_ORDERS, max_turns=7)["extras"]).max_turns == 7


@pytest.mark.parametrize("engine", ENGINES)
def test_a_no_op_earns_nothing_over_the_whole_episode(shop_files, engine):
    env = skyrl_gym.make("text2sql")
    outputs = play_episode(env, [""] * 10, task=shop_task(shop_files[engine], COUNT_ORDERS))
    assert len(outputs) == 5 and sum(o["reward"] for o in outputs) <= 0


# -- caps, timeout, transpilation ----------------------------------------------------------------------------------


def test_strict_observations_are_capped_in_rows_and_characters(shop_files):
    env = make(shop_task(shop_files["duckdb"], COUNT_ORDERS), env_config={**STRICT, "max_rows": 4})
    output = env.step("<sql>SELECT * FROM orders ORDER BY id</sql>")
    content = output["observations"][0]["content"]
    assert "[4 of 15 rows shown; at most 4 rows are shown]" in content
    assert output["metadata"]["rows"] == 15 and output["metadata"]["rows_shown"] == 4
    env = make(shop_task(shop_files["duckdb"], COUNT_ORDERS), env_config={**STRICT, "max_chars": 200})
    content = env.step("<sql>SELECT * FROM orders</sql>")["observations"][0]["content"]
    assert "output cut at 200 characters" in content
    body = content.split("<observation>\n", 1)[1].split("\n</observation>", 1)[0]
    assert len(body) < 300
    env = make(shop_task(shop_files["duckdb"], COUNT_ORDERS), env_config={**STRICT, "max_chars": 100})
    content = env.step("<sql>SELECT repeat('x', 5000) AS long</sql>")["observations"][0]["content"]
    assert len(content) < 400


def test_format_result_says_what_it_cut():
    from skyrl_gym.runtime.sql.database import QueryResult

    assert format_result(QueryResult(["a"], [])) == "a\n(no rows)"
    assert format_result(QueryResult(["a"], [(1,)])) == "a\n1\n(1 row)"
    text = format_result(QueryResult(["a"], [(1,), (2,)], truncated=True, total_rows=None))
    assert text.endswith("[2 of more than 2 rows shown; at most 2 rows are shown]")
    assert "line\\nbreak" in format_result(QueryResult(["a"], [("line\nbreak",)]))
    assert format_result(QueryResult(["f"], [(1 / 3,)])) == "f\n0.3333333333\n(1 row)"


@pytest.mark.parametrize("engine", ENGINES)
def test_a_heavy_query_times_out_as_an_observation(shop_files, engine):
    from test_safety import HEAVY

    env = make(shop_task(shop_files[engine], COUNT_ORDERS), env_config={"timeout_s": 1.0})
    output = env.step(f"<sql>{HEAVY[engine]}</sql>")  # a query of hours: only the deadline ends it
    assert not output["done"] and output["metadata"]["error_kind"] == "timeout"
    assert output["observations"][0]["content"].startswith(
        f"\n\n<observation>SQL Timeout:\n{HEAVY[engine]}\n"
    )
    assert env.step(solution(COUNT_ORDERS))["reward"] == 1.0  # the episode goes on
    env = make(shop_task(shop_files[engine], COUNT_ORDERS), env_config={**STRICT, "timeout_s": 1.0})
    assert "stopped after 1 s" in env.step(f"<sql>{HEAVY[engine]}</sql>")["observations"][0]["content"]


def test_queries_in_another_dialect_are_transpiled(shop_files):
    query = "<sql>SELECT name FROM customers ORDER BY id LIMIT 1, 2</sql>"  # SQLite / MySQL syntax
    env = make(shop_task(shop_files["duckdb"], COUNT_ORDERS), env_config=STRICT)  # strict: "auto"
    output = env.step(query)
    assert output["metadata"]["transpiled_from"] == "sqlite" and output["metadata"]["rows"] == 2
    assert "Bob Stone" in output["observations"][0]["content"]
    env = make(shop_task(shop_files["duckdb"], COUNT_ORDERS))  # SkyRL runs queries as written
    assert env.step(query)["metadata"]["error_kind"] == "syntax"
    env = make(shop_task(shop_files["duckdb"], COUNT_ORDERS), env_config={"transpile_from": "auto"})
    assert env.step(query)["metadata"]["transpiled_from"] == "sqlite"
    env = make(shop_task(shop_files["duckdb"], COUNT_ORDERS), env_config={**STRICT, "transpile_from": None})
    assert env.step(query)["metadata"]["error_kind"] == "syntax"
    env = make(shop_task(shop_files["duckdb"], COUNT_ORDERS), env_config={"transpile_from": "mysql"})
    assert env.step(query)["metadata"]["transpiled_from"] == "mysql"
    # Postgres casts on SQLite
    env = make(shop_task(shop_files["sqlite"], COUNT_ORDERS), env_config=STRICT)
    output = env.step("<sql>SELECT id::TEXT FROM customers WHERE id = 1</sql>")
    assert output["metadata"]["transpiled_from"] is not None and output["metadata"]["rows"] == 1
    gold = "SELECT name FROM customers ORDER BY id LIMIT 2 OFFSET 1"
    env = make(shop_task(shop_files["duckdb"], gold), env_config=STRICT)
    output = env.step(solution("SELECT name FROM customers ORDER BY id LIMIT 1, 2"))
    assert output["reward"] == 1.0 and output["metadata"]["transpiled_from"] == "sqlite"


# -- construction and configuration -------------------------------------------------------------------------------


def test_a_missing_database_is_a_clear_error_from_the_constructor(tmp_path):
    task = shop_task(tmp_path / "gone.duckdb", COUNT_ORDERS)
    with pytest.raises(FileNotFoundError, match="gone.duckdb"):
        Text2SQLEnv(extras=task["extras"])
    with pytest.raises(FileNotFoundError, match="gone.duckdb"):
        skyrl_gym.make("text2sql", extras=task["extras"])
    extras = {"reward_spec": {"ground_truth": COUNT_ORDERS}, "db_id": "concert_singer", "data": "spider"}
    with pytest.raises(FileNotFoundError) as caught:
        Text2SQLEnv({"db_path": str(tmp_path)}, extras)
    assert str(tmp_path / "spider" / "database" / "concert_singer" / "concert_singer.sqlite") in str(
        caught.value
    )
    with pytest.raises(ValueError, match="env_config.db_path"):
        Text2SQLEnv(None, extras)


@pytest.mark.parametrize(
    ("data", "layout"),
    [
        ("spider", "spider/database/{db}/{db}.sqlite"),
        ("bird", "bird/train/train_databases/{db}/{db}.sqlite"),
        ("synsql", "SynSQL-2.5M/databases/{db}/{db}.sqlite"),
    ],
)
def test_db_id_and_data_find_skyrl_layouts(tmp_path, data, layout):
    from shopdb import build_shop

    build_shop(tmp_path / layout.format(db="shop"), "sqlite")
    extras = {"reward_spec": {"ground_truth": COUNT_ORDERS}, "db_id": "shop", "data": data}
    for config in ({"db_path": str(tmp_path)}, {"db_file_path": str(tmp_path)}):  # SkyRL's key too
        env = skyrl_gym.make("text2sql", env_config=config, extras=extras)
        env.reset(options={"prompt": [{"role": "user", "content": "?"}], "extras": extras})
        assert env.step(solution(COUNT_ORDERS))["reward"] == 1.0
        env.close()


def test_env_config_refuses_nonsense():
    with pytest.raises(ValueError, match=r"'max_turn' \(did you mean 'max_turns'\?\)"):
        Text2SQLConfig.from_env_config({"max_turn": 3})
    with pytest.raises(ValueError, match="timeout_s must be a positive number"):
        Text2SQLConfig(timeout_s=0)
    with pytest.raises(ValueError, match="transpile_from"):
        Text2SQLConfig(transpile_from="klingon")
    with pytest.raises(TypeError, match="require_think"):
        Text2SQLConfig(require_think="yes")
    with pytest.raises(ValueError, match="protocol must be one of skyrl, strict"):
        Text2SQLConfig(protocol="skyrl-sql")
    with pytest.raises(ValueError, match="match must be 'set' or 'execution'"):
        Text2SQLConfig(match="fuzzy")
    with pytest.raises(ValueError, match="apply to match='execution'"):
        Text2SQLConfig(float_tol=0.01)  # SkyRL's set match compares exactly
    assert Text2SQLConfig(match="execution", float_tol=0.01, ignore_column_order=False).float_tol == 0.01


def test_the_protocol_chooses_the_defaults_it_changes():
    skyrl, strict = Text2SQLConfig(), Text2SQLConfig(protocol="strict")
    assert (skyrl.match, skyrl.max_chars, skyrl.transpile_from) == ("set", 9000, None)
    assert (strict.match, strict.max_chars, strict.transpile_from) == ("execution", 4000, "auto")
    given = Text2SQLConfig.from_env_config(
        {"protocol": "strict", "match": "set", "max_chars": 10, "transpile_from": None}
    )
    assert (given.match, given.max_chars, given.transpile_from) == ("set", 10, None)
    assert Text2SQLConfig.from_env_config(given) is given


def test_starting_without_a_task_says_what_is_missing():
    env = Text2SQLEnv()
    with pytest.raises(ValueError, match="needs a task"):
        env.init([{"role": "user", "content": "?"}])
    with pytest.raises(ValueError, match="needs a task"):
        env.step("<sql>SELECT 1</sql>")


def test_importing_the_package_stays_light():
    code = (
        "import sys, json, skyrl_gym.envs.sql, skyrl_gym.runtime.sql.database;"
        "print(json.dumps([m for m in ('duckdb', 'sqlglot') if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


# -- conformance and property tests --------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_check_env_with_explicit_tasks(shop_files, engine):
    tasks = [shop_task(shop_files[engine], gold, question) for question, gold in SHOP_QUESTIONS[:3]]
    report = check_env(
        lambda: skyrl_gym.make("text2sql"),
        tasks=tasks,
        actions=("<think>look</think><sql>SELECT * FROM customers</sql>", "<sql>DROP TABLE orders</sql>"),
        gymnasium_check=False,
    )
    assert report.ok and not report.skipped, report.summary()


def test_check_env_with_seeds_and_gymnasium():
    report = check_env(lambda: skyrl_gym.make("text2sql"), seeds=(0, 1))
    assert report.ok, report.summary()
    env = gymnasium.make("skyrl_gym/text2sql")
    observation, info = env.reset(seed=3)
    assert isinstance(observation, str) and observation
    env.close()


SQLISH = st.one_of(
    st.sampled_from(HOSTILE),
    st.sampled_from([gold for _, gold in SHOP_QUESTIONS]),
    st.sampled_from(["SELECT * FROM orders", "SELECT 1", "SELEC", "'", '"', "--", "/*", ";;", "\\"]),
    st.text(max_size=40),
)


@settings(max_examples=40)
@given(
    engine=st.sampled_from(ENGINES), actions=episodes(tag_actions(["think", "sql", "solution"], inner=SQLISH))
)
def test_adversarial_episodes_are_contained(shop_files, engine, actions):
    path = shop_files[engine]
    checksum = sha256_of(path)
    env = skyrl_gym.make("text2sql")
    outputs = play_episode(env, actions, task=shop_task(path, COUNT_ORDERS))
    env.close()
    for output in outputs:
        assert output["reward"] in (-1.0, 0.0, 1.0)
        assert output["metadata"].get("end") != "error"
    assert sha256_of(path) == checksum


@pytest.mark.parametrize("engine", ENGINES)
def test_the_hostile_battery_through_the_environment_changes_nothing(shop_files, engine):
    path = shop_files[engine]
    close_idle_databases()
    checksum, folder, temps = sha256_of(path), sorted(os.listdir(path.parent)), temp_entries()
    for config, error in ((None, "<observation>Error executing SQL: "), (STRICT, "<observation>\nError: ")):
        env = make(shop_task(path, COUNT_ORDERS, max_turns=len(HOSTILE) + 1), env_config=config)
        for sql in HOSTILE:
            output = env.step(f"<think>try</think><sql>{sql}</sql>")
            content = output["observations"][0]["content"]
            if config is None and not sql.strip():  # SkyRL: an empty statement returns no rows
                assert content.startswith("\n\n<observation>Empty DataFrame\nColumns: []\nIndex: []\n")
                continue
            assert error in content, (sql, content)
            assert output["metadata"]["error_kind"] in ("unsafe", "syntax"), (sql, output["metadata"])
        assert env.step(solution(COUNT_ORDERS))["reward"] == 1.0
        env.close()
    close_idle_databases()
    assert sha256_of(path) == checksum
    assert sorted(os.listdir(path.parent)) == folder
    assert temp_entries() == temps
