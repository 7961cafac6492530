"""The whole training loop on a tiny random model (the shared ``tiny_model`` fixture) over the real text2sql
environment: warm-up, GRPO steps, evaluation, run folder, checkpoint and resume."""

from __future__ import annotations

import json

import pytest
import torch

from skyrl_gym.envs.sql.prompts import build_compact_prompt
from skyrl_gym.envs.sql.tasks import load_split
from skyrl_gym.runtime.sql.database import open_database
from skyrl_train.config import Config, ConfigError, load_config
from skyrl_train.loop.trainer import Trainer, pass_at_k


@pytest.fixture(scope="module")
def sql_files(tmp_path_factory):
    """A few compact text2sql rows: train from the synthetic train split, validation from dev."""
    out = tmp_path_factory.mktemp("sql_data")
    for split, name, count in (("train", "train", 8), ("dev", "validation", 4)):
        rows = [r for r in load_split(split) if r["extra_info"]["level"] == "easy"][:count]
        with (out / f"{name}.jsonl").open("w") as handle:
            for row in rows:
                with open_database(row["db_path"]) as db:
                    row["prompt"] = build_compact_prompt(db, row["extra_info"]["question"])
                handle.write(json.dumps(row) + "\n")
    return out


def _config(tiny_model, sql_files, run_dir, *overrides):
    return load_config("sql_cpu", _overrides(tiny_model, sql_files, run_dir, *overrides))


def _overrides(tiny_model, sql_files, run_dir, *overrides) -> list[str]:
    """The main job's recipe made small: the tiny model, a few text2sql rows, one warm-up step, short turns,
    a checkpoint every step (the ``sql_cpu`` overrides, for ``load_config`` or the command line)."""
    return [
        f"trainer.policy.model.path={tiny_model}",
        f"data.train_data=[{sql_files / 'train.jsonl'}]",
        f"data.val_data=[{sql_files / 'validation.jsonl'}]",
        f"trainer.run_dir={run_dir}",
        "trainer.train_batch_size=2",
        "trainer.policy_mini_batch_size=2",
        "trainer.micro_train_batch_size_per_gpu=4",
        "trainer.sft_warmup.steps=1",
        "trainer.sft_warmup.batch_size=4",
        "trainer.ckpt_interval=1",
        "trainer.max_wall_time_s=null",
        "trainer.logger=[jsonl,tensorboard]",
        "generator.n_samples_per_prompt=2",
        "generator.sampling_params.max_generate_length=16",
        "generator.eval_sampling_params.max_generate_length=16",
        "generator.max_turns=2",
        "trainer.policy.optimizer_config.lr=1e-3",
        *overrides,
    ]


def test_fit_writes_the_run_folder_and_resumes(tiny_model, sql_files, tmp_path):
    run_dir = tmp_path / "run"
    config = _config(tiny_model, sql_files, run_dir, "trainer.max_steps=2", "trainer.eval_interval=1")
    with Trainer(config) as trainer:
        before = {k: v.clone() for k, v in trainer.policy.model.state_dict().items()}
        summary = trainer.fit()
        after = trainer.policy.model.state_dict()
        assert any(not torch.equal(before[k], after[k]) for k in before), "training did not move the weights"
    assert summary["steps"] == 2 and summary["stopped_by"] == "max_steps"
    stages = [(e["stage"], e["step"]) for e in summary["evaluations"]]
    assert stages == [("before", 0), ("after warm-up", 0), ("during RL", 1), ("after RL", 2)]
    for e in summary["evaluations"]:
        assert e["eval/num_prompts"] == 4.0 and 0.0 <= e["eval/accuracy"] <= 1.0
    saved = json.loads((run_dir / "summary.json").read_text())
    assert saved["steps"] == 2 and [st["questions"] for st in saved["stages"]] == [4, 4, 4, 4]
    # data.val_data is the evaluation set val: its stage table, paired changes and per-question outcomes
    val = saved["eval_sets"]["val"]
    assert [(st["stage"], st["n"]) for st in val["stages"]] == [
        ("before", 4),
        ("after warm-up", 4),
        ("during RL", 4),
        ("after RL", 4),
    ]
    assert [(c["from"], c["to"]) for c in val["changes"]][-1] == ("before", "after RL")
    outcomes = [json.loads(x) for x in (run_dir / "eval_outcomes.jsonl").read_text().splitlines()]
    assert [(o["stage"], len(o["outcomes"])) for o in outcomes if o["set"] == "val"] == [
        (stage, 4) for stage in ("before", "after_warmup", "during_rl", "after_rl")
    ]
    assert (run_dir / "report.md").exists()
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [line for line in lines if "generate/reward_mean" in line]
    assert len(steps) == 2 and all("time/generate_s" in s and "policy/grad_norm" in s for s in steps)
    assert any("warmup/nll" in line for line in lines)
    assert (run_dir / "learning_curve.png").stat().st_size > 0
    assert (run_dir / "config.yaml").exists()
    assert (run_dir / "checkpoints" / "step_2").is_dir()

    # A second run over the same folder resumes after step 2 (no warm-up again) and takes step 3.
    with Trainer(_config(tiny_model, sql_files, run_dir, "trainer.max_steps=3")) as trainer:
        assert trainer.step == 2
        summary = trainer.fit()
    assert summary["steps"] == 3
    assert [e["stage"] for e in summary["evaluations"]] == ["after RL"]


def test_the_time_budget_counts_rl_only(tiny_model, sql_files, tmp_path, monkeypatch):
    """trainer.max_wall_time_s bounds RL alone: a warm-up that (on the trainer's clock) takes three hours
    leaves RL its whole budget of an hour, so the run stops by max_steps, not by the time budget."""
    import time
    import types

    import skyrl_train.loop.trainer as trainer_module

    skipped = [0.0]  # seconds the fake clock jumped
    clock = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith("_")})
    clock.perf_counter = lambda: time.perf_counter() + skipped[0]
    monkeypatch.setattr(trainer_module, "time", clock)
    config = _config(
        tiny_model,
        sql_files,
        tmp_path / "run",
        "trainer.max_steps=2",
        "trainer.max_wall_time_s=3600",
        "trainer.eval_before_train=false",
        "trainer.sft_warmup.eval_after=false",
        "data.val_data=[]",
    )
    with Trainer(config) as trainer:
        warmup = trainer.warmup

        def slow_warmup():
            warmup()
            skipped[0] += 3 * 3600.0

        trainer.warmup = slow_warmup
        summary = trainer.fit()
    assert summary["steps"] == 2 and summary["stopped_by"] == "max_steps"
    assert summary["wall_time_s"] >= 3 * 3600 > summary["rl_wall_time_s"]


def test_an_environment_setting_is_checked_when_the_config_loads_and_again_before_any_model_loads(tmp_path):
    """A misspelt environment setting, or settings for an id no environment has, stops the run at once: the
    config does not load. A config built without its rules (``validate=False``) is checked by the trainer
    before anything loads: the model path below does not exist, so reaching the model would fail otherwise."""
    overrides = [f"trainer.run_dir={tmp_path}", "trainer.policy.model.path=/nonexistent/model"]
    wrong = {"text2sql": {"reference_correction": 0.8}, "txt2sql": {"db_path": "x"}}

    def check(errors: list[str]) -> None:
        assert len(errors) == 2, errors
        assert (
            "environment.skyrl_gym.text2sql: unknown text2sql env_config key(s) 'reference_correction'"
            in (errors[0])
        )
        assert "did you mean 'reference_corrections'" in errors[0]
        assert errors[1].startswith("environment.skyrl_gym.txt2sql: unknown environment 'txt2sql'")

    with pytest.raises(ConfigError) as caught:
        load_config(
            "sql_cpu",
            [
                *overrides,
                "+environment.skyrl_gym.text2sql.reference_correction=0.8",
                "+environment.skyrl_gym.txt2sql.db_path=x",
            ],
        )
    check(caught.value.errors)
    data = load_config("sql_cpu", overrides).to_dict()
    data["environment"]["skyrl_gym"] = wrong
    with pytest.raises(ConfigError) as caught:
        Trainer(Config.from_dict(data, validate=False))
    check(caught.value.errors)


def test_pass_at_k_matches_the_closed_form():
    assert pass_at_k(4, 0, 1) == 0.0
    assert pass_at_k(4, 4, 2) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - (3 / 4) * (2 / 3))


def test_gpu_recipe_validates():
    cfg = load_config("sql_qwen7b_8gpu")
    assert cfg.trainer.policy.model.path == "Qwen/Qwen2.5-Coder-7B-Instruct"
    assert cfg.generator.backend == "vllm" and cfg.trainer.placement.backend == "cuda"
    assert cfg.trainer.train_batch_size == 256 and cfg.generator.n_samples_per_prompt == 5
    assert cfg.generator.max_turns == 6 and cfg.trainer.policy.optimizer_config.lr == 1e-6
    assert cfg.generator.sampling_params.temperature == 0.6 and cfg.generator.sampling_params.top_p == 0.95
    assert set(cfg.generator.sampling_params.stop) == {"</sql>", "</solution>"}


def test_eval_command_reports_pass_at_k_from_the_last_checkpoint(tiny_model, sql_files, tmp_path, capsys):
    from skyrl_train.cli import main

    run_dir = tmp_path / "run"
    with Trainer(
        _config(tiny_model, sql_files, run_dir, "trainer.max_steps=1", "trainer.sft_warmup.steps=0")
    ) as trainer:
        trainer.fit()
    overrides = [
        f"trainer.policy.model.path={tiny_model}",
        f"data.train_data=[{sql_files / 'train.jsonl'}]",
        f"data.val_data=[{sql_files / 'validation.jsonl'}]",
        f"trainer.run_dir={run_dir}",
        "trainer.train_batch_size=2",
        "trainer.policy_mini_batch_size=2",
        "trainer.micro_train_batch_size_per_gpu=4",
        "generator.n_samples_per_prompt=2",
        "generator.eval_n_samples_per_prompt=3",
        "generator.eval_sampling_params.temperature=0.8",
        "generator.eval_sampling_params.max_generate_length=16",
        "trainer.logger=[jsonl]",
    ]
    assert main(["eval", "sql_cpu", *overrides]) == 0
    printed = capsys.readouterr().out
    report = json.loads(printed[printed.index("{") :])
    assert report["step"] == 1  # the checkpoint of step 1 was loaded
    assert report["eval/num_trajectories"] == 12.0  # 4 questions x 3 samples
    assert 0.0 <= report["eval/pass@1"] <= report["eval/pass@3"] <= 1.0


@pytest.mark.slow
def test_a_training_step_on_two_gloo_workers(tiny_model, sql_files, tmp_path):
    """The policy as an FSDP2 group of two CPU processes (gloo): the trainer's warm-up step and one GRPO
    step, weights synced into the engine, and both ranks holding the same model."""
    from skyrl_train.training.workers import WorkerGroup

    config = _config(
        tiny_model,
        sql_files,
        tmp_path / "run",
        "trainer.placement.policy_num_gpus_per_node=2",
        "trainer.micro_train_batch_size_per_gpu=2",  # each worker trains on 2 of the 4 trajectories
        "trainer.eval_before_train=false",
        # the tiny model earns no reward: the entropy bonus gives the GRPO step a gradient (a step with none
        # makes no update)
        "trainer.algorithm.use_entropy_loss=true",
    )
    assert config.policy_world_size == 2
    with Trainer(config) as trainer:
        assert isinstance(trainer.policy, WorkerGroup) and trainer.policy.world_size == 2
        before = trainer.policy.full_state_dict()
        trainer.warmup()  # reference trajectories with advantage 1: a step that must move the weights
        warmed = trainer.policy.full_state_dict()
        assert any(not torch.equal(before[k], warmed[k]) for k in before), (
            "the warm-up did not move the weights"
        )
        metrics = trainer.train_step(next(iter(trainer.iterator)))
        after = trainer.policy.full_state_dict()
        assert all(torch.isfinite(torch.tensor(metrics[k])) for k in ("policy/loss", "policy/grad_norm"))
        assert metrics["policy/num_updates"] == 1.0 and metrics["policy/skipped_step"] == 0.0
        # the engine received the new weights
        engine_weights = trainer.engine.model.state_dict()
        assert all(torch.equal(engine_weights[k], after[k]) for k in after)
        # both ranks hold the same model: the same rows score the same on each, after the same steps
        ids = torch.randint(1, 100, (2, 9), generator=torch.Generator().manual_seed(0))
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "response_mask": torch.ones(2, 4)}
        rank0, rank1 = trainer.policy.call("compute_log_probs", batch)
        assert torch.equal(rank0, rank1) and bool((rank0 < 0).all())
        assert trainer.policy.call("__getattribute__", "global_step") == [2, 2]  # warm-up and RL


def _self_correction_config(tiny_model, sql_files, run_dir, *overrides):
    """One RL step after the warm-up's self-correction steps (two samples per row), without evaluations."""
    return _config(
        tiny_model,
        sql_files,
        run_dir,
        "trainer.max_steps=1",
        "trainer.sft_warmup.self_correction_samples=2",
        "trainer.eval_before_train=false",
        "trainer.sft_warmup.eval_after=false",
        *overrides,
    )


def test_self_correction_steps_follow_the_reference_warmup(tiny_model, sql_files, tmp_path):
    """``trainer.sft_warmup.self_correction_steps``: after the reference step, the model samples its own
    episodes with the engine and a step trains on what they give; RL's steps are logged after both."""
    run_dir = tmp_path / "run"
    config = _self_correction_config(
        tiny_model, sql_files, run_dir, "trainer.sft_warmup.self_correction_steps=2"
    )
    with Trainer(config) as trainer:
        assert trainer.log_offset == 3
        trainer.fit()
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    own = [line for line in lines if "warmup/own_sampled" in line]
    # 4 rows a step, each sampled twice, at tracker steps 2 and 3 (after the reference step)
    assert [line["step"] for line in own] == [2, 3] and {line["warmup/own_sampled"] for line in own} == {8.0}
    assert all(line["warmup/trajectories"] + line["warmup/dropped"] == 8.0 for line in own)
    rl = [line for line in lines if "generate/reward_mean" in line]
    assert [line["step"] for line in rl] == [4]


@pytest.mark.parametrize("fraction", [0.0, 1.0])
def test_self_correction_steps_keep_query_first_to_the_episode_fraction(
    tiny_model, sql_files, tmp_path, fraction
):
    """The trainer hands ``trainer.sft_warmup.episode_fraction`` to the self-correction steps: with 0 none of
    what they train on queries first (every query sampled becomes the reference answer), with 1 all of it does
    (every answer given at once becomes a reference episode)."""
    run_dir = tmp_path / "run"
    config = _self_correction_config(
        tiny_model,
        sql_files,
        run_dir,
        "trainer.sft_warmup.self_correction_steps=1",
        f"trainer.sft_warmup.episode_fraction={fraction}",
    )
    with Trainer(config) as trainer:
        trainer.fit()
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    (own,) = [line for line in lines if "warmup/own_sampled" in line]
    kinds = {
        k: own[f"warmup/trained_{k}"]
        for k in ("own_query", "own_answer", "reference_answer", "reference_episode")
    }
    assert sum(kinds.values()) > 0
    if fraction == 0.0:
        assert kinds["own_query"] == 0.0 and kinds["reference_episode"] == 0.0
    else:
        assert kinds["own_answer"] == 0.0 and kinds["reference_answer"] == 0.0
