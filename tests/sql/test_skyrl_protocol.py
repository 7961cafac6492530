"""text2sql speaks SkyRL-SQL's protocol byte for byte by default, against real SQLite and DuckDB databases.

Pinned here: the observation text (``<observation>`` wrapping, the ``<reminder>``, the message for a turn
without ``<sql>``, the result as pandas' table, error and timeout texts), the step metadata (``tool_input``),
the reward rules (the format rule of ``verify_format_and_extract`` over the episode with its observations,
the set match, an empty solution), the public names SkyRL code imports, and SkyRL's own test scenarios played
on a real database at SkyRL's path layout. The expected tables were computed with pandas 2.3 (SkyRL's pin).
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shopdb import ENGINES, build_shop, shop_task

import skyrl_gym
from skyrl_gym.envs.base_text_env import MissingGroundTruthError
from skyrl_gym.envs.sql.env import Text2SQLEnv
from skyrl_gym.envs.sql.utils import (
    calculate_reward_single,
    compute_score_single,
    rows_match_as_sets,
    verify_format_and_extract,
)
from skyrl_gym.tools.sql import INVALID_ACTION, SQLCodeExecutorToolGroup, render_table, skyrl_result

COUNT_ORDERS = "SELECT COUNT(*) FROM orders"


def reminder(left: int) -> str:
    return f"<reminder>You have {left} turns left to complete the task.</reminder>"


def observation(body: str, left: int) -> str:
    return f"\n\n<observation>{body}\n{reminder(left)}</observation>\n\n"


def episode(path: Path, gold: str = COUNT_ORDERS, config: dict | None = None, **extras) -> Text2SQLEnv:
    """A text2sql environment made directly (no init(), as SkyRL's tests step it)."""
    return Text2SQLEnv(config, shop_task(path, gold, **extras)["extras"])


# -- verify_format_and_extract: SkyRL's cases ----------------------------------------------------------------

FORMAT_CASES = [
    ("<think>I need to query the database</think>\n<solution>SELECT * FROM users;</solution>", True),
    ("<solution>SELECT * FROM users;</solution>", False),  # no think
    ("<think>thinking</think>\n<solution>SELECT * FROM users;<solution>more text</solution>", False),
    ("<think>thinking</think>\n<solution>SELECT * FROM users;</solution>extra</solution>", False),
    ("<think>thinking</think>\nSELECT * FROM users;</solution>", False),  # no opening tag
    ("<think>thinking</think>\n<solution>SELECT * FROM users;", False),  # no closing tag
    ("<think>thinking</think>\nsome text<solution>", False),
    ("<think>thinking</think>\n<solution>SELECT * FROM users; <sql>forbidden</sql></solution>", False),
    (
        "<think>thinking</think>\n<solution>SELECT * FROM users; <observation>forbidden</observation></solution>",
        False,
    ),
    ("<think>thinking</think>\n<solution></solution>", True),  # an empty solution is well formed
    (
        "<think>first thought</think>\n<think>second thought</think>\n<solution>SELECT * FROM users;</solution>",
        True,
    ),
    (
        "<observation>some observation</observation>\n<think>thinking</think>\n"
        "<solution>SELECT * FROM users;</solution>",
        True,
    ),
    (
        "<observation>some observation</observation>\nrandom text\n<think>thinking</think>\n"
        "<solution>SELECT * FROM users;</solution>",
        False,
    ),
    ("some text<solution>", False),
    ("</solution><solution>content</solution>", False),
    ("<solution><solution>content</solution>", False),
    ("some text</solution>", False),
    ("", False),
    ("<solution>content without end", False),
]


@pytest.mark.parametrize(("output", "valid"), FORMAT_CASES)
def test_verify_format_and_extract_on_skyrls_cases(output, valid):
    is_valid, thoughts, solution, rest = verify_format_and_extract(output)
    assert is_valid is valid and rest is None
    if valid:
        assert thoughts and solution is not None
    else:
        assert thoughts is None and solution is None


def test_verify_format_and_extract_returns_the_thoughts_and_the_stripped_solution():
    text = "<think>a</think>x<think>b\nc</think><observation>o</observation>  <THINK>d</think><solution>  S 1 \n</solution>"
    assert verify_format_and_extract(text) == (True, ["a", "b\nc"], "S 1", None)
    # the tag checks are case-insensitive where SkyRL's are, and only there
    assert not verify_format_and_extract("<think>a</think><solution>x </SQL></solution>")[0]
    assert not verify_format_and_extract("<think>a</think><solution>x <Observation</solution>")[0]
    assert verify_format_and_extract("<think>a</think><solution>x <sqlite></solution>")[0]  # \b: not a tag
    assert not verify_format_and_extract("<THINK>a</THINK><solution>x</solution>")[0]  # blocks: lower case
    assert verify_format_and_extract(
        "<think>a</think></OBSERVATION>\u2003\n\t<think>b</think><solution>x</solution>"
    )[0]  # any Unicode space before the <think>
    assert not verify_format_and_extract(
        "<think>a</think></observation>\u200b<think>b</think><solution>x</solution>"
    )[0]
    # an observation after the solution is not checked
    assert verify_format_and_extract("<think>a</think><solution>x</solution></observation>after")[0]
    assert verify_format_and_extract(None) == (False, None, None, None)
    assert verify_format_and_extract("<solution>x</solution>", require_think=False) == (True, [], "x", None)
    assert verify_format_and_extract("</observation>no<solution>x</solution>", require_think=False)[0]


def spec_verify(output: str) -> tuple:
    """SkyRL's rule written the direct way (quadratic in the worst case): the reference for the fast one."""
    if output.count("<solution>") != 1:
        return (False, None, None, None)
    before, tail = output.split("<solution>", 1)
    if tail.count("</solution>") != 1:
        return (False, None, None, None)
    solution = tail.split("</solution>", 1)[0]
    if re.search(r"</?(think|sql|observation)\b", solution, re.IGNORECASE):
        return (False, None, None, None)
    thoughts = re.findall(r"<think>(.*?)</think>", output, re.DOTALL)
    if not thoughts:
        return (False, None, None, None)
    for closing in re.finditer(r"</observation>", before, re.IGNORECASE):
        if not before[closing.end() :].lstrip().lower().startswith("<think>"):
            return (False, None, None, None)
    return (True, thoughts, solution.strip(), None)


PIECES = st.sampled_from(
    [
        "<think>",
        "</think>",
        "<THINK>",
        "<solution>",
        "</solution>",
        "<sql>",
        "</sql>",
        "<observation>",
        "</observation>",
        "</OBSERVATION>",
        "<sqlx>",
        " ",
        "\n",
        "\u00a0",
        "\u212a",
        "x",
        "SELECT 1",
        "<",
        "think>",
        "<thin\u212a>",
    ]
)


@settings(max_examples=400)
@given(st.lists(st.one_of(PIECES, st.text(max_size=3)), max_size=14).map("".join))
def test_verify_format_and_extract_agrees_with_the_direct_rule(text):
    assert verify_format_and_extract(text) == spec_verify(text)


@pytest.mark.parametrize(
    ("text", "valid", "thoughts"),
    [
        ("<think>" * 200_000 + "<solution>x</solution>", False, None),  # blocks that never close
        ("<think>a</think>" + "</observation>" * 150_000 + "<solution>x</solution>", False, None),
        (
            "<think>a</think>" + "</observation>  <think>b</think>" * 100_000 + "<solution>x</solution>",
            True,
            100_001,
        ),
        ("<think>a</think><solution>" + "<sq" * 300_000 + "</solution>", True, 1),
        ("<think>a</think><solution>" + "<sql" * 300_000 + "</solution>", False, None),
        ("<solution>" + "</solution" * 300_000, False, None),
    ],
)
def test_verify_format_and_extract_takes_adversarial_megabytes(text, valid, thoughts):
    # The direct rule is quadratic on the first three (10^10 character steps and more); this one reads them once.
    is_valid, found, _, _ = verify_format_and_extract(text)
    assert is_valid is valid
    assert (None if found is None else len(found)) == thoughts


# -- the observation text ------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_every_observation_is_skyrls_text(shop_files, engine):
    env = episode(shop_files[engine], max_turns=4)
    out = env.step("<think>a</think><sql>SELECT name, price FROM products WHERE price > 10 ORDER BY id</sql>")
    table = "             0    1\nEspresso beans 12.5\n  French press 34.0\n       Grinder 89.9"
    assert out["observations"] == [{"role": "user", "content": observation(table, 3)}]
    assert out["reward"] == 0.0 and out["done"] is False
    out = env.step("<think>b</think>no query here")
    assert out["observations"][0]["content"] == observation(INVALID_ACTION, 2)
    out = env.step("<think>c</think><sql>SELECT quantity FROM orders WHERE id < 3 ORDER BY id</sql>")
    assert out["observations"][0]["content"] == observation(" 0\n 2\n 6", 1)  # "1 turns", as SkyRL writes
    assert env.step(f"<think>d</think><solution>{COUNT_ORDERS}</solution>")["reward"] == 1.0


def test_the_result_shows_distinct_rows_in_the_database_order(shop_files):
    env = episode(shop_files["sqlite"])
    out = env.step("<sql>SELECT country FROM customers ORDER BY id</sql>")
    body = "      0\n France\nGermany\n   None\n  Spain\nIreland"
    assert out["observations"][0]["content"] == observation(body, 4)
    assert out["metadata"]["rows"] == 8  # the metadata counts every row


@pytest.mark.parametrize(
    ("rows", "table"),
    [
        (
            [(12.5,), (7.25,), (34.0,), (2.99,), (89.9,), (6.5,)],
            "    0\n12.50\n 7.25\n34.00\n 2.99\n89.90\n 6.50",
        ),
        ([(1, None), (2, 3)], " 0   1\n 1 NaN\n 2 3.0"),
        ([("Ann Lee", 3), ("Bob", 12)], "      0  1\nAnn Lee  3\n    Bob 12"),
        ([(1e-7,), (2.5,)], "           0\n1.000000e-07\n2.500000e+00"),
        ([(123456789.123,), (1.5,)], "           0\n1.234568e+08\n1.500000e+00"),
        ([(True,), (False,)], "    0\n True\nFalse"),
        ([("a", 1.5), (2, None)], "0   1\na 1.5\n2 NaN"),
        ([("line\nbreak\ttab",)], "               0\nline\\nbreak\\ttab"),
        ([(b"\x00ab",)], "        0\nb'\\x00ab'"),
        ([(None,), (None,)], "   0\nNone\nNone"),
        ([("",), ("x",)], "0\n \nx"),
        ([(-1.25,), (10.0,)], "    0\n-1.25\n10.00"),
        ([(float("nan"),), (1.0,)], "  0\nNaN\n1.0"),
        (
            [(None, None), (None, 2**64)],
            "   0            1\nNone          NaN\nNone 1.844674e+19",
        ),  # null first
        (
            [(None, 2**64), (None, None)],
            "   0                    1\nNone 18446744073709551616\nNone                 None",
        ),
        ([(2**64, None)], "                   0    1\n18446744073709551616 None"),
        ([], "Empty DataFrame\nColumns: []\nIndex: []"),
    ],
)
def test_render_table_lays_rows_out_as_pandas_does(rows, table):
    assert render_table(rows) == table


def test_a_long_result_is_cut_to_max_rows_as_skyrl_cuts_it(tmp_path):
    path = tmp_path / "numbers.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (s TEXT)")
        db.executemany("INSERT INTO t VALUES (?)", [(f"row{i:06d}",) for i in range(1, 5001)])
    env = Text2SQLEnv(None, {"reward_spec": {"ground_truth": "SELECT 1"}, "db_path": str(path)})
    # 899 rows of 9 characters and the header: 8999 characters, shown whole
    body = env.step("<sql>SELECT s FROM t WHERE rowid <= 899</sql>")["observations"][0]["content"]
    table = "\n".join(["        0"] + [f"row{i:06d}" for i in range(1, 900)])
    assert len(table) == 8999 and body == observation(table, 4)
    # one more row passes 9000: SkyRL's line, then the first 50 rows
    metadata = env.step("<sql>SELECT s FROM t WHERE rowid <= 900</sql>")
    head = "\n".join(["        0"] + [f"row{i:06d}" for i in range(1, 51)])
    truncated = f"Truncated to 50 lines since returned response too long: {head}"
    assert metadata["observations"][0]["content"] == observation(truncated, 3)
    assert metadata["metadata"]["rows"] == 900 and metadata["metadata"]["truncated"] is False
    # more rows than could fit are not fetched: the result is cut the same way
    out = env.step("<sql>SELECT s FROM t</sql>")
    assert out["observations"][0]["content"] == observation(truncated, 2)
    assert out["metadata"]["rows_shown"] == 4501 and out["metadata"]["truncated"] is True
    assert out["metadata"]["rows"] == 5000


def test_the_registered_budget_lets_skyrls_longest_results_through(tmp_path):
    path = tmp_path / "wide.sqlite"
    rows = [("x" * 2999,), ("y" * 2999,), ("z" * 2999,)]
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (s TEXT)")
        db.executemany("INSERT INTO t VALUES (?)", rows)
    env = skyrl_gym.make(
        "text2sql", extras={"reward_spec": {"ground_truth": "SELECT 1"}, "db_path": str(path)}
    )
    env.init([{"role": "user", "content": "?"}])
    whole = env.step("<sql>SELECT s FROM t WHERE rowid <= 2</sql>")["observations"][0]["content"]
    table = render_table(rows[:2])
    assert len(table) == 8999 and whole == observation(table, 4)  # 9094 characters, uncut by the budget
    cut = env.step("<sql>SELECT s FROM t</sql>")["observations"][0]["content"]
    prefix = "Truncated to 50 lines since returned response too long: "
    assert cut == observation(prefix + render_table(rows)[:9000] + "\n[... 2999 characters cut]", 3)
    env.close()


def test_max_rows_and_max_chars_set_where_skyrl_cuts(shop_files):
    env = episode(shop_files["duckdb"], config={"max_rows": 2, "max_chars": 30})
    content = env.step("<sql>SELECT id FROM orders ORDER BY id</sql>")["observations"][0]["content"]
    assert content == observation("Truncated to 2 lines since returned response too long:  0\n 1\n 2", 4)
    # a cell longer than the cap is cut with a note
    content = env.step("<sql>SELECT repeat('x', 100000)</sql>")["observations"][0]["content"]
    body = content.split("<observation>", 1)[1].split("\n<reminder>", 1)[0]
    assert body.startswith("Truncated to 2 lines since returned response too long: ")
    assert body.endswith(" characters cut]") and len(body) < 150
    assert skyrl_result([("a",)] * 3) == "0\na"


@pytest.mark.parametrize("engine", ENGINES)
def test_errors_timeouts_and_empty_queries_read_as_in_skyrl(shop_files, engine):
    from test_safety import HEAVY

    path = shop_files[engine]
    env = episode(path, config={"timeout_s": 1.0}, max_turns=6)
    content = env.step("<sql>SELECT * FROM nowhere</sql>")["observations"][0]["content"]
    assert re.fullmatch(
        r"\n\n<observation>Error executing SQL: .*nowhere.*, db file: "
        + re.escape(Path(path).name)  # the file's name only: no host path reaches the model
        + r"\n<reminder>.*",
        content,
        re.DOTALL,
    )
    out = env.step(f"<sql>{HEAVY[engine]}</sql>")
    assert out["observations"][0]["content"] == observation(f"SQL Timeout:\n{HEAVY[engine]}", 4)
    assert out["metadata"]["error_kind"] == "timeout"
    out = env.step("<sql> \n </sql>")  # SQLite runs an empty statement: no rows
    assert out["observations"][0]["content"] == observation("Empty DataFrame\nColumns: []\nIndex: []", 3)
    out = env.step("<sql>SELECT * FROM customers WHERE id < 0</sql>")
    assert out["observations"][0]["content"] == observation("Empty DataFrame\nColumns: []\nIndex: []", 2)
    assert env.get_metrics()["queries"] == 4 and env.get_metrics()["query_errors"] == 2


# -- the metadata --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "query"),
    [
        ("<sql>SELECT name FROM customers WHERE id = 1;</sql>", "SELECT name FROM customers WHERE id = 1;"),
        ("<sql>SELECT name FROM customers", None),
        ("<think>a</think><sql>\n SELECT 1 </sql> and <sql>SELECT 2</sql>", "\n SELECT 1 "),
        ("<sql></sql>", ""),
        ("no tags at all", None),
    ],
)
@pytest.mark.parametrize("protocol", ["skyrl", "strict"])
def test_tool_input_carries_the_query_as_skyrl_parses_it(shop_files, action, query, protocol):
    env = episode(shop_files["sqlite"], config={"protocol": protocol}, max_turns=2)
    metadata = env.step(action)["metadata"]
    assert metadata["tool_group"] == "SQLCodeExecutorToolGroup" and metadata["tool_name"] == "sql"
    db_id, written, left = metadata["tool_input"]
    assert db_id == "shop" and left == 1
    if protocol == "skyrl":
        assert written == query  # exactly as written
    else:
        assert written == (None if query is None else query.strip())  # strict runs it stripped
    json.dumps(metadata)


# -- the reward ----------------------------------------------------------------------------------------------


def test_a_turn_after_an_observation_must_start_with_think(shop_files):
    first = "<think>look</think><sql>SELECT 1</sql>"
    for answer, reward in [
        (f"<solution>{COUNT_ORDERS}</solution>", -1.0),
        (f"I know. <think>x</think><solution>{COUNT_ORDERS}</solution>", -1.0),
        (f"  \n<think>x</think><solution>{COUNT_ORDERS}</solution>", 1.0),
        (f"<Think>x</think><solution>{COUNT_ORDERS}</solution>", 1.0),  # SkyRL compares in lower case
    ]:
        env = episode(shop_files["duckdb"])
        env.step(first)
        assert env.step(answer)["reward"] == reward, answer
        # strict checks the model's text only
        env = episode(shop_files["duckdb"], config={"protocol": "strict"})
        env.step(first)
        assert env.step(answer)["reward"] == 1.0
    env = episode(shop_files["duckdb"], config={"require_think": False})
    env.step("<sql>SELECT 1</sql>")
    assert env.step(f"<solution>{COUNT_ORDERS}</solution>")["reward"] == 1.0


def test_an_empty_solution_scores_zero(shop_files):
    for solution in ("", "  \n"):
        env = episode(shop_files["sqlite"])
        out = env.step(f"<think>x</think><solution>{solution}</solution>")
        assert out["reward"] == 0.0 and out["done"]
        assert out["metadata"]["format_valid"] is True and out["metadata"]["correct"] is False
    env = episode(
        shop_files["sqlite"], gold="SELECT * FROM customers WHERE id < 0"
    )  # even when gold is empty
    assert env.step("<think>x</think><solution></solution>")["reward"] == 0.0


@pytest.mark.parametrize("engine", ENGINES)
def test_the_solution_matches_as_a_set_of_rows(shop_files, engine):
    gold = "SELECT country FROM customers WHERE country IS NOT NULL ORDER BY country"
    for answer, reward in [
        ("SELECT DISTINCT country FROM customers WHERE country IS NOT NULL", 1.0),  # duplicates, order
        ("SELECT country FROM customers WHERE country IS NOT NULL ORDER BY country DESC", 1.0),
        ("SELECT country FROM customers", 0.0),  # a NULL more
        ("SELECT country, 1 FROM customers WHERE country IS NOT NULL", 0.0),  # a column more
    ]:
        env = episode(shop_files[engine], gold=gold)
        assert env.step(f"<think>x</think><solution>{answer}</solution>")["reward"] == reward, answer
    # columns count in order; exact values; 2 == 2.0
    two = "SELECT name, price FROM products WHERE id = 1"
    for answer, reward in [
        ("SELECT price, name FROM products WHERE id = 1", 0.0),
        ("SELECT name, price + 1e-9 FROM products WHERE id = 1", 0.0),
        ("SELECT name, 12.5 FROM products WHERE id = 1", 1.0),
    ]:
        env = episode(shop_files[engine], gold=two)
        assert env.step(f"<think>x</think><solution>{answer}</solution>")["reward"] == reward, answer
    env = episode(shop_files[engine], gold="SELECT 2")
    assert env.step("<think>x</think><solution>SELECT 2.0</solution>")["reward"] == 1.0


def test_match_execution_is_this_packages_rule(shop_files):
    config = {"match": "execution"}
    gold = "SELECT name FROM customers ORDER BY id"
    env = episode(shop_files["duckdb"], gold=gold, config=config)
    assert (
        env.step("<think>x</think><solution>SELECT name FROM customers ORDER BY id DESC</solution>")["reward"]
        == 0
    )
    env = episode(shop_files["duckdb"], gold="SELECT name, price FROM products", config=config)
    assert env.step("<think>x</think><solution>SELECT price, name FROM products</solution>")["reward"] == 1.0
    strict = {"protocol": "strict", "match": "set"}  # and strict can match as SkyRL does
    env = episode(shop_files["duckdb"], gold=gold, config=strict)
    assert (
        env.step("<think>x</think><solution>SELECT name FROM customers ORDER BY id DESC</solution>")["reward"]
        == 1
    )


def test_rows_match_as_sets_compares_as_python_sets_do():
    assert rows_match_as_sets([(1, "a"), (1, "a"), (2, None)], [(2, None), (1.0, "a")])
    assert not rows_match_as_sets([(1, "a")], [("a", 1)])
    assert rows_match_as_sets([([1, 2], {"k": 1})], [([1, 2], {"k": 1})])  # DuckDB lists and structs
    assert not rows_match_as_sets([([1, 2],)], [([2, 1],)])


def test_a_turn_with_both_solution_tags_ends_the_episode_in_any_order(shop_files):
    env = episode(shop_files["sqlite"])
    out = env.step("</solution> first, then <solution>")
    assert out["done"] and out["reward"] == -1.0 and out["observations"] == []
    env = episode(shop_files["sqlite"], config={"protocol": "strict"})
    assert not env.step("</solution> first, then <solution>")["done"]


def test_penalties_and_the_turn_budget_apply_to_skyrls_rule(shop_files):
    env = episode(shop_files["sqlite"], config={"format_penalty": -0.5})
    assert env.step(f"<solution>{COUNT_ORDERS}</solution>")["reward"] == -0.5
    env = episode(shop_files["sqlite"], config={"no_solution_reward": 0.0}, max_turns=2)
    env.step("<think>x</think><sql>SELECT 1</sql>")
    out = env.step("<think>y</think><sql>SELECT 2</sql>")
    assert out["done"] and out["reward"] == 0.0 and out["metadata"]["end"] == "truncated"
    env = episode(shop_files["sqlite"], max_turns=2)
    env.step("<think>x</think><sql>SELECT 1</sql>")
    assert env.step("<think>y</think>")["reward"] == -1.0  # SkyRL's score of an episode with no solution


def test_compute_score_single_on_a_database_file(shop_files):
    for engine in ENGINES:
        path = shop_files[engine]
        text = f"<think>x</think><solution>{COUNT_ORDERS}</solution>"
        assert compute_score_single(text, COUNT_ORDERS, path) == 1.0
        assert calculate_reward_single(text, "SELECT 1", path, timeout=5) == 0.0
        assert compute_score_single(f"<solution>{COUNT_ORDERS}</solution>", COUNT_ORDERS, path) == -1.0
    with pytest.raises(FileNotFoundError):
        compute_score_single("<think>x</think><solution>SELECT 1</solution>", "SELECT 1", "/nowhere/x.sqlite")


# -- construction, public names ------------------------------------------------------------------------------


def test_a_row_without_ground_truth_fails_at_construction(shop_files):
    extras = {"db_path": str(shop_files["sqlite"]), "db_id": "shop", "data": "shop"}
    with pytest.raises(MissingGroundTruthError, match="reward_spec field is required"):
        skyrl_gym.make("text2sql", extras=extras)
    with pytest.raises(AssertionError):  # SkyRL's code catches an assertion
        Text2SQLEnv(None, {**extras, "reward_spec": {"method": "rule"}})
    with pytest.raises(ValueError, match="gold SQL query"):
        Text2SQLEnv(None, {**extras, "reward_spec": {"ground_truth": "  "}})
    with pytest.raises(ValueError, match="names no database"):
        Text2SQLEnv(None, {"reward_spec": {"ground_truth": COUNT_ORDERS}})


def test_made_without_a_task_reset_draws_a_bundled_one():
    env = Text2SQLEnv()
    prompt, info = env.reset(seed=0)
    assert prompt and info["max_turns"] == env.max_turns
    out = env.step(env.reference_action())
    assert out["reward"] == 1.0 and out["done"]
    env.close()


def test_skyrls_public_names():
    import skyrl_gym.envs.sql as sql_package
    import skyrl_gym.envs.sql.env as env_module
    import skyrl_gym.tools as tools

    assert env_module.SQLEnv is Text2SQLEnv and sql_package.SQLEnv is Text2SQLEnv
    assert sql_package.Text2SQLEnvConfig is env_module.Text2SQLConfig
    config = env_module.Text2SQLEnvConfig(db_path="/data/sql")  # SkyRL's one field
    assert config.db_path == "/data/sql" and config.protocol == "skyrl"
    assert tools.SQLCodeExecutorToolGroup is SQLCodeExecutorToolGroup
    assert skyrl_gym.spec("text2sql").entry_point.endswith(":Text2SQLEnv")


def test_the_tool_module_imports_no_environment():
    code = (
        "import sys, json, skyrl_gym.tools.sql;"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('skyrl_gym.envs.') or m in "
        "('duckdb', 'sqlglot', 'pandas'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert [m for m in json.loads(out.stdout) if m != "skyrl_gym.envs.registration"] == []


def test_the_tool_group_finds_databases_at_skyrls_layout(tmp_path):
    root = tmp_path / "spider" / "database"
    build_shop(root / "shop" / "shop.sqlite", "sqlite")
    group = SQLCodeExecutorToolGroup(db_file_path=str(root))
    assert group.get_name() == "SQLCodeExecutorToolGroup" and group.get_tool_names()[0] == "sql"
    assert group.db_path == str(root)
    text = group.execute_tool("sql", "shop", "SELECT COUNT(*) FROM orders", 3)
    assert text == observation(" 0\n15", 3)
    assert group.sql("shop", None, 2) == observation(INVALID_ACTION, 2)
    missing = group.sql("elsewhere", "SELECT 1", 1)
    assert missing.startswith("\n\n<observation>Error executing SQL: ")
    assert "db file: elsewhere.sqlite" in missing
    assert group.sql("../shop", "SELECT 1", 1).startswith(
        "\n\n<observation>Error executing SQL: db_id must be"
    )
    database, _ = group.database_for("shop")
    group.close()
    assert database.closed
    with pytest.raises(ValueError, match="db_file_path"):
        SQLCodeExecutorToolGroup()


# -- SkyRL's own scenarios, on a real database at SkyRL's path layout ----------------------------------------


@pytest.fixture()
def spider_root(tmp_path: Path) -> Path:
    path = tmp_path / "spider" / "database" / "test_db" / "test_db.sqlite"
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE employees (id INTEGER PRIMARY KEY, name TEXT)")
        db.executemany("INSERT INTO employees VALUES (?, ?)", [(1, "John Doe"), (2, "Jane Smith")])
    db.close()
    return tmp_path


def skyrl_row(max_turns: int) -> dict:
    return {
        "reward_spec": {"method": "rule", "ground_truth": "SELECT name FROM employees WHERE id = 1;"},
        "max_turns": max_turns,
        "db_id": "test_db",
        "data": "spider",
    }


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        (
            "<think>a</think>\n\n<sql>SELECT name FROM employees WHERE id = 1;</sql>",
            "<think>b</think>\n\n<solution>SELECT name FROM employees WHERE id = 1;</solution>",
            1.0,
        ),
        (
            "<think>a</think>\n\n<sql>SELECT name FROM employees WHERE id = 1;</sql>",
            "<think>b</think>\n\n<solution>SELECT name FROM employees WHERE name LIKE 'John%';</solution>",
            1.0,
        ),
        (
            "<think>a</think>\n\n<sql>SELECT name FROM employees WHERE id = 1;</sql>",
            "<think>b</think>\n\n<solution>SELECT name FROM employees WHERE id = 2;</solution>",
            0.0,
        ),
        (
            "<think>a</think>",
            "<think>b</think>\n\n<solution>SELECT name FROM employees WHERE id = 1;</solution>",
            1.0,
        ),
    ],
)
def test_skyrls_episode_scenarios(spider_root, first, second, expected):
    from omegaconf import DictConfig

    env = skyrl_gym.make(
        "text2sql", env_config=DictConfig({"db_path": str(spider_root)}), extras=skyrl_row(3)
    )
    env.init([{"role": "user", "content": "Who is employee 1?"}])
    out = env.step(first)
    assert out["reward"] == 0.0 and reminder(2) in out["observations"][0]["content"]
    if "<sql>" not in first:
        assert INVALID_ACTION in out["observations"][0]["content"]
    else:
        assert "John Doe" in out["observations"][0]["content"]
    out = env.step(second)
    assert out["done"] and out["reward"] == expected
    env.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_huge_result_costs_the_caller_what_the_observation_shows(shop_files, engine):
    import tracemalloc

    huge = {
        "duckdb": "SELECT repeat('x', 2000000) AS v, i FROM range(60) t(i)",
        "sqlite": "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 60) "
        "SELECT substr(printf('%.*c', 900000, 'x'), 1) AS v, i FROM n",
    }[engine]
    env = episode(shop_files[engine], max_turns=3)
    tracemalloc.start()
    try:
        content = env.step(f"<think>big</think><sql>{huge}</sql>")["observations"][0]["content"]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert content.startswith("\n\n<observation>Truncated to 50 lines since returned response too long")
    assert len(content) < 10_000
    # values are cut to the observation's cap in the query worker: megabytes, not the 54-120 MB the rows hold
    assert peak < 32 * 2**20, peak
