"""Repositories of the pinned projects: the real tinydb sdist from PyPI (cached), unpacked into git repositories
whose shas do not depend on the folder, the call or the machine's git configuration."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from skyrl_gym.envs.swe.projects import PROJECTS, get_project
from skyrl_gym.envs.swe.repos import (
    BUG_COMMIT_MESSAGE,
    RepoError,
    bugged_repo,
    clean_repo,
    commit_shell_command,
    git,
    sdist_path,
)

TINYDB = get_project("tinydb")


def _bug_patch(repo) -> str:
    """A small real bug in tinydb's ``Table.__len__`` as a patch against the clean commit."""
    path = repo / "tinydb" / "table.py"
    text = path.read_text()
    assert "return len(self._read_table())" in text
    path.write_text(text.replace("return len(self._read_table())", "return len(self._read_table()) + 1", 1))
    patch = git(repo, "diff")
    git(repo, "checkout", "--", "tinydb/table.py")
    return patch


def test_sdist_is_the_pinned_file():
    path = sdist_path(TINYDB)
    assert path.name == TINYDB.sdist
    assert hashlib.sha256(path.read_bytes()).hexdigest() == TINYDB.sha256


def test_clean_repo_sha_is_the_same_in_every_folder(tmp_path):
    first = clean_repo("tinydb", tmp_path / "a")
    second = clean_repo(TINYDB, tmp_path / "deeper" / "b")
    assert first == second and len(first) == 40
    # the whole sdist is in the tree, its top folder stripped, and nothing is left uncommitted
    files = git(tmp_path / "a", "ls-files").split()
    assert "tinydb/table.py" in files and "tests/test_tables.py" in files and "PKG-INFO" in files
    assert git(tmp_path / "a", "status", "--porcelain") == ""
    assert git(tmp_path / "a", "log", "--format=%an %ad", "--date=iso-strict").strip() == (
        "skyrl 2000-01-01T00:00:00+00:00"
    )


def test_clean_repo_refuses_a_folder_in_use(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep.txt").write_text("mine")
    with pytest.raises(RepoError, match="not empty"):
        clean_repo(TINYDB, tmp_path / "x")


def test_bugged_repo_reaches_base_commit(tmp_path):
    clean = clean_repo(TINYDB, tmp_path / "work")
    patch = _bug_patch(tmp_path / "work")
    git(tmp_path / "work", "apply", "--index", "-", input=patch)
    # the one-line commit for containers makes the same commit as bugged_repo
    subprocess.run(["bash", "-c", commit_shell_command()], cwd=tmp_path / "work", check=True)
    expected = git(tmp_path / "work", "rev-parse", "HEAD").strip()
    instance = {
        "instance_id": "tinydb-len",
        "repo": "tinydb",
        "version": TINYDB.version,
        "environment_setup_commit": clean,
        "base_commit": expected,
        "bug_patch": patch,
    }
    assert bugged_repo(instance, tmp_path / "bugged") == expected
    assert git(tmp_path / "bugged", "log", "-1", "--format=%s").strip() == BUG_COMMIT_MESSAGE
    assert "len(self._read_table()) + 1" in (tmp_path / "bugged" / "tinydb" / "table.py").read_text()
    with pytest.raises(RepoError, match="is not base_commit"):
        bugged_repo({**instance, "base_commit": "0" * 40}, tmp_path / "wrong")
    with pytest.raises(RepoError, match="bug_patch does not apply"):
        bugged_repo({**instance, "bug_patch": patch.replace("_read_table", "_no_such")}, tmp_path / "noapply")


def test_unknown_project_and_version_are_named():
    with pytest.raises(KeyError, match="pinned projects: boltons"):
        get_project("tinydbb")
    with pytest.raises(ValueError, match="pinned at version 4.8.2"):
        get_project("tinydb", "4.0.0")
    assert len(PROJECTS) >= 6
    for project in PROJECTS.values():
        assert project.test_command.startswith("python3 -m pytest -p no:cacheprovider")
        assert project.image_name == f"local/swe-{project.name}:{project.version}"
