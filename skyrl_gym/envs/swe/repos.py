"""Repositories of the pinned projects, made the same way on every machine.

- :func:`sdist_path`: the project's source distribution, downloaded once with ``pip download`` into a cache
  (``$SKYRL_SWE_CACHE`` or ``~/.cache/skyrl/swe/sdists``) and checked against its pinned sha256;
- :func:`clean_repo`: the sdist unpacked (its top folder stripped) into a new git repository with one commit
  whose author, committer, date and message are fixed, so its sha is the same everywhere (an instance's
  ``environment_setup_commit``);
- :func:`bugged_repo`: the clean repository with the instance's ``bug_patch`` applied and committed the same
  way; its sha is the instance's ``base_commit``, and a mismatch is an error.

Git runs with the user's and the system's configuration switched off (:data:`GIT_ENV`), so no hook, template,
signing key or line-ending rule of the machine changes a sha. :func:`commit_shell_command` is the same commit
as one shell line, for a container that has git but not this package.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skyrl_gym.envs.swe.projects import Project, get_project

__all__ = [
    "BUG_COMMIT_MESSAGE",
    "CLEAN_COMMIT_MESSAGE",
    "GIT_ENV",
    "GIT_OPTIONS",
    "RepoError",
    "bugged_repo",
    "sdist_cache",
    "clean_repo",
    "commit_shell_command",
    "git",
    "sdist_path",
]

#: The fixed identity and date of every commit made here; with the tree they fix the commit's sha.
GIT_ENV: dict[str, str] = {
    "GIT_AUTHOR_NAME": "skyrl",
    "GIT_AUTHOR_EMAIL": "skyrl@localhost",
    "GIT_COMMITTER_NAME": "skyrl",
    "GIT_COMMITTER_EMAIL": "skyrl@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
    # no ~/.gitconfig or /etc/gitconfig: hooks, templates, signing or autocrlf there would change the result
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}
#: Options given to every git command, for the same reason.
GIT_OPTIONS: tuple[str, ...] = (
    "-c",
    "core.autocrlf=false",
    "-c",
    "core.safecrlf=false",
    "-c",
    "commit.gpgsign=false",
    "-c",
    "init.defaultBranch=main",
)
CLEAN_COMMIT_MESSAGE = "clean source"
BUG_COMMIT_MESSAGE = "bugged source"


class RepoError(RuntimeError):
    """A repository could not be made as pinned: a download, checksum, unpack, patch or sha failed."""


def sdist_cache(cache_dir: str | os.PathLike | None = None) -> Path:
    """The sdist cache folder: ``cache_dir`` if given, else ``$SKYRL_SWE_CACHE``, else ``~/.cache/skyrl/swe/sdists``."""
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get("SKYRL_SWE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "skyrl" / "swe" / "sdists"


def _as_project(project: Project | str) -> Project:
    return project if isinstance(project, Project) else get_project(project)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def sdist_path(project: Project | str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The path of ``project``'s source distribution, downloaded into the cache if it is not there yet.

    The file is fetched with ``pip download --no-deps --no-binary :all: name==version`` (PyPI or the
    configured index) and kept only if its sha256 is the pinned one; a cached file with another digest is
    fetched again. Raises :class:`RepoError` when pip fails or the digest does not match.
    """
    project = _as_project(project)
    folder = sdist_cache(cache_dir)
    path = folder / project.sdist
    if path.is_file() and _sha256(path) == project.sha256:
        return path
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".download-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--dest",
            tmp,
            f"{project.name}=={project.version}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        got = Path(tmp) / project.sdist
        if proc.returncode != 0 or not got.is_file():
            raise RepoError(
                f"could not download {project.sdist} with pip (exit {proc.returncode}); is PyPI reachable? "
                f"Or put the file into {folder} by hand.\n{proc.stderr[-2000:]}"
            )
        digest = _sha256(got)
        if digest != project.sha256:
            raise RepoError(f"{project.sdist}: sha256 {digest} is not the pinned {project.sha256}")
        os.replace(got, path)
    return path


def git(repo: str | os.PathLike, *args: str, input: str | None = None) -> str:
    """Run ``git <args>`` in ``repo`` with the fixed configuration; return its stdout, or raise RepoError."""
    env = {**os.environ, **GIT_ENV}
    proc = subprocess.run(
        ["git", *GIT_OPTIONS, *args], cwd=repo, env=env, input=input, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RepoError(f"git {' '.join(args[:2])} failed in {repo}: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def _unpack(sdist: Path, dest: Path) -> None:
    """Extract ``sdist`` into ``dest`` without its top folder; only plain files and folders, nothing outside."""
    with tarfile.open(sdist, "r:*") as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts[1:]
            if not parts or member.isdir():
                continue
            if any(p in ("..", "") for p in parts) or Path(member.name).is_absolute():
                raise RepoError(f"{sdist.name}: unsafe path {member.name!r}")
            if not member.isfile():
                continue  # links and devices have no place in a source distribution
            target = dest.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(member) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
            # git records only the executable bit; keep it as the sdist has it, the rest fixed
            os.chmod(target, 0o755 if member.mode & 0o100 else 0o644)


def _commit(repo: Path, message: str) -> str:
    git(repo, "commit", "--quiet", "--no-verify", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def clean_repo(
    project: Project | str, dest: str | os.PathLike, cache_dir: str | os.PathLike | None = None
) -> str:
    """Unpack ``project``'s sdist into ``dest`` (missing or empty) as a git repository; return the commit sha.

    The repository has one commit on ``main`` holding every file of the sdist (ignore rules of the sdist are
    overridden, so the tree is the sdist itself), with the fixed metadata of :data:`GIT_ENV`: the sha is the
    same on every machine and every call.
    """
    project = _as_project(project)
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise RepoError(f"{dest} is not empty; a clean repository is made in a new or empty folder")
    dest.mkdir(parents=True, exist_ok=True)
    _unpack(sdist_path(project, cache_dir), dest)
    git(dest, "init", "--quiet")
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file() and ".git" not in p.parts)
    # -f: a .gitignore shipped in the sdist must not drop its own files (egg-info, PKG-INFO) from the tree
    git(dest, "add", "-f", "--pathspec-from-file=-", "--pathspec-file-nul", input="\0".join(files))
    return _commit(dest, CLEAN_COMMIT_MESSAGE)


def bugged_repo(
    instance: Mapping[str, Any], dest: str | os.PathLike, cache_dir: str | os.PathLike | None = None
) -> str:
    """Make ``instance``'s repository at its bugged state in ``dest``; return the sha (== ``base_commit``).

    :func:`clean_repo` of the instance's project, then ``git apply --index`` of its ``bug_patch`` and a
    commit with the fixed metadata. Raises :class:`RepoError` when the patch does not apply or the sha is not
    the instance's ``base_commit`` (a different project version or a changed patch).
    """
    project = get_project(instance["repo"], instance.get("version"))
    dest = Path(dest)
    clean = clean_repo(project, dest, cache_dir)
    expected_clean = instance.get("environment_setup_commit")
    if expected_clean and clean != expected_clean:
        raise RepoError(f"{instance.get('instance_id')}: clean commit {clean} is not {expected_clean}")
    try:
        git(dest, "apply", "--index", "--whitespace=nowarn", "-", input=instance["bug_patch"])
    except RepoError as exc:
        raise RepoError(
            f"{instance.get('instance_id')}: bug_patch does not apply at the clean commit: {exc}"
        ) from None
    sha = _commit(dest, BUG_COMMIT_MESSAGE)
    if instance.get("base_commit") and sha != instance["base_commit"]:
        raise RepoError(
            f"{instance.get('instance_id')}: bugged commit {sha} is not base_commit {instance['base_commit']}"
        )
    return sha


def commit_shell_command(message: str = BUG_COMMIT_MESSAGE) -> str:
    """One shell line that commits the staged changes of the current repository with the fixed metadata.

    For a container that has git but not this package: ``git apply --index bug.patch && <this line>`` at
    the clean commit gives the same ``base_commit`` as :func:`bugged_repo`.
    """
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in GIT_ENV.items())
    opts = " ".join(map(shlex.quote, GIT_OPTIONS))
    return f"{env} git {opts} commit --quiet --no-verify --allow-empty -m {shlex.quote(message)}"
