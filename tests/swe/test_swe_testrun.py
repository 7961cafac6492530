"""The pytest report plugin, the test command line, the report parser and the grader of the ``swe`` tests.

The plugin runs for real under Debian's python3 with python3-pytest (the interpreter of the images) on a
small suite written here that has every kind of outcome.
"""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from skyrl_gym.envs.swe.testrun import (
    DEBIAN_PYTHON,
    PLUGIN_MODULE,
    ReportError,
    grade,
    parse_report,
    run_tests,
    test_shell_command,
    write_plugin,
)


def _debian_pytest() -> bool:
    try:
        proc = subprocess.run(
            [DEBIAN_PYTHON, "-m", "pytest", "--version"], cwd="/", capture_output=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


needs_pytest = pytest.mark.skipif(
    not _debian_pytest(), reason="Debian's python3-pytest is not installed (make sysdeps installs it)"
)

SUITE = """
import pytest

def test_ok():
    assert 1 + 1 == 2

def test_bad():
    assert [1, 2] == [1, 3]

@pytest.fixture
def broken():
    raise RuntimeError("set-up fails")

def test_setup_error(broken):
    pass

@pytest.fixture
def noisy_teardown():
    yield
    raise RuntimeError("tear-down fails")

def test_teardown_error(noisy_teardown):
    pass

@pytest.mark.skip(reason="not here")
def test_skipped():
    pass

@pytest.mark.xfail(strict=True)
def test_strict_xpass():
    pass

@pytest.mark.xfail
def test_xfail():
    assert False

@pytest.mark.parametrize("word", ["a b", "c[d]"])
def test_param(word):
    assert word
"""


@pytest.fixture
def suite(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_kinds.py").write_text(textwrap.dedent(SUITE))
    (tmp_path / "tests" / "test_broken_import.py").write_text("import no_such_module_here\n")
    return tmp_path


@needs_pytest
def test_plugin_folds_every_phase_into_one_outcome(suite):
    # a module that fails to import stops the session unless pytest is told to go on
    command = "python3 -m pytest -p no:cacheprovider --continue-on-collection-errors tests"
    run = run_tests(suite, command, timeout_s=120)
    assert run.returncode == 1 and not run.timed_out
    assert run.outcomes == {
        "tests/test_broken_import.py": "error",
        "tests/test_kinds.py::test_ok": "passed",
        "tests/test_kinds.py::test_bad": "failed",
        "tests/test_kinds.py::test_setup_error": "error",
        "tests/test_kinds.py::test_teardown_error": "error",
        "tests/test_kinds.py::test_skipped": "skipped",
        "tests/test_kinds.py::test_strict_xpass": "failed",
        "tests/test_kinds.py::test_xfail": "skipped",
        "tests/test_kinds.py::test_param[a b]": "passed",
        "tests/test_kinds.py::test_param[c[d]]": "passed",
    }
    # failure messages: the exception line and pytest's explanation, no source lines
    assert "assert [1, 2] == [1, 3]" in run.messages["tests/test_kinds.py::test_bad"]
    assert "RuntimeError: set-up fails" in run.messages["tests/test_kinds.py::test_setup_error"]
    assert "no_such_module_here" in run.messages["tests/test_broken_import.py"]
    assert "tests/test_kinds.py::test_ok" not in run.messages
    # byte code is switched off: the run leaves the repository as it was
    assert not list(suite.rglob("__pycache__"))


@needs_pytest
def test_run_of_selected_node_ids(suite):
    command = "python3 -m pytest -p no:cacheprovider 'tests/test_kinds.py::test_param[a b]' tests/test_kinds.py::test_ok"
    run = run_tests(suite, command, timeout_s=120)
    assert run.returncode == 0
    assert run.outcomes == {
        "tests/test_kinds.py::test_param[a b]": "passed",
        "tests/test_kinds.py::test_ok": "passed",
    }


@needs_pytest
def test_a_run_past_its_timeout_is_named(tmp_path):
    (tmp_path / "test_slow.py").write_text("import time\n\ndef test_sleeps():\n    time.sleep(60)\n")
    run = run_tests(tmp_path, "python3 -m pytest -p no:cacheprovider test_slow.py", timeout_s=2)
    assert run.timed_out and run.returncode == 124
    assert run.outcomes == {}


def test_shell_line_carries_the_plugin_the_report_and_the_timeout(tmp_path):
    line = test_shell_command("python3 -m pytest tests", "/tmp/my report.json", "/opt/plugin", 30.5)
    assert line.startswith("SKYRL_PYTEST_REPORT='/tmp/my report.json' timeout -k 5 31 env ")
    # a plain pytest command runs in a clean interpreter through the runner, with the plugin named
    assert "python3 -I /opt/plugin/skyrl_clean_pytest.py /opt/plugin skyrl_swe_report -- tests" in line
    assert "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1" in line and "-u PYTHONPATH" in line
    # another command runs as written, the plugin on PYTHONPATH, autoload off all the same
    other = test_shell_command("make check", "r.json", "/opt/plugin", 10)
    assert "PYTHONPATH=/opt/plugin" in other and "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1" in other
    assert other.endswith("timeout -k 5 10 make check -p skyrl_swe_report")
    with pytest.raises(ValueError, match="timeout_s"):
        test_shell_command("python3 -m pytest", "r.json", "/p", 0)
    path = write_plugin(tmp_path)
    assert path.name == f"{PLUGIN_MODULE}.py"
    compile(path.read_text(), str(path), "exec")


@needs_pytest
def test_shell_line_runs_in_bash(suite, tmp_path):
    plugin = write_plugin(tmp_path / "plugin").parent
    report = tmp_path / "out.json"
    line = test_shell_command(
        f"{DEBIAN_PYTHON} -m pytest -p no:cacheprovider tests/test_kinds.py", str(report), str(plugin), 60
    )
    proc = subprocess.run(["bash", "-c", line], cwd=suite, capture_output=True, text=True)
    assert proc.returncode == 1
    outcomes = parse_report(report.read_text())
    assert outcomes["tests/test_kinds.py::test_ok"] == "passed" and len(outcomes) == 9


def test_parse_report_refuses_what_is_not_a_report():
    assert parse_report('{"t.py::a": "passed", "t.py::b": "error"}') == {
        "t.py::a": "passed",
        "t.py::b": "error",
    }
    with pytest.raises(ReportError, match="not JSON"):
        parse_report('{"t.py::a": "pass')
    with pytest.raises(ReportError, match="not an object"):
        parse_report(json.dumps(["t.py::a"]))
    with pytest.raises(ReportError, match="outcome 'ok'"):
        parse_report(json.dumps({"t.py::a": "ok"}))


def test_grade_sorts_the_listed_tests():
    outcomes = {"a": "passed", "b": "passed", "c": "failed", "d": "error", "e": "skipped"}
    good = grade(outcomes, ["a"], ["b"])
    assert good.resolved and good.f2p_passed == ["a"] and good.p2p_passed == ["b"]
    bad = grade(outcomes, ["a", "c"], ["b", "d", "e", "gone"])
    assert not bad.resolved
    assert bad.f2p_failed == ["c"] and bad.p2p_failed == ["d", "e"] and bad.missing == ["gone"]
    assert bad.as_dict()["missing"] == ["gone"]
    # a test that vanished from the report is a failure, not a pass
    assert not grade({"b": "passed"}, ["a"], ["b"]).resolved
    with pytest.raises(ValueError, match="at least one"):
        grade(outcomes, [], [])
