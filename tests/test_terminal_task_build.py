"""The terminal environment's task folders are generated, not kept in git: ``datasets/terminal/build.py`` writes
them from their recipes (``datasets/terminal/families.py``) at ``make setup``, or on first use. These tests
hold the generated set to the recipe and to the rows and splits that are kept in git."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from skyrl_gym.envs.terminal import tasks as terminal_tasks

REPO = Path(__file__).resolve().parents[1]
TERMINAL = REPO / "datasets" / "terminal"


def _tree(root: Path) -> dict[str, tuple[bytes, bool]]:
    """Every file under ``root``: its bytes and whether it is executable."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), bool(p.stat().st_mode & 0o100))
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _build(out: Path) -> None:
    subprocess.run([sys.executable, str(TERMINAL / "build.py"), "--out", str(out)], check=True, timeout=300)


def test_the_generated_task_folders_are_the_recipe_and_match_the_kept_rows(tmp_path):
    _build(tmp_path)
    built = _tree(tmp_path / "tasks")
    assert len({name.split("/")[0] for name in built}) == 55
    # the folders in use are the recipe's, file for file, modes included
    assert _tree(terminal_tasks.default_tasks_dir()) == built
    # the dataset rows and splits kept in git are the ones the recipe gives
    for kept in ("train.jsonl", "test.jsonl", "splits/train.txt", "splits/test.txt"):
        assert (tmp_path / kept).read_bytes() == (TERMINAL / kept).read_bytes(), kept
    # and nothing generated is tracked by git
    tracked = subprocess.run(
        ["git", "ls-files", "datasets/terminal/tasks"], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert tracked.stdout == ""


def test_a_missing_task_set_is_built_on_first_use(tmp_path, monkeypatch):
    """A checkout without ``make setup``: the first lookup builds the folders (once, atomically) and finds the
    task set."""
    (tmp_path / "datasets" / "terminal").mkdir(parents=True)
    for name in ("build.py", "families.py"):
        (tmp_path / "datasets" / "terminal" / name).write_bytes((TERMINAL / name).read_bytes())
    _build(tmp_path / "recipe")
    tasks = tmp_path / "datasets" / "terminal" / "tasks"
    monkeypatch.delenv("SKYRL_TERMINAL_TASKS", raising=False)
    monkeypatch.setattr(terminal_tasks, "REPO_TASKS", tasks)
    monkeypatch.setattr(terminal_tasks, "BUILD_SCRIPT", tmp_path / "datasets" / "terminal" / "build.py")
    assert not tasks.exists()
    found = terminal_tasks.find_tasks()
    assert len(found) == 55 and tasks.is_dir()
    assert _tree(tasks) == _tree(tmp_path / "recipe" / "tasks")
    # the scratch folder is gone; only the lock file is left beside the tasks
    assert sorted(p.name for p in tasks.parent.iterdir()) == [
        ".build.lock",
        "build.py",
        "families.py",
        "tasks",
    ]
