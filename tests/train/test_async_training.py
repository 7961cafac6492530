"""Fully asynchronous training (``trainer.mode=async``) on the tiny random model over the real text2sql
environment, with the hf engine in this process (its decode thread) and in its own process; and the
off-policy correction of the loss, exact on on-policy data.

No wall-clock assertions: the tests count steps, pushes, versions, engine counters and threads."""

from __future__ import annotations

import itertools
import json
import math
import multiprocessing
import threading
import time

import pytest
import torch

import skyrl_gym
from skyrl_gym.envs.sql.env import Text2SQLEnv
from skyrl_gym.envs.sql.prompts import build_compact_prompt
from skyrl_gym.envs.sql.tasks import load_split
from skyrl_gym.runtime.sql.database import open_database
from skyrl_train.config import ConfigError, load_config
from skyrl_train.config.schema import AlgorithmConfig, OffPolicyCorrectionConfig
from skyrl_train.loop.trainer import Trainer
from skyrl_train.training.algorithms.off_policy import behaviour_weights, corrected_advantages
from skyrl_train.training.algorithms.policy_loss import dual_clip_loss, gspo_loss, ppo_loss

from .tiny_models import tiny_llama


@pytest.fixture(scope="module")
def sql_files(tmp_path_factory):
    """Compact text2sql rows: 12 from the synthetic train split, 2 from dev for validation."""
    out = tmp_path_factory.mktemp("async_sql")
    for split, name, count in (("train", "train", 12), ("dev", "validation", 2)):
        rows = [r for r in load_split(split) if r["extra_info"]["level"] == "easy"][:count]
        with (out / f"{name}.jsonl").open("w") as handle:
            for row in rows:
                with open_database(row["db_path"]) as db:
                    row["prompt"] = build_compact_prompt(db, row["extra_info"]["question"])
                handle.write(json.dumps(row) + "\n")
    return out


class FailsEveryThirdInit(Text2SQLEnv):
    """text2sql whose every third instance fails to start: one trajectory of some groups errors."""

    counter = itertools.count()

    def init(self, prompt):
        if next(self.counter) % 3 == 1:
            raise RuntimeError("the database is unavailable")
        return super().init(prompt)


@pytest.fixture(scope="module", autouse=True)
def flaky_env():
    skyrl_gym.register("async_test_flaky_sql", entry_point=FailsEveryThirdInit)
    yield
    skyrl_gym.deregister("async_test_flaky_sql")


def _config(tiny_model, sql_files, run_dir, *overrides):
    return load_config(
        "sql_cpu",
        [
            f"trainer.policy.model.path={tiny_model}",
            f"data.train_data=[{sql_files / 'train.jsonl'}]",
            f"data.val_data=[{sql_files / 'validation.jsonl'}]",
            f"trainer.run_dir={run_dir}",
            "trainer.mode=async",
            "trainer.train_batch_size=2",
            "trainer.policy_mini_batch_size=2",
            "trainer.micro_train_batch_size_per_gpu=4",
            "trainer.sft_warmup.steps=0",
            "trainer.eval_before_train=false",
            "trainer.ckpt_interval=0",
            "trainer.max_wall_time_s=null",
            "trainer.resume_mode=none",
            "trainer.logger=[jsonl]",
            "generator.n_samples_per_prompt=2",
            "generator.sampling_params.max_generate_length=16",
            "generator.eval_sampling_params.max_generate_length=8",
            "generator.max_turns=2",
            "trainer.policy.optimizer_config.lr=1e-3",
            # the random model earns equal rewards (no advantage): the entropy bonus still moves the weights
            "trainer.algorithm.use_entropy_loss=true",
            *overrides,
        ],
    )


def _step_lines(run_dir):
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [line for line in lines if "async/policy_version" in line]


def _no_producer_thread() -> bool:
    return not any(t.name == "rollout-producer" and t.is_alive() for t in threading.enumerate())


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# ------------------------------------------------------------------------------------------ whole runs


def test_an_async_run_with_the_engine_in_process_trains_within_the_staleness_bound(
    tiny_model, sql_files, tmp_path
):
    run_dir = tmp_path / "run"
    config = _config(
        tiny_model,
        sql_files,
        run_dir,
        "trainer.max_steps=4",
        "trainer.fully_async.max_staleness_steps=1",
        "trainer.fully_async.num_parallel_generation_workers=3",
        "trainer.algorithm.off_policy_correction.method=tis",
    )
    with Trainer(config) as trainer:
        assert not trainer._shares_policy  # the engine generates while the policy trains: its own copy
        before = _weights(trainer.policy.model)
        summary = trainer.fit()
        after = trainer.policy.model.state_dict()
        engine_stats = dict(trainer.engine.stats)
        producer = trainer.async_producer
    assert summary["steps"] == 4 and summary["stopped_by"] == "max_steps"
    assert any(not torch.equal(before[k], after[k]) for k in before), "training did not move the weights"
    steps = _step_lines(run_dir)
    assert len(steps) == 4
    for line in steps:
        assert math.isfinite(line["policy/loss"])
        assert line["async/staleness_max"] <= 1  # no batch holds a token more than K versions old
        assert "policy/off_policy/weight_mean" in line
    # one push per step, each a new engine version
    assert [line["async/policy_version"] for line in steps] == [1.0, 2.0, 3.0, 4.0]
    assert engine_stats["weight_updates"] == 4 and producer.stats.pushes == 4
    assert producer.stats.groups_consumed == 8
    assert _no_producer_thread() and not producer.alive


def test_the_updates_of_an_async_run_replay_from_its_record(tiny_model, sql_files, tmp_path):
    """Groups taken in the order they finish, pushes in flight: the record keeps what each step trained on
    (its groups, each token's version and behaviour log-prob), so the step after a checkpoint reruns to the
    same losses and weights."""
    from skyrl_train.replay import replay_training

    run_dir = tmp_path / "run"
    config = _config(
        tiny_model,
        sql_files,
        run_dir,
        "trainer.max_steps=2",
        "trainer.ckpt_interval=1",
        "trainer.fully_async.max_staleness_steps=1",
        "trainer.algorithm.off_policy_correction.method=tis",
    )
    with Trainer(config) as trainer:
        trainer.fit()
    replay = replay_training(run_dir, from_step=1)
    assert [s.step for s in replay.steps] == [2] and "policy/loss" in replay.steps[0].metrics
    assert replay.equal and replay.weights.verdict == "equal", replay


def test_staleness_zero_holds_generation_back_until_each_push(tiny_model, sql_files, tmp_path):
    run_dir = tmp_path / "run"
    config = _config(
        tiny_model,
        sql_files,
        run_dir,
        "trainer.max_steps=3",
        "trainer.fully_async.max_staleness_steps=0",
        "trainer.fully_async.num_parallel_generation_workers=4",
    )
    with Trainer(config) as trainer:
        summary = trainer.fit()
        stats = trainer.async_producer.stats
    assert summary["steps"] == 3
    steps = _step_lines(run_dir)
    assert all(line["async/staleness_max"] == 0 for line in steps)
    # with K = 0 a step's groups start only after the previous push: generation waited for the trainer
    assert stats.held_back_events >= 2
    assert stats.groups_started <= (3 + 0 + 1) * 2  # the capacity after the last push
    assert stats.groups_dropped_stale == 0


def test_an_engine_process_receives_pushes_while_requests_are_in_flight(tiny_model, sql_files, tmp_path):
    """Every push of the loop meets a request being decoded in the engine's process: the test puts one there
    (a long generation, waited for until its first tokens came) right before the loop's pause, so the overlap
    does not depend on which side of the race is faster on this machine. The request keeps its tokens across
    the push and finishes under the new weights."""
    from skyrl_train.config import SamplingParams

    run_dir = tmp_path / "run"
    config = _config(
        tiny_model,
        sql_files,
        run_dir,
        "trainer.max_steps=3",
        "generator.engine_process=true",
        "trainer.fully_async.max_staleness_steps=2",
        "trainer.fully_async.num_parallel_generation_workers=4",
        "trainer.algorithm.off_policy_correction.method=decoupled_ppo",
    )
    with Trainer(config) as trainer:
        engine = trainer.engine
        assert engine.is_engine_process and engine.weight_sync_backend == "shared_memory"
        long_turn = SamplingParams(max_generate_length=256, ignore_eos=True, temperature=1.0, seed=0)
        prompt = trainer.tokenizer.encode("Count to one thousand.")
        in_flight: list = []
        pause = engine.pause

        def pause_with_a_request_in_flight() -> int:
            before = engine.stats["generated_tokens"]
            in_flight.append(engine.submit([prompt], long_turn))
            deadline = time.monotonic() + 60
            while engine.stats["generated_tokens"] < before + 2 and time.monotonic() < deadline:
                time.sleep(0.01)  # until the engine decodes it: queued is not in flight
            return pause()

        engine.pause = pause_with_a_request_in_flight
        summary = trainer.fit()
        outputs = [future.result(timeout=300)[0] for future in in_flight]
        engine_stats = engine.stats  # read from the engine's process
        producer = trainer.async_producer
        pid = engine.pid
    assert summary["steps"] == 3 and len(outputs) == 3
    steps = _step_lines(run_dir)
    assert all(line["async/staleness_max"] <= 2 and math.isfinite(line["policy/loss"]) for line in steps)
    # the engine paused with sequences running, took the weights and recomputed their KV
    assert engine_stats["weight_updates"] == 3 and engine_stats["pauses"] >= 3
    assert engine_stats["recomputed_rows"] >= 1 and producer.stats.inflight_pushes >= 1
    # the requests kept their tokens across the pushes: versions only go up within one, and one spans two
    assert all(len(o.token_ids) == 256 and o.policy_versions == sorted(o.policy_versions) for o in outputs)
    assert any(len(set(o.policy_versions)) >= 2 for o in outputs)
    # stopped cleanly: no producer thread, no engine process
    assert _no_producer_thread()
    assert all(child.pid != pid for child in multiprocessing.active_children())


def test_an_error_trajectory_is_masked_alone(tiny_model, sql_files, tmp_path):
    run_dir = tmp_path / "run"
    rows = [json.loads(line) for line in (sql_files / "train.jsonl").read_text().splitlines()]
    flaky = tmp_path / "flaky.jsonl"
    flaky.write_text("".join(json.dumps({**r, "env_class": "async_test_flaky_sql"}) + "\n" for r in rows))
    config = _config(
        tiny_model,
        sql_files,
        run_dir,
        "trainer.max_steps=2",
        f"data.train_data=[{flaky}]",
        "trainer.eval_batch_size=2",
    )
    with Trainer(config) as trainer:
        before = _weights(trainer.policy.model)
        summary = trainer.fit()
        after = trainer.policy.model.state_dict()
    assert summary["steps"] == 2
    steps = _step_lines(run_dir)
    assert sum(line["generate/error_count"] for line in steps) >= 1
    # the other trajectories of the batch trained: finite loss, weights moved
    assert all(math.isfinite(line["policy/loss"]) for line in steps)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert all(line["generate/num_trajectories"] == 4 for line in steps)


# ------------------------------------------------------------------------------------------ config


def test_async_settings_are_refused_where_they_cannot_act(tiny_model):
    with pytest.raises(ConfigError, match=r"trainer.fully_async.max_staleness_steps is set but trainer.mode"):
        load_config(None, ["trainer.fully_async.max_staleness_steps=3"])
    with pytest.raises(ConfigError, match=r"trainer.mode=async needs trainer.sync_weights=true"):
        load_config(None, ["trainer.mode=async", "trainer.sync_weights=false"])
    with pytest.raises(ConfigError, match=r"sampling_params.temperature=1.0"):
        load_config(
            None,
            [
                "trainer.algorithm.off_policy_correction.method=tis",
                "generator.sampling_params.temperature=0.7",
            ],
        )
    with pytest.raises(ConfigError, match=r"token_tis_ratio_clip_high"):
        load_config(None, ["trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high=0.5"])


# ------------------------------------------------------------------------------------------ the loss


def _loss_inputs(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    log_probs = -torch.rand(4, 6, generator=generator) * 3
    old = log_probs + 0.3 * torch.randn(4, 6, generator=generator)
    advantages = torch.randn(4, 1, generator=generator).expand(4, 6).contiguous()
    mask = torch.ones(4, 6)
    mask[2, 4:] = 0
    return log_probs, old, advantages, mask


@pytest.mark.parametrize("method", ["tis", "decoupled_ppo"])
@pytest.mark.parametrize(
    ("loss_fn", "reduction"),
    [(ppo_loss, "token_mean"), (dual_clip_loss, "token_mean"), (gspo_loss, "seq_mean_token_mean")],
)
def test_the_correction_on_on_policy_data_is_the_plain_loss_exactly(method, loss_fn, reduction):
    log_probs, old, advantages, mask = _loss_inputs()
    log_probs.requires_grad_(True)
    cfg = AlgorithmConfig(loss_reduction=reduction, eps_clip_high=0.28)
    correction = OffPolicyCorrectionConfig(method=method)
    plain, _ = loss_fn(log_probs, old, advantages, mask, cfg)
    weighted, metrics = corrected_advantages(advantages, old, old.clone(), mask, correction)  # mu == pi_old
    corrected, _ = loss_fn(log_probs, old, weighted, mask, cfg)
    assert torch.equal(plain, corrected)
    (grad_plain,) = torch.autograd.grad(plain, log_probs)
    (grad_corrected,) = torch.autograd.grad(corrected, log_probs)
    assert torch.equal(grad_plain, grad_corrected)
    assert metrics["off_policy/weight_mean"] == 1.0 and metrics["off_policy/capped_frac"] == 0.0


def test_tis_truncates_and_decoupled_ppo_masks_tokens_past_the_cap():
    old = torch.log(torch.tensor([[0.5, 0.5, 0.5, 0.5]]))
    behaviour = torch.log(torch.tensor([[0.5, 0.25, 0.1, 0.9]]))  # pi_old / mu = 1, 2, 5, 0.555...
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    tis, tis_metrics = behaviour_weights(old, behaviour, mask, "tis", 2.0)
    decoupled, _ = behaviour_weights(old, behaviour, mask, "decoupled_ppo", 2.0)
    assert torch.allclose(tis, torch.tensor([[1.0, 2.0, 2.0, 0.0]]))
    assert torch.allclose(decoupled, torch.tensor([[1.0, 2.0, 0.0, 0.0]]))
    assert tis_metrics["off_policy/capped_frac"] == pytest.approx(1 / 3)
    # no behaviour log-probs (the warm-up's reference trajectories): nothing to correct, and it says so
    same, metrics = corrected_advantages(
        torch.ones(1, 4), old, None, mask, OffPolicyCorrectionConfig(method="tis")
    )
    assert torch.equal(same, torch.ones(1, 4)) and metrics == {"off_policy/uncorrected": 1.0}


def test_a_policy_step_on_on_policy_rollouts_is_the_plain_step():
    """The worker's whole step: behaviour log-probs equal to the policy's own give the plain loss."""
    from skyrl_train.training.workers import PolicyWorker

    def factory():
        torch.manual_seed(0)
        return tiny_llama()

    input_ids = torch.randint(0, 100, (4, 9), generator=torch.Generator().manual_seed(1))
    batch = {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "response_mask": torch.ones(4, 5),
        "advantages": torch.tensor([[1.0], [-1.0], [0.5], [-0.5]]).expand(4, 5).contiguous(),
    }
    results = {}
    for method in ("none", "tis", "decoupled_ppo"):
        algorithm = {"off_policy_correction": {"method": method}}
        worker = PolicyWorker(factory, {"lr": 1e-2}, algorithm, micro_batch_size=4)
        rollout = worker.compute_log_probs(batch)
        results[method] = worker.train_step({**batch, "rollout_log_probs": rollout})
        results[method]["weights"] = sum(float(p.detach().double().sum()) for p in worker.model.parameters())
    for method in ("tis", "decoupled_ppo"):
        assert results[method]["policy/off_policy/weight_mean"] == pytest.approx(1.0, abs=1e-6)
        for key in ("policy/loss", "policy/grad_norm", "weights"):
            assert results[method][key] == pytest.approx(results["none"][key], rel=1e-5, abs=1e-7), key
