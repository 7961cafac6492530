"""Two runs with the same seed, config and data are the same run: a multi-turn run on the CPU with real
environments (text2sql on its database, python in the bubblewrap sandbox) gives the same tokens, sampler
log-probs, rewards, advantages, losses and weights, compared byte for byte, when the hf engine decodes one
sequence at a time without its prefix cache (``generator.max_num_seqs=1``,
``generator.enable_prefix_caching=false``): in the synchronous mode, and in the asynchronous mode with its
ordering fixed (``trainer.fully_async.ordered``), whose recorded steps then replay from a checkpoint; and with
the terminal environment's Docker containers, with its command timings off (``timings=false``: a command's
duration in the observation is the clock).

What is left out of the comparison is what measures the machine, not the run: seconds (``time/``, any key
with ``_s`` at its end or before ``_mean``, the record's ``generate_s``/``env_s``), memory, CPU- and environment-seconds, the record's
file size (its timing columns differ), and how far the asynchronous producer got ahead when a step is logged.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from skyrl_gym.envs.python.tasks import build_rows as python_rows
from skyrl_train.config import load_config
from skyrl_train.loop.trainer import Trainer
from skyrl_train.record import read_rollouts
from skyrl_train.training.checkpoint import export_model
from tests.docker.conftest import docker_engine  # noqa: F401  (the Docker engine with the images, or a skip)
from tests.train.test_trainer import _overrides as _trainer_overrides
from tests.train.test_trainer import sql_files  # noqa: F401  (the module's data fixture)

REPO = Path(__file__).resolve().parents[2]
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
MACHINE_COLUMNS = ("generate_s", "env_s")
ASYNC_PROGRESS = (
    "async/groups_started",
    "async/groups_finished",
    "async/buffered_groups",
    "async/held_back_events",
)
"""The asynchronous producer's progress when a step is logged: how far generation got meanwhile is the
machine's speed (the groups a step trains on are fixed by the ordered mode; these count the ones ahead)."""


def _of_the_run(metrics: dict) -> dict:
    return {
        k: v
        for k, v in metrics.items()
        if not k.startswith(MACHINE_METRICS)
        and k not in ASYNC_PROGRESS
        and not re.search(r"_s(_|$)", k)  # seconds (and their means), rates per second
        and "elapsed" not in k
    }


@pytest.fixture(scope="module")
def mixed_data(sql_files, tmp_path_factory):  # noqa: F811
    """Four text2sql rows and four python rows (the sandboxed interpreter) in one training file."""
    out = tmp_path_factory.mktemp("mixed")
    sql = (sql_files / "train.jsonl").read_text().splitlines()[:4]
    python = [json.dumps(r) for r in python_rows(4, seed=5, split="train", tasks=["gcd", "basic_arithmetic"])]
    (out / "train.jsonl").write_text("\n".join(sql + python) + "\n")
    return out


def _overrides(tiny_model, sql_files, data, run_dir, *overrides) -> list[str]:  # noqa: F811
    """The compared runs' settings: two steps on ``data`` with the engine settings for bitwise runs."""
    return _trainer_overrides(
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
        *overrides,
    )


def _run(tiny_model, sql_files, data, run_dir, *overrides):  # noqa: F811
    config = load_config("sql_cpu", _overrides(tiny_model, sql_files, data, run_dir, *overrides))
    with Trainer(config) as trainer:
        trainer.fit()
    return _outcome(run_dir)


def _outcome(run_dir: Path):
    """What two runs compare: the run's metrics (one entry per line of ``metrics.jsonl``, a resume's marker
    left out), the recorded rollouts and the exported weights' SHA-256."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    metrics = [_of_the_run(m) for m in lines if "resumed_from_step" not in m]
    rollouts = [{k: v for k, v in r.items() if k not in MACHINE_COLUMNS} for r in read_rollouts(run_dir)]
    export_model(run_dir, run_dir / "exported")
    weights = hashlib.sha256((run_dir / "exported" / "model.safetensors").read_bytes()).hexdigest()
    return metrics, rollouts, weights


def _assert_same_run(first, second) -> None:
    """Two ``_run`` results are equal: the recorded rollouts, the run's metrics and the exported weights (the
    message names the columns or metric keys that differ)."""
    (metrics, rollouts, weights), (metrics2, rollouts2, weights2) = first, second
    assert len(rollouts) == len(rollouts2) and len(metrics) == len(metrics2)
    columns = {
        k
        for a, b in zip(rollouts, rollouts2, strict=True)
        for k in a.keys() | b.keys()
        if a.get(k) != b.get(k)
    }
    assert not columns, columns
    keys = {
        k for a, b in zip(metrics, metrics2, strict=True) for k in a.keys() | b.keys() if a.get(k) != b.get(k)
    }
    assert not keys, keys
    assert weights == weights2


def test_the_same_seed_gives_the_same_run_byte_for_byte(tiny_model, sql_files, mixed_data, tmp_path):  # noqa: F811
    first = _run(tiny_model, sql_files, mixed_data, tmp_path / "first")
    second = _run(tiny_model, sql_files, mixed_data, tmp_path / "second")
    metrics, rollouts, weights = first
    # the run did what is compared: two RL steps of both environments, with model tokens and a loss
    assert {r["env_class"] for r in rollouts} == {"text2sql", "python"} and len(rollouts) == 16
    losses = [m["policy/loss"] for m in metrics if "policy/loss" in m]
    assert len(losses) == 2 and all(losses) and all(r["response_ids"] for r in rollouts)
    _assert_same_run(first, second)


ASYNC_ORDERED = (
    "trainer.mode=async",
    "trainer.fully_async.ordered=true",
    "trainer.fully_async.max_staleness_steps=1",
    "trainer.fully_async.num_parallel_generation_workers=2",
    "trainer.algorithm.off_policy_correction.method=tis",
    "trainer.max_steps=3",
    "trainer.epochs=2",  # the eight rows make two batches an epoch
)


def test_the_async_mode_with_its_ordering_fixed_is_the_same_run_byte_for_byte(
    tiny_model,
    sql_files,  # noqa: F811
    mixed_data,
    tmp_path,
):
    """The asynchronous mode with ``trainer.fully_async.ordered``: generation runs a step ahead of the trainer
    (each step but the first trains on groups a previous policy made), and two runs are still the same; the
    recorded ordering replays: ``replay_training`` reruns step 3 from checkpoint 2 to the same losses and
    weights."""
    from skyrl_train.replay import replay_training

    first = _run(tiny_model, sql_files, mixed_data, tmp_path / "first", *ASYNC_ORDERED)
    second = _run(tiny_model, sql_files, mixed_data, tmp_path / "second", *ASYNC_ORDERED)
    metrics, rollouts, weights = first
    steps = [m for m in metrics if "async/policy_version" in m]
    assert len(steps) == 3
    # the overlap is real: steps 2 and 3 trained on groups generated one version behind the policy
    assert [m["async/staleness_max"] for m in steps] == [0.0, 1.0, 1.0]
    assert {r["env_class"] for r in rollouts} == {"text2sql", "python"} and len(rollouts) == 24

    # each step took its own prompts' groups, in prompt order, each made whole by one policy version: the
    # first version for steps 1 and 2, the next for step 3
    def versions(rows):  # of the model's tokens (an observation's tokens have none: -1)
        return {v for r in rows for v in r["policy_versions"] or () if v >= 0}

    base = min(versions(rollouts))
    for step, version in ((1, base), (2, base), (3, base + 1)):
        rows = [r for r in rollouts if r["step"] == step]
        assert [r["group_id"] for r in rows] == [g for g in range(4 * (step - 1), 4 * step) for _ in (0, 1)]
        assert versions(rows) == {version}
    _assert_same_run(first, second)

    replay = replay_training(tmp_path / "first", from_step=2)
    assert [s.step for s in replay.steps] == [3] and replay.equal and replay.weights.verdict == "equal", (
        replay
    )


@pytest.mark.docker
def test_a_run_with_the_terminal_environment_is_the_same_byte_for_byte(
    tiny_model,
    sql_files,  # noqa: F811
    docker_engine,  # noqa: F811
    tmp_path,
):
    """The terminal environment (each episode in its task's Docker container): the warm-up plays each task's
    reference commands in the containers and trains on their real output, and two RL steps run episodes there
    and the tests that verify them; two runs are the same byte for byte."""
    rows = (REPO / "datasets" / "terminal" / "train.jsonl").read_text().splitlines()[:4]
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("\n".join(rows) + "\n")
    terminal = (
        "environment.env_class=terminal",
        # the references' commands take a second or two; the bound is for a machine busy with other work,
        # where a command cut at its timeout would give the two runs different output
        "environment.skyrl_gym.terminal.command_timeout_s=120",
        "environment.skyrl_gym.terminal.timings=false",  # a command's duration in its output is the clock
        "trainer.sft_warmup.episode_fraction=0.0",  # each warm-up row plays its reference commands
        "trainer.max_prompt_length=1024",
        "generator.max_input_length=2048",
        # a reference's command (its solve.sh in base64) fits in a turn
        "generator.sampling_params.max_generate_length=512",
        "generator.max_tokens_per_trajectory=null",
    )
    first = _run(tiny_model, sql_files, data, tmp_path / "first", *terminal)
    second = _run(tiny_model, sql_files, data, tmp_path / "second", *terminal)
    metrics, rollouts, weights = first
    assert {r["env_class"] for r in rollouts} == {"terminal"} and len(rollouts) == 8
    # the episodes reached their containers' verification (the random model's text runs no command)
    assert all(r["verification"] for r in rollouts)
    warmup = [m for m in metrics if "warmup/loss" in m]
    assert warmup and all(m["warmup/loss"] > 0 for m in warmup)
    _assert_same_run(first, second)
