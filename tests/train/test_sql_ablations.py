"""benchmarks/sql_ablations.py: the table rows of finished runs, and the overrides of RL from a saved warm-up."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sql_ablations.py"


@pytest.fixture(scope="module")
def ablations():
    spec = importlib.util.spec_from_file_location("sql_ablations", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _summary(stages: list[tuple[str, float]], changes: list[tuple[str, str, float]]) -> dict:
    return {
        "steps": 10,
        "wall_time_s": 100.0,
        "peak_rss_gb": 3.0,
        "eval_sets": {
            "heldout": {
                "stages": [{"stage": s, "n": 200, "accuracy": a, "se": 0.03} for s, a in stages],
                "changes": [{"from": a, "to": b, "mean": m, "se": 0.02} for a, b, m in changes],
            }
        },
    }


def test_a_run_with_its_own_warmup_reads_the_warmup_stage(ablations):
    summary = _summary(
        [("before", 0.02), ("after warm-up", 0.24), ("after RL", 0.30)],
        [
            ("before", "after warm-up", 0.22),
            ("after warm-up", "after RL", 0.06),
            ("before", "after RL", 0.28),
        ],
    )
    row = ablations.row_of("main", summary, "heldout")
    assert row["after_warmup"] == (0.24, 0.03) and row["rl_change"] == (0.06, 0.02)
    assert row["whole_change"] == (0.28, 0.02)


def test_a_run_from_a_saved_warmup_pairs_rl_against_its_before_stage(ablations):
    summary = _summary([("before", 0.24), ("after RL", 0.20)], [("before", "after RL", -0.04)])
    row = ablations.row_of("g8", summary, "heldout", from_model=True)
    assert row["after_warmup"] == (0.24, 0.03) and row["rl_change"] == (-0.04, 0.02)
    assert row["whole_change"] is None  # no base-model stage in such a run
    assert "| g8 | 10 | 200 | 24.0 ± 3.0 | 20.0 ± 3.0 | -4.0 ± 2.0 | -2.0 | - |" in ablations.format_table(
        [row], "heldout"
    )


def test_from_model_overrides_skip_the_warmup_and_evaluate_before_and_after_rl(ablations):
    overrides = ablations.from_model_overrides("runs/warm_model")
    assert "trainer.policy.model.path=runs/warm_model" in overrides
    assert "trainer.sft_warmup.steps=0" in overrides
    assert any("stages: [before, after_rl]" in o for o in overrides)


def test_from_model_refuses_variants_that_change_the_warmup(ablations, capsys):
    with pytest.raises(SystemExit):
        ablations.main(["--from-model", "runs/warm_model", "--only", "light_warmup", "--table-only"])
    assert "light_warmup" in capsys.readouterr().err


def test_every_variant_overrides_keys_the_config_knows(ablations):
    from skyrl_train.config import load_config

    for overrides in ablations.VARIANTS.values():
        load_config("sql_cpu", overrides)  # ConfigError on an unknown key or a bad value
    load_config("sql_cpu", ablations.from_model_overrides("runs/warm_model"))


def test_in_domain_adds_the_validation_set_at_the_same_stages(ablations):
    from skyrl_train.config import load_config

    overrides = ablations.from_model_overrides("runs/warm_model", in_domain=True)
    config = load_config("sql_cpu", overrides)
    sets = config.data.eval_sets
    assert set(sets) == {"heldout", "validation"}
    assert list(sets["validation"].stages) == list(sets["heldout"].stages) == ["before", "after_rl"]
    assert list(sets["validation"].paths) == ["data/text2sql/validation.parquet"]


def test_in_domain_without_stage_overrides_is_refused(ablations, capsys):
    with pytest.raises(SystemExit):
        ablations.main(["--in-domain", "--table-only"])
    assert "--in-domain needs" in capsys.readouterr().err
