"""Test configuration for the whole repository.

- hypothesis profiles: no per-example deadline (CI machines are noisy); ``HYPOTHESIS_PROFILE=thorough``
  for many more examples;
- under ``CI=true`` a skipped test is a failure: CI installs every part the tests need (databases, the
  embedded model, PyTorch), so a skip there means a part is missing. Only tests that need a CUDA GPU (marked
  ``gpu``; CI never has one) may skip.
"""

import os

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


def _may_skip(report, keywords=()) -> bool:
    reason = str(report.longrepr)
    return "gpu" in keywords or "CUDA" in reason or "GPU" in reason


def _fail_skip(report, keywords=()) -> None:
    if _CI and report.skipped and not _may_skip(report, keywords):
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under CI=true, where every part the tests need is installed: {report.longrepr}"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not hasattr(report, "wasxfail"):
        _fail_skip(report, item.keywords)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_skip(outcome.get_result())
