"""Running a repository's pytest suite and grading it against an instance's test lists.

The suite runs under Debian's ``python3 -m pytest`` (in a container, in the bubblewrap sandbox or on the
host) with a small report plugin, :data:`PLUGIN_SOURCE`, loaded by ``-p skyrl_swe_report``: it writes one
JSON object ``{node id: "passed" | "failed" | "error" | "skipped"}`` to the file named by
``$SKYRL_PYTEST_REPORT``. The phases of a test are folded into one outcome: a failed set-up or tear-down is
``error``, a failed call ``failed``, an unexpected pass of a strict xfail ``failed``; a module that fails to
collect is reported under its own node id as ``error`` (its tests are then missing from the report). With
``$SKYRL_PYTEST_MESSAGES`` set, the plugin also writes each failed test's failure message there (the
exception line and pytest's explanation of a failed assert, no source lines): the builder's material for
problem statements.

- :func:`test_shell_command`: the bash line that runs a test command with the plugin under a timeout;
- :func:`parse_report`: the report's text as a dict (:class:`ReportError` when it is not one);
- :func:`grade`: outcomes against ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` as a :class:`TestGrade`;
- :func:`write_plugin` and :func:`run_tests`: the plugin file and a run on this machine (the builder's and
  the sandbox backend's path).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from skyrl_gym.integrity.runner import CLEAN_ENV, RUNNER_MODULE, RUNNER_SOURCE, clean_pytest_command

__all__ = [
    "DEBIAN_PYTHON",
    "OUTCOMES",
    "PLUGIN_MODULE",
    "PLUGIN_SOURCE",
    "TIMEOUT_EXIT_CODES",
    "ReportError",
    "TestGrade",
    "TestRun",
    "grade",
    "parse_report",
    "plugin_files",
    "run_tests",
    "test_shell_command",
    "write_plugin",
]

PLUGIN_MODULE = "skyrl_swe_report"
OUTCOMES = ("passed", "failed", "error", "skipped")
#: Exit codes of ``timeout``: 124 when the command ran out of time, 137 when it had to be killed.
TIMEOUT_EXIT_CODES = (124, 137)
#: Debian bookworm's interpreter, with python3-pytest: the one inside the images, used on the host too.
DEBIAN_PYTHON = "/usr/bin/python3"

PLUGIN_SOURCE = '''\
"""pytest plugin: write each test's outcome as JSON to the file named by $SKYRL_PYTEST_REPORT."""
import json
import os

_outcomes = {}
_messages = {}
_RANK = {"skipped": 0, "passed": 1, "failed": 2, "error": 3}


def _record(nodeid, outcome):
    # a test reports up to three phases; the worst outcome of them stands
    old = _outcomes.get(nodeid)
    if old is None or _RANK[outcome] > _RANK[old]:
        _outcomes[nodeid] = outcome


def _message(report):
    # the exception's own line and pytest's explanation of a failed assert, without source lines
    crash = getattr(report.longrepr, "reprcrash", None)
    text = getattr(crash, "message", None) or str(report.longrepr)
    return text[-2000:]


def pytest_runtest_logreport(report):
    if report.failed and report.nodeid not in _messages:
        _messages[report.nodeid] = _message(report)
    if report.when == "call":
        if report.passed:
            _record(report.nodeid, "passed")
        elif report.failed:
            _record(report.nodeid, "failed")
        else:
            _record(report.nodeid, "skipped")
    elif report.failed:
        _record(report.nodeid, "error")
    elif report.skipped and report.when == "setup":
        _record(report.nodeid, "skipped")


def pytest_collectreport(report):
    if report.failed:
        _outcomes[report.nodeid or "<collection>"] = "error"
        _messages[report.nodeid or "<collection>"] = _message(report)


def _write(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump(data, out, sort_keys=True)
    os.replace(tmp, path)


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("SKYRL_PYTEST_REPORT"):
        _write(os.environ["SKYRL_PYTEST_REPORT"], _outcomes)
    if os.environ.get("SKYRL_PYTEST_MESSAGES"):
        _write(os.environ["SKYRL_PYTEST_MESSAGES"], _messages)
'''


class ReportError(ValueError):
    """A test report is missing or is not a JSON object of node ids to outcomes."""


def test_shell_command(test_command: str, report_path: str, plugin_dir: str, timeout_s: float) -> str:
    """One bash line that runs ``test_command`` with the report plugin, under ``timeout``.

    ``plugin_dir`` holds ``skyrl_swe_report.py`` and the clean runner (see :func:`write_plugin`) and
    ``report_path`` is where the report goes, both as seen by the shell that runs the line (a container's or
    the sandbox's paths). A plain pytest command runs through :func:`~skyrl_gym.integrity.runner.
    clean_pytest_command` (``python3 -I``, plugin autoload off, the plugin imported before the repository's
    code); another command runs as written with the plugin on ``PYTHONPATH`` and autoload off. Byte code is
    not written, so a run leaves no ``__pycache__`` in the repository and never reads a stale one. The line
    exits 124 (or 137) when the run outlasts ``timeout_s``.
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    seconds = max(1, math.ceil(timeout_s))
    report = f"SKYRL_PYTEST_REPORT={shlex.quote(report_path)}"
    clean = clean_pytest_command(test_command, plugin_dir, PLUGIN_MODULE)
    if clean is not None:
        return f"{report} timeout -k 5 {seconds} {clean}"
    return (
        f"{report} PYTHONPATH={shlex.quote(plugin_dir)} {CLEAN_ENV} "
        f"timeout -k 5 {seconds} {test_command} -p {PLUGIN_MODULE}"
    )


test_shell_command.__test__ = False  # a helper, not a test, for pytest modules that import it


def parse_report(text: str) -> dict[str, str]:
    """The outcomes in a report's text: node id -> ``passed`` / ``failed`` / ``error`` / ``skipped``.

    Raises :class:`ReportError` when the text is not JSON, not an object, or holds another outcome.
    """
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise ReportError(
            f"the test report is not JSON ({exc}); did the run end before pytest finished?"
        ) from None
    if not isinstance(data, dict):
        raise ReportError(f"the test report is a JSON {type(data).__name__}, not an object of node ids")
    for nodeid, outcome in data.items():
        if outcome not in OUTCOMES:
            raise ReportError(
                f"test {nodeid!r} has outcome {outcome!r}; expected one of {', '.join(OUTCOMES)}"
            )
    return data


@dataclass
class TestGrade:
    """The listed tests sorted by what happened to them; ``resolved`` when every one of them passed.

    A listed test that is not in the report at all (its module failed to import, or it was deleted) is in
    ``missing`` and counts as failed; it is not repeated in the failed lists.
    """

    __test__ = False  # not a test class, whatever pytest thinks of the name

    resolved: bool
    f2p_passed: list[str] = field(default_factory=list)
    f2p_failed: list[str] = field(default_factory=list)
    p2p_passed: list[str] = field(default_factory=list)
    p2p_failed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        """The grade as plain data (for metadata and logs)."""
        return {
            "resolved": self.resolved,
            "f2p_passed": list(self.f2p_passed),
            "f2p_failed": list(self.f2p_failed),
            "p2p_passed": list(self.p2p_passed),
            "p2p_failed": list(self.p2p_failed),
            "missing": list(self.missing),
        }


def grade(outcomes: Mapping[str, str], fail_to_pass: Sequence[str], pass_to_pass: Sequence[str]) -> TestGrade:
    """Grade a run's ``outcomes`` against an instance's lists: resolved when every listed test passed.

    Raises :class:`ValueError` when both lists are empty (nothing would judge the fix).
    """
    if not fail_to_pass and not pass_to_pass:
        raise ValueError("an instance needs at least one FAIL_TO_PASS or PASS_TO_PASS test to be graded")
    result = TestGrade(resolved=False)
    for names, passed, failed in (
        (fail_to_pass, result.f2p_passed, result.f2p_failed),
        (pass_to_pass, result.p2p_passed, result.p2p_failed),
    ):
        for nodeid in names:
            outcome = outcomes.get(nodeid)
            if outcome is None:
                result.missing.append(nodeid)
            elif outcome == "passed":
                passed.append(nodeid)
            else:
                failed.append(nodeid)
    result.resolved = not (result.f2p_failed or result.p2p_failed or result.missing)
    return result


def plugin_files() -> dict[str, str]:
    """The report plugin and the clean runner, by file name (what a plugin folder holds)."""
    return {f"{PLUGIN_MODULE}.py": PLUGIN_SOURCE, f"{RUNNER_MODULE}.py": RUNNER_SOURCE}


def write_plugin(folder: str | os.PathLike) -> Path:
    """Write the report plugin (``folder/skyrl_swe_report.py``) and the clean runner; return the plugin's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in plugin_files().items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder / f"{PLUGIN_MODULE}.py"


@dataclass
class TestRun:
    """One run of a suite on this machine: the outcomes, the exit code, the output's tail and its time."""

    __test__ = False

    outcomes: dict[str, str]
    returncode: int
    timed_out: bool
    output: str
    seconds: float
    messages: dict[str, str] = field(default_factory=dict)


def run_tests(
    repo: str | os.PathLike,
    test_command: str,
    timeout_s: float = 300.0,
    env: Mapping[str, str] | None = None,
    output_chars: int = 20000,
    python: str | None = DEBIAN_PYTHON,
    memory_mb: int | None = None,
) -> TestRun:
    """Run ``test_command`` in ``repo`` on this machine with the report plugin; return a :class:`TestRun`.

    ``python`` replaces a leading ``python3`` of the command: by default Debian's ``/usr/bin/python3``
    (with python3-pytest), the interpreter the containers run, whatever ``python3`` is first on ``PATH``.

    ``memory_mb`` caps the address space of the run (a mutated loop that grows without end fails instead
    of taking the machine). ``messages`` holds the failure messages of the failed tests.
    A run that times out has ``timed_out`` set and the outcomes it got to (usually none). Raises
    :class:`ReportError` when pytest ended without writing a report (it could not start at all).
    """
    with tempfile.TemporaryDirectory(prefix="skyrl-swe-run-") as tmp:
        write_plugin(tmp)
        report = Path(tmp) / "report.json"
        messages = Path(tmp) / "messages.json"
        if python and test_command.startswith("python3 "):
            test_command = shlex.quote(python) + test_command[len("python3") :]
        line = test_shell_command(test_command, str(report), tmp, timeout_s)
        run_env = {
            k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_PLUGINS")
        }
        run_env["SKYRL_PYTEST_MESSAGES"] = str(messages)
        run_env.update(env or {})

        def limit_memory():  # runs in the child before bash starts; its children inherit the limit
            import resource

            size = memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (size, size))

        started = time.monotonic()
        proc = subprocess.run(
            ["bash", "-c", line],
            cwd=repo,
            env=run_env,
            capture_output=True,
            text=True,
            errors="replace",
            preexec_fn=limit_memory if memory_mb else None,
        )
        seconds = time.monotonic() - started
        output = (proc.stdout + proc.stderr)[-output_chars:]
        timed_out = proc.returncode in TIMEOUT_EXIT_CODES
        if report.is_file():
            outcomes = parse_report(report.read_text(encoding="utf-8"))
        elif timed_out:
            outcomes = {}
        else:
            raise ReportError(f"pytest wrote no report (exit {proc.returncode}) in {repo}:\n{output[-3000:]}")
        details = json.loads(messages.read_text(encoding="utf-8")) if messages.is_file() else {}
    return TestRun(outcomes, proc.returncode, timed_out, output, seconds, details)


def failing(outcomes: Mapping[str, str]) -> list[str]:
    """The node ids whose outcome is ``failed`` or ``error``, sorted."""
    return sorted(k for k, v in outcomes.items() if v in ("failed", "error"))


def passing(outcomes: Mapping[str, str], among: Iterable[str] | None = None) -> list[str]:
    """The node ids that passed (of ``among`` when given), sorted."""
    keys = outcomes if among is None else among
    return sorted(k for k in keys if outcomes.get(k) == "passed")
