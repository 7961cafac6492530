"""The SWE instance builder on real parts: tinydb's sdist from PyPI (cached), its real functions mutated, one
candidate validated by tinydb's own suite under Debian's python3, and the committed instance file."""

from __future__ import annotations

import ast
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from skyrl_gym.datasets.swe.build import (
    Candidate,
    baseline,
    candidates,
    read_instances,
    skyrl_row,
    source_files,
    validate,
    write_instances,
)
from skyrl_gym.datasets.swe.mutate import BUG_KINDS, apply_edits, find_sites, functions
from skyrl_gym.datasets.swe.split import assign_splits, shared_functions
from skyrl_gym.datasets.swe.statement import changed_lines, problem_statement
from skyrl_gym.envs.swe.projects import PROJECTS, get_project
from skyrl_gym.envs.swe.repos import bugged_repo, clean_repo
from skyrl_gym.envs.swe.testrun import DEBIAN_PYTHON

INSTANCES = Path(__file__).resolve().parents[2] / "datasets" / "swe" / "instances.jsonl.gz"
TINYDB = get_project("tinydb")


def _debian_pytest() -> bool:
    try:
        proc = subprocess.run(
            [DEBIAN_PYTHON, "-m", "pytest", "--version"], cwd="/", capture_output=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


@pytest.fixture(scope="module")
def tinydb_repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("tinydb") / "repo"
    clean_repo(TINYDB, repo)
    return repo


def _mutate(code: str) -> list[str]:
    """Every mutated version of the one-function module ``code``, as text."""
    return sorted({apply_edits(code, [site]) for site in find_sites(code)})


def test_each_kind_makes_the_expected_edit():
    assert "def f(a, b):\n    return a - b\n" in _mutate("def f(a, b):\n    return a + b\n")
    assert "def f(a, b):\n    return b - a\n" in _mutate("def f(a, b):\n    return a - b\n")
    assert "def f(a, b):\n    return a <= b\n" in _mutate("def f(a, b):\n    return a < b\n")
    assert "def f(a, b):\n    return a or b\n" in _mutate("def f(a, b):\n    return a and b\n")
    assert "def f(a):\n    return a[1]\n" in _mutate("def f(a):\n    return a[0]\n")
    assert "def f(a):\n    return a[:1]\n" in _mutate("def f(a):\n    return a[:2]\n")
    assert "def f(a):\n    return len(a)\n" in _mutate("def f(a):\n    return len(a) - 1\n")
    assert "def f(a):\n    if a != 1:\n        return 2\n" in _mutate(
        "def f(a):\n    if a == 1:\n        return 2\n"
    )
    assert "def f(a):\n    x = 1\n    return a\n" in _mutate(
        "def f(a):\n    x = 1\n    a += x\n    return a\n"
    )
    loop = "def f(a):\n    for x in a:\n        print(x)\n    return a\n"
    assert "def f(a):\n    return a\n" in _mutate(loop)
    branch = "def f(a):\n    if a:\n        a = 1\n    else:\n        a = 2\n    return a\n"
    assert "def f(a):\n    if a:\n        a = 1\n    return a\n" in _mutate(branch)
    # a block never becomes empty: pass stands in for its one statement
    assert "def f(a):\n    if a:\n        pass\n    return a\n" in _mutate(
        "def f(a):\n    if a:\n        a = 1\n    return a\n"
    )
    # comments and the rest of the file stay byte for byte
    commented = "# head\ndef f(a, b):  # sum\n    return a + b  # plus\n# tail\n"
    assert "# head\ndef f(a, b):  # sum\n    return a - b  # plus\n# tail\n" in _mutate(commented)
    # docstrings and string formatting are not touched
    assert all('"""Doc."""' in m for m in _mutate('def f(a):\n    """Doc."""\n    return "%s" % a\n'))


def test_every_kind_on_real_tinydb_functions_compiles_and_changes_the_ast(tinydb_repo):
    seen = Counter()
    for path in source_files(TINYDB, tinydb_repo):
        source = (tinydb_repo / path).read_text()
        tree = ast.parse(source)
        spans = {name: (node.lineno, node.end_lineno) for name, node in functions(tree)}
        done = set()
        for site in find_sites(source):
            if site.kind in done:
                continue
            done.add(site.kind)
            mutated = apply_edits(source, [site])
            compile(mutated, path, "exec")
            assert ast.dump(ast.parse(mutated)) != ast.dump(tree)
            # only lines of the mutated function changed
            old, new = source.splitlines(), mutated.splitlines()
            first = next(i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b) + 1
            start, end = spans[site.function]
            assert start <= first <= end, (site, first)
            seen[site.kind] += 1
    assert set(seen) == set(BUG_KINDS)


def test_candidates_are_ordered_by_seed_and_take_kinds_in_turn(tinydb_repo):
    first = candidates(TINYDB, tinydb_repo, seed=0)
    assert [c.sites for c in first] == [c.sites for c in candidates(TINYDB, tinydb_repo, seed=0)]
    assert [c.sites for c in first] != [c.sites for c in candidates(TINYDB, tinydb_repo, seed=1)]
    assert [c.kinds[0] for c in first[:9]] == list(BUG_KINDS) and len(first[9].sites) == 2
    pairs = [c for c in first if len(c.sites) == 2]
    assert pairs and all(a.function == b.function and a.kind != b.kind for a, b in (c.sites for c in pairs))


@pytest.mark.skipif(not _debian_pytest(), reason="Debian's python3-pytest is not installed (make sysdeps)")
def test_one_real_candidate_becomes_a_valid_instance(tmp_path):
    base = baseline(TINYDB, tmp_path)
    assert len(base.stable) > 150 and base.flaky == []
    path = "tinydb/table.py"
    source = (base.repo / path).read_text()
    site = next(
        s
        for s in find_sites(source)
        if s.kind == "change_constant" and s.function == "Table._get_next_id" and s.edits[0].text == "0"
    )
    outcome = validate(base, Candidate(path, (site,)))
    instance = outcome.instance
    assert outcome.reason == "kept", outcome.reason
    assert "tests/test_tables.py::test_next_id[memory]" in instance["FAIL_TO_PASS"]
    assert not set(instance["FAIL_TO_PASS"]) & set(instance["PASS_TO_PASS"])
    assert len(instance["FAIL_TO_PASS"]) + len(instance["PASS_TO_PASS"]) == len(base.stable)
    assert (
        instance["bug_kinds"] == ["change_constant"]
        and instance["function"] == "tinydb/table.py::Table._get_next_id"
    )
    # the statement names a failing test and quotes nothing of the patch
    statement = instance["problem_statement"]
    assert instance["FAIL_TO_PASS"][0] in statement
    assert changed_lines(instance["bug_patch"]) and not any(
        line in statement for line in changed_lines(instance["bug_patch"])
    )
    assert "next_id + 0" not in statement and str(base.repo) not in statement
    assert instance["patch"].startswith("diff --git a/tinydb/table.py b/tinydb/table.py\n")
    assert "+            self._next_id = next_id + 1" in instance["patch"]
    # the work copy is clean again, and the instance's repository can be rebuilt at base_commit
    assert (base.repo / path).read_text() == source
    assert bugged_repo(instance, tmp_path / "again") == instance["base_commit"]
    assert "next_id + 0" in (tmp_path / "again" / path).read_text()
    row = skyrl_row(instance)
    assert row["env_class"] == "swe" and row["reward_spec"]["ground_truth"] == {
        "instance_id": instance["instance_id"]
    }


def test_statement_leaves_out_a_message_that_quotes_the_patch():
    patch = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-    return total + 1\n+    return total - 1\n"
    messages = {"t.py::a": "AssertionError: return total - 1 is wrong", "t.py::b": "ValueError: bad value"}
    text = problem_statement("p", "1.0", ["t.py::b", "t.py::a"], messages, patch)
    assert "t.py::a" in text and "t.py::b" in text and "ValueError: bad value" in text
    assert "return total" not in text
    with pytest.raises(ValueError):
        problem_statement("p", "1.0", [], {}, patch)


def test_statement_is_the_same_on_every_run():
    def statement(address, inode, now, tmp):
        message = (
            f"assert 0 != 0 where <Table at {address}> os.stat_result(st_ino={inode}, st_size=0) "
            f"datetime.datetime({now}, 48, 113051) {tmp}/db.json"
        )
        return problem_statement("p", "1.0", ["t.py::a"], {"t.py::a": message}, "")

    first = statement("0x7f6cba4a2c10", 2345730, "2026, 12, 2, 4, 2", "/tmp/pytest-of-root/pytest-12/test_a0")
    second = statement("0x7f00aa47d250", 4263375, "2027, 1, 3, 5, 6", "/tmp/pytest-of-ci/pytest-3/test_a0")
    assert first == second and "assert 0 != 0" in first


def test_split_keeps_every_function_on_one_side():
    rows = [
        {"repo": r, "function": f"m.py::f{i % 7}", "instance_id": f"{r}{i}"} for r in "ab" for i in range(40)
    ]
    rows.append({"repo": "a", "function": "m.py::f1;m.py::g", "instance_id": "pair"})
    assign_splits(rows, test_fraction=0.25, seed=3)
    assert shared_functions(rows) == set()
    for repo in "ab":
        tests = sum(r["split"] == "test" for r in rows if r["repo"] == repo)
        assert 0.2 <= tests / sum(r["repo"] == repo for r in rows) < 0.6


def test_instance_file_is_the_same_bytes_for_the_same_rows(tmp_path):
    rows = [{"instance_id": "b", "x": [1]}, {"instance_id": "a", "x": "é"}]
    write_instances(rows, tmp_path / "one.jsonl.gz")
    write_instances(list(reversed(rows)), tmp_path / "two.jsonl.gz")
    assert (tmp_path / "one.jsonl.gz").read_bytes() == (tmp_path / "two.jsonl.gz").read_bytes()
    assert [r["instance_id"] for r in read_instances(tmp_path / "one.jsonl.gz")] == ["a", "b"]


# -- the committed instances --------------------------------------------------------------------------------------
FIELDS = {
    "instance_id": str,
    "repo": str,
    "version": str,
    "base_commit": str,
    "environment_setup_commit": str,
    "patch": str,
    "test_patch": str,
    "bug_patch": str,
    "FAIL_TO_PASS": list,
    "PASS_TO_PASS": list,
    "problem_statement": str,
    "hints_text": str,
    "created_at": str,
    "image_name": str,
    "test_command": str,
    "bug_kinds": list,
    "function": str,
    "split": str,
}


@pytest.fixture(scope="module")
def committed():
    return read_instances(INSTANCES)


def test_committed_instances_follow_the_schema(committed):
    ids = [i["instance_id"] for i in committed]
    assert len(ids) == len(set(ids))
    for instance in committed:
        assert set(instance) == set(FIELDS), instance["instance_id"]
        for name, kind in FIELDS.items():
            assert isinstance(instance[name], kind), (instance["instance_id"], name)
        project = get_project(instance["repo"], instance["version"])
        assert (
            instance["image_name"] == project.image_name and instance["test_command"] == project.test_command
        )
        assert len(instance["base_commit"]) == 40 and len(instance["environment_setup_commit"]) == 40
        assert instance["FAIL_TO_PASS"] and instance["FAIL_TO_PASS"] == sorted(instance["FAIL_TO_PASS"])
        assert instance["PASS_TO_PASS"] == sorted(instance["PASS_TO_PASS"])
        assert not set(instance["FAIL_TO_PASS"]) & set(instance["PASS_TO_PASS"])
        assert set(instance["bug_kinds"]) <= set(BUG_KINDS) and 1 <= len(instance["bug_kinds"]) <= 2
        assert instance["split"] in ("train", "test")
        assert instance["patch"].startswith("diff --git a/") and instance["bug_patch"].startswith(
            "diff --git a/"
        )
        assert instance["FAIL_TO_PASS"][0] in instance["problem_statement"]
        assert not any(line in instance["problem_statement"] for line in changed_lines(instance["bug_patch"]))
        assert instance["instance_id"].startswith(
            f"{instance['repo']}__{instance['repo']}-{instance['version']}."
        )


def test_committed_split_shares_no_function(committed):
    assert shared_functions(committed) == set()
    per_repo = Counter((i["repo"], i["split"]) for i in committed)
    for repo in {i["repo"] for i in committed}:
        assert per_repo[(repo, "test")] > 0 and per_repo[(repo, "train")] > 0


def test_committed_set_is_large_and_spread(committed):
    repos = Counter(i["repo"] for i in committed)
    assert len(committed) >= 300 and len(repos) >= 6, repos
    assert set(repos) <= set(PROJECTS)
    kinds = Counter(k for i in committed for k in i["bug_kinds"])
    assert set(kinds) == set(BUG_KINDS), kinds
