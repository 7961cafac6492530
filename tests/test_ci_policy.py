"""The root conftest's rule under ``CI=true``: a skip fails unless the test is marked ``gpu`` (whatever its
reason says), and an expected failure fails too."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES = """
import pytest

def test_passes():
    pass

def test_skips_naming_a_gpu():
    pytest.skip("needs a CUDA GPU")

@pytest.mark.gpu
def test_marked_gpu_skips():
    pytest.skip("needs a CUDA GPU")

@pytest.mark.xfail
def test_expected_failure():
    assert False

@pytest.mark.xfail
def test_unexpected_pass():
    pass
"""


def _outcomes(folder: Path, ci: str) -> dict[str, str]:
    """Each test's outcome word in a verbose run of ``folder`` with CI set to ``ci``."""
    env = {**os.environ, "CI": ci}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", str(folder)],
        capture_output=True, text=True, cwd=folder, env=env, timeout=300,
    )  # fmt: skip
    found = {}
    for line in out.stdout.splitlines():
        name, _, rest = line.partition(" ")
        if name.startswith("test_cases.py::") and rest:
            found[name.split("::")[1]] = rest.split()[0]
    return found


def test_ci_fails_skips_outside_gpu_tests_and_expected_failures(tmp_path):
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a CUDA GPU\n")
    (tmp_path / "test_cases.py").write_text(CASES)
    assert _outcomes(tmp_path, "true") == {
        "test_passes": "PASSED",
        "test_skips_naming_a_gpu": "FAILED",
        "test_marked_gpu_skips": "SKIPPED",
        "test_expected_failure": "FAILED",
        "test_unexpected_pass": "FAILED",
    }
    assert _outcomes(tmp_path, "false") == {
        "test_passes": "PASSED",
        "test_skips_naming_a_gpu": "SKIPPED",
        "test_marked_gpu_skips": "SKIPPED",
        "test_expected_failure": "XFAIL",
        "test_unexpected_pass": "XPASS",
    }
