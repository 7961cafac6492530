"""The stdin/stdout problems as data: the bundle the code environment loads is what the problem files say."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "datasets" / "code" / "stdio"


def _builder():
    path = REPO / "datasets" / "code" / "stdio_bundle.py"
    spec = importlib.util.spec_from_file_location("stdio_bundle", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bundle_builder = _builder()


def test_the_bundle_holds_the_problem_files_in_the_index_order():
    bundle = json.loads((REPO / "skyrl_gym" / "envs" / "code" / "stdio_problems.json").read_text())
    ids = bundle_builder.problem_ids(SOURCE)
    assert [p["id"] for p in bundle["problems"]] == ids and len(ids) == 39
    for entry in bundle["problems"]:
        spec = bundle_builder.load_problem(SOURCE / f"{entry['id']}.yaml")
        for key in ("title", "difficulty", "statement", "reference_solution", "float_tol"):
            assert entry[key] == spec[key], (entry["id"], key)
        assert [t["input"] for t in entry["public_tests"]] == spec["public_inputs"]
        assert [t["input"] for t in entry["hidden_tests"]] == spec["hidden_inputs"]
        assert entry["time_limit_s"] == bundle_builder.TIME_LIMIT_S


def _one_problem(folder: Path, **changes) -> Path:
    folder.mkdir(exist_ok=True)
    spec = {
        "id": "double",
        "title": "Double",
        "difficulty": "easy",
        "float_tol": None,
        "statement": "Print twice the integer n.\n",
        "reference_solution": "print(2 * int(input()))\n",
        "public_inputs": ["3\n"],
        "hidden_inputs": ["-4\n", "0\n"],
        **changes,
    }
    (folder / f"{spec['id']}.yaml").write_text(json.dumps(spec))  # JSON is YAML
    (folder / "index.txt").write_text(f"# easy\n{spec['id']}\n")
    return folder


def test_the_builder_runs_the_reference_for_the_expected_outputs(tmp_path):
    bundle = bundle_builder.build_bundle(_one_problem(tmp_path / "stdio"))
    (problem,) = bundle["problems"]
    assert problem["public_tests"] == [{"input": "3\n", "output": "6\n"}]
    assert problem["hidden_tests"] == [{"input": "-4\n", "output": "-8\n"}, {"input": "0\n", "output": "0\n"}]
    assert list(problem) == [
        "id", "title", "difficulty", "statement", "public_tests", "hidden_tests", "reference_solution",
        "float_tol", "time_limit_s",
    ]  # fmt: skip
    assert bundle_builder.bundle_text(bundle).endswith("}\n")


def test_the_builder_refuses_inconsistent_problem_files(tmp_path):
    folder = _one_problem(tmp_path / "unlisted")
    shutil.copy(folder / "double.yaml", folder / "triple.yaml")
    with pytest.raises(ValueError, match="does not list: triple"):
        bundle_builder.build_bundle(folder)
    folder = _one_problem(tmp_path / "missing")
    (folder / "index.txt").write_text("double\nhalf\n")
    with pytest.raises(ValueError, match="without a file .*: half"):
        bundle_builder.build_bundle(folder)
    with pytest.raises(ValueError, match="the same input is listed twice"):
        bundle_builder.build_bundle(_one_problem(tmp_path / "twice", hidden_inputs=["3\n"]))
    with pytest.raises(ValueError, match="difficulty 'trivial'"):
        bundle_builder.build_bundle(_one_problem(tmp_path / "level", difficulty="trivial"))
    with pytest.raises(RuntimeError, match="the reference printed nothing"):
        bundle_builder.build_bundle(_one_problem(tmp_path / "silent", reference_solution="pass\n"))
