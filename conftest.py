"""Test configuration for the whole repository.

- hypothesis profiles: no per-example deadline (CI machines are noisy); ``HYPOTHESIS_PROFILE=thorough``
  for many more examples;
- under ``CI=true`` a skipped test is a failure: CI installs every part the tests need (databases, the
  embedded model, PyTorch), so a skip there means a part is missing. Only tests marked ``gpu`` (they need a
  CUDA GPU; CI never has one) may skip; a skip's reason does not exempt it. An expected failure (``xfail``)
  is a failure there too: a path known to be broken is not a passing test;
- the fast lane (``make test-fast``: unit and property tests, about 4 minutes on 2 cores) leaves out the tests
  marked ``slow``: those that use a real model or Docker (:data:`SLOW_FIXTURES`) and those recorded at
  :data:`SLOW_AT_S` seconds or more in ``tests/durations.json``;
- a handler a test leaves on the root logger that writes to a file or a stream (a library configuring
  logging for its run, as tinker-cookbook's recipes do) is removed when the test ends: its file lies in the
  test's tmp_path, which is deleted when the test passes, and a later reopening (after another library's
  ``dictConfig`` closed it) raised FileNotFoundError in whatever test logged next.
"""

import json
import logging
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", deadline=None, max_examples=500, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

_CI = os.environ.get("CI", "").lower() == "true"


def _fail_skip(report, keywords=()) -> None:
    if not _CI:
        return
    if hasattr(report, "wasxfail"):  # xfailed (reported as skipped) or xpassed
        report.outcome = "failed"
        report.longrepr = f"an expected failure under CI=true, where every test must pass: {report.wasxfail}"
    elif report.skipped and "gpu" not in keywords:
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under CI=true, where every part the tests need is installed: {report.longrepr}"
        )


SLOW_FIXTURES = frozenset({"tiny_model", "docker_engine"})
"""Fixtures that put a test in the integration lane (marked ``slow``): a real model trained or served, Docker
containers. Used directly or through another fixture."""
DURATIONS = Path(__file__).parent / "tests" / "durations.json"
"""Seconds each test took (setup, call and teardown) on a 2-core machine, for the tests that took half a second
or more: ``pytest --record-durations`` (``make durations``) rewrites the entries of the tests it ran."""
SLOW_AT_S = 1.0
"""A test recorded at this many seconds or more is in the integration lane (marked ``slow``)."""


def pytest_addoption(parser):
    parser.addoption(
        "--record-durations",
        action="store_true",
        help=f"write the seconds of each test run to {DURATIONS.relative_to(DURATIONS.parents[1])}",
    )


def pytest_collection_modifyitems(config, items):
    recorded = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())) or (
            recorded.get(item.nodeid, 0.0) >= SLOW_AT_S
        ):
            item.add_marker(pytest.mark.slow)


_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report):
    _seconds[report.nodeid] = _seconds.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session):
    if not session.config.getoption("--record-durations", False) or not _seconds:
        return
    recorded = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    for nodeid, seconds in _seconds.items():
        recorded.pop(nodeid, None)
        if seconds >= 0.5:
            recorded[nodeid] = round(seconds, 2)
    DURATIONS.write_text(json.dumps(recorded, indent=0, sort_keys=True) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_skip(outcome.get_result(), item.keywords)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_skip(outcome.get_result())


@pytest.fixture(autouse=True)
def _root_logger_left_as_found():
    root = logging.getLogger()
    before, level = set(root.handlers), root.level
    yield
    for handler in root.handlers[:]:
        # pytest's own capture handlers are subclasses, and are left to pytest
        if handler not in before and (
            isinstance(handler, logging.FileHandler) or type(handler) is logging.StreamHandler
        ):
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
