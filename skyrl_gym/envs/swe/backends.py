"""Where a SWE episode runs and how it is verified: a Docker container, or a folder in the bubblewrap sandbox.

Both backends do the same three things, in shell scripts they share (:func:`prepare_script`,
:func:`diff_script`), so that they only differ in where the scripts run:

- set-up (:meth:`SWEBackend.start`): the repository at the bugged state (``bug_patch`` applied to the clean
  repository and committed with fixed metadata, checked against ``base_commit``), the judging test files
  removed from the working tree, and the git history replaced by one commit of what the agent sees (so that
  neither the clean source nor the tests can be read back from git). That commit's tree ``T0`` and a copy of its
  git folder are kept apart from the agent's repository.
- the agent's diff (:meth:`SWEBackend.agent_diff`): what the agent's working tree changes from ``T0``, computed
  with the kept git folder (whatever the agent did to its own ``.git``), test files, ``conftest.py`` files and
  pytest configuration left out;
- verification (:meth:`SWEBackend.verify`): a fresh copy at ``base_commit`` (a new container, or a new folder),
  the diff applied with ``git apply``, the row's ``test_patch`` after it, the suite run with the report plugin
  of :mod:`~skyrl_gym.envs.swe.testrun` and graded against ``FAIL_TO_PASS`` / ``PASS_TO_PASS``.

``docker`` (:class:`DockerBackend`): one image per repository version, ``local/swe-<repo>:<version>``, built
offline from ``images/swe/Dockerfile`` FROM ``local/python:latest`` with the clean repository at ``/testbed``
(cached by content), or the row's own image (``image_name`` / ``env_config.image_template``). ``bwrap``
(:class:`BwrapBackend`): the clean repository made on this machine with :func:`repos.clean_repo` (once per
process and project version, then copied) and brought to ``base_commit`` as in a container, each command run in
the bubblewrap sandbox over a copy of the folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from skyrl_gym.envs.swe import repos, testrun
from skyrl_gym.envs.swe.tasks import KIND_SWEBENCH, KIND_SYNTH, SWEInstance, image_for
from skyrl_gym.integrity import safe_extract, screen_diff, scrub_history_script, split_diff

__all__ = [
    "BACKENDS",
    "BackendSettings",
    "BwrapBackend",
    "DockerBackend",
    "InfraError",
    "SWEBackend",
    "Verdict",
    "diff_pathspecs",
    "ensure_image",
    "hidden_paths",
    "make_backend",
]

OUTCOMES = ("resolved", "unresolved", "patch_failed", "rejected", "test_timeout", "infra_error")
"""The named outcomes of a verification; only ``resolved`` earns 1.0. ``rejected``: the diff changes test
machinery (see :mod:`skyrl_gym.integrity.diffscreen`); like ``unresolved``, a score of 0, never an error."""
PYTEST_CONFIG_FILES = ("pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml")
"""Configuration read by pytest at the repository root: an agent's change there could switch tests off."""
EPISODE_COMMIT_MESSAGE = "task"
DOCKERFILE = Path(__file__).resolve().parents[3] / "images" / "swe" / "Dockerfile"
BASE_IMAGE = "local/python:latest"
IMAGE_LABEL = "org.skyrl.swe.recipe"
MAX_DIFF_BYTES = 16 * 1024 * 1024


class InfraError(RuntimeError):
    """The machinery failed (an engine, a container, a broken row), not the agent: never a score of 0."""


@dataclasses.dataclass(frozen=True)
class BackendSettings:
    """What a backend needs from ``env_config``."""

    memory_mb: int = 2048
    cpus: float = 1.0
    disk_mb: int = 1024
    max_output_chars: int = 4000
    test_timeout_s: float = 300.0
    image_template: str | None = None
    workdir: str = "/testbed"
    user: str = "1000:1000"
    env: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Verdict:
    """One verification: its ``outcome`` (see :data:`OUTCOMES`), the ``grade`` when the tests ran, the
    agent's ``patch`` and notes. ``reward`` is 1.0 only when resolved."""

    outcome: str
    patch: str = ""
    grade: dict[str, Any] | None = None
    note: str = ""
    output: str = ""
    test_exit_code: int | None = None

    @property
    def reward(self) -> float:
        """1.0 when resolved, else 0.0."""
        return 1.0 if self.outcome == "resolved" else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The verdict as metadata: outcome, reward, the test counts (never the test names) and notes."""
        data: dict[str, Any] = {"outcome": self.outcome, "reward": self.reward}
        if self.grade is not None:
            data["tests"] = {
                "fail_to_pass_passed": len(self.grade["f2p_passed"]),
                "fail_to_pass_failed": len(self.grade["f2p_failed"]),
                "pass_to_pass_passed": len(self.grade["p2p_passed"]),
                "pass_to_pass_failed": len(self.grade["p2p_failed"]),
                "missing": len(self.grade["missing"]),
            }
        data["patch_lines"] = self.patch.count("\n")
        if self.test_exit_code is not None:
            data["test_exit_code"] = self.test_exit_code
        if self.note:
            data["note"] = self.note[:2000]
        return data


# -- the shared scripts --------------------------------------------------------------------------------------
def _project(instance: SWEInstance) -> Any | None:
    """The pinned project of one of this project's instances (``None`` for users' rows)."""
    if instance.kind != KIND_SYNTH:
        return None
    from skyrl_gym.envs.swe.projects import get_project

    try:
        return get_project(instance.repo, instance.version or None)
    except (KeyError, ValueError):
        return None


def hidden_paths(instance: SWEInstance) -> list[str]:
    """What the agent does not see: the judging test files and, for a pinned project, its test paths."""
    project = _project(instance)
    found = set(instance.test_files)
    if project is not None:
        found.update(p.rstrip("/") for p in project.test_paths)
    return sorted(found)


def source_dirs(instance: SWEInstance) -> tuple[str, ...]:
    """Where a fix may change files: the row's ``source_dirs``, a pinned project's, else the top-level folders
    (or files) of the known fix; empty (anywhere) when none of them is known."""
    given = instance.row.get("source_dirs") if isinstance(instance.row, dict) else None
    if isinstance(given, (list, tuple)) and all(isinstance(p, str) and p for p in given):
        return tuple(p.strip("/") for p in given)
    project = _project(instance)
    if project is not None and project.source_dirs:
        return tuple(project.source_dirs)
    tops = {d.path.split("/", 1)[0] for d in split_diff(instance.fix_patch or instance.bug_patch)}
    return tuple(sorted(tops))


def test_patch_paths(instance: SWEInstance) -> list[str]:
    """The files a row's ``test_patch`` changes: the agent's diff leaves them alone, so that the test patch
    always applies on top of it (a fix that touched them could otherwise end verification in error)."""
    return sorted({d.path for d in split_diff(instance.test_patch)})


def diff_pathspecs(instance: SWEInstance) -> list[str]:
    """Pathspecs of the agent's diff: everything but tests, their folders, ``conftest.py`` files and pytest's
    configuration files at the root (a change to any of them could make the tests pass without a fix)."""
    excluded = {
        *hidden_paths(instance),
        *instance.test_dirs,
        *PYTEST_CONFIG_FILES,
        *test_patch_paths(instance),
    }
    return [
        ".",
        *(f":(exclude,literal){p}" for p in sorted(excluded)),
        ":(exclude,glob)**/conftest.py",
        ":(exclude,glob)**/__pycache__/**",
    ]


def _git_prefix() -> str:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in repos.GIT_ENV.items())
    return f"export {env}\nG='git {' '.join(map(shlex.quote, repos.GIT_OPTIONS))}'\n"


def prepare_script(
    instance: SWEInstance, *, apply_bug: bool, hide: bool, episode: bool, trusted: str | None = None
) -> str:
    """The bash script that brings a repository (the current folder) to the task's state; reads the bug patch
    on stdin when ``apply_bug``. Exit codes: 10 the bug patch does not apply, 11 HEAD is not ``base_commit``.

    With ``episode`` the hidden files go and the history is replaced by one commit of what is left; with
    ``trusted`` a copy of that git folder is kept there. Without ``episode`` (a copy to verify in) it checks
    that the working tree is exactly the commit (exit 12 otherwise). It prints ``TREE <sha>`` of the final tree.
    """
    # a copied work folder (a container's volume) has new file times: refresh them, or git sees every file changed
    lines = ["set -eu", _git_prefix(), "$G update-index -q --refresh >/dev/null 2>&1 || true"]
    if apply_bug:
        lines.append(
            '$G apply --index --whitespace=nowarn - || { echo "the bug patch does not apply" >&2; exit 10; }'
        )
        lines.append(repos.commit_shell_command(repos.BUG_COMMIT_MESSAGE))
    if instance.base_commit and instance.kind in (KIND_SYNTH, KIND_SWEBENCH):
        base = shlex.quote(instance.base_commit)
        lines.append(
            f'head=$($G rev-parse HEAD); [ "$head" = {base} ] || '
            f'{{ echo "HEAD is $head, not base_commit {instance.base_commit}" >&2; exit 11; }}'
        )
    if episode:
        if hide:
            paths = " ".join(shlex.quote(p) for p in hidden_paths(instance))
            if paths:
                lines.append(f"rm -rf -- {paths}")
                lines.append(
                    f"GIT_LITERAL_PATHSPECS=1 $G rm -r -q --cached --ignore-unmatch -- {paths} >/dev/null"
                )
        lines.append(scrub_history_script("$G", repos.commit_shell_command(EPISODE_COMMIT_MESSAGE)))
        if trusted:
            lines.append(f"rm -rf {shlex.quote(trusted)} && cp -a .git {shlex.quote(trusted)}")
    else:
        # a copy to verify in holds the commit and nothing else: no untracked conftest.py, no changed file
        lines.append(
            'dirty=$($G status --porcelain --untracked-files=all | head -5); [ -z "$dirty" ] || '
            '{ echo "the fresh copy is not clean: $dirty" >&2; exit 12; }'
        )
    lines.append("echo TREE $($G rev-parse 'HEAD^{tree}')")
    return "\n".join(lines) + "\n"


def diff_script(instance: SWEInstance, trusted: str, tree: str, worktree: str) -> str:
    """The bash script that prints the agent's diff: ``worktree`` against the tree ``tree``, read with the kept
    git folder ``trusted`` and an index of its own (the agent's ``.git`` is never read)."""
    specs = " ".join(shlex.quote(s) for s in diff_pathspecs(instance))
    index = shlex.quote(f"{trusted}/skyrl-verify.index")
    return (
        f"set -eu\n{_git_prefix()}"
        f"export GIT_DIR={shlex.quote(trusted)} GIT_WORK_TREE={shlex.quote(worktree)} GIT_INDEX_FILE={index}\n"
        # nothing of the agent's can make git run a command: no hooks, no fsmonitor, no filter driver config
        'G="$G -c core.hooksPath=/dev/null -c core.fsmonitor=false"\n'
        f"cd {shlex.quote(worktree)}\n"
        f"rm -f {index}\n$G read-tree {shlex.quote(tree)}\n$G add -A\n"
        f"$G diff --cached --binary --no-color --no-ext-diff --no-renames --full-index {shlex.quote(tree)} "
        f"-- {specs}\n"
    )


APPLY_SCRIPT = _git_prefix() + "$G apply --whitespace=nowarn -\n"
_DROP_BYTECODE = (
    "find . \\( -name __pycache__ -o -name '*.pyc' \\) -prune -exec rm -rf {} + 2>/dev/null || true\n"
)


def _tree_of(output: str) -> str:
    for line in reversed(output.splitlines()):
        if line.startswith("TREE "):
            return line.split()[1]
    raise InfraError(f"the set-up script printed no tree: {output[-500:]}")


def _python_command(command: str) -> str:
    """The command with a leading ``python3`` spelled as Debian's interpreter (the one with pytest)."""
    if command.startswith("python3 "):
        return testrun.DEBIAN_PYTHON + command[len("python3") :]
    return command


@dataclasses.dataclass
class _Run:
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class SWEBackend(ABC):
    """Where one episode runs: set-up, the workspace lent to the agent, its diff and the verification."""

    name = "base"

    def __init__(self, instance: SWEInstance, settings: BackendSettings):
        self.instance = instance
        self.settings = settings
        self.tree = ""
        """The tree of the episode's starting commit (what the agent's diff is taken against)."""
        self.setup_s = 0.0

    @property
    @abstractmethod
    def workdir(self) -> str:
        """The repository's path as the agent's commands see it."""

    @abstractmethod
    def start(self) -> None:
        """Set-up: the episode's repository at the task's state (raises :class:`InfraError`)."""

    @abstractmethod
    def workspace(self) -> Any:
        """The :class:`~skyrl_gym.tools.workspace.Workspace` of the episode's repository."""

    @abstractmethod
    def stop_agent(self) -> None:
        """Kill whatever the agent left running, before its work is read."""

    @abstractmethod
    def _diff_run(self) -> _Run:
        """Run :func:`diff_script` where the episode's repository is."""

    @abstractmethod
    def _fresh(self) -> Any:
        """A context manager giving a fresh copy at ``base_commit`` (a :class:`_Copy`)."""

    @abstractmethod
    def close(self) -> None:
        """Release the container or folders (idempotent)."""

    def agent_diff(self) -> tuple[str | None, str]:
        """The agent's diff (tests excluded) and ``""``, or ``None`` and why it could not be read."""
        result = self._diff_run()
        if result.exit_code is None and not result.timed_out:
            raise InfraError(
                f"the agent's repository could not be read: {(result.stderr or result.stdout)[-1000:]}"
            )
        if not result.ok:
            return None, f"the agent's changes could not be read: {(result.stderr or result.stdout)[-1000:]}"
        if len(result.stdout.encode("utf-8", errors="surrogateescape")) >= MAX_DIFF_BYTES:
            return None, f"the agent's diff is larger than {MAX_DIFF_BYTES // (1024 * 1024)} MB"
        return result.stdout, ""

    def verify(self, patch: str | None = None) -> Verdict:
        """Verify the episode: the agent's diff (or ``patch`` when given) on a fresh copy, the suite, the grade.

        The diff is screened first (:func:`~skyrl_gym.integrity.screen_diff`): only files under the source
        folders are applied, and one that touches test machinery is ``rejected`` (a score of 0, its reason in
        ``note``). An infrastructure failure comes back as the ``infra_error`` outcome with its reason in
        ``note``.
        """
        try:
            if patch is None:
                self.stop_agent()
                patch, why = self.agent_diff()
                if patch is None:
                    return Verdict("patch_failed", note=why)
            screened = screen_diff(
                patch, source_dirs(self.instance), excluded=test_patch_paths(self.instance)
            )
            if screened.violation:
                return Verdict("rejected", patch=patch, note=screened.note)
            verdict = self._verify_patch(screened.patch)
            verdict.patch = patch
            if screened.dropped:
                verdict.note = "; ".join(n for n in (verdict.note, screened.note) if n)
            return verdict
        except InfraError as exc:
            return Verdict("infra_error", patch=patch or "", note=str(exc))
        except Exception as exc:  # an engine or a sandbox that failed is the machinery's failure
            return Verdict("infra_error", patch=patch or "", note=f"{type(exc).__name__}: {exc}")

    def _verify_patch(self, patch: str) -> Verdict:
        instance = self.instance
        with self._fresh() as copy:
            if patch.strip():
                applied = copy.script(APPLY_SCRIPT, stdin=patch, timeout_s=120)
                if not applied.ok:
                    return Verdict(
                        "patch_failed",
                        patch=patch,
                        note=f"git apply: {(applied.stderr or applied.stdout)[-1000:]}",
                    )
            if instance.test_patch.strip():
                applied = copy.script(APPLY_SCRIPT, stdin=instance.test_patch, timeout_s=120)
                if not applied.ok:
                    raise InfraError(f"the row's test_patch does not apply: {applied.stderr[-1000:]}")
            copy.script(_DROP_BYTECODE, timeout_s=60)  # nothing stale is imported in place of the source
            timeout = self.settings.test_timeout_s
            line = testrun.test_shell_command(
                _python_command(instance.command()), copy.report_path, copy.plugin_dir, timeout
            )
            run, report = copy.tests(line, timeout)
        tail = (run.stdout + run.stderr)[-2000:]
        if run.timed_out or run.exit_code in testrun.TIMEOUT_EXIT_CODES:
            return Verdict("test_timeout", patch=patch, note=f"the tests ran past {timeout:g} s", output=tail)
        if run.exit_code is None:
            raise InfraError(f"the test command could not start: {tail[-1000:]}")
        if report is None:
            return Verdict(
                "unresolved",
                patch=patch,
                note="pytest wrote no report",
                output=tail,
                test_exit_code=run.exit_code,
            )
        try:
            outcomes = testrun.parse_report(report)
        except testrun.ReportError as exc:
            return Verdict(
                "unresolved", patch=patch, note=str(exc), output=tail, test_exit_code=run.exit_code
            )
        graded = testrun.grade(outcomes, instance.fail_to_pass, instance.pass_to_pass)
        return Verdict(
            "resolved" if graded.resolved else "unresolved",
            patch=patch,
            grade=graded.as_dict(),
            output=tail,
            test_exit_code=run.exit_code,
        )


class _Copy(ABC):
    """A fresh copy of the repository at ``base_commit``, for one verification."""

    plugin_dir: str
    report_path: str

    @abstractmethod
    def script(self, text: str, *, stdin: str = "", timeout_s: float = 60) -> _Run:
        """Run a bash script in the copy's repository root."""

    @abstractmethod
    def tests(self, line: str, timeout_s: float) -> tuple[_Run, str | None]:
        """Run the test line; return the run and the report's text (``None`` if none was written)."""


# -- docker -------------------------------------------------------------------------------------------------
_image_locks: dict[str, threading.Lock] = {}
_image_locks_guard = threading.Lock()


def _recipe(project: Any, clean_commit: str, base_id: str) -> str:
    """What an image is built from: the Dockerfile, the repository version, its clean commit and the base
    image's id (a rebuilt ``local/python`` rebuilds every repository image on it)."""
    text = DOCKERFILE.read_text() if DOCKERFILE.is_file() else ""
    return hashlib.sha256(f"{text}\0{project.key}\0{clean_commit}\0{base_id}".encode()).hexdigest()[:16]


def ensure_image(instance: SWEInstance, template: str | None = None, engine: Any = None) -> str:
    """The image of the instance, built first when it is one of this project's repository versions and the
    engine lacks it (or holds one of another recipe): ``images/swe/Dockerfile`` FROM ``local/python:latest``
    with :func:`repos.clean_repo` at ``/testbed``. Users' images are used as they are."""
    name = image_for(instance, template)
    project = _project(instance)
    if project is None or instance.image_name and instance.image_name != project.image_name:
        return name
    from skyrl_gym.runtime.docker import ImageNotFound, _docker_module
    from skyrl_gym.runtime.docker import engine as docker_engine

    docker = _docker_module()
    api = (engine or docker_engine()).api
    if not DOCKERFILE.is_file():
        raise InfraError(f"{DOCKERFILE} is missing: the swe images are built from it")
    try:
        base_id = api.inspect_image(BASE_IMAGE)["Id"]
    except docker.errors.ImageNotFound:
        raise ImageNotFound(BASE_IMAGE) from None
    recipe = _recipe(project, instance.environment_setup_commit, base_id)

    def current() -> bool:
        try:
            labels = (api.inspect_image(name).get("Config") or {}).get("Labels") or {}
        except docker.errors.ImageNotFound:
            return False
        return labels.get(IMAGE_LABEL) == recipe

    if current():
        return name
    with _image_locks_guard:
        lock = _image_locks.setdefault(name, threading.Lock())
    with lock:
        if current():
            return name
        with tempfile.TemporaryDirectory(prefix="skyrl-swe-image-") as context:
            shutil.copy(DOCKERFILE, Path(context) / "Dockerfile")
            sha = repos.clean_repo(project, Path(context) / "testbed")
            if instance.environment_setup_commit and sha != instance.environment_setup_commit:
                raise InfraError(
                    f"the clean repository of {project.key} is at {sha}, not the instance's "
                    f"environment_setup_commit {instance.environment_setup_commit}"
                )
            try:
                for event in api.build(
                    path=context, tag=name, rm=True, forcerm=True, decode=True,
                    buildargs={"BASE": BASE_IMAGE}, labels={IMAGE_LABEL: recipe},
                ):  # fmt: skip
                    if "error" in event:
                        raise InfraError(f"building {name} failed: {str(event['error']).strip()[:1000]}")
            except docker.errors.APIError as exc:
                raise InfraError(f"building {name} failed: {exc}") from exc
    return name


class _ContainerCopy(_Copy):
    plugin_dir = "/tmp/.skyrl-swe-plugin"
    report_path = "/tmp/.skyrl-swe-report/report.json"

    def __init__(self, container: Any):
        self.container = container

    def script(self, text: str, *, stdin: str = "", timeout_s: float = 60) -> _Run:
        result = self.container.exec(
            ["bash", "-c", text],
            stdin=stdin or None,
            timeout_s=timeout_s,
            max_output_bytes=MAX_DIFF_BYTES + 1024,
        )
        return _Run(result.exit_code, result.stdout, result.stderr, result.timed_out)

    def tests(self, line: str, timeout_s: float) -> tuple[_Run, str | None]:
        from skyrl_gym.runtime.docker.archives import _tar

        # the plugin and runner belong to root (the tests run as the container's user, who cannot change them)
        folder = shlex.quote(self.plugin_dir)
        installed = self.container.exec(
            ["sh", "-c", f"rm -rf {folder} && mkdir -m 755 {folder} && tar -x -m --no-same-owner -C {folder} -f -"],
            stdin=_tar(testrun.plugin_files(), 0o644), user="0:0", timeout_s=60,
        )  # fmt: skip
        if not installed.ok:
            raise InfraError(f"the report plugin could not be installed: {installed.stderr[-500:]}")
        self.container.exec(["mkdir", "-p", self.report_path.rsplit("/", 1)[0]], timeout_s=30)
        run = self.script(line, timeout_s=timeout_s + 30)
        raw = self.container.get_file(self.report_path, max_bytes=64 * 1024 * 1024)
        return run, None if raw is None else raw.decode("utf-8", errors="replace")


def _snapshot(container: Any, folder: str, dest: Path, max_bytes: int) -> None:
    """``folder`` of the container unpacked into ``dest`` on this machine, the container paused meanwhile (so
    that nothing left running in it can change the files while they are read); links are never followed."""
    api = container.engine.api
    api.pause(container.id)
    try:
        stream, _ = api.get_archive(container.id, folder)
        chunks, size = [], 0
        for chunk in stream:
            size += len(chunk)
            if size > max_bytes:
                raise _TooLarge(f"the repository is larger than {max_bytes // (1024 * 1024)} MB")
            chunks.append(chunk)
    finally:
        api.unpause(container.id)
    safe_extract(b"".join(chunks), dest, strip=1, max_bytes=max_bytes)


STOPPED_SETTLE_S = 10.0
"""How long the Docker engine may take to report stopped a container whose process already died: the runtime
knows at once (a pause is refused), the engine's state follows when it has handled the exit, which on a busy
machine can lag by seconds."""


def _stopped(container: Any) -> bool:
    """Whether the container has stopped, as the engine reports within :data:`STOPPED_SETTLE_S` (at once for a
    container it already knows stopped; a running one is asked until then)."""
    deadline = time.monotonic() + STOPPED_SETTLE_S
    while container.alive():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _engine_answers(container: Any) -> bool:
    """Whether the Docker engine still answers (when it does, a stopped container is the agent's doing)."""
    try:
        container.engine.api.ping()
    except Exception:
        return False
    return True


class _TooLarge(ValueError):
    """The agent's files are larger than a verification reads."""


class DockerBackend(SWEBackend):
    """The episode in a container of the instance's image; verification in a new container of it."""

    name = "docker"

    def __init__(self, instance: SWEInstance, settings: BackendSettings):
        super().__init__(instance, settings)
        self.container: Any = None
        self.shell: Any = None
        self.image = ""
        self._host: Path | None = None
        """A folder of this machine: the starting commit's git folder (``t0/.git``) and the agent's files."""
        self._lock = threading.Lock()

    @property
    def workdir(self) -> str:
        return self.container.workdir if self.container is not None else self.settings.workdir

    def _container(self) -> Any:
        from skyrl_gym.runtime import Limits
        from skyrl_gym.runtime.docker import DockerContainer

        limits = Limits(
            timeout_s=60,
            memory_mb=self.settings.memory_mb,
            max_processes=256,
            max_file_mb=min(self.settings.disk_mb, 1024),
            max_output_bytes=256 * 1024,
        )
        return DockerContainer(
            self.image, limits=limits, cpus=self.settings.cpus, disk_mb=self.settings.disk_mb,
            workdir=self.settings.workdir, user=self.settings.user, env=self.settings.env,
        )  # fmt: skip

    def _prepare(self, container: Any, episode: bool) -> str:
        instance = self.instance
        script = prepare_script(instance, apply_bug=bool(instance.bug_patch), hide=True, episode=episode)
        result = container.exec(["bash", "-c", script], stdin=instance.bug_patch or None, timeout_s=300)
        if not result.ok:
            raise InfraError(
                f"setting up {instance.instance_id} in {self.image} failed ({result.explain()}): "
                f"{(result.stderr or result.stdout)[-1500:]}"
            )
        return _tree_of(result.stdout)

    def start(self) -> None:
        if self.container is not None:
            return
        begin = time.monotonic()
        try:
            self.image = ensure_image(self.instance, self.settings.image_template)
            container = self._container()
        except InfraError:
            raise
        except Exception as exc:
            raise InfraError(f"{type(exc).__name__}: {exc}") from exc
        with self._lock:
            self.container = container
        self.tree = self._prepare(container, episode=True)
        # the starting commit's git folder is kept on this machine, before the agent runs anything
        self._host = Path(tempfile.mkdtemp(prefix="skyrl-swe-docker-"))
        (self._host / "t0").mkdir()
        try:
            _snapshot(container, self.workdir, self._host / "t0", self._max_bytes())
        except Exception as exc:
            raise InfraError(f"the starting repository could not be copied out: {exc}") from exc
        self.shell = container.shell(max_output_bytes=max(4096, self.settings.max_output_chars * 4))
        self.setup_s = time.monotonic() - begin

    def workspace(self) -> Any:
        from skyrl_gym.tools.workspace import ContainerWorkspace

        return ContainerWorkspace(self.container, self.shell, max_output_chars=self.settings.max_output_chars)

    def stop_agent(self) -> None:
        if self.shell is not None:
            self.shell.close()
        if self.container is not None and self.container.alive():
            # init-adopted processes too (setsid, nohup, a double fork): nothing of the agent's outlives this
            self.container.stop_all_processes()

    def _max_bytes(self) -> int:
        return (self.settings.disk_mb + 64) * 1024 * 1024

    def _diff_run(self) -> _Run:
        """The diff, taken on this machine: the agent's work folder copied out of the paused container, read
        with the starting commit's git folder kept since set-up (nothing in the container takes part)."""
        assert self._host is not None and self.container is not None
        work = Path(tempfile.mkdtemp(dir=self._host, prefix="agent-"))
        try:
            _snapshot(self.container, self.workdir, work, self._max_bytes())
        except (_TooLarge, ValueError) as exc:
            return _Run(1, "", str(exc))
        except Exception as exc:
            container = self.container
            if not container.removed and _stopped(container) and _engine_answers(container):
                # the agent killed the container's own process (kill -9 -1): its work went with the container
                # (a container this side removed, or an engine that does not answer, is the machinery's fault)
                return _Run(
                    1, "", "the episode's container stopped before verification (its process was killed)"
                )
            return _Run(None, "", f"{type(exc).__name__}: {exc}")
        _remove(work / ".git")  # the agent's own git folder is never read
        trusted = self._host / "t0" / ".git"
        return _host_script(diff_script(self.instance, str(trusted), self.tree, str(work)), self._host)

    def _fresh(self) -> Any:
        backend = self

        class _Fresh:
            def __enter__(self) -> _ContainerCopy:
                self.container = backend._container()
                try:
                    backend._prepare(self.container, episode=False)
                except BaseException:
                    self.container.remove()
                    raise
                return _ContainerCopy(self.container)

            def __exit__(self, *exc: object) -> None:
                self.container.remove()

        return _Fresh()

    def close(self) -> None:
        with self._lock:
            container, self.container = self.container, None
            host, self._host = self._host, None
        if self.shell is not None:
            self.shell.close()
            self.shell = None
        if container is not None:
            container.remove()
        if host is not None:
            shutil.rmtree(host, ignore_errors=True)

    def abandon(self) -> None:
        """Remove the container in the background (whatever runs in it stops at once)."""
        container = self.container
        if container is not None:
            threading.Thread(target=container.remove, name="swe-abandon", daemon=True).start()


# -- bwrap --------------------------------------------------------------------------------------------------
_clean: dict[str, Path] = {}
_clean_lock = threading.Lock()
_clean_root: Path | None = None


def _clean_copy(instance: SWEInstance, dest: Path) -> None:
    """Copy the clean repository of the instance's project (made with :func:`repos.clean_repo` once per
    process and project version) to ``dest``."""
    global _clean_root
    project = _project(instance)
    if project is None:
        raise ValueError(
            f"the bwrap backend makes repositories of the pinned projects only; {instance.instance_id!r} "
            "is a users' row: run it with env_config backend='docker' and its image"
        )
    with _clean_lock:
        source = _clean.get(project.key)
        if source is None or not source.is_dir():
            if _clean_root is None:
                _clean_root = Path(tempfile.mkdtemp(prefix="skyrl-swe-clean-"))
                import atexit

                atexit.register(shutil.rmtree, _clean_root, True)
            source = _clean_root / project.key
            shutil.rmtree(source, ignore_errors=True)
            try:
                repos.clean_repo(project, source)
            except repos.RepoError as exc:
                shutil.rmtree(source, ignore_errors=True)
                raise InfraError(str(exc)) from exc
            _clean[project.key] = source
    shutil.copytree(source, dest, symlinks=True)


def _remove(path: Path) -> None:
    """Remove ``path`` whatever it is (a link is removed, never followed)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


def _forget_clean(instance: SWEInstance) -> None:
    """Drop the cached clean repository of the instance's project: the next copy makes it anew."""
    project = _project(instance)
    if project is None:
        return
    with _clean_lock:
        source = _clean.pop(project.key, None)
    if source is not None:
        shutil.rmtree(source, ignore_errors=True)


def _host_script(text: str, cwd: Path, stdin: str = "", timeout_s: float = 300) -> _Run:
    try:
        proc = subprocess.run(
            ["bash", "-c", text], cwd=cwd, input=stdin, capture_output=True, text=True, errors="surrogateescape",
            timeout=timeout_s, env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8"},
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        return _Run(None, str(exc.stdout or ""), str(exc.stderr or ""), timed_out=True)
    return _Run(proc.returncode, proc.stdout, proc.stderr)


_plugin_host_dir: Path | None = None
_plugin_lock = threading.Lock()


def _plugin_folder() -> Path:
    """This process's folder of the report plugin and the clean runner, shown read-only in the sandbox at the
    same path: outside the copy's work folder, so nothing in the diff can sit beside them or replace them."""
    global _plugin_host_dir
    with _plugin_lock:
        if _plugin_host_dir is None or not _plugin_host_dir.is_dir():
            folder = Path(tempfile.mkdtemp(prefix="skyrl-swe-plugin-"))
            folder.chmod(0o755)  # the sandbox's user reads it
            testrun.write_plugin(folder)
            import atexit

            atexit.register(shutil.rmtree, folder, True)
            _plugin_host_dir = folder
        return _plugin_host_dir


_EXIT_MARKER = "\x1eSKYRL-SWE-TESTS-EXIT "
_REPORT_IN_SANDBOX = "/tmp/.skyrl-swe-report/report.json"
# The copy arrives as a tar on stdin; the tests' output goes to stderr; stdout carries only the exit code and
# the report. Nothing is copied back: what the tests leave in the folder (links, fifos) never reaches the host.
_TESTS_SCRIPT = (
    "tar -x -m -f - 2>/dev/null\n"
    "mkdir -p /tmp/.skyrl-swe-report /tmp/.skyrl-home\n"
    "{line} </dev/null 1>&2\n"
    "code=$?\n"
    "printf '\\036SKYRL-SWE-TESTS-EXIT %s\\n' \"$code\"\n"
    "base64 -w0 < {report} 2>/dev/null\n"
)


class _FolderCopy(_Copy):
    report_path = _REPORT_IN_SANDBOX

    def __init__(self, root: Path, sandbox: Any, memory_mb: int):
        self.root = root
        self.sandbox = sandbox
        self.memory_mb = memory_mb
        self.plugin_dir = str(_plugin_folder())

    def script(self, text: str, *, stdin: str = "", timeout_s: float = 60) -> _Run:
        return _host_script(text, self.root, stdin, timeout_s)

    def tests(self, line: str, timeout_s: float) -> tuple[_Run, str | None]:
        import base64
        import io
        import tarfile

        from skyrl_gym.runtime import Limits

        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            archive.add(self.root, arcname=".")  # our own fresh copy: links are stored, never followed
        data = buffer.getvalue()
        size_mb = max(64, 4 * len(data) // (1024 * 1024) + 16)
        limits = Limits(
            timeout_s=timeout_s + 15, memory_mb=self.memory_mb, max_processes=128, max_file_mb=size_mb,
            max_output_bytes=64 * 1024 * 1024,
        )  # fmt: skip
        script = _TESTS_SCRIPT.format(line=line, report=_REPORT_IN_SANDBOX)
        result = self.sandbox.run(
            ["/bin/bash", "-c", script], stdin=data, limits=limits, env={"HOME": "/tmp/.skyrl-home"}
        )
        output = result.stderr[-20_000:]
        if result.exit_code is None and not result.timed_out:
            return _Run(None, "", output or "the sandbox could not start the tests"), None
        marker = result.stdout.rfind(_EXIT_MARKER)
        if marker < 0 or result.timed_out:
            return _Run(None, "", output, timed_out=True), None
        code_text, _, payload = result.stdout[marker + len(_EXIT_MARKER) :].partition("\n")
        code = int(code_text) if code_text.strip().lstrip("-").isdigit() else None
        report = (
            base64.b64decode(payload.strip()).decode("utf-8", errors="replace") if payload.strip() else None
        )
        return _Run(code, output, ""), report


_sandboxes: dict[float, Any] = {}
_sandboxes_lock = threading.Lock()


class BwrapBackend(SWEBackend):
    """The episode in a folder of this machine, each command in the bubblewrap sandbox over a copy of it
    (``/work`` inside); verification in a new folder."""

    name = "bwrap"

    def __init__(self, instance: SWEInstance, settings: BackendSettings):
        super().__init__(instance, settings)
        self.root: Path | None = None
        self._trusted_root: Path | None = None
        """The starting commit's git folder, in a folder of its own (never beside the agent's repository)."""
        self._workspace: Any = None
        self._sandbox: Any = None

    @property
    def workdir(self) -> str:
        return "/work"

    def _get_sandbox(self) -> Any:
        # one sandbox per process and CPU quota: each run gets its own namespaces and limits anyway
        if self._sandbox is None:
            with _sandboxes_lock:
                sandbox = _sandboxes.get(self.settings.cpus)
                if sandbox is None:
                    from skyrl_gym.runtime import make_sandbox

                    sandbox = _sandboxes[self.settings.cpus] = make_sandbox(
                        "bwrap", cpus=self.settings.cpus, ro_paths=[str(_plugin_folder())]
                    )
            self._sandbox = sandbox
        return self._sandbox

    def start(self) -> None:
        if self.root is not None:
            return
        begin = time.monotonic()
        try:
            self.root = Path(tempfile.mkdtemp(prefix="skyrl-swe-"))
            repo = self.root / "repo"
            _clean_copy(self.instance, repo)
            self._trusted_root = Path(tempfile.mkdtemp(prefix="skyrl-swe-trusted-"))
            script = prepare_script(
                self.instance,
                apply_bug=True,
                hide=True,
                episode=True,
                trusted=str(self._trusted_root / "episode.git"),
            )
            result = _host_script(script, repo, stdin=self.instance.bug_patch)
            if not result.ok:
                raise InfraError(f"setting up {self.instance.instance_id} failed: {result.stderr[-1500:]}")
            self.tree = _tree_of(result.stdout)
            from skyrl_gym.tools.workspace import LocalDirWorkspace

            self._workspace = LocalDirWorkspace(
                repo, sandbox=self._get_sandbox(), memory_mb=self.settings.memory_mb,
                max_output_chars=self.settings.max_output_chars,
            )  # fmt: skip
        except BaseException:
            self.close()  # a failed set-up leaves no folder behind
            raise
        self.setup_s = time.monotonic() - begin

    def workspace(self) -> Any:
        return self._workspace

    def stop_agent(self) -> None:
        """Nothing runs between commands: each one's sandbox ended with it."""

    def _diff_run(self) -> _Run:
        assert self.root is not None
        assert self._trusted_root is not None
        if not (self.root / "repo").is_dir():  # the agent's commands only ever change what is inside it
            raise InfraError(f"the episode's repository {self.root / 'repo'} is gone")
        script = diff_script(
            self.instance, str(self._trusted_root / "episode.git"), self.tree, str(self.root / "repo")
        )
        return _host_script(script, self._trusted_root)

    def _fresh(self) -> Any:
        backend = self

        class _Fresh:
            def __enter__(self) -> _FolderCopy:
                self.folder = Path(tempfile.mkdtemp(prefix="skyrl-swe-verify-"))
                repo = self.folder / "repo"
                script = prepare_script(backend.instance, apply_bug=True, hide=False, episode=False)
                for attempt in (1, 2):
                    _clean_copy(backend.instance, repo)
                    result = _host_script(script, repo, stdin=backend.instance.bug_patch)
                    if result.exit_code == 12 and attempt == 1:  # the cached clean repository was changed
                        _forget_clean(backend.instance)
                        shutil.rmtree(repo, ignore_errors=True)
                        continue
                    break
                if not result.ok:
                    shutil.rmtree(self.folder, ignore_errors=True)
                    raise InfraError(
                        f"the fresh copy of {backend.instance.instance_id} failed: {result.stderr[-1500:]}"
                    )
                return _FolderCopy(repo, backend._get_sandbox(), backend.settings.memory_mb)

            def __exit__(self, *exc: object) -> None:
                shutil.rmtree(self.folder, ignore_errors=True)

        return _Fresh()

    def close(self) -> None:
        root, self.root = self.root, None
        trusted, self._trusted_root = self._trusted_root, None
        self._workspace = None
        for folder in (root, trusted):
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)

    def abandon(self) -> None:
        """Nothing to stop from outside: a command's sandbox dies with its timeout."""


BACKENDS: dict[str, type[SWEBackend]] = {"docker": DockerBackend, "bwrap": BwrapBackend}
"""The backends by ``env_config.backend`` name."""


def make_backend(name: str, instance: SWEInstance, settings: BackendSettings) -> SWEBackend:
    """The backend called ``name`` for one episode (a ``ValueError`` lists the names)."""
    try:
        return BACKENDS[name](instance, settings)
    except KeyError:
        raise ValueError(
            f"unknown swe backend {name!r}; choose one of {', '.join(sorted(BACKENDS))}"
        ) from None
