"""Correction episodes: near-miss first queries derived from the gold query and the schema, checked against the
real database, played through the environment, and kept out of the warm-up's loss."""

from __future__ import annotations

import pytest
from shopdb import ENGINES, SHOP_QUESTIONS, shop_task

import skyrl_gym
from skyrl_gym.core import Misstep
from skyrl_gym.envs.sql.corrections import RunResult, misnamed, near_misses
from skyrl_gym.runtime.sql.database import open_database
from skyrl_gym.tools.sql import SQLCodeExecutorToolGroup


@pytest.fixture(params=ENGINES)
def shop(request, shop_files):
    db = open_database(shop_files[request.param])
    tools = SQLCodeExecutorToolGroup(database=db, db_id="shop", db_file="shop", style="skyrl")

    def run(query: str) -> RunResult:
        tools.run("shop", query)
        return RunResult(tools.last.get("error_kind"), tools.last.get("rows"))

    schema = {table: list(db.sample_rows(table, 0).columns) for table in db.tables()}
    yield schema, db.dialect, run
    db.close()


@pytest.mark.parametrize(
    ("kind", "gold", "wrong_part", "fix_names", "seen"),
    [
        ("table", "SELECT COUNT(*) FROM customers", "FROM customer", "customers", "error"),
        (
            "column",
            "SELECT category, AVG(price) AS avg_price FROM products GROUP BY category",
            "categories",
            "the column is category",
            "error",
        ),
        (
            "filter",
            "SELECT name FROM customers WHERE country = 'France'",
            "WHERE name = 'France'",
            "country",
            0,
        ),
        (
            "clause",
            "SELECT name FROM customers WHERE country = 'France'",
            "FROM customers",
            "country = 'France'",
            8,
        ),
        ("clause", "SELECT name, price FROM products ORDER BY price DESC LIMIT 3", "DESC", "LIMIT 3", 6),
    ],
)
def test_each_kind_of_near_miss_gets_the_answer_its_fix_line_reads(
    shop, kind, gold, wrong_part, fix_names, seen
):
    schema, dialect, run = shop
    [miss] = near_misses(gold, schema, dialect, run, kinds=[kind])
    assert miss.kind == kind and wrong_part in miss.query and miss.query != gold
    assert fix_names in miss.fix
    result = run(miss.query)
    if seen == "error":
        assert result.error_kind == "schema"
    else:
        assert result.error_kind is None and result.rows == seen
    assert not miss.query.rstrip().endswith(gold)  # the slip is in the query, not appended to it


@pytest.mark.parametrize(
    ("query", "gold", "line"),
    [
        (
            "SELECT nme FROM customers",
            "SELECT name FROM customers",
            "There is no column nme; the column is name.",
        ),
        (
            "SELECT name FROM customer",
            "SELECT name FROM customers",
            "There is no table customer; the table is customers.",
        ),
        # the gold query's own names come first: "price" is closer to "prize" than any other column
        (
            "SELECT prize FROM products",
            "SELECT price FROM products",
            "There is no column prize; the column is price.",
        ),
        # a name the gold query does not use is matched among the schema's
        (
            "SELECT countri FROM customers",
            "SELECT name FROM customers",
            "There is no column countri; the column is country.",
        ),
        # no name close to it: nothing the line could say without guessing
        ("SELECT zzz FROM customers", "SELECT name FROM customers", None),
        # names the query defines itself are not misnamed: nothing to read from its error
        ("WITH c AS (SELECT name AS n FROM customers) SELECT c.n FROM c", "SELECT name FROM customers", None),
        ("SELECT x.name FROM customers AS x", "SELECT name FROM customers", None),
        ("SELEC name FROM customers", "SELECT name FROM customers", None),  # a syntax error
        ("SELECT name FROM customers", "SELECT name FROM customers", None),
    ],
)
def test_a_failed_querys_misnamed_table_or_column_is_read_against_the_schema(shop, query, gold, line):
    schema, dialect, _ = shop
    assert misnamed(query, gold, schema, dialect) == line


def test_no_near_miss_without_a_real_gold_result(shop):
    schema, dialect, run = shop
    assert near_misses("SELECT name FROM customers WHERE country = 'Atlantis'", schema, dialect, run) == []
    assert near_misses("SELEC name FROM customers", schema, dialect, run) == []
    assert near_misses("not sql (", schema, dialect, run) == []


def make(task: dict, share: float) -> skyrl_gym.Env:
    env = skyrl_gym.make("text2sql", env_config={"reference_corrections": share})
    env.reset(options={"prompt": task["prompt"], "extras": task["extras"]})
    return env


@pytest.mark.parametrize("engine", ENGINES)
def test_a_correction_episode_plays_its_misstep_reads_the_answer_and_earns_full_reward(shop_files, engine):
    corrections = 0
    for question, gold in SHOP_QUESTIONS:
        env = make(shop_task(shop_files[engine], gold, question), 1.0)
        first, answer = env.reference_episode()
        assert answer.endswith(f"<solution>{gold}</solution>")
        step = env.step(first)
        assert not step["done"] and step["reward"] == 0.0
        if isinstance(first, Misstep):
            corrections += 1
            assert f"<sql>{gold}</sql>" not in first
            observation = step["observations"][0]["content"]
            # what the answer's <think> line reads is what the database said
            assert ("Error" in observation) == (step["metadata"].get("error_kind") is not None)
            assert answer.startswith("<think>") and "The result answers the question" not in answer
        last = env.step(answer)
        assert last["reward"] == 1.0 and last["metadata"]["end"] == "terminated", last["metadata"]
        # the same task always gets the same episode
        again = make(shop_task(shop_files[engine], gold, question), 1.0)
        assert again.reference_episode() == [first, answer]
        env.close()
        again.close()
    assert corrections >= len(SHOP_QUESTIONS) - 2  # every question whose gold query sqlglot can rewrite


def test_the_share_of_correction_episodes_follows_the_setting(shop_files):
    tasks = [
        shop_task(shop_files["duckdb"], gold, f"{question} ({i})")
        for i in range(12)
        for question, gold in SHOP_QUESTIONS[:2]
    ]
    for share, low, high in ((0.0, 0, 0), (0.5, 5, 19), (1.0, 24, 24)):
        missteps = 0
        for task in tasks:
            env = make(task, share)
            missteps += isinstance(env.reference_episode()[0], Misstep)
            env.close()
        assert low <= missteps <= high, (share, missteps)


def test_the_setting_is_a_share():
    with pytest.raises(ValueError, match="reference_corrections must be at most 1"):
        skyrl_gym.make("text2sql", env_config={"reference_corrections": 1.5})
    with pytest.raises(TypeError, match="reference_corrections"):
        skyrl_gym.make("text2sql", env_config={"reference_corrections": True})


# -- the continuation after the model's own first query ----------------------------------------------------------

CUSTOMERS_IN_FRANCE = "SELECT name FROM customers WHERE country = 'France'"


@pytest.mark.parametrize("protocol", ["skyrl", "strict"])
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("query", "reading"),
    [
        # an error: a misnamed table or column is named, with the name to use; any other error gets the plan
        (
            "SELECT name FROM customer",
            "The query failed. There is no table customer; the table is customers.",
        ),
        (
            "SELECT nme FROM customers WHERE country = 'France'",
            "The query failed. There is no column nme; the column is name.",
        ),
        ("SELEC name FROM customers", "The query failed. Use the table customers."),
        ("SELECT name FROM customers WHERE country = 'Atlantis'", "No rows came back"),
        ("SELECT name FROM customers", "The result does not answer the question."),  # too many rows
    ],
)
def test_a_wrong_first_query_is_a_misstep_read_and_answered_with_the_gold_query(
    shop_files, engine, protocol, query, reading
):
    env = skyrl_gym.make("text2sql", env_config={"protocol": protocol})
    env.reset(options=shop_task(shop_files[engine], CUSTOMERS_IN_FRANCE, "Who lives in France?"))
    first = f"<think>Look at the customers.</think>\n<sql>{query}</sql>"
    assert not env.step(first)["done"]
    continuation = env.unwrapped.reference_continuation()
    (played,) = continuation.played
    # the model's own turn, kept only up to its <sql> tag: deciding to query was right, the query was not
    assert isinstance(played, Misstep) and played == first
    assert played.keep == "<think>Look at the customers.</think>\n<sql>"
    (rest,) = continuation.rest
    assert rest.startswith(f"<think>{reading}") and rest.endswith(
        f"<solution>{CUSTOMERS_IN_FRANCE}</solution>"
    )
    # played again from the start in a fresh episode, the whole of it earns the full reward
    env.reset(options=shop_task(shop_files[engine], CUSTOMERS_IN_FRANCE, "Who lives in France?"))
    outputs = [env.step(action) for action in continuation.episode]
    assert outputs[-1]["reward"] == 1.0 and outputs[-1]["metadata"]["end"] == "terminated"
    env.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_right_first_query_is_kept_whole_and_a_turn_without_one_kept_out(shop_files, engine):
    env = skyrl_gym.make("text2sql")
    task = shop_task(shop_files[engine], CUSTOMERS_IN_FRANCE, "Who lives in France?")
    env.reset(options=task)
    # the gold result by another query: right, so the whole turn is the model's to learn from
    right = (
        "<think>Filter.</think>\n<sql>SELECT c.name FROM customers AS c WHERE c.country IN ('France')</sql>"
    )
    env.step(right)
    continuation = env.unwrapped.reference_continuation()
    assert continuation.played == [right] and not isinstance(continuation.played[0], Misstep)
    assert continuation.rest[0].startswith("<think>The result answers the question.</think>")
    env.reset(options=task)
    env.step("I am not sure what to do.")
    (played,) = env.unwrapped.reference_continuation().played
    assert isinstance(played, Misstep) and played.keep == ""
    env.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_no_continuation_before_the_first_turn_after_the_answer_or_without_a_turn_left(shop_files, engine):
    task = shop_task(shop_files[engine], CUSTOMERS_IN_FRANCE, "Who lives in France?")
    env = skyrl_gym.make("text2sql")
    env.reset(options=task)
    assert env.unwrapped.reference_continuation() is None
    env.step(f"<think>Done.</think>\n<solution>{CUSTOMERS_IN_FRANCE}</solution>")
    assert env.unwrapped.reference_continuation() is None
    two_turns = shop_task(shop_files[engine], CUSTOMERS_IN_FRANCE, "Who lives in France?", max_turns=2)
    env.reset(options=two_turns)
    env.step("<think>a</think>\n<sql>SELECT 1</sql>")
    assert env.unwrapped.reference_continuation() is not None
    env.step("<think>b</think>\n<sql>SELECT 2</sql>")  # the last turn: no room for an answer after it
    assert env.unwrapped.reference_continuation() is None
    env.close()
