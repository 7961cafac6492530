"""Building the ``swe`` instances: candidate bugs in each pinned project, validated by the project's own suite.

For each project (:mod:`skyrl_gym.envs.swe.projects`):

1. :func:`baseline`: the clean repository (:func:`~skyrl_gym.envs.swe.repos.clean_repo`) in a work folder,
   its suite run twice under Debian's python3; tests that passed both times are the stable ones, tests whose
   outcome differed are flaky and never listed.
2. :func:`candidates`: every bug site of every source file (:mod:`.mutate`), single sites and pairs of
   sites in one function, in an order fixed by the seed that takes the bug kinds in turn.
3. :func:`validate`: the bug written into the work copy and the whole suite run; the candidate is kept when
   at least one stable test now fails (its ``FAIL_TO_PASS``), no module fails to import, the run ends in
   time, and the failing tests fail again when rerun alone (a test that passes on the rerun is flaky and
   dropped). ``PASS_TO_PASS`` are the stable tests that still pass. The bug is committed with the fixed
   metadata of :mod:`~skyrl_gym.envs.swe.repos` for ``base_commit``; ``patch`` is the reverse diff.
4. :func:`assign_splits` (:mod:`.split`) by function, and :func:`oracle` over every instance: the bugged
   repository rebuilt from scratch (its sha must be ``base_commit``), ``patch`` applied, the suite run with
   the instance's own ``test_command``, every listed test passing.

:func:`build` runs it all; ``datasets/swe/build.py`` is the command.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import io
import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyrl_gym.datasets.swe.mutate import BUG_KINDS, Site, apply_edits, find_sites
from skyrl_gym.datasets.swe.split import assign_splits
from skyrl_gym.datasets.swe.statement import problem_statement
from skyrl_gym.envs.swe.projects import PROJECTS, Project, get_project
from skyrl_gym.envs.swe.repos import BUG_COMMIT_MESSAGE, bugged_repo, clean_repo, git
from skyrl_gym.envs.swe.testrun import TestRun, grade, run_tests

__all__ = [
    "Baseline",
    "Candidate",
    "baseline",
    "build",
    "build_project",
    "candidates",
    "oracle",
    "read_instances",
    "skyrl_row",
    "validate",
    "write_instances",
]

COMBO = "combo"
CREATED_AT = "2000-01-01T00:00:00Z"
DATA_SOURCE = "swe-synth"
#: address-space cap of a validation run: a mutated loop that grows a list forever fails instead
MEMORY_MB = 4096
Log = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclass
class Baseline:
    """A project's clean work copy and what its suite does there (two runs)."""

    project: Project
    repo: Path
    clean_commit: str
    stable: list[str]
    flaky: list[str]
    not_passing: list[str]
    seconds: float

    @property
    def timeout_s(self) -> float:
        """The time a validation run gets: ten times the clean suite's, at least 30 s."""
        return max(30.0, 10 * self.seconds)


def _suite(
    repo: Path, project: Project, targets: Iterable[str] | None = None, timeout_s: float = 300
) -> TestRun:
    command = project.pytest_command(None if targets is None else list(targets))
    return run_tests(repo, command, timeout_s=timeout_s, memory_mb=MEMORY_MB)


def baseline(project: Project, work_root: Path) -> Baseline:
    """Make ``project``'s clean repository under ``work_root`` and run its suite twice."""
    repo = work_root / project.key
    if repo.exists():
        shutil.rmtree(repo)
    clean = clean_repo(project, repo)
    first = _suite(repo, project)
    second = _suite(repo, project)
    names = set(first.outcomes) | set(second.outcomes)
    flaky = sorted(n for n in names if first.outcomes.get(n) != second.outcomes.get(n))
    stable = sorted(n for n in names if first.outcomes.get(n) == second.outcomes.get(n) == "passed")
    not_passing = sorted(n for n in names if n not in flaky and first.outcomes.get(n) != "passed")
    if not stable:
        raise RuntimeError(f"{project.key}: no test passes on the clean source:\n{first.output[-3000:]}")
    return Baseline(project, repo, clean, stable, flaky, not_passing, (first.seconds + second.seconds) / 2)


@dataclass(frozen=True)
class Candidate:
    """One candidate bug: one site, or two sites of one function, in the file ``path`` (repository-relative)."""

    path: str
    sites: tuple[Site, ...]

    @property
    def kinds(self) -> list[str]:
        """The bug kinds, in site order."""
        return [site.kind for site in self.sites]

    @property
    def function(self) -> str:
        """``path::qualname`` of the mutated function."""
        return f"{self.path}::{self.sites[0].function}"


def source_files(project: Project, repo: Path) -> list[str]:
    """The project's Python source files where bugs may go (tests and ``setup.py`` excluded), sorted."""
    files = set()
    for entry in project.source_dirs:
        root = repo / entry
        paths = [root] if root.is_file() else root.rglob("*.py")
        for path in paths:
            rel = path.relative_to(repo).as_posix()
            if not project.is_test_file(rel) and path.name not in ("setup.py", "_version.py", "conftest.py"):
                files.add(rel)
    return sorted(files)


def _read(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8")  # bytes: keep the file's own line endings
    except UnicodeDecodeError:
        return None


def candidates(project: Project, repo: Path, seed: int = 0) -> list[Candidate]:
    """Every candidate bug of ``project`` in the order they are tried: the kinds in turn, each shuffled by seed.

    Pairs (kind ``combo``): for each function with sites of two kinds or more, up to two pairs of sites
    whose edits do not overlap, drawn with the seed.
    """
    by_kind: dict[str, list[Candidate]] = defaultdict(list)
    for path in source_files(project, repo):
        text = _read(repo / path)
        if text is None:
            continue
        try:
            sites = find_sites(text, check=False)
        except SyntaxError:
            continue
        by_function: dict[str, list[Site]] = defaultdict(list)
        for site in sites:
            by_kind[site.kind].append(Candidate(path, (site,)))
            by_function[site.function].append(site)
        for name, group in sorted(by_function.items()):
            rng = random.Random(f"{seed}:{project.key}:{path}:{name}")
            pairs = []
            for _ in range(20):
                if len(pairs) == 2 or len({s.kind for s in group}) < 2:
                    break
                a, b = rng.sample(group, 2)
                (a0, a1), (b0, b1) = a.span, b.span
                if a.kind != b.kind and (a1 < b0 or b1 < a0):
                    pair = tuple(sorted((a, b), key=lambda s: s.span))
                    if pair not in pairs:
                        pairs.append(pair)
            by_kind[COMBO].extend(Candidate(path, pair) for pair in pairs)
    rng = random.Random(f"{seed}:{project.key}")
    queues = []
    for kind in (*BUG_KINDS, COMBO):
        queue = list(by_kind.get(kind, []))
        rng.shuffle(queue)
        queues.append(queue)
    ordered = []
    for index in range(max((len(q) for q in queues), default=0)):
        ordered.extend(q[index] for q in queues if index < len(q))
    return ordered


@dataclass
class Outcome:
    """What validating one candidate gave: an instance, or the reason it was dropped, and the time it took."""

    instance: dict[str, Any] | None
    reason: str
    seconds: float


def _instance_id(project: Project, kinds: list[str], bug_patch: str) -> str:
    digest = hashlib.sha256(bug_patch.encode()).hexdigest()[:8]
    return f"{project.name}__{project.name}-{project.version}.{kinds[0]}__{digest}"


def validate(base: Baseline, candidate: Candidate) -> Outcome:
    """Write ``candidate``'s bug into the work copy, run the suite, and make an instance if it is a real bug.

    The work copy is back at the clean commit afterwards, whatever happened.
    """
    project, repo = base.project, base.repo
    target = repo / candidate.path
    original = _read(target)
    started = time.monotonic()
    try:
        bugged = apply_edits(original, list(candidate.sites))
        if ast.dump(ast.parse(bugged)) == ast.dump(ast.parse(original)):
            return Outcome(None, "no_change", 0.0)
    except (SyntaxError, ValueError):
        return Outcome(None, "invalid", 0.0)
    target.write_bytes(bugged.encode("utf-8"))
    try:
        run = _suite(repo, project, timeout_s=base.timeout_s)
        if run.timed_out:
            return Outcome(None, "timeout", time.monotonic() - started)
        if any("::" not in name and outcome == "error" for name, outcome in run.outcomes.items()):
            return Outcome(None, "import_error", time.monotonic() - started)
        stable = set(base.stable)
        broken = sorted(n for n in base.stable if run.outcomes.get(n) in ("failed", "error"))
        if any(n not in run.outcomes for n in stable):
            return Outcome(None, "tests_changed", time.monotonic() - started)
        if not broken:
            return Outcome(None, "survived", time.monotonic() - started)
        # the failing tests once more, alone: one that passes now is flaky, not broken by the bug
        rerun = _suite(repo, project, broken, timeout_s=base.timeout_s)
        fail_to_pass = [n for n in broken if rerun.outcomes.get(n) in ("failed", "error")]
        if not fail_to_pass:
            return Outcome(None, "flaky", time.monotonic() - started)
        pass_to_pass = sorted(n for n in stable if run.outcomes.get(n) == "passed")
        if git(repo, "diff", "--name-only").split() != [candidate.path]:
            return Outcome(None, "tests_wrote_files", time.monotonic() - started)
        bug_patch = git(repo, "diff")
        git(repo, "commit", "--quiet", "--no-verify", "-a", "-m", BUG_COMMIT_MESSAGE)
        base_commit = git(repo, "rev-parse", "HEAD").strip()
        # the fix: from the bugged commit back to the clean one, with a/ and b/ the way SWE-bench has them
        fix_patch = git(repo, "diff", base_commit, base.clean_commit)
        messages = {**run.messages, **rerun.messages}
        instance = {
            "instance_id": _instance_id(project, candidate.kinds, bug_patch),
            "repo": project.name,
            "version": project.version,
            "base_commit": base_commit,
            "environment_setup_commit": base.clean_commit,
            "patch": fix_patch,
            "test_patch": "",
            "bug_patch": bug_patch,
            "FAIL_TO_PASS": fail_to_pass,
            "PASS_TO_PASS": pass_to_pass,
            "problem_statement": problem_statement(
                project.name, project.version, fail_to_pass, messages, bug_patch, str(repo)
            ),
            "hints_text": "",
            "created_at": CREATED_AT,
            "image_name": project.image_name,
            "test_command": project.test_command,
            "bug_kinds": candidate.kinds,
            "function": candidate.function,
            "split": "train",
        }
        return Outcome(instance, "kept", time.monotonic() - started)
    finally:
        git(repo, "reset", "--quiet", "--hard", base.clean_commit)


@dataclass
class ProjectReport:
    """What building one project gave: its instances and the counts and times of the work."""

    project: str
    instances: list[dict[str, Any]]
    attempts: int = 0
    reasons: Counter = field(default_factory=Counter)
    validation_seconds: float = 0.0
    baseline_seconds: float = 0.0
    stable_tests: int = 0
    flaky_tests: list[str] = field(default_factory=list)
    candidates: int = 0

    def summary(self) -> dict[str, Any]:
        """Counts and times as plain data."""
        kept = len(self.instances)
        return {
            "instances": kept,
            "attempts": self.attempts,
            "candidates": self.candidates,
            "reasons": dict(sorted(self.reasons.items())),
            "stable_tests": self.stable_tests,
            "flaky_tests": self.flaky_tests,
            "suite_seconds": round(self.baseline_seconds, 3),
            "validation_seconds": round(self.validation_seconds, 1),
            "mean_validation_seconds_per_attempt": round(self.validation_seconds / max(1, self.attempts), 3),
            "mean_validation_seconds_per_instance": round(self.validation_seconds / max(1, kept), 3),
        }


def build_project(
    project: Project,
    work_root: Path,
    target: int = 48,
    max_attempts: int = 400,
    max_per_function: int = 2,
    seed: int = 0,
    log: Log = _quiet,
) -> ProjectReport:
    """Validate ``project``'s candidates in order until ``target`` instances are kept or attempts run out.

    At most ``max_per_function`` instances mutate one function, so the instances spread over the code.
    """
    base = baseline(project, work_root)
    found = candidates(project, base.repo, seed)
    report = ProjectReport(project.name, [], candidates=len(found))
    report.baseline_seconds, report.stable_tests, report.flaky_tests = (
        base.seconds,
        len(base.stable),
        base.flaky,
    )
    log(
        f"{project.key}: {len(base.stable)} stable tests, {len(base.flaky)} flaky, suite {base.seconds:.2f}s, {len(found)} candidates"
    )
    per_function: Counter = Counter()
    patches: set[str] = set()
    for candidate in found:
        if len(report.instances) >= target or report.attempts >= max_attempts:
            break
        if per_function[candidate.function] >= max_per_function:
            continue
        outcome = validate(base, candidate)
        if outcome.reason in ("no_change", "invalid"):
            report.reasons[outcome.reason] += 1
            continue
        report.attempts += 1
        report.validation_seconds += outcome.seconds
        instance = outcome.instance
        if instance is not None and instance["bug_patch"] in patches:
            outcome = Outcome(None, "duplicate", outcome.seconds)
            instance = None
        report.reasons[outcome.reason] += 1
        if instance is not None:
            patches.add(instance["bug_patch"])
            per_function[candidate.function] += 1
            report.instances.append(instance)
            log(
                f"{project.key}: kept {len(report.instances)}/{target} after {report.attempts} attempts: "
                f"{'+'.join(candidate.kinds)} in {candidate.function} ({len(instance['FAIL_TO_PASS'])} failing)"
            )
    shutil.rmtree(base.repo, ignore_errors=True)
    return report


def oracle(
    instance: Mapping[str, Any], work_root: Path | None = None, check_no_op: bool = False
) -> dict[str, Any]:
    """Rebuild ``instance``'s bugged repository from scratch, apply its ``patch``, run its ``test_command``.

    Returns ``{"instance_id", "resolved", "seconds"}`` (and ``no_op_resolved``, the grade of the untouched
    bugged state, with ``check_no_op``). A base_commit that cannot be rebuilt raises
    :class:`~skyrl_gym.envs.swe.repos.RepoError`.
    """
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=work_root, prefix="skyrl-swe-oracle-") as tmp:
        repo = Path(tmp) / "repo"
        bugged_repo(instance, repo)
        result: dict[str, Any] = {"instance_id": instance["instance_id"]}
        if check_no_op:
            before = run_tests(repo, instance["test_command"], timeout_s=300, memory_mb=MEMORY_MB)
            no_op = grade(before.outcomes, instance["FAIL_TO_PASS"], instance["PASS_TO_PASS"])
            result["no_op_resolved"] = no_op.resolved
        git(repo, "apply", "-", input=instance["patch"])
        after = run_tests(repo, instance["test_command"], timeout_s=300, memory_mb=MEMORY_MB)
        fixed = grade(after.outcomes, instance["FAIL_TO_PASS"], instance["PASS_TO_PASS"])
        result["resolved"] = fixed.resolved
        if not fixed.resolved:
            result["grade"] = fixed.as_dict()
    result["seconds"] = round(time.monotonic() - started, 3)
    return result


# -- files --------------------------------------------------------------------------------------------------------
def write_instances(instances: Iterable[Mapping[str, Any]], path: Path) -> Path:
    """Write instances as gzip-compressed JSON lines, sorted by id, byte for byte the same for the same rows."""
    rows = sorted(instances, key=lambda r: r["instance_id"])
    text = "".join(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n" for row in rows)
    buffer = io.BytesIO()
    # mtime 0 and no file name: the same instances give the same bytes
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as out:
        out.write(text.encode("utf-8"))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(buffer.getvalue())
    tmp.replace(path)
    return path


def read_instances(path: Path) -> list[dict[str, Any]]:
    """The instances of a ``.jsonl.gz`` (or plain ``.jsonl``) file."""
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]


def user_prompt(instance: Mapping[str, Any]) -> str:
    """The task as the user's message: the repository and the problem statement."""
    return (
        f"The repository of the Python project {instance['repo']} {instance['version']} is in the working "
        "directory. Resolve the problem below by editing its source code.\n\n" + instance["problem_statement"]
    )


def skyrl_row(instance: Mapping[str, Any]) -> dict[str, Any]:
    """The instance as a SkyRL dataset row for the ``swe`` environment.

    ``instance`` is the whole SWE-bench-style row, as in SkyRL's SWE recipes; the ground truth names it.
    """
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": user_prompt(instance)}],
        "env_class": "swe",
        "reward_spec": {"method": "rule", "ground_truth": {"instance_id": instance["instance_id"]}},
        "instance": dict(instance),
        "extra_info": {
            "instance_id": instance["instance_id"],
            "repo": instance["repo"],
            "split": instance["split"],
        },
    }


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _build_and_check(job: tuple) -> tuple[str, dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """One project: build its instances, then the oracle over each of them (one process of :func:`build`)."""
    name, target, max_attempts, max_per_function, seed, run_oracle, work_root, verbose = job
    log = _stderr if verbose else _quiet
    project = get_project(name)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=work_root, prefix="skyrl-swe-build-") as tmp:
        report = build_project(project, Path(tmp), target, max_attempts, max_per_function, seed, log)
        summary = {**report.summary(), "build_seconds": round(time.monotonic() - started, 1)}
        results = []
        if run_oracle:
            started = time.monotonic()
            for instance in report.instances:
                results.append(oracle(instance, Path(tmp)))
                if not results[-1]["resolved"]:
                    log(f"oracle FAILED on {instance['instance_id']}: {results[-1].get('grade')}")
            log(f"{project.key}: oracle {sum(r['resolved'] for r in results)}/{len(results)} resolved")
            summary["oracle_seconds"] = round(time.monotonic() - started, 1)
    return name, summary, report.instances, results


def build(
    projects: Iterable[str] | None = None,
    target: int = 48,
    max_attempts: int = 400,
    max_per_function: int = 2,
    test_fraction: float = 0.2,
    seed: int = 0,
    run_oracle: bool = True,
    work_root: Path | None = None,
    jobs: int = 1,
    verbose: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Build the instances of ``projects`` (all pinned ones by default); return them and the build's stats.

    Each project is built and then checked by :func:`oracle` instance by instance; an instance its own
    patch does not resolve is dropped (and named in the stats). ``jobs`` projects are built at once, in
    processes of their own; the result does not depend on it.
    """
    names = list(projects or PROJECTS)
    started = time.monotonic()
    stats: dict[str, Any] = {"seed": seed, "target_per_project": target, "jobs": jobs, "projects": {}}
    job_list = [
        (n, target, max_attempts, max_per_function, seed, run_oracle, work_root, verbose) for n in names
    ]
    if jobs > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            done = list(pool.imap(_build_and_check, job_list))
    else:
        done = [_build_and_check(job) for job in job_list]
    instances: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for name, summary, built, checked in done:
        stats["projects"][name] = summary
        instances.extend(built)
        results.extend(checked)
    stats["build_seconds"] = round(time.monotonic() - started, 1)
    if run_oracle:
        failed = sorted(r["instance_id"] for r in results if not r["resolved"])
        stats["oracle"] = {
            "instances": len(results),
            "resolved": len(results) - len(failed),
            "failed": failed,
            "seconds": round(sum(r["seconds"] for r in results), 1),
            "mean_seconds": round(sum(r["seconds"] for r in results) / max(1, len(results)), 3),
        }
        # an instance whose own fix does not pass is no instance
        instances = [i for i in instances if i["instance_id"] not in set(failed)]
    assign_splits(instances, test_fraction=test_fraction, seed=seed)
    stats.update(counts(instances))
    return instances, stats


def counts(instances: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Instances per repository, per bug kind (a pair counts for both kinds, and as ``combo``) and per split."""
    kinds: Counter = Counter()
    for instance in instances:
        kinds.update(instance["bug_kinds"])
        if len(instance["bug_kinds"]) > 1:
            kinds[COMBO] += 1
    return {
        "instances": len(instances),
        "per_repo": dict(sorted(Counter(i["repo"] for i in instances).items())),
        "per_kind": dict(sorted(kinds.items())),
        "per_split": dict(sorted(Counter(i["split"] for i in instances).items())),
        "per_repo_split": {
            repo: dict(sorted(Counter(i["split"] for i in instances if i["repo"] == repo).items()))
            for repo in sorted({i["repo"] for i in instances})
        },
    }
