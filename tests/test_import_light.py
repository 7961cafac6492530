"""Importing skyrl_gym must stay light: no torch, duckdb, docker, vllm or transformers."""

import json
import subprocess
import sys

HEAVY = ["torch", "duckdb", "docker", "vllm", "transformers", "sqlglot", "hypothesis", "ray"]


def test_import_skyrl_gym_imports_nothing_heavy():
    code = (
        "import sys, json, skyrl_gym, skyrl_gym.testing, skyrl_gym.tools, skyrl_gym.vector;"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
