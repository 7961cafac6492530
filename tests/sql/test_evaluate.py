"""The evaluation command on a small dataset and predictions file whose accuracy is known by construction."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("duckdb")
pytest.importorskip("sqlglot")

from skyrl_gym import cli  # noqa: E402
from skyrl_gym.envs.sql import evaluate  # noqa: E402
from skyrl_gym.rows import read_rows, write_rows  # noqa: E402

SHOP_SQL = """
CREATE TABLE product (product_id INTEGER PRIMARY KEY, name TEXT, price REAL, category TEXT);
INSERT INTO product VALUES (1, 'pen', 1.5, 'office'), (2, 'desk', 120.0, 'furniture'),
    (3, 'lamp', 35.25, 'furniture'), (4, 'stapler', 9.99, 'office');
"""
ZOO_SQL = """
CREATE TABLE animal (animal_id INTEGER PRIMARY KEY, name TEXT, species TEXT, age INTEGER);
INSERT INTO animal VALUES (1, 'Rex', 'lion', 7), (2, 'Mo', 'seal', 3), (3, 'Ada', 'lion', 12);
"""


def make_sqlite(path: Path, script: str) -> Path:
    con = sqlite3.connect(path)
    con.executescript(script)
    con.commit()
    con.close()
    return path


def row(db_path: Path, db_id: str, level: str, gold: str, **extra) -> dict:
    return {
        "data_source": "test",
        "prompt": [{"role": "user", "content": "question"}],
        "env_class": "text2sql",
        "reward_spec": {"method": "rule", "ground_truth": gold},
        "db_id": db_id,
        "db_path": str(db_path),
        "data": "test",
        "extra_info": {"split": "test", "level": level, **extra},
    }


def solution(sql: str) -> str:
    return f"<think>I know this one.</think>\n<solution>{sql}</solution>"


@pytest.fixture()
def case(tmp_path: Path) -> tuple[Path, Path]:
    """Eight rows over two databases; the predictions get 4 right, 1 wrong, 1 malformed, 1 failing, 1 missing."""
    shop = make_sqlite(tmp_path / "shop.sqlite", SHOP_SQL)
    zoo = make_sqlite(tmp_path / "zoo.sqlite", ZOO_SQL)
    rows = [
        row(shop, "shop", "easy", "SELECT COUNT(*) FROM product", id="s1"),
        row(shop, "shop", "easy", "SELECT name FROM product WHERE price > 10", id="s2"),
        row(shop, "shop", "medium", "SELECT category, AVG(price) FROM product GROUP BY category", id="s3"),
        row(shop, "shop", "hard", "SELECT name FROM product ORDER BY price DESC LIMIT 2", id="s4"),
        row(zoo, "zoo", "easy", "SELECT name FROM animal WHERE species = 'lion'", id="z1"),
        row(zoo, "zoo", "medium", "SELECT species, COUNT(*) FROM animal GROUP BY species", id="z2"),
        row(zoo, "zoo", "medium", "SELECT MAX(age) FROM animal", id="z3"),
        row(zoo, "zoo", "hard", "SELECT name FROM animal WHERE age > (SELECT AVG(age) FROM animal)", id="z4"),
    ]
    predictions = [
        # right: same rows, other column order / float noise / a different but equivalent query
        {"id": "s1", "completion": solution("SELECT COUNT(product_id) FROM product")},
        {"index": 2, "sql": "SELECT AVG(price) + 0.0000000001, category FROM product GROUP BY category"},
        {"id": "z1", "sql": "SELECT name FROM animal WHERE age <> 3"},
        {"id": "z2", "completion": solution("SELECT species, COUNT(*) FROM animal GROUP BY 1 ORDER BY 1")},
        # wrong: the order matters when the gold query orders its rows
        {"id": "s4", "completion": solution("SELECT name FROM product WHERE price > 30 ORDER BY price ASC")},
        # malformed: no <solution>
        {"id": "s2", "completion": "<think>hmm</think> SELECT name FROM product WHERE price > 10"},
        # a query that fails is a wrong answer, not an error
        {"id": "z3", "completion": solution("SELECT MAX(weight) FROM animal")},
        # z4 has no prediction
    ]
    data = write_rows(rows, tmp_path / "test.jsonl")
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps(p) + "\n" for p in predictions))
    return data, preds


def test_accuracy_per_level_and_database(case):
    data, preds = case
    report = evaluate.evaluate(read_rows(data), read_rows(preds))
    assert (report.overall.total, report.overall.correct) == (8, 4)
    assert report.overall.accuracy == pytest.approx(0.5)
    assert (report.overall.invalid_format, report.overall.missing, report.overall.errors) == (1, 1, 0)
    assert list(report.by_level) == ["easy", "medium", "hard"]
    assert {k: (v.correct, v.total) for k, v in report.by_level.items()} == {
        "easy": (2, 3),
        "medium": (2, 3),
        "hard": (0, 2),
    }
    assert {k: (v.correct, v.total) for k, v in report.by_database.items()} == {"shop": (2, 4), "zoo": (2, 4)}
    assert (report.valid_format, report.completions) == (6, 7)
    statuses = [r.status for r in report.rows]
    assert statuses == [
        "correct",
        "invalid_format",
        "correct",
        "wrong",
        "correct",
        "correct",
        "wrong",
        "missing",
    ]
    assert "prediction failed" in report.rows[6].detail


def test_command_prints_a_table_and_json(case, capsys):
    data, preds = case
    assert evaluate.main(["--data", str(data), "--predictions", str(preds)]) == 0
    text = capsys.readouterr().out
    assert "overall" in text and "50.0%" in text and "valid format: 6/7 predictions (85.7%)" in text
    for name in ("easy", "medium", "hard", "shop", "zoo"):
        assert f"  {name}" in text

    assert cli.main(["sql-eval", "--data", str(data), "--predictions", str(preds), "--json", "--rows"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["overall"]["accuracy"] == 0.5 and out["overall"]["total"] == 8
    assert out["by_level"]["easy"]["correct"] == 2 and out["by_database"]["zoo"]["accuracy"] == 0.5
    assert out["valid_format_rate"] == pytest.approx(6 / 7)
    assert len(out["rows"]) == 8


def test_module_entry_point(case):
    data, preds = case
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "skyrl_gym.envs.sql.evaluate",
            "--data",
            str(data),
            "--predictions",
            str(preds),
            "--json",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["overall"]["correct"] == 4


def test_a_broken_gold_query_is_an_error_not_a_wrong_answer(tmp_path: Path, capsys):
    shop = make_sqlite(tmp_path / "shop.sqlite", SHOP_SQL)
    rows = [
        row(shop, "shop", "easy", "SELECT COUNT(*) FROM product"),
        row(shop, "shop", "easy", "SELECT nothing FROM nowhere"),
        row(tmp_path / "gone.sqlite", "gone", "easy", "SELECT 1"),
    ]
    data = write_rows(rows, tmp_path / "test.parquet")
    preds = tmp_path / "preds.jsonl"
    preds.write_text(
        "".join(json.dumps({"index": i, "sql": "SELECT COUNT(*) FROM product"}) + "\n" for i in range(3))
    )
    assert evaluate.main(["--data", str(data), "--predictions", str(preds)]) == 1
    text = capsys.readouterr().out
    assert "error in row 1 (shop)" in text and "error in row 2 (gone)" in text and "gone.sqlite" in text
    report = evaluate.evaluate(read_rows(data), read_rows(preds))
    assert (report.overall.correct, report.overall.errors, report.overall.scored) == (1, 2, 1)
    assert report.overall.accuracy == 1.0


def test_db_id_and_data_resolve_under_db_root(tmp_path: Path):
    root = tmp_path / "root"
    (root / "spider" / "database" / "shop").mkdir(parents=True)
    shop = make_sqlite(root / "spider" / "database" / "shop" / "shop.sqlite", SHOP_SQL)
    moved = row(tmp_path / "elsewhere" / "shop.sqlite", "shop", "easy", "SELECT COUNT(*) FROM product")
    moved["data"] = "spider"
    bare = {k: v for k, v in moved.items() if k != "db_path"}
    preds = [{"index": 0, "sql": "SELECT 4"}, {"index": 1, "sql": "SELECT 4"}]
    report = evaluate.evaluate([moved, bare], preds, db_root=root)
    assert report.overall.correct == 2, [r.detail for r in report.rows]
    report = evaluate.evaluate([bare], preds[:1])
    assert report.overall.errors == 1 and "env_config.db_path" in report.rows[0].detail
    assert shop.exists()


@pytest.mark.parametrize(
    ("prediction", "message"),
    [
        ({"index": 9, "sql": "SELECT 1"}, "outside the dataset"),
        ({"id": "nope", "sql": "SELECT 1"}, "matches no dataset row"),
        ({"id": 3, "sql": "SELECT 1"}, "matches no dataset row"),  # rows have ids: indexes are not ids
        ({"sql": "SELECT 1"}, "neither 'index' nor 'id'"),
        ({"index": 0}, "neither 'completion' nor 'sql'"),
    ],
)
def test_bad_predictions_are_refused(case, prediction, message, capsys):
    data, preds = case
    preds.write_text(json.dumps(prediction) + "\n")
    assert evaluate.main(["--data", str(data), "--predictions", str(preds)]) == 2
    assert message in capsys.readouterr().err


def test_two_predictions_for_one_row_are_refused():
    rows = [{"extra_info": {"id": "a"}}]
    with pytest.raises(ValueError, match="second prediction"):
        evaluate.match_predictions(rows, [{"id": "a", "sql": "x"}, {"index": 0, "sql": "y"}])


def test_ids_fall_back_to_the_split_index_and_must_be_unique():
    rows = [{"extra_info": {"index": 0}}, {"extra_info": {"index": 1}}, {"extra_info": {"index": 1}}]
    assert list(evaluate.match_predictions(rows, [{"id": 0, "sql": "x"}])) == [0]
    with pytest.raises(ValueError, match=r"matches rows \[1, 2\]"):
        evaluate.match_predictions(rows, [{"id": "1", "sql": "x"}])
