"""The trainer on vLLM (its CPU build in CI): a step of the SQL recipe, fully asynchronous training with
in-flight updates, the weight-sync gate stopping a run, and the Ray layout's engine actor.

Marked ``vllm`` (run in .venv-vllm by `make test`). The policy is a small random Llama over the embedded
tokenizer (head size 64, which vLLM's CPU attention supports), saved once, so that each vLLM start is short.
"""

from __future__ import annotations

import asyncio
import json

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]  # an engine start: 20-150 s

torch = pytest.importorskip("torch")

from skyrl_gym.envs.sql.prompts import build_compact_prompt  # noqa: E402
from skyrl_gym.envs.sql.tasks import load_split  # noqa: E402
from skyrl_gym.runtime.sql.database import open_database  # noqa: E402
from skyrl_train.config import load_config  # noqa: E402
from skyrl_train.inference.weight_sync import gate  # noqa: E402
from skyrl_train.loop.trainer import Trainer  # noqa: E402

from .tiny_models import save_tiny_llama  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _vllm():
    """vLLM itself, imported when a test of this module runs (the main environment deselects them with
    -m "not vllm"; under CI=true a missing vLLM fails them)."""
    return pytest.importorskip("vllm")


@pytest.fixture(scope="module")
def small_model(tmp_path_factory, tokenizer) -> str:
    """A 2-layer random Llama, hidden 128 in 2 heads of 64, over the embedded tokenizer."""
    return save_tiny_llama(
        tmp_path_factory.mktemp("vllm_model"),
        tokenizer,
        hidden_size=128,
        intermediate_size=256,
        num_attention_heads=2,
        num_key_value_heads=1,
    )


@pytest.fixture(scope="module")
def sql_rows(tmp_path_factory):
    """Four easy text2sql training rows with the main job's compact prompts, as JSONL."""
    rows = [r for r in load_split("train") if r["extra_info"]["level"] == "easy"][:4]
    for row in rows:
        with open_database(row["db_path"]) as db:
            row["prompt"] = build_compact_prompt(db, row["extra_info"]["question"])
    path = tmp_path_factory.mktemp("vllm_sql") / "train.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def sql_config(model: str, rows, run_dir, *extra: str):
    return load_config(
        "sql_cpu",
        [
            f"trainer.policy.model.path={model}",
            f"data.train_data=[{rows}]",
            "data.eval_sets={}",
            "data.shuffle=false",
            f"trainer.run_dir={run_dir}",
            "trainer.train_batch_size=2",
            "trainer.policy_mini_batch_size=2",
            "trainer.micro_train_batch_size_per_gpu=4",
            "trainer.micro_forward_batch_size_per_gpu=4",
            "trainer.sft_warmup.steps=0",
            "trainer.eval_before_train=false",
            "trainer.max_wall_time_s=null",
            "trainer.ckpt_interval=0",
            "trainer.logger=[jsonl]",
            "trainer.gradient_checkpointing=false",
            "trainer.policy.optimizer_config.lr=1e-3",
            "generator.backend=vllm",
            "generator.enforce_eager=true",
            "generator.n_samples_per_prompt=2",
            "generator.sampling_params.max_generate_length=24",
            "generator.max_tokens_per_trajectory=48",
            *extra,
        ],
    )


def logged(run_dir) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [entry for entry in map(json.loads, lines) if "policy/loss" in entry]


def test_a_step_of_the_sql_recipe_on_vllm_trains_syncs_and_passes_the_gate(small_model, sql_rows, tmp_path):
    # a random model earns no reward, so the entropy bonus is what moves its weights
    config = sql_config(
        small_model,
        sql_rows,
        tmp_path / "run",
        "trainer.max_steps=2",
        "trainer.algorithm.use_entropy_loss=true",
    )
    with Trainer(config) as trainer:
        before = {k: v.clone() for k, v in trainer.policy.full_state_dict().items()}
        summary = trainer.fit()
        after = trainer.policy.full_state_dict()
        assert trainer.engine.policy_version >= 2  # a push after each step
        # the engine runs the trainer's latest weights
        probe = gate.probe_tokens(trainer.tokenizer)
        gate.compare_probe(
            gate.trainer_probe_logprobs(trainer.policy.model, probe),
            gate.engine_probe_logprobs(trainer.engine, probe),
            tolerance=gate.PROBE_TOLERANCE["float32"],
        )
    assert summary["steps"] == 2
    assert any(not torch.equal(before[k], after[k]) for k in before)
    steps = logged(tmp_path / "run")
    assert len(steps) == 2
    for metrics in steps:
        assert torch.isfinite(torch.tensor(metrics["policy/loss"]))
        assert metrics["generate/num_trajectories"] == 4.0
        assert metrics["sync/probe_max_diff"] < gate.PROBE_TOLERANCE["float32"]
        assert metrics["time/sync_check_s"] > 0


def test_a_sync_that_does_not_take_effect_stops_the_run(small_model, sql_rows, tmp_path, monkeypatch):
    """The engine takes the bytes but keeps its old weights (its loader skips them): the digests agree, the
    probe does not, and the run stops with the gate's error instead of training on stale samples."""
    import skyrl_train.inference.vllm as vllm_engine

    monkeypatch.setattr(vllm_engine.VLLMEngine, "_commit", "skyrl_drop_staged")
    config = sql_config(
        small_model,
        sql_rows,
        tmp_path / "run",
        "trainer.max_steps=1",
        "trainer.algorithm.use_entropy_loss=true",
    )
    with Trainer(config) as trainer, pytest.raises(gate.WeightSyncError, match="probe"):
        trainer.fit()


def test_async_training_on_vllm_pushes_weights_in_flight(small_model, sql_rows, tmp_path):
    import threading
    import time

    from skyrl_train.inference import SamplingParams
    from skyrl_train.loop.async_training import push_weights_in_flight

    config = sql_config(
        small_model,
        sql_rows,
        tmp_path / "run",
        "trainer.max_steps=3",
        "trainer.epochs=2",
        "trainer.mode=async",
        "trainer.fully_async.max_staleness_steps=1",
        "trainer.algorithm.off_policy_correction.method=tis",
        "trainer.algorithm.use_entropy_loss=true",
    )
    with Trainer(config) as trainer:
        summary = trainer.fit()
        engine = trainer.engine
        assert summary["steps"] == 3 and engine.policy_version == 3
        # the trainer's in-flight push with requests running: they are held, keep their tokens, go on
        prompt = trainer.tokenizer("SELECT name FROM singer;")["input_ids"]
        params = SamplingParams(temperature=1.0, max_tokens=256, ignore_eos=True, seed=0)
        results: list = []
        worker = threading.Thread(target=lambda: results.extend(engine.generate_sync([prompt] * 3, params)))
        delivered = engine._delivered
        worker.start()
        deadline = time.monotonic() + 120
        while engine._delivered < delivered + 6 and time.monotonic() < deadline:
            time.sleep(0.01)  # the three requests are decoding
        held, _ = push_weights_in_flight(trainer)
        worker.join(timeout=300)
        assert held == 3 and engine.policy_version == 4
        assert trainer.last_weight_check["sync/probe_max_diff"] < gate.PROBE_TOLERANCE["float32"]
    for out in results:
        assert len(out.token_ids) == 256 and set(out.policy_versions) == {3, 4}
        assert out.policy_versions == sorted(out.policy_versions)
    steps = logged(tmp_path / "run")
    assert [m["async/policy_version"] for m in steps] == [1.0, 2.0, 3.0]
    for metrics in steps:
        assert torch.isfinite(torch.tensor(metrics["policy/loss"]))
        assert metrics["sync/probe_max_diff"] < gate.PROBE_TOLERANCE["float32"]


def test_the_ray_layouts_engine_actor_runs_vllm(small_model, tokenizer):
    ray = pytest.importorskip("ray")
    from skyrl_train.config import GeneratorConfig
    from skyrl_train.inference import SamplingParams
    from skyrl_train.models import load_model
    from skyrl_train.ray_layout.engine import RayEngine

    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True)
    try:
        generator = GeneratorConfig.model_validate({"backend": "vllm", "enforce_eager": True})
        engine = RayEngine(
            kind="vllm",
            generator=generator,
            model_path=small_model,
            tokenizer=tokenizer,
            seed=0,
            device="cpu",
            actor_options={"num_cpus": 1},
            start_timeout_s=300,
            call_timeout_s=300,
        )
        try:
            prompt = tokenizer("SELECT 1;")["input_ids"]
            params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
            (first,) = asyncio.run(engine.generate([prompt], params))
            assert len(first.token_ids) == 8 and len(first.logprobs) == 8
            model = load_model(small_model)
            with torch.no_grad():
                model.lm_head.weight.mul_(-1.0)  # reverses every preference of the greedy choice
            asyncio.run(engine.update_weights(model.state_dict().items()))
            (second,) = asyncio.run(engine.generate([prompt], params))
            assert second.token_ids != first.token_ids
        finally:
            engine.close()
    finally:
        ray.shutdown()
