"""The procedural text-to-SQL generator: domains, templates, checks, the builder and its command.

A small dataset is built once per session (``small_build``); its gold queries run on the real DuckDB files
through the environment's ``Database`` with the read-only guard on, as the oracle will run them.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from skyrl_gym.datasets.sql.synth import DOMAINS, LEVELS, SPLITS, build_synthetic, plan_instances
from skyrl_gym.datasets.sql.synth.build import INSTANCES_PER_SPLIT, Mirror, populate, write_database
from skyrl_gym.datasets.sql.synth.schema import plural, predicate
from skyrl_gym.datasets.sql.synth.templates import (
    GENERIC_TEMPLATES,
    MAX_ROWS,
    Candidate,
    Context,
    check_candidate,
    degenerate,
    literal,
)
from skyrl_gym.envs.sql.prompts import SYSTEM_PROMPT
from skyrl_gym.runtime.sql.database import open_database

REPO = Path(__file__).resolve().parents[2]
SMALL = {"train": 120, "dev": 40, "test": 80}


def without_paths(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "db_path"} for row in rows]


@pytest.fixture(scope="session")
def small_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[dict]]]:
    out = tmp_path_factory.mktemp("synthetic")
    return out, build_synthetic(out, seed=3, sizes=SMALL)


# -- domains ---------------------------------------------------------------------------------------------
def test_at_least_eight_domains_with_keys_and_links():
    assert len(DOMAINS) >= 8
    for domain in DOMAINS:
        assert len(domain.tables) >= 3, domain.name
        assert all(table.primary_key for table in domain.tables)
        foreign = [c for t in domain.tables for c in t.columns if c.references]
        assert len(foreign) >= 2, domain.name
        assert domain.links, domain.name
        kinds = {c.kind for t in domain.tables for c in t.columns}
        assert {"date", "cat", "label"} <= kinds, domain.name
        assert kinds & {"num", "money"}, domain.name


@pytest.mark.parametrize("domain", DOMAINS, ids=lambda d: d.name)
def test_populated_instance_is_realistic(domain):
    instance = next(i for i in plan_instances(0) if i.domain is domain)
    data = populate(instance)
    assert data == populate(instance), "populate must be deterministic"
    nulls = 0
    for table in domain.tables:
        rows = data[table.name]
        assert len(rows) >= 5, table.name
        assert all(len(row) == len(table.columns) for row in rows)
        keys = [tuple(row[table.index(k)] for k in table.primary_key) for row in rows]
        assert len(set(keys)) == len(keys), f"{table.name}: duplicate primary keys"
        if table.label:
            labels = [row[table.index(table.label)] for row in rows]
            assert len(set(labels)) == len(labels), f"{table.name}: labels must name one row each"
        for column in table.columns:
            values = [row[table.index(column.name)] for row in rows]
            if not column.nullable:
                assert None not in values, f"{table.name}.{column.name} is NOT NULL"
            nulls += values.count(None)
            if column.references:  # every reference points at an existing row
                parent = domain.table(column.references[0])
                targets = {row[parent.index(column.references[1])] for row in data[parent.name]}
                assert {v for v in values if v is not None} <= targets, f"{table.name}.{column.name}"
    assert nulls > 0, "some columns hold NULLs"
    # skew: the busiest parent of the first link has several times the children of a typical one
    link = domain.links[0]
    fk = domain.table(link.child).index(link.column)
    counts = sorted(Counter(row[fk] for row in data[link.child] if row[fk] is not None).values())
    assert counts[-1] >= 2 * counts[len(counts) // 2], f"{domain.name}: child counts are not skewed"


def test_written_database_has_types_and_keys(tmp_path):
    instance = next(i for i in plan_instances(0) if i.domain.name == "company")  # a self-referencing key
    data = populate(instance)
    path = tmp_path / "company.duckdb"
    write_database(instance.domain, data, path)
    with open_database(path) as db:
        ddl = db.schema_ddl()
        assert "PRIMARY KEY" in ddl and "FOREIGN KEY" in ddl and "REFERENCES employees" in ddl
        assert "DATE" in ddl and "DECIMAL(10,2)" in ddl and "BOOLEAN" in ddl
        for table in instance.domain.tables:
            assert db.execute(f"SELECT COUNT(*) FROM {table.name}").rows == [(len(data[table.name]),)]


def test_instances_are_split_by_database():
    instances = plan_instances(0)
    by_split = {s: {i.db_id for i in instances if i.split == s} for s in SPLITS}
    assert not (by_split["train"] & by_split["dev"] or by_split["train"] & by_split["test"])
    assert not by_split["dev"] & by_split["test"]
    for domain in DOMAINS:
        for split, n in INSTANCES_PER_SPLIT.items():
            assert sum(1 for i in instances if i.domain is domain and i.split == split) == n
    assert len({i.scale for i in instances}) > len(DOMAINS), "instances differ in size"
    assert plan_instances(0) == plan_instances(0)


# -- words -----------------------------------------------------------------------------------------------
def test_english_helpers():
    assert (
        plural("city") == "cities"
        and plural("status") == "statuses"
        and plural("number of pages") == ("numbers of pages")
    )
    assert predicate("from Lyon") == "are from Lyon"
    assert predicate("with a salary above $5,000") == "have a salary above $5,000"
    assert predicate("who signed up in 2022") == "signed up in 2022"
    assert predicate("hired in 2019", "were") == "were hired in 2019"
    assert literal("O'Brien") == "'O''Brien'" and literal(49.5) == "49.5" and literal(50.0) == "50"


def test_templates_cover_every_level_with_paraphrases():
    assert {t.level for t in GENERIC_TEMPLATES} == set(LEVELS)
    domain = next(d for d in DOMAINS if d.name == "shop")
    data = populate(next(i for i in plan_instances(0) if i.domain is domain))
    ctx = Context(domain, data, random.Random(0))
    for template in GENERIC_TEMPLATES:
        openings = set()
        for _ in range(60):
            candidate = template.make(ctx)
            if candidate is not None:
                assert candidate.level == template.level
                openings.add(" ".join(candidate.question.split()[:2]))
        assert len(openings) >= 2, f"{template.name} has a single wording: {openings}"


# -- checks ----------------------------------------------------------------------------------------------
def test_degenerate_results_are_named():
    assert degenerate([]) == "empty"
    assert degenerate([(0,)]) == "a single zero"
    assert degenerate([(None,)]) is not None
    assert degenerate([(1, None), (2, None)]) == "column 1 is all NULL"
    assert degenerate([(i,) for i in range(MAX_ROWS + 1)]) is not None
    assert degenerate([(3,)]) is None and degenerate([("Lyon", 4)]) is None


def test_check_candidate_rejects_what_a_question_cannot_test():
    domain = next(d for d in DOMAINS if d.name == "shop")
    data = populate(next(i for i in plan_instances(0) if i.domain is domain))
    mirror = Mirror(domain, data)
    rarest = Counter(row[3] for row in data["customers"]).most_common()[-1][0]
    city = f"SELECT name FROM customers WHERE city = {literal(rarest)}"
    assert check_candidate(Candidate("q", city, "easy"), mirror.rows) is None
    # the filter must matter, a fair other reading must agree, and an ordered answer must not tie
    assert "same result" in check_candidate(Candidate("q", city, "easy", contrasts=[city]), mirror.rows)
    other = "SELECT name FROM customers"
    assert "another reading" in check_candidate(
        Candidate("q", city, "easy", equivalents=[other]), mirror.rows
    )
    tie = Candidate(
        "q",
        "SELECT name FROM customers ORDER BY country LIMIT 1",
        "medium",
        tie_sql="SELECT country FROM customers ORDER BY country LIMIT 2",
        tie_limit=1,
    )
    assert check_candidate(tie, mirror.rows) in ("a tie at the LIMIT", None)
    assert check_candidate(Candidate("q", "SELECT COUNT(*) FROM customers WHERE 1 = 0", "easy"), mirror.rows)
    assert check_candidate(Candidate("q", "SELECT nope FROM customers", "easy"), mirror.rows).startswith(
        "gold"
    )
    mirror.close()


# -- the builder -----------------------------------------------------------------------------------------
def test_small_build_sizes_levels_and_disjoint_databases(small_build):
    out, rows = small_build
    questions = []
    databases = {}
    for split in SPLITS:
        split_rows = rows[split]
        assert len(split_rows) == SMALL[split]
        levels = Counter(r["extra_info"]["level"] for r in split_rows)
        assert set(levels) == set(LEVELS), (split, levels)
        assert min(levels.values()) >= 0.1 * len(split_rows), (split, levels)
        assert [r["extra_info"]["index"] for r in split_rows] == list(range(len(split_rows)))
        assert {r["extra_info"]["split"] for r in split_rows} == {split}
        databases[split] = {r["db_id"] for r in split_rows}
        questions += [r["extra_info"]["question"] for r in split_rows]
        for row in split_rows:
            assert row["env_class"] == "text2sql" and row["data"] == "synthetic"
            assert row["reward_spec"]["method"] == "rule" and row["reward_spec"]["ground_truth"]
            assert Path(row["db_path"]).is_absolute() and Path(row["db_path"]).parent == out / "databases"
            assert row["prompt"][0] == {"role": "system", "content": SYSTEM_PROMPT}
            assert row["extra_info"]["question"] in row["prompt"][1]["content"]
            assert "CREATE TABLE" in row["prompt"][1]["content"]
    assert not databases["train"] & databases["test"] and not databases["train"] & databases["dev"]
    assert not databases["dev"] & databases["test"]
    assert len(set(questions)) == len(questions), "questions are unique"


def test_every_gold_query_of_the_small_build_passes_the_guard_and_is_not_degenerate(small_build):
    _, rows = small_build
    by_db: dict[str, list[dict]] = {}
    for split_rows in rows.values():
        for row in split_rows:
            by_db.setdefault(row["db_path"], []).append(row)
    for path, db_rows in by_db.items():
        with open_database(path) as db:
            for row in db_rows:
                result = db.execute(row["reward_spec"]["ground_truth"], check=True)
                assert degenerate(result.rows) is None, row["extra_info"]["question"]


@pytest.mark.slow
def test_build_command_is_deterministic_across_processes(small_build, tmp_path):
    """The command in a fresh process (another hash seed) writes the same rows as the in-process build."""
    out, rows = small_build
    target = tmp_path / "cli"
    sizes = [f"--{split}={n}" for split, n in SMALL.items()]
    done = subprocess.run(
        [sys.executable, str(REPO / "datasets/sql/build.py"), "--out", str(target), "--seed", "3", *sizes],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    )
    assert done.returncode == 0, done.stderr
    for split in SPLITS:
        assert split in done.stdout and "hard" in done.stdout
        written = [json.loads(line) for line in (target / f"{split}.jsonl").read_text().splitlines()]
        assert without_paths(written) == without_paths(rows[split])
        assert all(Path(r["db_path"]).parent == target / "databases" for r in written)
        assert (target / f"{split}.parquet").is_file()
    assert len(list((target / "databases").glob("*.duckdb"))) == len(plan_instances(3))
    assert not list(REPO.glob("datasets/**/__init__.py")), "datasets/ must never become a package"


def test_sqlite_build_checks_its_gold_queries_on_sqlite(tmp_path):
    rows = build_synthetic(tmp_path, seed=1, sizes={"train": 24, "dev": 8, "test": 16}, engine="sqlite")
    assert {len(r) for r in rows.values()} == {24, 8, 16}
    for split_rows in rows.values():
        for row in split_rows:
            assert row["db_path"].endswith(".sqlite")
            assert row["prompt"][1]["content"].startswith("Database engine: SQLite")
            with open_database(row["db_path"]) as db:
                assert db.dialect == "sqlite"
                result = db.execute(row["reward_spec"]["ground_truth"], check=True)
                assert degenerate(result.rows) is None, row["extra_info"]["question"]
    with pytest.raises(ValueError, match="engine"):
        build_synthetic(tmp_path, engine="postgres")


def test_parquet_matches_jsonl(tmp_path, small_build):
    pq = pytest.importorskip("pyarrow.parquet")
    from skyrl_gym.rows import read_rows, write_split

    _, rows = small_build
    jsonl, parquet = write_split(rows["dev"], tmp_path, "dev", parquet=True)
    assert pq.read_table(parquet).to_pylist() == rows["dev"] == read_rows(jsonl)
