"""Scoring: SkyRL's format rule, comparing results, execution match on both engines, the gold cache."""

from __future__ import annotations

import os
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shopdb import ENGINES, SHOP_QUESTIONS, build_shop

from skyrl_gym.envs.sql import scoring
from skyrl_gym.envs.sql.scoring import (
    execution_match,
    extract_solution,
    grade_completion,
    is_ordered,
    results_match,
    score_completion,
)
from skyrl_gym.runtime.sql.database import QueryError, QueryResult, open_database
from skyrl_gym.testing.strategies import text_actions

# -- the format rule --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>easy</think><solution>SELECT 1</solution>", "SELECT 1"),
        (
            "<think>a</think>\n<sql>SELECT 2</sql>\n<think>b</think>\n<solution>\n SELECT 1 \n</solution>",
            "SELECT 1",
        ),
        ("<think>x</think><solution>```sql\nSELECT 1\n```</solution>", "SELECT 1"),
        ("<think>x</think><solution>```\nSELECT 1\n```</solution>", "SELECT 1"),
        ("<solution>SELECT 1</solution><think>after</think>", "SELECT 1"),  # a thought anywhere counts
        ("<solution>SELECT 1</solution>", None),  # no <think>
        ("<think>unclosed <solution>SELECT 1</solution>", None),
        ("<think>x</think><solution>SELECT 1</solution><solution>SELECT 2</solution>", None),
        ("<think>x</think><solution>SELECT 1", None),
        ("<think>x</think>SELECT 1</solution>", None),
        ("<think>x</think></solution>SELECT 1<solution>", None),
        ("<think>x</think><solution><sql>SELECT 1</sql></solution>", None),
        ("<think>x</think><solution>SELECT 1 <think>hmm</think></solution>", None),
        ("<think>x</think><solution>SELECT 1 </observation></solution>", None),
        ("<think>x</think><solution>SELECT 1 <SQL></solution>", None),
        ("<think>x</think><solution>   </solution>", None),
        ("", None),
        (None, None),
    ],
)
def test_extract_solution_applies_the_format_rule(text, expected):
    assert extract_solution(text) == expected


def test_the_think_block_can_be_optional():
    assert extract_solution("<solution>SELECT 1</solution>", require_think=False) == "SELECT 1"
    assert extract_solution("<solution><sql>x</sql></solution>", require_think=False) is None


@settings(max_examples=200)
@given(text_actions(400))
def test_extract_solution_never_raises(text):
    result = extract_solution(text)
    assert result is None or isinstance(result, str)


@pytest.mark.timeout(60)  # a quadratic scan of these million-character texts would take hours, not 60 s
def test_extract_solution_is_linear_on_adversarial_text():
    for text in ("<solution>" * 200_000, "<think>" * 200_000 + "<solution>x</solution>", "<" * 1_000_000):
        assert extract_solution(text) in (None, "x")


# -- comparing results ------------------------------------------------------------------------------------------


def result(rows, columns=None):
    rows = [tuple(r) for r in rows]
    width = len(rows[0]) if rows else len(columns or [])
    return QueryResult(columns or [f"c{i}" for i in range(width)], rows)


@pytest.mark.parametrize(
    ("pred", "gold", "ordered", "expected"),
    [
        ([(1, "a"), (2, "b")], [(2, "b"), (1, "a")], False, True),  # multisets
        ([(1, "a"), (2, "b")], [(2, "b"), (1, "a")], True, False),  # order matters
        ([(1, "a"), (1, "a"), (2, "b")], [(1, "a"), (2, "b"), (2, "b")], False, False),  # multiplicities
        ([(1, "a")], [(1, "a"), (1, "a")], False, False),
        ([(1.0000000001,)], [(1.0,)], False, True),  # float tolerance
        ([(1.001,)], [(1.0,)], False, False),
        ([(1e-9,)], [(0.0,)], False, True),  # absolute tolerance near zero
        ([(3,)], [(3.0,)], False, True),  # int and float
        ([(None, 1)], [(None, 1)], False, True),  # NULL equals NULL
        ([(None,)], [(0,)], False, False),
        ([("1",)], [(1,)], False, False),  # text is not a number
        ([(True,)], [(1,)], False, True),  # booleans as 0/1
        ([("a", 1), ("b", 2)], [(1, "a"), (2, "b")], False, True),  # columns in another order
        ([("a", 1), ("b", 2)], [(2, "b"), (1, "a")], True, False),
        ([("b", 2), ("a", 1)], [(2, "b"), (1, "a")], True, True),
        ([(1, 1, 2)], [(1, 2, 1)], False, True),  # duplicate columns permuted
        ([(1, 2)], [(1, 2, 3)], False, False),  # column count differs
        ([], [], False, True),
        ([(float("nan"),)], [(float("nan"),)], False, True),
        ([(0.1 + 0.2, "x"), (0.3, "y")], [(0.3, "y"), (0.3, "x")], False, True),
    ],
)
def test_results_match(pred, gold, ordered, expected):
    assert results_match(result(pred), result(gold), ordered=ordered) is expected


def test_column_order_and_tolerance_are_configurable():
    pred, gold = result([("a", 1)]), result([(1, "a")])
    assert results_match(pred, gold, ordered=False)
    assert not results_match(pred, gold, ordered=False, ignore_column_order=False)
    assert results_match(result([(1.01,)]), result([(1.0,)]), ordered=False, float_tol=0.02)
    assert not results_match(result([(1.0000001,)]), result([(1.0,)]), ordered=False, float_tol=0.0)


def test_a_truncated_prediction_never_matches():
    gold = result([(1,)])
    assert not results_match(QueryResult(["c"], [(1,)], truncated=True), gold, ordered=False)


@settings(max_examples=100)
@given(
    st.lists(
        st.tuples(st.integers(-5, 5), st.one_of(st.none(), st.text(max_size=3)), st.floats(-1e6, 1e6)),
        min_size=1,
        max_size=12,
    ),
    st.randoms(use_true_random=False),
)
def test_shuffled_rows_and_columns_still_match(rows, rnd):
    gold = result(rows)
    shuffled = list(rows)
    rnd.shuffle(shuffled)
    permutation = [2, 0, 1]
    moved = [tuple(row[i] for i in permutation) for row in shuffled]
    assert results_match(result(shuffled), gold, ordered=False)
    assert results_match(result(moved), gold, ordered=False)
    assert results_match(result(rows), gold, ordered=True)
    changed = list(rows)
    changed[0] = (changed[0][0] + 100, *changed[0][1:])
    assert not results_match(result(changed), gold, ordered=False)


@pytest.mark.parametrize(
    ("sql", "ordered"),
    [
        ("SELECT name FROM t ORDER BY name", True),
        ("select name from t order by name desc limit 3", True),
        ("WITH x AS (SELECT 1) SELECT * FROM x ORDER BY 1", True),
        ("SELECT a FROM x UNION SELECT a FROM y ORDER BY a", True),
        ("SELECT * FROM (SELECT a FROM x ORDER BY a) AS t", False),
        ("SELECT a FROM x WHERE a IN (SELECT b FROM y ORDER BY b LIMIT 2)", False),
        ("SELECT name FROM t", False),
        ("SELECT 'order by' FROM t", False),
        ("(SELECT a FROM x ORDER BY a)", True),
    ],
)
def test_is_ordered_looks_at_the_top_level_only(sql, ordered):
    assert is_ordered(sql, "duckdb") is ordered
    assert is_ordered(sql, "sqlite") is ordered


def test_is_ordered_falls_back_for_sql_sqlglot_cannot_parse():
    assert scoring._has_top_level_order_by("SELECT weird syntax ~~ ORDER BY x")
    assert not scoring._has_top_level_order_by("SELECT f(x ORDER BY y) FROM t")
    assert not scoring._has_top_level_order_by("SELECT 'ORDER BY' FROM t")


# -- execution match on real databases ---------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_every_gold_query_matches_itself_and_scores_one(shop_files, engine):
    with open_database(shop_files[engine]) as db:
        for _, gold in SHOP_QUESTIONS:
            assert execution_match(gold, gold, db), gold
            assert score_completion(f"<think>t</think><solution>{gold}</solution>", gold, db) == 1.0


@pytest.mark.parametrize("engine", ENGINES)
def test_equivalent_queries_match_and_wrong_ones_do_not(shop_files, engine):
    gold = "SELECT name FROM customers WHERE country = 'France'"
    with open_database(shop_files[engine]) as db:
        assert execution_match(
            "SELECT name FROM customers WHERE country IN ('France') ORDER BY name DESC", gold, db
        )
        assert execution_match("select c.name from customers as c where c.country like 'Fr%'", gold, db)
        assert not execution_match("SELECT name FROM customers", gold, db)
        assert not execution_match("SELECT name, country FROM customers WHERE country = 'France'", gold, db)
        assert not execution_match("SELECT nme FROM customers", gold, db)  # an error is wrong, not a crash
        assert not execution_match("DROP TABLE customers", gold, db)
        ordered_gold = "SELECT name FROM products ORDER BY price DESC"
        assert execution_match("SELECT name FROM products ORDER BY price DESC", ordered_gold, db)
        assert not execution_match("SELECT name FROM products ORDER BY price", ordered_gold, db)
        # columns in another order, numbers computed another way
        assert execution_match(
            "SELECT AVG(price), category FROM products GROUP BY category",
            "SELECT category, SUM(price) / COUNT(*) FROM products GROUP BY category",
            db,
        )


@pytest.mark.parametrize("engine", ENGINES)
def test_score_completion_is_minus_one_zero_or_one(shop_files, engine):
    gold = "SELECT COUNT(*) FROM orders"
    with open_database(shop_files[engine]) as db:
        assert (
            score_completion("<think>t</think><solution>SELECT COUNT(*) FROM orders</solution>", gold, db)
            == 1.0
        )
        assert (
            score_completion("<think>t</think><solution>SELECT COUNT(*) FROM customers</solution>", gold, db)
            == 0.0
        )
        assert score_completion("<think>t</think><solution>SELECT nope</solution>", gold, db) == 0.0
        assert score_completion("<solution>SELECT COUNT(*) FROM orders</solution>", gold, db) == -1.0
        assert score_completion("SELECT COUNT(*) FROM orders", gold, db, format_penalty=-0.5) == -0.5
        assert (
            score_completion(
                "<solution>SELECT COUNT(*) FROM orders</solution>", gold, db, require_think=False
            )
            == 1.0
        )
        grade = grade_completion("<think>t</think><solution>SELECT nope FROM orders</solution>", gold, db)
        assert grade.format_valid and not grade.correct and grade.error_kind == "schema"


def executions(db) -> list[tuple[str, int | None, int]]:
    """Record each query ``db`` runs from now on: ``(sql, max_rows asked, rows fetched)``."""
    calls: list[tuple[str, int | None, int]] = []
    run = db.execute

    def execute(sql, *args, **kwargs):
        result = run(sql, *args, **kwargs)
        calls.append((sql, kwargs.get("max_rows"), len(result.rows)))
        return result

    db.execute = execute
    return calls


def test_a_prediction_is_never_fetched_beyond_the_gold_size(shop_files):
    scoring.clear_gold_cache()
    with open_database(shop_files["duckdb"]) as db:
        calls = executions(db)
        assert not execution_match("SELECT * FROM range(100000000)", "SELECT 1", db)
        gold, prediction = calls
        assert gold == ("SELECT 1", None, 1)
        # a hundred million rows, and only the gold's one (plus the one that shows there are more) fetched
        assert prediction[0] == "SELECT * FROM range(100000000)" and prediction[1] == 1 and prediction[2] <= 2


def test_a_broken_gold_query_raises_instead_of_scoring(shop_files):
    with open_database(shop_files["sqlite"]) as db:
        with pytest.raises(QueryError, match="gold query failed"):
            score_completion("<think>t</think><solution>SELECT 1</solution>", "SELECT * FROM missing", db)


def test_gold_results_are_cached_and_refreshed_when_the_file_changes(tmp_path):
    scoring.clear_gold_cache()
    path = build_shop(tmp_path / "shop.sqlite", "sqlite")
    gold = "SELECT COUNT(*) FROM customers"
    with open_database(path) as db:
        first = scoring.gold_result(db, gold)
        assert scoring.gold_result(db, gold) is first
    import sqlite3

    connection = sqlite3.connect(path)
    connection.execute("INSERT INTO customers VALUES (9, 'Ivy', NULL, NULL)")
    connection.commit()
    connection.close()
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    with open_database(path) as db:
        assert scoring.gold_result(db, gold).rows == [(9,)]


def test_transpilation_applies_to_the_solution(shop_files):
    gold = "SELECT name FROM customers ORDER BY id LIMIT 2 OFFSET 1"
    with open_database(shop_files["duckdb"]) as db:
        solution = "SELECT name FROM customers ORDER BY id LIMIT 1, 2"  # SQLite's LIMIT offset, count
        assert not execution_match(solution, gold, db)
        assert execution_match(solution, gold, db, transpile_from="auto")
        assert execution_match(solution, gold, db, transpile_from="sqlite")


def test_scoring_many_random_completions_is_quick(shop_files):
    rng = random.Random(0)
    pieces = [
        "<think>",
        "</think>",
        "<solution>",
        "</solution>",
        "<sql>",
        "SELECT COUNT(*) FROM orders",
        " x ",
    ]
    scoring.clear_gold_cache()
    with open_database(shop_files["duckdb"]) as db:
        calls = executions(db)
        graded = 0
        for i in range(300):
            text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
            if i % 10 == 0:  # well-formed ones too, right or wrong, so that queries run
                text = f"<think>t</think><solution>{rng.choice(pieces[5:])}</solution>"
            reward = score_completion(text, "SELECT COUNT(*) FROM orders", db)
            assert reward in (-1.0, 0.0, 1.0)
            graded += reward != -1.0
        # the work: the gold query once at most (then cached), one query per well-formed completion at most
        gold_runs = sum(1 for _, max_rows, _ in calls if max_rows is None)
        assert gold_runs == 1 and graded >= 30 and len(calls) - gold_runs <= graded, (
            gold_runs,
            calls,
            graded,
        )
