"""pytest plugin (registered through the ``pytest11`` entry point): the ``skyrl_check_env`` fixture."""

from __future__ import annotations

import pytest

from skyrl_gym.testing.checker import check_env


@pytest.fixture
def skyrl_check_env():
    """The :func:`skyrl_gym.testing.check_env` function: ``skyrl_check_env(lambda: make("my_env"))``."""
    return check_env
