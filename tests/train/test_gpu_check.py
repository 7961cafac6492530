"""benchmarks/gpu_check.py runs anywhere with --dry-run: every row is reported, none runs on a GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"
ROWS = ("vllm_generate", "sync_nccl", "sync_cuda_ipc", "fsdp2_bf16_step", "sql_step", "mfu")


def test_dry_run_reports_every_row_skipped():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run"], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = {
        line.split("|")[0].strip(): line.split("|", 1)[1].strip()
        for line in done.stdout.splitlines()
        if "|" in line
    }
    for row in ROWS:
        assert lines[row] in ("skipped: no CUDA", "skipped: dry run"), (row, lines.get(row))
