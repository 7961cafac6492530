"""``skyrl-train train`` through its command line, as a user runs it: the real trainer, data loader, (tiny)
model, text2sql database and python sandbox, in a process of its own. Killed with SIGKILL after a checkpoint
and started again with the same command, a run continues from its latest checkpoint and ends where an
uninterrupted run ends: the same recorded rollouts, metrics and weights, byte for byte (with the engine
settings of the reproducibility tests). In the synchronous mode, and in the asynchronous mode with its
ordering fixed, whose producer reads ahead of training: its checkpoint must point at the step's own batch, not
at how far the producer had read."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from skyrl_train.training import checkpoint
from tests.train.test_reproducible import ASYNC_ORDERED, _assert_same_run, _outcome, _overrides, mixed_data  # noqa: F401
from tests.train.test_trainer import sql_files  # noqa: F401  (the module's data fixture)

REPO = Path(__file__).resolve().parents[2]
FIRST_CHECKPOINT_WITHIN_S = 600
"""Bound on the wait for the first checkpoint: loading the tiny model, one warm-up step and one RL step, on
a machine that may be running other work (seconds each when it is not)."""
RUN_WITHIN_S = 900
"""Bound on one whole command: three RL steps of the tiny model."""
SYNC = ("trainer.max_steps=3", "trainer.epochs=2")  # the eight rows make two batches an epoch


def _command(overrides: list[str]) -> list[str]:
    return [sys.executable, "-m", "skyrl_train", "train", "sql_cpu", *overrides]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}


def _train(overrides: list[str]) -> subprocess.CompletedProcess:
    done = subprocess.run(
        _command(overrides), cwd=REPO, env=_env(), capture_output=True, text=True, timeout=RUN_WITHIN_S
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def _train_killed_after_first_checkpoint(overrides: list[str], run_dir: Path) -> int:
    """Start the command, SIGKILL its whole process group as soon as a checkpoint is complete (the ``latest``
    marker names it), and return that checkpoint's step."""
    process = subprocess.Popen(
        _command(overrides),
        cwd=REPO,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + FIRST_CHECKPOINT_WITHIN_S
    try:
        while checkpoint.find_latest(run_dir) is None:
            assert process.poll() is None, process.stderr.read()[-4000:] if process.stderr else ""
            assert time.monotonic() < deadline, f"no checkpoint within {FIRST_CHECKPOINT_WITHIN_S} s"
            time.sleep(0.05)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(60)
    # it was killed, mid-run: it had not finished by itself
    assert process.returncode == -signal.SIGKILL
    return checkpoint.checkpoint_step(checkpoint.find_latest(run_dir))


def _overrides_for(tiny_model, sql_files, data, settings):  # noqa: F811
    def overrides(run_dir: Path) -> list[str]:
        return _overrides(tiny_model, sql_files, data, run_dir, *settings)

    return overrides


def _whole_and_resumed(overrides, tmp_path: Path) -> tuple[Path, Path, int]:
    """An uninterrupted run, and the same command killed after its first checkpoint and run again; both end
    after their three steps."""
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    _train(overrides(whole))
    killed_at = _train_killed_after_first_checkpoint(overrides(resumed), resumed)
    assert 1 <= killed_at < 3
    _train(overrides(resumed))
    for run_dir in (whole, resumed):
        summary = json.loads((run_dir / "summary.json").read_text())
        assert (summary["steps"], summary["stopped_by"]) == (3, "max_steps")
    assert f'"resumed_from_step": {float(killed_at)}' in (resumed / "metrics.jsonl").read_text()
    return whole, resumed, killed_at


def test_a_sync_run_killed_by_sigkill_resumes_from_the_command_line_to_the_same_run(
    tiny_model,
    sql_files,  # noqa: F811
    mixed_data,  # noqa: F811
    tmp_path,
):
    whole, resumed, _ = _whole_and_resumed(_overrides_for(tiny_model, sql_files, mixed_data, SYNC), tmp_path)
    first, second = _outcome(whole), _outcome(resumed)
    metrics, rollouts, _ = first
    # the compared run: three RL steps of both environments, each step's groups once in the record
    assert [r["step"] for r in rollouts] == [s for s in (1, 2, 3) for _ in range(8)]
    assert {r["env_class"] for r in rollouts} == {"text2sql", "python"}
    assert len([m for m in metrics if "policy/loss" in m]) == 3
    _assert_same_run(first, second)


def test_an_async_run_killed_by_sigkill_resumes_with_each_step_on_its_own_prompts(
    tiny_model,
    sql_files,  # noqa: F811
    mixed_data,  # noqa: F811
    tmp_path,
):
    """The asynchronous mode (ordered, one step ahead): the producer had read the next step's prompts and
    started their groups when the run was killed. The resumed run starts them again, from the checkpoint's
    step, so every step trains on the same prompts as the uninterrupted run. Those groups are generated by
    the checkpoint's policy, one version newer than the uninterrupted run's (which made them a step ahead,
    with weights no checkpoint keeps): the steps up to the checkpoint are the same byte for byte, the later
    ones the same prompts with new samples, and the policy versions go on counting from the checkpoint."""
    whole, resumed, killed_at = _whole_and_resumed(
        _overrides_for(tiny_model, sql_files, mixed_data, ASYNC_ORDERED), tmp_path
    )
    (metrics, rollouts, _), (metrics2, rollouts2, _) = _outcome(whole), _outcome(resumed)

    def identity(row):
        return row["step"], row["group_id"], row["sample_index"], json.dumps(row["task"], sort_keys=True)

    assert [identity(r) for r in rollouts] == [identity(r) for r in rollouts2]
    assert [r["step"] for r in rollouts] == [s for s in (1, 2, 3) for _ in range(8)]
    before = [r for r in rollouts if r["step"] <= killed_at]
    assert before == [r for r in rollouts2 if r["step"] <= killed_at]
    # the log's steps up to the checkpoint's (the warm-up's come first): the same
    lines = [json.loads(line) for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    logged = next(m["step"] for m in lines if "resumed_from_step" in m)
    assert [m for m in metrics if m["step"] <= logged] == [m for m in metrics2 if m["step"] <= logged]

    def versions(rows, step):  # of the model's tokens (an observation's tokens have none: -1)
        return {v for r in rows if r["step"] == step for v in r["policy_versions"] or () if v >= 0}

    # uninterrupted, step s's groups were made by the policy of step s - 1 (K=1), the first two by the first
    base = min(versions(rollouts, 1))
    assert [versions(rollouts, s) for s in (1, 2, 3)] == [{base}, {base}, {base + 1}]
    # resumed, the first step after the checkpoint was made by the checkpoint's policy (version base + k)
    assert versions(rollouts2, killed_at + 1) == {base + killed_at}
