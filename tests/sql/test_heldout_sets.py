"""The main job's held-out set comes from domains and databases that training never sees, and the compact
training rows leave those domains out."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("duckdb")

from skyrl_gym.datasets.sql.heldout import (  # noqa: E402
    HELDOUT_DOMAINS,
    build_heldout,
    heldout_instances,
    training_domain_rows,
)
from skyrl_gym.datasets.sql.synth.build import plan_instances  # noqa: E402
from skyrl_gym.envs.sql.tasks import load_split  # noqa: E402
from skyrl_gym.runtime.sql.database import open_database  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _build_compact():
    spec = importlib.util.spec_from_file_location("build_compact", ROOT / "datasets/sql/build_compact.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def heldout(tmp_path_factory):
    return build_heldout(tmp_path_factory.mktemp("heldout"), per_level=6, per_domain=1)


def test_heldout_rows_are_on_fresh_databases_of_the_heldout_domains(heldout):
    assert Counter(r["extra_info"]["level"] for r in heldout) == {"easy": 6, "medium": 6}
    assert {r["extra_info"]["domain"] for r in heldout} == set(HELDOUT_DOMAINS)
    synthetic_ids = {i.db_id for i in plan_instances(0)}
    assert not {r["db_id"] for r in heldout} & synthetic_ids
    assert {i.db_id for i in heldout_instances(0, 1)} == {r["db_id"] for r in heldout}
    # each gold query runs on its own database file and the prompt is the compact one with the question
    row = heldout[0]
    with open_database(row["db_path"]) as db:
        assert db.execute(row["reward_spec"]["ground_truth"]).rows
    assert row["prompt"][-1]["content"].endswith(row["extra_info"]["question"].strip())


def test_training_rows_never_come_from_a_heldout_domain(heldout):
    train = load_split("train")
    kept = training_domain_rows(train)
    assert kept and len(kept) < len(train)
    assert not {r["extra_info"]["domain"] for r in kept} & set(HELDOUT_DOMAINS)
    compact = _build_compact().compact_rows("train", ["easy", "medium"], 10_000, seed=0, max_turns=None)
    assert not {r["extra_info"]["domain"] for r in compact} & set(HELDOUT_DOMAINS)
    assert not {r["db_id"] for r in compact} & {r["db_id"] for r in heldout}
    questions = {r["extra_info"]["question"] for r in compact}
    assert not questions & {r["extra_info"]["question"] for r in heldout}
    with pytest.raises(ValueError, match="extra_info.domain"):
        training_domain_rows([{"db_id": "chinook", "extra_info": {}}])
