"""Every script in ``examples/`` runs as a user runs it (its own process, the venv's python) and prints what
it promises: the checker's verdict, the tool's result, the accuracy, a finite loss and sampled text."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def run_example(name: str, *args: str, cwd: Path, timeout: float = 120) -> str:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TINKER_API_KEY": "tml-local", "TINKER_TELEMETRY": "0"},
    )
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_every_example_is_listed_and_tested():
    scripts = sorted(p.name for p in EXAMPLES.glob("*.py"))
    assert scripts == ["custom_env.py", "react_tool.py", "sql_eval.py", "tinker_client.py"]
    listing = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    assert all(f"`{name}`" in listing for name in scripts)


def test_custom_env(tmp_path):
    out = run_example("custom_env.py", cwd=tmp_path)
    assert "reward: 1.0 done: True end: terminated" in out  # the scripted episode earned the reward
    assert re.search(r"ReverseEnv<reverse>: \d+ passed, 0 failed", out)
    assert "verdict: PASS" in out


def test_react_tool(tmp_path):
    out = run_example("react_tool.py", cwd=tmp_path)
    assert "tools offered: ['calculate', 'finish']" in out
    assert "tool result: -28.0" in out  # -(26 + 68 - -90 + 68 / 1) / 9, run in the environment's interpreter
    assert "reward: 1.0 done: True" in out  # finish(answer) reached the environment's verifier


def test_sql_eval(tmp_path):
    out = run_example("sql_eval.py", cwd=tmp_path)
    assert "accuracy: 0.500 (3/6)" in out  # gold queries on rows 0, 2, 4; a wrong query on the others
    assert (tmp_path / "sql_example" / "preds.jsonl").read_text().count("\n") == 6


@pytest.mark.slow
def test_tinker_client(tmp_path):
    # `skyrl-train serve` with the embedded model comes up in seconds on the CPU and the script takes about
    # 10 s, so the test starts a real server, as a user does, and runs the script against it.
    pytest.importorskip("tinker")
    pytest.importorskip("httpx")
    sys.path.insert(0, str(Path(__file__).parent / "tinker"))
    from tinker_server import serve_command

    with serve_command(tmp_path / "store", wait_s=120) as (url, _):
        out = run_example("tinker_client.py", "--base-url", url, cwd=tmp_path, timeout=300)
    loss = re.search(r"^loss: (\S+) ", out, re.M)
    assert loss and math.isfinite(float(loss.group(1))) and float(loss.group(1)) > 0, out
    sampled = re.search(r"^sampled: '(.*)'$", out, re.M)
    assert sampled and sampled.group(1).strip(), out  # the model wrote some text
