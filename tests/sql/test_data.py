"""The bundled synthetic SQL dataset (built on first use into the cache) and the prompts.

The first test that loads a split builds the dataset into ``cache_root()`` (``$SKYRL_GYM_CACHE`` or
``~/.cache/skyrl_gym``) unless it is there already; later runs reuse it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from skyrl_gym.datasets.sql.synth import build as synth_build
from skyrl_gym.datasets.sql.synth.build import GENERATOR_VERSION
from skyrl_gym.datasets.sql.synth.templates import LEVELS, degenerate
from skyrl_gym.envs.sql import tasks
from skyrl_gym.envs.sql.prompts import ENV_CLASS, SYSTEM_PROMPT, build_prompt, build_row
from skyrl_gym.runtime.sql.database import open_database

MIN_SIZES = {"train": 2000, "dev": 200, "test": 300}


@pytest.fixture(scope="module")
def splits() -> dict[str, list[dict]]:
    return {split: tasks.load_split(split) for split in tasks.SPLITS}


def run_all(rows: list[dict]) -> None:
    """Run every row's gold query as the oracle would (guard on) and check its result is a real answer."""
    by_path: dict[str, list[dict]] = {}
    for row in rows:
        by_path.setdefault(row["db_path"], []).append(row)
    for path, db_rows in by_path.items():
        with open_database(path) as db:
            for row in db_rows:
                result = db.execute(row["reward_spec"]["ground_truth"], check=True)
                assert degenerate(result.rows) is None, (row["db_id"], row["extra_info"]["question"])


# -- the bundled splits ------------------------------------------------------------------------------------
def test_sizes_and_level_shares(splits):
    for split, rows in splits.items():
        assert len(rows) >= MIN_SIZES[split], split
        levels = Counter(r["extra_info"]["level"] for r in rows)
        assert set(levels) == set(LEVELS), split
        for level in LEVELS:
            assert levels[level] >= 0.12 * len(rows), (split, levels)


def test_splits_use_disjoint_databases_and_unique_questions(splits):
    databases = {split: {r["db_id"] for r in rows} for split, rows in splits.items()}
    assert not databases["train"] & databases["test"]
    assert not databases["train"] & databases["dev"]
    assert not databases["dev"] & databases["test"]
    questions = [r["extra_info"]["question"] for rows in splits.values() for r in rows]
    assert len(set(questions)) == len(questions)
    domains = {split: {r["extra_info"]["domain"] for r in rows} for split, rows in splits.items()}
    assert domains["train"] == domains["test"] == domains["dev"] and len(domains["test"]) >= 8


def test_rows_are_in_skyrl_format(splits):
    for split, rows in splits.items():
        for index, row in enumerate(rows):
            assert set(row) == {"data_source", "prompt", "env_class", "reward_spec", "db_id", "db_path", "data",
                                "extra_info"}  # fmt: skip
            assert row["env_class"] == ENV_CLASS and row["data"] == "synthetic"
            assert row["reward_spec"] == {
                "method": "rule",
                "ground_truth": row["reward_spec"]["ground_truth"],
            }
            assert Path(row["db_path"]).is_absolute() and Path(row["db_path"]).is_file()
            assert Path(row["db_path"]).stem == row["db_id"]
            info = row["extra_info"]
            assert (info["split"], info["index"]) == (split, index) and info["level"] in LEVELS


def test_every_test_gold_query_runs_and_answers(splits):
    run_all(splits["test"])


def test_a_sample_of_train_and_dev_gold_queries_runs_and_answers(splits):
    rng = random.Random(0)
    run_all(rng.sample(splits["train"], 200) + rng.sample(splits["dev"], 100))


def test_prompts_hold_protocol_schema_rows_and_question(splits):
    for row in random.Random(1).sample(splits["test"], 20):
        system, user = row["prompt"]
        assert system == {"role": "system", "content": SYSTEM_PROMPT}
        assert user["role"] == "user"
        text = user["content"]
        assert text.startswith("Database engine: DuckDB")
        assert text.rstrip().endswith(f"Question: {row['extra_info']['question']}")
        with open_database(row["db_path"]) as db:
            for table in db.tables():
                assert f"CREATE TABLE {table} (" in text and f"\n{table}:\n" in text


def test_load_split_is_deterministic_and_returns_fresh_rows(splits):
    again = tasks.load_split("test")
    assert again == splits["test"]
    again[0]["reward_spec"]["ground_truth"] = "SELECT 1"
    assert tasks.load_split("test")[0] == splits["test"][0]
    with pytest.raises(ValueError, match="unknown split 'validation'"):
        tasks.load_split("validation")


def test_default_task_is_a_test_row_fixed_by_the_seed(splits):
    task = tasks.default_task(7)
    assert task == tasks.default_task(7)
    assert set(task) == {"prompt", "extras"}
    extras = task["extras"]
    assert "env_class" not in extras and "prompt" not in extras and "max_turns" not in extras
    assert Path(extras["db_path"]).is_file() and extras["reward_spec"]["method"] == "rule"
    assert extras["extra_info"]["split"] == "test"
    row = splits["test"][extras["extra_info"]["index"]]
    assert task["prompt"] == row["prompt"]
    picked = {tasks.default_task(seed)["extras"]["extra_info"]["index"] for seed in range(40)}
    assert len(picked) > 30
    assert tasks.default_task(None)["extras"]["extra_info"]["split"] == "test"


# -- prompts -----------------------------------------------------------------------------------------------
def test_system_prompt_states_the_protocol():
    for tag in ("<think>", "</think>", "<sql>", "</sql>", "<observation>", "<solution>", "</solution>"):
        assert tag in SYSTEM_PROMPT
    assert "DuckDB" in SYSTEM_PROMPT and "SQLite" in SYSTEM_PROMPT
    assert "one SQL query" in SYSTEM_PROMPT


@pytest.mark.parametrize("engine", ["duckdb", "sqlite"])
def test_build_prompt_and_row_on_a_small_database(tmp_path, engine):
    path = tmp_path / f"pets.{engine}"
    statements = [
        "CREATE TABLE owners (owner_id INTEGER PRIMARY KEY, name VARCHAR NOT NULL)",
        "CREATE TABLE pets (pet_id INTEGER PRIMARY KEY, owner_id INTEGER REFERENCES owners (owner_id), "
        "species VARCHAR, born DATE)",
        "INSERT INTO owners VALUES (1, 'Ana Silva'), (2, 'Ben Okafor'), (3, 'Chen Wei'), (4, 'Dana Ito')",
        "INSERT INTO pets VALUES (1, 1, 'cat', '2020-03-01'), (2, 1, NULL, '2021-05-02'), (3, 2, 'dog', NULL)",
    ]
    if engine == "duckdb":
        with duckdb.connect(str(path)) as con:
            for statement in statements:
                con.execute(statement)
    else:
        import sqlite3

        with sqlite3.connect(path) as con:
            for statement in statements:
                con.execute(statement)
        con.close()
    question = "Which owners have no pets?"
    gold = "SELECT name FROM owners WHERE owner_id NOT IN (SELECT owner_id FROM pets)"
    with open_database(path) as db:
        system, user = build_prompt(db, question, n_sample_rows=2)
        assert system["content"] == SYSTEM_PROMPT
        text = user["content"]
        assert text.startswith(f"Database engine: {'DuckDB' if engine == 'duckdb' else 'SQLite'}")
        assert "CREATE TABLE owners" in text and "CREATE TABLE pets" in text and "REFERENCES" in text
        assert "1 | Ana Silva" in text and "2 | Ben Okafor" in text and "Chen Wei" not in text  # 2 rows each
        assert "2 | 1 | NULL | 2021-05-02" in text
        assert text.endswith(f"Question: {question}")
        assert "Sample rows" not in build_prompt(db, question, n_sample_rows=0)[1]["content"]

        row = build_row(db, question, gold, db_id="pets", split="test", index=4, level="hard")
        assert row["db_path"] == str(path.resolve()) and row["env_class"] == "text2sql"
        assert row["reward_spec"] == {"method": "rule", "ground_truth": gold}
        assert row["extra_info"] == {"split": "test", "index": 4, "level": "hard", "question": question}
        assert "max_turns" not in row
        assert json.loads(json.dumps(row)) == row
        row = build_row(db, question, gold, db_id="pets", split="test", index=0, level="hard", max_turns=3,
                        db_path="/data/pets.db", extra_info={"id": "p1"})  # fmt: skip
        assert row["max_turns"] == 3 and row["db_path"] == "/data/pets.db" and row["extra_info"]["id"] == "p1"


# -- the cache ---------------------------------------------------------------------------------------------
def test_cache_root_and_versioned_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("SKYRL_GYM_CACHE", str(tmp_path / "cache"))
    assert tasks.cache_root() == tmp_path / "cache"
    folder = tasks.dataset_dir(0)
    assert folder.parent == tmp_path / "cache" / "sql" and f"v{GENERATOR_VERSION}" in folder.name
    monkeypatch.setattr("skyrl_gym.datasets.sql.synth.build.GENERATOR_VERSION", "999")
    assert tasks.dataset_dir(0) != folder and "v999" in tasks.dataset_dir(0).name
    monkeypatch.delenv("SKYRL_GYM_CACHE")
    assert tasks.cache_root() == Path.home() / ".cache" / "skyrl_gym"


def test_a_builder_that_loses_the_race_uses_the_winners_dataset(monkeypatch, tmp_path):
    """Another process renames its finished dataset into place first: ours is dropped, theirs is used."""
    monkeypatch.setenv("SKYRL_GYM_CACHE", str(tmp_path))
    target = tasks.dataset_dir(5)

    def build_while_another_finishes(staging: Path, final: Path, seed: int) -> None:
        (staging / "test.jsonl").write_text("ours\n")
        final.mkdir(parents=True)
        (final / "test.jsonl").write_text("theirs\n")

    monkeypatch.setattr(
        synth_build, "BUNDLE", dataclasses.replace(synth_build.BUNDLE, build=build_while_another_finishes)
    )
    assert tasks.ensure_dataset(5) == target
    assert (target / "test.jsonl").read_text() == "theirs\n"
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name], "no staging folder is left"
    assert tasks.ensure_dataset(5) == target  # built already: nothing to do


def test_staging_folders_of_killed_builds_are_removed(monkeypatch, tmp_path):
    monkeypatch.setenv("SKYRL_GYM_CACHE", str(tmp_path))
    target = tasks.dataset_dir(6)
    target.parent.mkdir(parents=True)
    killed, running = target.parent / f".{target.name}-killed", target.parent / f".{target.name}-running"
    killed.mkdir()
    running.mkdir()
    os.utime(killed, (1_000_000, 1_000_000))

    def build(staging: Path, final: Path, seed: int) -> None:
        (staging / "test.jsonl").write_text("{}\n")

    monkeypatch.setattr(synth_build, "BUNDLE", dataclasses.replace(synth_build.BUNDLE, build=build))
    tasks.ensure_dataset(6)
    assert not killed.exists() and running.exists() and (target / "test.jsonl").is_file()


@pytest.mark.slow
def test_two_processes_building_at_once_leave_one_complete_dataset(tmp_path):
    script = textwrap.dedent(
        """
        import json, sys
        from skyrl_gym.datasets.sql.synth import build
        build.INSTANCES_PER_SPLIT.update(train=1, dev=1, test=1)
        build.DEFAULT_SIZES.update(train=16, dev=8, test=8)
        from skyrl_gym.envs.sql import tasks
        rows = tasks.load_split("test")
        print(json.dumps([r["reward_spec"]["ground_truth"] for r in rows]))
        """
    )
    env = {**os.environ, "SKYRL_GYM_CACHE": str(tmp_path)}
    runs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
            for _ in range(2)]  # fmt: skip
    outputs = [run.communicate(timeout=300)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    assert json.loads(outputs[0]) == json.loads(outputs[1]) and len(json.loads(outputs[0])) == 8
    (folder,) = (tmp_path / "sql").iterdir()
    assert not folder.name.startswith(".") and (folder / "train.jsonl").is_file()
    assert len(list((folder / "databases").glob("*.duckdb"))) == 3 * 8
