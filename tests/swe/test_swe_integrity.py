"""The SWE reward cannot be forged on the bwrap backend: the attack battery (tests/swe/attacks.py), the clean
repository cache that heals itself, and the guard kit's pieces (diff screen, safe unpacking, history check)."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from skyrl_gym.envs.swe import backends
from skyrl_gym.envs.swe.backends import BackendSettings, make_backend
from skyrl_gym.integrity import history_problems, safe_extract, screen_diff, scrub_history_script
from tests.swe.attacks import INSTANCE, attacks, host_state, play_attack
from tests.swe.common import INSTANCES

FAST = {"backend": "bwrap", "command_timeout_s": 10, "timings": False, "test_timeout_s": 120}


@pytest.fixture(scope="module")
def bwrap():
    from skyrl_gym.runtime.bwrap import bwrap_available

    ok, why = bwrap_available()
    if not ok:
        pytest.skip(f"no bubblewrap sandbox: {why} (make sysdeps)")


@pytest.mark.parametrize("attack", attacks("bwrap"), ids=lambda a: a.name)
def test_attack_earns_nothing_and_is_no_error(bwrap, attack, tmp_path):
    sentinel = tmp_path / "sentinel"
    sentinel.write_text("unchanged")
    watched = [sentinel, Path("/etc/passwd"), *backends._clean.values()]
    before = host_state(watched)
    play_attack(FAST, attack)
    assert host_state(watched) == before, f"{attack.name} changed something outside its episode"


def test_the_oracle_still_earns_one_through_the_screen(bwrap):
    backend = make_backend("bwrap", INSTANCE, BackendSettings(test_timeout_s=120))
    backend.start()
    try:
        assert backend.verify(patch=INSTANCE.fix_patch).outcome == "resolved"
    finally:
        backend.close()


def test_every_instance_fix_passes_the_screen():
    for instance in INSTANCES:
        screened = screen_diff(instance.fix_patch, backends.source_dirs(instance))
        assert not screened.violation and not screened.dropped, (instance.instance_id, screened.note)
        assert screened.patch == instance.fix_patch


def test_a_planted_conftest_in_the_clean_cache_is_found_and_the_cache_rebuilt(bwrap):
    backend = make_backend("bwrap", INSTANCE, BackendSettings(test_timeout_s=120))
    backend.start()
    try:
        clean = backends._clean[backends._project(INSTANCE).key]
        forged = "def pytest_runtest_logreport(report):\n    report.outcome = 'passed'\n"
        (clean / "conftest.py").write_text(forged)  # untracked, at the root: pytest would load it
        (clean / "tests" / "conftest.py").write_text(forged)  # a tracked file, changed
        verdict = backend.verify(patch="")
        assert verdict.outcome == "unresolved", verdict
        rebuilt = backends._clean[backends._project(INSTANCE).key]
        assert not (rebuilt / "conftest.py").exists()
        assert (rebuilt / "tests" / "conftest.py").read_text() != forged
    finally:
        backend.close()


def test_test_patch_on_a_source_file_still_applies_after_the_agent_changed_it(bwrap, tmp_path):
    row = dict(INSTANCE.row)
    target = INSTANCE.fix_patch.split(" b/", 1)[1].split("\n", 1)[0]  # a source file the fix touches
    repo = tmp_path / "repo"
    backends._clean_copy(INSTANCE, repo)
    script = (
        "git update-index -q --refresh; git apply --index - && sed -i '1i # from the test patch' "
        + target
        + " && git diff --no-color --full-index"
    )
    made = subprocess.run(["bash", "-c", script], cwd=repo, input=INSTANCE.bug_patch, text=True,
                          capture_output=True, check=True)  # fmt: skip
    row["test_patch"] = made.stdout
    row["instance_id"] = INSTANCE.instance_id + "-test-patch"
    from skyrl_gym.envs.swe.env import SWEEnv
    from tests.swe.common import extras, play

    env = SWEEnv({**FAST, "max_turns": 3}, extras(row))
    try:
        outputs = play(env, [f"<bash>sed -i '1i # the agent was here' {target}</bash>", "<submit/>"])
    finally:
        env.close()
    final = outputs[-1]
    assert final["metadata"]["end"] == "terminated", final["metadata"].get("error")
    assert final["reward"] == 0.0 and final["metadata"]["verification"]["outcome"] == "unresolved"


# -- the guard kit's pieces ------------------------------------------------------------------------------------
def _tar(members: list[tuple[str, str, bytes | str]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                data = payload if isinstance(payload, bytes) else payload.encode()
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "link": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE,
                         "fifo": tarfile.FIFOTYPE}[kind]  # fmt: skip
            info.linkname = payload if isinstance(payload, str) else ""
            archive.addfile(info)
    return out.getvalue()


def test_safe_extract_never_writes_through_a_link(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("unchanged")
    dest = tmp_path / "dest"
    dest.mkdir()
    chain = [(f"l{i}", "link", f"l{i + 1}") for i in range(40)] + [("l40", "link", str(outside))]
    data = _tar(
        [
            ("ok/file.py", "file", "x = 1\n"),
            ("up", "link", "../outside"),
            ("up/victim", "file", "overwritten"),
            ("abs", "link", str(outside)),
            ("abs/new", "file", "planted"),
            *chain,
            ("l0/victim", "file", "overwritten"),
            ("hard", "hard", str(outside / "victim")),
            ("../escape", "file", "planted"),
            ("/abs-name", "file", "planted"),
            ("pipe", "fifo", ""),
            ("ok", "file", "a file where a folder is"),
        ]
    )
    result = safe_extract(data, dest)
    assert (outside / "victim").read_text() == "unchanged" and sorted(p.name for p in outside.iterdir()) == [
        "victim"
    ]
    assert (dest / "ok" / "file.py").read_text() == "x = 1\n"
    assert (dest / "up").is_symlink() and not (dest / "pipe").exists() and not (dest / "hard").exists()
    assert not (tmp_path / "escape").exists()
    skipped = dict(result.skipped)
    assert "under a symbolic link" in skipped["up/victim"] and "under a symbolic link" in skipped["l0/victim"]
    assert "could not be written" in skipped["ok"] and (dest / "ok" / "file.py").is_file()


def test_screen_names_what_it_drops_and_rejects():
    patch = (
        "diff --git a/pkg/a.py b/pkg/a.py\n--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
        "diff --git a/notes.txt b/notes.txt\nnew file mode 100644\n--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1 @@\n+hi\n"
    )
    screened = screen_diff(patch, ["pkg"])
    assert screened.kept == ["pkg/a.py"] and screened.dropped == ["notes.txt"] and not screened.violation
    assert "notes.txt" in screened.note and screened.patch.startswith("diff --git a/pkg/a.py")
    hooked = patch.replace("+x = 2", "+import atexit")
    assert "atexit" in screen_diff(hooked, ["pkg"]).violation
    commented = patch.replace("+x = 2", "+# pytest would be wrong here")
    assert not screen_diff(commented, ["pkg"]).violation


def test_history_check_finds_every_leftover_and_the_scrub_clears_them(tmp_path):
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": "/dev/null", "PATH": "/usr/bin:/bin"}  # fmt: skip
    repo = tmp_path / "repo"
    repo.mkdir()

    def sh(line: str) -> None:
        subprocess.run(["bash", "-c", line], cwd=repo, env=env, check=True, capture_output=True)

    sh("git init -q && echo a > f && git add f && git commit -qm one && echo b > f && git commit -qam fix "
       "&& git tag v1 && git branch future && git reset -q --hard HEAD~1 && git remote add origin /nowhere "
       "&& echo c > f && git stash -q")  # fmt: skip
    kinds = {p.kind for p in history_problems(repo, env)}
    assert {"commits", "ref", "branches", "remote", "reflog"} <= kinds, kinds
    sh(scrub_history_script())
    assert history_problems(repo, env) == []
    assert (repo / "f").read_text() == "a\n"


def test_clean_runner_ignores_what_the_repository_plants(tmp_path):
    """The runner alone (no diff screen): a shadowing pytest.py, a sitecustomize.py, a user-site .pth under HOME,
    a pytest11 entry point and PYTEST_ADDOPTS/PYTEST_PLUGINS all stay out; the real pytest grades."""
    from skyrl_gym.envs.swe.testrun import DEBIAN_PYTHON, parse_report, test_shell_command, write_plugin

    if not Path(DEBIAN_PYTHON).exists():
        pytest.skip(f"{DEBIAN_PYTHON} is missing (make sysdeps)")
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_it.py").write_text("def test_fails():\n    assert False\n")
    marker = tmp_path / "ran"
    hook = f"open({str(marker)!r}, 'a').write('x')\n"
    (repo / "pytest.py").write_text(hook + "raise SystemExit(0)\n")
    (repo / "sitecustomize.py").write_text(hook)
    site = repo / "home" / ".local" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "forge.pth").write_text(f"import os; {hook.strip()}\n")
    (repo / "forge_plugin.py").write_text(
        hook + "def pytest_runtest_logreport(report):\n    report.outcome = 'passed'\n"
    )
    dist = repo / "forge-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: forge\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[pytest11]\nforge = forge_plugin\n")
    plugin = write_plugin(tmp_path / "plugin").parent
    report = tmp_path / "report.json"
    line = test_shell_command(
        f"{DEBIAN_PYTHON} -m pytest -p no:cacheprovider tests", str(report), str(plugin), 60
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(repo / "home"), "PYTEST_ADDOPTS": "-p forge_plugin",
           "PYTEST_PLUGINS": "forge_plugin", "PYTHONPATH": str(repo)}  # fmt: skip
    proc = subprocess.run(["bash", "-c", line], cwd=repo, env=env, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert parse_report(report.read_text()) == {"tests/test_it.py::test_fails": "failed"}
    assert not marker.exists(), "code the repository planted ran"


def test_a_rows_own_source_dirs_decide_what_is_applied():
    from skyrl_gym.envs.swe.tasks import SWEInstance

    row = {**INSTANCE.row, "source_dirs": ["tinydb/storages.py"]}
    instance = SWEInstance.from_row(row)
    assert backends.source_dirs(instance) == ("tinydb/storages.py",)
    screened = screen_diff(instance.fix_patch, backends.source_dirs(instance))
    touched = {d.path for d in backends.split_diff(instance.fix_patch)}
    assert set(screened.kept) == touched & {"tinydb/storages.py"}
    assert set(screened.dropped) == touched - {"tinydb/storages.py"}
