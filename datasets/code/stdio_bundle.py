"""Build the bundle of stdin/stdout problems from their data files: one YAML file per problem in ``stdio/``.

    python datasets/code/stdio_bundle.py            # rewrites skyrl_gym/envs/code/stdio_problems.json

A problem file holds a statement (Markdown: the task, the input and output formats, the limits), a reference
solution, the public inputs (shown in the prompt as examples) and the hidden inputs (edge cases, random cases
and, where the naive algorithm is too slow, one large case). ``stdio/index.txt`` lists the problems in the
bundle's order. The expected outputs are what the reference solution prints for each input: they are computed
here, with this Python, and stored in the bundle next to the inputs, so the same files always give the same
bundle.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
SOURCE = Path(__file__).resolve().with_name("stdio")
BUNDLE = REPO / "skyrl_gym" / "envs" / "code" / "stdio_problems.json"
TIME_LIMIT_S = 2.0
REFERENCE_BUDGET_S = 0.6
"""A reference solution must answer every input in this time here, well inside the judge's limit."""
SEED = 0
"""The seed of the generators that once made the stored hidden inputs; the bundle's header still names it."""
DIFFICULTIES = ("easy", "medium", "hard")
FIELDS = (
    "id",
    "title",
    "difficulty",
    "float_tol",
    "statement",
    "reference_solution",
    "public_inputs",
    "hidden_inputs",
)

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def problem_ids(source: Path = SOURCE) -> list[str]:
    """The problem ids of ``index.txt`` in its order (``#`` starts a comment); every listed file must exist and
    every problem file must be listed."""
    index = source / "index.txt"
    ids = []
    for line in index.read_text(encoding="utf-8").splitlines():
        name = line.split("#", 1)[0].strip()
        if name:
            ids.append(name)
    if len(set(ids)) != len(ids):
        duplicates = sorted({name for name in ids if ids.count(name) > 1})
        raise ValueError(f"{index}: problems listed twice: {', '.join(duplicates)}")
    files = {path.stem for path in source.glob("*.yaml")}
    if missing := [name for name in ids if name not in files]:
        raise ValueError(f"{index} lists problems without a file in {source}: {', '.join(missing)}")
    if unlisted := sorted(files - set(ids)):
        raise ValueError(f"{source} has problem files that {index} does not list: {', '.join(unlisted)}")
    return ids


def load_problem(path: Path) -> dict[str, Any]:
    """One problem file, checked: the fields of :data:`FIELDS`, its id its file name, inputs that are text."""
    data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a problem file holds a mapping of {', '.join(FIELDS)}")
    if missing := [key for key in FIELDS if key not in data]:
        raise ValueError(f"{path}: missing {', '.join(missing)}")
    if unknown := sorted(set(data) - set(FIELDS)):
        raise ValueError(f"{path}: unknown fields {', '.join(unknown)} (expected {', '.join(FIELDS)})")
    if data["id"] != path.stem:
        raise ValueError(f"{path}: id {data['id']!r} differs from the file name")
    if data["difficulty"] not in DIFFICULTIES:
        raise ValueError(f"{path}: difficulty {data['difficulty']!r} is not one of {', '.join(DIFFICULTIES)}")
    for key in ("title", "statement", "reference_solution"):
        if not isinstance(data[key], str) or not data[key].strip():
            raise ValueError(f"{path}: {key} must be non-empty text")
    for key in ("public_inputs", "hidden_inputs"):
        inputs = data[key]
        if not isinstance(inputs, list) or not all(isinstance(item, str) for item in inputs):
            raise ValueError(f"{path}: {key} must be a list of texts")
    if not data["public_inputs"]:
        raise ValueError(f"{path}: a problem needs at least one public input (shown as an example)")
    every = data["public_inputs"] + data["hidden_inputs"]
    if len(set(every)) != len(every):
        raise ValueError(f"{path}: the same input is listed twice")
    if data["float_tol"] is not None and not (isinstance(data["float_tol"], float) and data["float_tol"] > 0):
        raise ValueError(f"{path}: float_tol must be a positive number or null")
    return data


def run_reference(source: str, data: str) -> tuple[str, float]:
    """What the reference solution prints for ``data``, and how long it took."""
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", source], input=data, capture_output=True, text=True, timeout=30, check=False
    )
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"the reference solution failed: {result.stderr[-2000:]}\ninput: {data[:300]!r}")
    return result.stdout, elapsed


def build_bundle(source: Path = SOURCE) -> dict[str, Any]:
    """Every problem with its public and hidden tests (expected outputs from the reference solution)."""
    problems = []
    for pid in problem_ids(source):
        spec = load_problem(source / f"{pid}.yaml")
        tests: dict[str, list[dict[str, str]]] = {"public_tests": [], "hidden_tests": []}
        for kind, inputs in (
            ("public_tests", spec["public_inputs"]),
            ("hidden_tests", spec["hidden_inputs"]),
        ):
            for data in inputs:
                output, elapsed = run_reference(spec["reference_solution"], data)
                if elapsed > REFERENCE_BUDGET_S:
                    raise RuntimeError(f"{pid}: the reference took {elapsed:.2f} s on a test")
                if not output.strip():
                    raise RuntimeError(f"{pid}: the reference printed nothing for {data[:100]!r}")
                tests[kind].append({"input": data, "output": output})
        problems.append(
            {
                "id": pid,
                "title": spec["title"],
                "difficulty": spec["difficulty"],
                "statement": spec["statement"],
                **tests,
                "reference_solution": spec["reference_solution"],
                "float_tol": spec["float_tol"],
                "time_limit_s": TIME_LIMIT_S,
            }
        )
    return {"version": 1, "seed": SEED, "problems": problems}


def bundle_text(bundle: dict[str, Any]) -> str:
    """The bundle as the JSON file stores it."""
    return json.dumps(bundle, indent=1, ensure_ascii=False) + "\n"


def main() -> int:
    bundle = build_bundle()
    text = bundle_text(bundle)
    BUNDLE.write_text(text, encoding="utf-8")
    counts: dict[str, int] = {}
    for entry in bundle["problems"]:
        counts[entry["difficulty"]] = counts.get(entry["difficulty"], 0) + 1
    tests = sum(len(p["public_tests"]) + len(p["hidden_tests"]) for p in bundle["problems"])
    print(f"{len(bundle['problems'])} problems {counts}, {tests} tests, {len(text) / 1e6:.2f} MB -> {BUNDLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
