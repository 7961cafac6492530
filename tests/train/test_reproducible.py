"""Two runs with the same seed, config and data are the same run: a synchronous multi-turn run on the CPU with
real environments (text2sql on its database, python in the bubblewrap sandbox) gives the same tokens,
sampler log-probs, rewards, advantages, losses and weights, compared byte for byte, when the hf engine
decodes one sequence at a time without its prefix cache (``generator.max_num_seqs=1``,
``generator.enable_prefix_caching=false``).

What is left out of the comparison is what measures the machine, not the run: timings (``time/``,
``generate/*_s*``, the record's ``generate_s``/``env_s``), memory, CPU- and environment-seconds, and the
record's file size (its timing columns differ).
"""

from __future__ import annotations

import hashlib
import json

import pytest

from skyrl_gym.envs.python.tasks import build_rows as python_rows
from skyrl_train.checkpoint import export_model
from skyrl_train.record import read_rollouts
from skyrl_train.trainer import Trainer
from tests.train.test_trainer import _config, sql_files  # noqa: F401  (the module's data fixture)

MACHINE_METRICS = (
    "time",
    "memory/",
    "cost/cpu_s",
    "cost/env_s",
    "cost/gpu_s",
    "record/bytes",
    "sync/",
    "dispatch/",
)
MACHINE_METRICS_EXACT = (
    "generate/wall_s",
    "generate/tokens_per_s",
    "generate/engine_s_mean",
    "generate/env_s_mean",
    "warmup/elapsed_s",
)
MACHINE_COLUMNS = ("generate_s", "env_s")


def _of_the_run(metrics: dict) -> dict:
    return {
        k: v
        for k, v in metrics.items()
        if not k.startswith(MACHINE_METRICS) and k not in MACHINE_METRICS_EXACT and "elapsed" not in k
    }


@pytest.fixture(scope="module")
def mixed_data(sql_files, tmp_path_factory):  # noqa: F811
    """Four text2sql rows and four python rows (the sandboxed interpreter) in one training file."""
    out = tmp_path_factory.mktemp("mixed")
    sql = (sql_files / "train.jsonl").read_text().splitlines()[:4]
    python = [json.dumps(r) for r in python_rows(4, seed=5, split="train", tasks=["gcd", "basic_arithmetic"])]
    (out / "train.jsonl").write_text("\n".join(sql + python) + "\n")
    return out


def _run(tiny_model, sql_files, data, run_dir):  # noqa: F811
    config = _config(
        tiny_model,
        sql_files,
        run_dir,
        f"data.train_data=[{data / 'train.jsonl'}]",
        "data.val_data=[]",
        "data.eval_sets={}",
        "trainer.eval_before_train=false",
        "trainer.max_steps=2",
        "trainer.train_batch_size=4",
        "trainer.policy_mini_batch_size=4",
        # an entropy bonus: the random model earns no reward, and the bonus still moves every weight each step
        "trainer.algorithm.use_entropy_loss=true",
        "trainer.algorithm.entropy_loss_coef=0.1",
        # the engine's settings for bitwise runs: one sequence per forward and no prefix cache, so that the
        # sampler's log-probs do not depend on which requests happened to share a batch or a cached prefix
        # (with either on, the tokens were the same here but some log-probs differed in the last bits)
        "generator.max_num_seqs=1",
        "generator.enable_prefix_caching=false",
    )
    with Trainer(config) as trainer:
        trainer.fit()
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rollouts = [{k: v for k, v in r.items() if k not in MACHINE_COLUMNS} for r in read_rollouts(run_dir)]
    export_model(run_dir, run_dir / "exported")
    weights = hashlib.sha256((run_dir / "exported" / "model.safetensors").read_bytes()).hexdigest()
    return [_of_the_run(m) for m in metrics], rollouts, weights


def test_the_same_seed_gives_the_same_run_byte_for_byte(tiny_model, sql_files, mixed_data, tmp_path):  # noqa: F811
    first = _run(tiny_model, sql_files, mixed_data, tmp_path / "first")
    second = _run(tiny_model, sql_files, mixed_data, tmp_path / "second")
    metrics, rollouts, weights = first
    # the run did what is compared: two RL steps of both environments, with model tokens and a loss
    assert {r["env_class"] for r in rollouts} == {"text2sql", "python"} and len(rollouts) == 16
    losses = [m["policy/loss"] for m in metrics if "policy/loss" in m]
    assert len(losses) == 2 and all(losses) and all(r["response_ids"] for r in rollouts)
    assert rollouts == second[1]
    assert metrics == second[0]
    assert weights == second[2]
