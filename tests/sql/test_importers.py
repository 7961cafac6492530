"""Importers for downloaded text-to-SQL data, run on tiny fake Spider, BIRD and SkyRL-SQL-653 layouts.

Each layout is built in ``tmp_path`` with real SQLite databases, and the imported rows are played through the
real ``text2sql`` environment: the gold query as the solution must earn 1.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

pytest.importorskip("duckdb")
pytest.importorskip("sqlglot")

import skyrl_gym  # noqa: E402
from skyrl_gym.datasets.sql.importers import (  # noqa: E402
    ImportFormatError,
    bird_question,
    import_bird,
    import_skyrl_sql,
    import_spider,
    spider_hardness,
)
from skyrl_gym.rows import read_rows, write_rows  # noqa: E402

CONCERT_SQL = """
CREATE TABLE stadium (stadium_id INTEGER PRIMARY KEY, name TEXT NOT NULL, capacity INTEGER);
CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
CREATE TABLE concert (
    concert_id INTEGER PRIMARY KEY, stadium_id INTEGER REFERENCES stadium(stadium_id), year INTEGER
);
INSERT INTO stadium VALUES (1, 'Hampden', 52000), (2, 'Ibrox', 50817), (3, 'Tynecastle', 19852);
INSERT INTO singer VALUES (1, 'Joe', 'France', 52), (2, 'Ana', 'Spain', 29), (3, 'Lee', 'France', 41),
    (4, 'Kim', 'Korea', 35);
INSERT INTO concert VALUES (1, 1, 2014), (2, 1, 2015), (3, 2, 2014), (4, 3, 2016);
"""

SCHOOL_SQL = """
CREATE TABLE schools (cds TEXT PRIMARY KEY, school TEXT, county TEXT, charter INTEGER);
CREATE TABLE scores (cds TEXT REFERENCES schools(cds), avg_math INTEGER, num_takers INTEGER);
INSERT INTO schools VALUES ('01', 'Alameda High', 'Alameda', 0), ('02', 'Oak Charter', 'Alameda', 1),
    ('03', 'Fresno West', 'Fresno', 1);
INSERT INTO scores VALUES ('01', 520, 300), ('02', 610, 80), ('03', 450, 120);
"""


def make_sqlite(path: Path, script: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.executescript(script)
    con.commit()
    con.close()
    return path


def play_gold(row: dict, env_config: dict | None = None) -> float:
    """Play one episode with the row's gold query as the solution; return the reward."""
    kwargs = {"extras": row} if env_config is None else {"extras": row, "env_config": env_config}
    with skyrl_gym.make("text2sql", **kwargs) as env:
        env.init(row["prompt"])
        gold = row["reward_spec"]["ground_truth"]
        out = env.step(f"<think>the gold query</think><solution>{gold}</solution>")
    assert out["done"]
    return out["reward"]


def check_row_shape(row: dict) -> None:
    assert row["env_class"] == "text2sql"
    assert row["reward_spec"]["method"] == "rule"
    assert row["reward_spec"]["ground_truth"]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert {"split", "index", "level", "question"} <= set(row["extra_info"])


# -- Spider -------------------------------------------------------------------------------------------------
@pytest.fixture()
def spider_dir(tmp_path: Path) -> Path:
    root = tmp_path / "spider"
    make_sqlite(root / "database" / "concert_singer" / "concert_singer.sqlite", CONCERT_SQL)
    tables = [{"db_id": "concert_singer", "table_names_original": ["stadium", "singer", "concert"]}]
    (root / "tables.json").write_text(json.dumps(tables))
    dev = [
        {
            "db_id": "concert_singer",
            "question": "How many singers do we have?",
            "query": "SELECT count(*) FROM singer",
        },
        {
            "db_id": "concert_singer",
            "question": "What are the names of singers from France, oldest first?",
            "query": "SELECT name FROM singer WHERE country = 'France' ORDER BY age DESC",
            "query_toks": ["SELECT", "name"],
        },
        {
            "db_id": "concert_singer",
            "question": "Which stadiums held no concert before 2016?",
            "query": "SELECT name FROM stadium WHERE stadium_id NOT IN (SELECT stadium_id FROM concert WHERE year < 2016)",
        },
    ]
    (root / "dev.json").write_text(json.dumps(dev))
    (root / "train_spider.json").write_text(json.dumps(dev[:2]))
    (root / "train_others.json").write_text(json.dumps(dev[2:]))
    return root


def test_spider_rows_carry_question_gold_and_a_schema_prompt(spider_dir: Path):
    rows = import_spider(spider_dir, "dev")
    assert len(rows) == 3
    for index, row in enumerate(rows):
        check_row_shape(row)
        assert row["db_id"] == "concert_singer" and row["data"] == "spider"
        assert Path(row["db_path"]).is_absolute() and Path(row["db_path"]).exists()
        assert row["extra_info"]["index"] == index and row["extra_info"]["split"] == "dev"
    user = rows[1]["prompt"][1]["content"]
    assert "CREATE TABLE" in user and "singer" in user and "What are the names of singers from France" in user
    assert (
        rows[1]["reward_spec"]["ground_truth"]
        == "SELECT name FROM singer WHERE country = 'France' ORDER BY age DESC"
    )
    assert [r["extra_info"]["level"] for r in rows] == ["easy", "medium", "hard"]


def test_spider_train_joins_train_spider_and_train_others(spider_dir: Path):
    rows = import_spider(spider_dir, "train")
    assert [r["extra_info"]["question"] for r in rows] == [
        "How many singers do we have?",
        "What are the names of singers from France, oldest first?",
        "Which stadiums held no concert before 2016?",
    ]
    assert len(import_spider(spider_dir, "train", limit=2)) == 2


def test_spider_rows_play_in_the_environment(spider_dir: Path):
    assert [play_gold(row) for row in import_spider(spider_dir, "dev")] == [1.0, 1.0, 1.0]


def test_spider_errors_name_the_file(spider_dir: Path):
    with pytest.raises(FileNotFoundError, match="test.json"):
        import_spider(spider_dir, "test")
    bad = json.loads((spider_dir / "dev.json").read_text())
    bad.append({"db_id": "nowhere", "question": "?", "query": "SELECT 1"})
    (spider_dir / "dev.json").write_text(json.dumps(bad))
    with pytest.raises(ImportFormatError, match="nowhere.*tables.json"):
        import_spider(spider_dir, "dev")
    (spider_dir / "tables.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"database/nowhere/nowhere\.sqlite"):
        import_spider(spider_dir, "dev")
    (spider_dir / "dev.json").write_text(json.dumps([{"db_id": "concert_singer", "question": "?"}]))
    with pytest.raises(ImportFormatError, match="query"):
        import_spider(spider_dir, "dev")


# -- BIRD ---------------------------------------------------------------------------------------------------
@pytest.fixture()
def bird_dir(tmp_path: Path) -> Path:
    root = tmp_path / "bird"
    make_sqlite(root / "dev" / "dev_databases" / "schools" / "schools.sqlite", SCHOOL_SQL)
    dev = [
        {
            "question_id": 7,
            "db_id": "schools",
            "question": "Which charter school has the highest average math score?",
            "evidence": "charter school refers to charter = 1",
            "SQL": "SELECT T1.school FROM schools AS T1 JOIN scores AS T2 ON T1.cds = T2.cds "
            "WHERE T1.charter = 1 ORDER BY T2.avg_math DESC LIMIT 1",
            "difficulty": "moderate",
        },
        {
            "question_id": 8,
            "db_id": "schools",
            "question": "How many schools are in Alameda county?",
            "evidence": "",
            "SQL": "SELECT COUNT(*) FROM schools WHERE county = 'Alameda'",
            "difficulty": "simple",
        },
    ]
    (root / "dev" / "dev.json").write_text(json.dumps(dev))
    return root


def test_bird_rows_fold_the_evidence_into_the_question(bird_dir: Path):
    rows = import_bird(bird_dir, "dev")
    assert len(rows) == 2
    for row in rows:
        check_row_shape(row)
        assert row["data"] == "bird" and row["db_id"] == "schools" and Path(row["db_path"]).exists()
    first = rows[0]
    assert first["extra_info"]["question"] == (
        "Which charter school has the highest average math score?\nHint: charter school refers to charter = 1"
    )
    assert "Hint: charter school refers to charter = 1" in first["prompt"][1]["content"]
    assert first["extra_info"]["difficulty"] == "moderate" and first["extra_info"]["id"] == 7
    assert rows[1]["extra_info"]["question"] == "How many schools are in Alameda county?"
    assert [play_gold(row) for row in rows] == [1.0, 1.0]


def test_bird_finds_the_split_file_at_the_top_level_too(bird_dir: Path):
    flat = bird_dir / "dev"  # dev.json and dev_databases/ directly in the folder given
    assert len(import_bird(flat, "dev", limit=1)) == 1
    with pytest.raises(FileNotFoundError, match="train.json"):
        import_bird(bird_dir, "train")


def test_bird_question_without_evidence():
    assert bird_question(" How many? ", None) == "How many?"
    assert bird_question("How many?", "  x = 1 ") == "How many?\nHint: x = 1"


# -- SkyRL-SQL-653 --------------------------------------------------------------------------------------------
SKYRL_PROMPT = [
    {"role": "system", "content": "You are a data science expert. Use <think>, <sql> and <solution>."},
    {"role": "user", "content": "Database Engine: SQLite ... Question: How many singers are from France?"},
]


def skyrl_records() -> list[dict]:
    return [
        {
            "data_source": "synsql",
            "prompt": SKYRL_PROMPT,
            "env_class": "text2sql",
            "reward_spec": {
                "method": "rule",
                "ground_truth": "SELECT count(*) FROM singer WHERE country = 'France'",
            },
            "db_id": "concert_singer",
            "data": "synsql",
            "extra_info": {"question": "How many singers are from France?"},
        },
        {
            "prompt": SKYRL_PROMPT,
            "reward_model": {
                "style": "rule",
                "ground_truth": "SELECT name FROM stadium WHERE capacity > 50000",
            },
            "db_id": "concert_singer",
            "data": "spider",
            "question": "Which stadiums hold more than 50000 people?",
        },
    ]


@pytest.fixture()
def skyrl_root(tmp_path: Path) -> Path:
    root = tmp_path / "omnisql"
    make_sqlite(root / "SynSQL-2.5M" / "databases" / "concert_singer" / "concert_singer.sqlite", CONCERT_SQL)
    make_sqlite(root / "spider" / "database" / "concert_singer" / "concert_singer.sqlite", CONCERT_SQL)
    return root


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_skyrl_sql_keeps_db_id_data_and_prompt(tmp_path: Path, skyrl_root: Path, suffix: str):
    source = write_rows(skyrl_records(), tmp_path / f"skyrl_sql_653{suffix}")
    rows = import_skyrl_sql(source)
    assert [(r["db_id"], r["data"]) for r in rows] == [
        ("concert_singer", "synsql"),
        ("concert_singer", "spider"),
    ]
    assert all("db_path" not in r for r in rows)
    assert rows[0]["prompt"] == SKYRL_PROMPT and rows[0]["env_class"] == "text2sql"
    assert rows[1]["reward_spec"] == {
        "method": "rule",
        "ground_truth": "SELECT name FROM stadium WHERE capacity > 50000",
    }
    assert rows[0]["extra_info"]["question"] == "How many singers are from France?"
    assert rows[1]["extra_info"]["question"] == "Which stadiums hold more than 50000 people?"
    # The environment resolves db_id + data under env_config.db_path, as SkyRL does.
    assert [play_gold(r, env_config={"db_path": str(skyrl_root)}) for r in rows] == [1.0, 1.0]


def test_skyrl_sql_checks_databases_and_rebuilds_prompts(tmp_path: Path, skyrl_root: Path):
    source = write_rows(skyrl_records(), tmp_path / "skyrl.jsonl")
    rows = import_skyrl_sql(source, db_root=skyrl_root, rebuild_prompts=True)
    for row in rows:
        check_row_shape(row)
        assert "db_path" not in row and "CREATE TABLE" in row["prompt"][1]["content"]
    assert "Which stadiums hold more than 50000 people?" in rows[1]["prompt"][1]["content"]
    assert [play_gold(r, env_config={"db_path": str(skyrl_root)}) for r in rows] == [1.0, 1.0]

    (skyrl_root / "spider" / "database" / "concert_singer" / "concert_singer.sqlite").unlink()
    with pytest.raises(FileNotFoundError, match=r"record 1.*spider/database/concert_singer"):
        import_skyrl_sql(source, db_root=skyrl_root)


def test_skyrl_sql_rejects_records_it_cannot_use(tmp_path: Path):
    records = skyrl_records()
    records[0]["data"] = "wikisql"
    with pytest.raises(ImportFormatError, match="wikisql"):
        import_skyrl_sql(write_rows(records, tmp_path / "a.jsonl"))
    records = skyrl_records()
    del records[1]["reward_model"]
    with pytest.raises(ImportFormatError, match="record 1: no gold SQL"):
        import_skyrl_sql(write_rows(records, tmp_path / "b.jsonl"))
    records = skyrl_records()
    del records[0]["prompt"]
    with pytest.raises(ImportFormatError, match="needs a 'question' field and db_root"):
        import_skyrl_sql(write_rows(records, tmp_path / "c.jsonl"))


# -- shared pieces ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sql", "level"),
    [
        ("SELECT count(*) FROM singer", "easy"),
        ("SELECT name FROM singer WHERE age > 30", "easy"),
        ("SELECT name, country, age FROM singer ORDER BY age DESC", "medium"),
        (
            "SELECT T2.name, count(*) FROM concert AS T1 JOIN stadium AS T2 ON T1.stadium_id = T2.stadium_id "
            "GROUP BY T1.stadium_id",
            "medium",
        ),
        ("SELECT name FROM stadium WHERE stadium_id NOT IN (SELECT stadium_id FROM concert)", "hard"),
        (
            "SELECT country FROM singer WHERE age > 40 INTERSECT SELECT country FROM singer WHERE age < 30",
            "hard",
        ),
        (
            "SELECT T2.name FROM concert AS T1 JOIN stadium AS T2 ON T1.stadium_id = T2.stadium_id WHERE T1.year >= 2014 "
            "GROUP BY T2.stadium_id ORDER BY count(*) DESC LIMIT 1",
            "extra",
        ),
        (
            "SELECT name FROM singer WHERE age > (SELECT avg(age) FROM singer) UNION SELECT name FROM stadium",
            "extra",
        ),
        ("this is not SQL (", None),
    ],
)
def test_spider_hardness(sql: str, level: str | None):
    assert spider_hardness(sql) == level


def _build_command():
    """``datasets/sql/build.py`` (a script, not a package module), run from its file."""
    import runpy

    path = Path(__file__).resolve().parents[2] / "datasets" / "sql" / "build.py"
    return runpy.run_path(str(path), run_name="sql_build_command")["main"]


def test_build_command_imports_every_layout(
    tmp_path: Path, spider_dir: Path, bird_dir: Path, skyrl_root: Path, capsys
):
    source = write_rows(skyrl_records(), tmp_path / "skyrl.parquet")
    out = tmp_path / "out"
    argv = ["--out", str(out), "--train", "0", "--dev", "0", "--test", "0"]
    argv += ["--import-spider", str(spider_dir), "--import-bird", str(bird_dir)]
    argv += ["--import-skyrl-sql653", str(source), "--skyrl-sql-db-root", str(skyrl_root)]
    assert _build_command()(argv) == 0
    written = sorted(p.name for p in out.iterdir())
    assert written == [
        f"{stem}.{ext}"
        for stem in ("bird_dev", "skyrl_sql_653", "spider_dev", "spider_train")
        for ext in ("jsonl", "parquet")
    ]
    assert len(read_rows(out / "spider_train.parquet")) == 3
    assert read_rows(out / "bird_dev.jsonl")[0]["data"] == "bird"
    assert "skyrl_sql_653" in capsys.readouterr().out
    with pytest.raises(FileNotFoundError, match="no train.json or dev.json"):
        _build_command()(
            ["--out", str(out), "--train", "0", "--dev", "0", "--test", "0", "--import-bird", str(tmp_path)]
        )
