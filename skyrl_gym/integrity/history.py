"""The git history an agent is given: one commit of what it sees, nothing it could dig the answer out of.

A repository at a bugged state usually carries the fix in its history: a future commit, a tag, a branch, a
remote, the reflog, a stash, or an unreachable object left by a rebase (SWE-bench's "future commits" leak).
:func:`scrub_history_script` replaces the history by one commit of the tracked files; :func:`history_problems`
checks a repository for every kind of leftover and names each one it finds.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["HistoryProblem", "history_problems", "scrub_history_script"]


def scrub_history_script(git: str = "git", commit: str = 'git commit -q --allow-empty -m "task"') -> str:
    """Bash lines that replace the history of the repository in the current folder by one commit of its
    tracked files (the working tree is kept as it is). ``git`` is how git is called, ``commit`` the line that
    makes the commit (fixed identity and date, say, so its sha is the same everywhere)."""
    return "\n".join(
        [
            'listing="$(mktemp)"',
            f'{git} ls-files -z > "$listing"',
            "rm -rf .git",
            f"{git} init -q",
            f'GIT_LITERAL_PATHSPECS=1 {git} add -f --pathspec-from-file="$listing" --pathspec-file-nul',
            'rm -f "$listing"',
            commit,
        ]
    )


@dataclass(frozen=True)
class HistoryProblem:
    """Something in a repository's git folder an agent could read a fix from: ``kind`` and ``detail``."""

    kind: str
    detail: str


def _git(repo: str | os.PathLike, args: Sequence[str], env: Mapping[str, str] | None) -> str:
    run_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": "/nonexistent",
    }
    run_env.update(env or {})
    proc = subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", *args],
        cwd=repo,
        env=run_env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip()[:500]}")
    return proc.stdout


def history_problems(repo: str | os.PathLike, env: Mapping[str, str] | None = None) -> list[HistoryProblem]:
    """Everything in ``repo``'s history beyond one commit on one branch: more commits, other refs (branches,
    tags, notes, stashes), remotes, reflog entries, and objects no ref reaches. Empty when clean."""
    problems: list[HistoryProblem] = []
    commits = _git(repo, ["rev-list", "--all", "--count"], env).strip()
    if commits != "1":
        problems.append(HistoryProblem("commits", f"{commits} commits reachable from the refs (expected 1)"))
    refs = _git(repo, ["for-each-ref", "--format=%(refname)"], env).split()
    heads = [r for r in refs if r.startswith("refs/heads/")]
    for ref in refs:
        if not ref.startswith("refs/heads/"):
            problems.append(HistoryProblem("ref", ref))
    if len(heads) > 1:
        problems.append(HistoryProblem("branches", ", ".join(heads)))
    for remote in _git(repo, ["remote"], env).split():
        problems.append(HistoryProblem("remote", remote))
    head = _git(repo, ["rev-parse", "HEAD"], env).strip()
    logged = set(_git(repo, ["reflog", "--all", "--format=%H"], env).split()) - {head}
    if logged:
        problems.append(HistoryProblem("reflog", f"{len(logged)} other commits in the reflog"))
    unreachable = _git(repo, ["fsck", "--unreachable", "--no-reflogs", "--no-progress"], env).splitlines()
    unreachable = [line for line in unreachable if line.startswith("unreachable ")]
    if unreachable:
        problems.append(HistoryProblem("unreachable", f"{len(unreachable)} objects no ref reaches"))
    git_dir = _git(repo, ["rev-parse", "--absolute-git-dir"], env).strip()
    for extra in ("FETCH_HEAD", "ORIG_HEAD", "logs/refs/stash", "shallow"):
        if os.path.exists(os.path.join(git_dir, extra)):
            problems.append(HistoryProblem("file", f".git/{extra}"))
    return problems
