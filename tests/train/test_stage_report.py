"""Stage evaluations over the real text2sql environment (held-out rows on real DuckDB files) with scripted
policies whose outcomes are known, the stage table they give, and the report written into a run folder."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("duckdb")

from skyrl_gym.datasets.sql.heldout import build_heldout  # noqa: E402
from skyrl_train.config import load_config  # noqa: E402
from skyrl_train.evaluation.stages import EvalSet, StageEvaluator  # noqa: E402
from skyrl_train.inference.scripted import SamplingParams, ScriptedEngine  # noqa: E402
from skyrl_train.report import write_report  # noqa: E402
from skyrl_train.rollout import MultiTurnGenerator  # noqa: E402

PARAMS = SamplingParams(temperature=0.0, max_tokens=4096)


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return build_heldout(tmp_path_factory.mktemp("heldout"), per_level=3, per_domain=1)[:6]


def _policy(rows, plan):
    """A script that plays ``plan[i]`` for the question of row i: "gold" answers at once, "fix" runs a
    broken query, reads the error and then answers gold, "wrong" answers a query that returns other rows."""
    by_question = {
        r["extra_info"]["question"].strip(): (plan[i], r["reward_spec"]["ground_truth"])
        for i, r in enumerate(rows)
    }

    def script(conversation: str) -> str:
        question = next(q for q in by_question if q in conversation)
        kind, gold = by_question[question]
        if kind == "gold":
            return f"<think>easy</think>\n<solution>{gold}</solution>"
        if kind == "wrong":
            return "<think>guess</think>\n<solution>SELECT 12345</solution>"
        if "<observation>" not in conversation.split(question, 1)[1]:
            # "fix" runs a query that fails, "empty" one that returns no rows, then both answer gold
            broken = "SELECT no_such_column FROM no_such_table" if kind == "fix" else "SELECT 1 WHERE 1 = 0"
            return f"<think>check</think>\n<sql>{broken}</sql>"
        return f"<think>fixed</think>\n<solution>{gold}</solution>"

    return script


def _generator(tokenizer, rows, plan):
    return MultiTurnGenerator(ScriptedEngine(tokenizer, _policy(rows, plan)), max_turns=2)


@pytest.fixture(scope="module")
def evaluated(tokenizer, rows, tmp_path_factory):
    evaluator = StageEvaluator([EvalSet("heldout", rows, ("before", "after_rl"))], PARAMS, batch_size=4)
    evaluator.outcomes_path = tmp_path_factory.mktemp("outcomes") / "eval_outcomes.jsonl"
    before = evaluator.run(
        _generator(tokenizer, rows, ["gold", "gold", "wrong", "wrong", "wrong", "wrong"]), "before", 0
    )
    after = evaluator.run(
        _generator(tokenizer, rows, ["gold", "gold", "fix", "empty", "wrong", "wrong"]), "after_rl", 7
    )
    return evaluator, before, after


def test_stage_metrics_and_table_match_the_scripted_outcomes(evaluated, rows):
    evaluator, before, after = evaluated
    assert before["eval/heldout/accuracy"] == pytest.approx(2 / 6)
    assert after["eval/heldout/accuracy"] == pytest.approx(4 / 6)
    assert after["eval/heldout/queried_first"] == pytest.approx(2 / 6)
    assert after["eval/heldout/self_corrected"] == pytest.approx(2 / 4)
    assert before["eval/heldout/queried_first"] == 0.0 and before["eval/heldout/self_corrected"] == 0.0
    summary = evaluator.summary()
    table = summary["eval_sets"]["heldout"]
    first, last = table["stages"]
    assert (first["stage"], last["stage"], last["step"]) == ("before", "after RL", 7)
    assert first["n"] == last["n"] == 6 and first["errors"] == last["errors"] == 0
    # 0/1 outcomes: se = sqrt(p (1 - p) / (n - 1))
    assert first["se"] == pytest.approx(math.sqrt(2 / 6 * 4 / 6 / 5))
    assert set(first["levels"]) == {r["extra_info"]["level"] for r in rows}
    (change,) = table["changes"]
    # differences 0 0 1 1 0 0: mean 1/3, sample variance (4/9 x 4 + 4/9 x 2 ... ) = 4/15, se = sqrt(4/15 / 6)
    assert change["n"] == 6 and change["mean"] == pytest.approx(1 / 3)
    assert change["se"] == pytest.approx(math.sqrt(4 / 15 / 6))
    # examples: the questions whose outcome changed come first, with the real error observation
    example = summary["examples"][0]
    assert example["question"] in {rows[2]["extra_info"]["question"], rows[3]["extra_info"]["question"]}
    before_ep, after_ep = example["episodes"]
    assert before_ep["correct"] == 0.0 and after_ep["correct"] == 1.0
    assert "<observation>" in after_ep["turns"][1]["content"] and "Error" in after_ep["turns"][1]["content"]
    empty = summary["examples"][1]
    assert empty["question"] == rows[3]["extra_info"]["question"]
    assert "Empty DataFrame" in empty["episodes"][1]["turns"][1]["content"]


def test_the_report_of_a_fake_run_folder(evaluated, tmp_path):
    evaluator, before, after = evaluated
    records = [{"step": 0, "time": 100.0, **before}]
    records += [
        {"step": s, "time": 100.0 + 30 * s, "warmup/nll": 2.0 / s, "warmup/loss": 2.0 / s} for s in (1, 2)
    ]
    records += [
        {"step": s, "time": 100.0 + 60 * s, "generate/reward_mean": 0.1 * s, "generate/pass_rate": 0.05 * s}
        for s in (3, 4, 5)
    ]
    records += [{"step": 5, "time": 500.0, **after}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = {
        "steps": 3,
        "stopped_by": "max_wall_time_s",
        "wall_time_s": 400.0,
        "eval_time_s": 50.0,
        **evaluator.summary(),
    }
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    path = write_report(tmp_path, warmup_steps=2)
    text = path.read_text()
    assert path == tmp_path / "report.md"
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![learning curves](curves.png)" in text
    assert "| before | 0 | 6 | 33.3 ± 21.1 |" in text
    assert "| after RL | 7 | 6 | 66.7 ± 21.1 |" in text
    assert f"| before | after RL | 6 | +33.3 ± {100 * math.sqrt(4 / 15 / 6):.1f} |" in text
    assert "50.0 (2/4)" in text  # self-corrected share of the correct answers after RL
    assert "## Example episodes, before and after" in text and "[environment]" in text


def test_the_main_recipe_evaluates_heldout_and_chinook_by_stage():
    config = load_config("sql_cpu")
    sets = config.data.eval_sets
    assert sets["heldout"].paths == ["data/text2sql/heldout.parquet"]
    assert sets["heldout"].stages == ["before", "after_warmup", "after_rl"]
    assert sets["chinook"].stages == ["before", "after_rl"]
    with pytest.raises(ValueError, match="stages"):
        load_config("sql_cpu", ["data.eval_sets={x: {paths: [a.jsonl], stages: [during]}}"])


def test_each_stage_appends_its_per_question_outcomes(evaluated, rows):
    evaluator = evaluated[0]
    lines = [json.loads(line) for line in evaluator.outcomes_path.read_text().splitlines()]
    assert [(x["set"], x["stage"], x["step"]) for x in lines] == [
        ("heldout", "before", 0),
        ("heldout", "after_rl", 7),
    ]
    assert lines[0]["outcomes"] == {"0": 1.0, "1": 1.0, "2": 0.0, "3": 0.0, "4": 0.0, "5": 0.0}
    assert lines[1]["outcomes"] == {"0": 1.0, "1": 1.0, "2": 1.0, "3": 1.0, "4": 0.0, "5": 0.0}
    assert lines[0]["levels"] == {str(i): r["extra_info"]["level"] for i, r in enumerate(rows)}


def test_a_run_evaluates_its_sets_at_each_stage_and_writes_the_report(tiny_model, rows, tmp_path, capsys):
    pytest.importorskip("torch")

    from skyrl_gym.envs.sql.prompts import build_compact_prompt
    from skyrl_gym.envs.sql.tasks import load_split
    from skyrl_gym.runtime.sql.database import open_database
    from skyrl_train.cli import main

    train = [r for r in load_split("train") if r["extra_info"]["level"] == "easy"][:4]
    with (tmp_path / "train.jsonl").open("w") as handle:
        for row in train:
            with open_database(row["db_path"]) as db:
                row["prompt"] = build_compact_prompt(db, row["extra_info"]["question"])
            handle.write(json.dumps(row) + "\n")
    (tmp_path / "heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:3]))
    run_dir = tmp_path / "run"
    sets = f"{{heldout: {{paths: [{tmp_path / 'heldout.jsonl'}]}}, chinook: {{paths: [{tmp_path / 'no.jsonl'}]}}}}"
    assert (
        main(
            [
                "train",
                "sql_cpu",
                f"trainer.policy.model.path={tiny_model}",
                f"data.train_data=[{tmp_path / 'train.jsonl'}]",
                f"data.eval_sets={sets}",
                f"trainer.run_dir={run_dir}",
                "trainer.train_batch_size=2",
                "trainer.policy_mini_batch_size=2",
                "trainer.micro_train_batch_size_per_gpu=4",
                "trainer.sft_warmup.steps=1",
                "trainer.sft_warmup.batch_size=2",
                "trainer.max_steps=1",
                "trainer.max_wall_time_s=null",
                "trainer.logger=[jsonl]",
                "generator.n_samples_per_prompt=2",
                "generator.sampling_params.max_generate_length=8",
                "generator.eval_sampling_params.max_generate_length=8",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "| before | after RL | 3 |" in printed and f"report: {run_dir}/report.md" in printed
    summary = json.loads((run_dir / "summary.json").read_text())
    stages = summary["eval_sets"]["heldout"]["stages"]
    assert [s["stage"] for s in stages] == ["before", "after warm-up", "after RL"]
    assert all(s["n"] + s["errors"] == 3 for s in stages)
    assert [(c["from"], c["to"]) for c in summary["eval_sets"]["heldout"]["changes"]] == [
        ("before", "after warm-up"),
        ("after warm-up", "after RL"),
        ("before", "after RL"),
    ]
    assert summary["eval_sets_skipped"] == {"chinook": [str(tmp_path / "no.jsonl")]}
    assert summary["eval_time_s"] > 0
    logged = [
        r["step"]
        for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
        if "eval/heldout/accuracy" in r
    ]
    assert logged == [0, 1, 2]  # before, after the one warm-up step, after the one RL step
    outcomes = [json.loads(x) for x in (run_dir / "eval_outcomes.jsonl").read_text().splitlines()]
    assert [x["stage"] for x in outcomes] == ["before", "after_warmup", "after_rl"]
    assert all(len(x["outcomes"]) + s["errors"] == 3 for x, s in zip(outcomes, stages, strict=True))
    report = (run_dir / "report.md").read_text()
    assert "### heldout (3 questions)" in report and "Not evaluated: chinook" in report


def test_a_set_may_sample_its_questions_its_own_way(tokenizer, rows, tmp_path):
    """A set's own ``n_samples`` and ``temperature`` (mean@n at temperature 1 beside the greedy headline): every
    question is sampled that many times with those parameters, its outcome the share that was right."""
    answered = {}

    def script(conversation: str) -> str:
        row = next(r for r in rows if r["extra_info"]["question"].strip() in conversation)
        count = answered[row["extra_info"]["question"]] = answered.get(row["extra_info"]["question"], 0) + 1
        # right on the first of every 4 samples of a question, wrong on the others
        answer = row["reward_spec"]["ground_truth"] if count % 4 == 1 else "SELECT 12345"
        return f"<think>try</think>\n<solution>{answer}</solution>"

    engine = ScriptedEngine(tokenizer, script)
    hot = PARAMS.model_copy(update={"temperature": 1.0})
    evaluator = StageEvaluator(
        [EvalSet("greedy", rows, ("after_rl",)), EvalSet("sampled", rows, ("after_rl",), 4, hot)],
        PARAMS,
        batch_size=4,
    )
    metrics = evaluator.run(MultiTurnGenerator(engine, max_turns=2), "after_rl", 1)
    # greedy: one sample each, the first, right; sampled: four more each, one of them right
    assert metrics["eval/greedy/accuracy"] == 1.0 and metrics["eval/sampled/accuracy"] == pytest.approx(0.25)
    temperatures = [call.params.temperature for call in engine.calls]
    assert temperatures.count(0.0) == len(rows) and temperatures.count(1.0) == 4 * len(rows)

    # from the config: a set's keys reach its EvalSet; unset, the run's own settings apply
    path = tmp_path / "heldout.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = load_config(
        "sql_cpu",
        [
            f"data.eval_sets={{greedy: {{paths: [{path}]}}, "
            f"sampled: {{paths: [{path}], n_samples: 8, temperature: 1.0, stages: [after_rl]}}}}",
        ],
    )
    greedy, sampled = StageEvaluator.from_config(config).sets
    assert (greedy.n_samples, greedy.params) == (None, None)
    assert sampled.n_samples == 8 and sampled.params.temperature == 1.0 and sampled.stages == ("after_rl",)


def test_val_data_is_an_evaluation_set_scored_as_any_other(tokenizer, rows, tmp_path):
    """data.val_data is the set val: it comes last, at every stage, under the plain eval/ prefix; a named set
    over the same rows gets the same scores under its own prefix (one scorer, pass@k included)."""
    from skyrl_train.config import ConfigError

    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    overrides = [
        f"data.val_data=[{path}]",
        "generator.eval_n_samples_per_prompt=2",
        "generator.eval_sampling_params.temperature=1.0",
    ]
    config = load_config(
        "sql_cpu", [*overrides, f"data.eval_sets={{same: {{paths: [{path}], stages: [during_rl]}}}}"]
    )
    evaluator = StageEvaluator.from_config(config, val_rows=rows)
    assert [(s.name, s.stages) for s in evaluator.sets] == [
        ("same", ("during_rl",)),
        ("val", ("before", "after_warmup", "during_rl", "after_rl")),
    ]
    generator = _generator(tokenizer, rows, ["gold", "wrong", "fix", "gold", "wrong", "empty"])
    metrics = evaluator.run(generator, "during_rl", 3)
    val = {
        k[len("eval/") :]: v
        for k, v in metrics.items()
        if k.startswith("eval/") and not k.startswith("eval/same/")
    }
    same = {k[len("eval/same/") :]: v for k, v in metrics.items() if k.startswith("eval/same/")}
    assert val == same
    assert val["num_prompts"] == 6.0 and val["num_trajectories"] == 12.0 and val["num_errors"] == 0.0
    assert val["accuracy"] == pytest.approx(4 / 6) and val["pass@1"] == pytest.approx(4 / 6)
    assert val["pass@2"] == pytest.approx(4 / 6) and val["valid_format_rate"] == 1.0
    assert val["queried_first"] == pytest.approx(2 / 6)
    assert "time/eval_s" in metrics and "time/eval_same_s" in metrics
    # a stage that only val names evaluates only val
    assert not any(k.startswith("eval/same/") for k in evaluator.run(generator, "after_rl", 4))
    table = evaluator.summary()["eval_sets"]
    assert [st["stage"] for st in table["val"]["stages"]] == ["during RL", "after RL"]
    assert [st["stage"] for st in table["same"]["stages"]] == ["during RL"]
    # a named set may not take val's name
    with pytest.raises(ConfigError, match="data.eval_sets.val: val is the name of data.val_data's"):
        load_config("sql_cpu", [*overrides, f"data.eval_sets={{val: {{paths: [{path}]}}}}"])
