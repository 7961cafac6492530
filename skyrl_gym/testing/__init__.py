"""The test kit: conformance checking and property testing of environments.

- :func:`check_env` plays real episodes and checks every rule in :data:`RULES` (types, determinism,
  isolation, budgets, adversarial actions, the oracle and the no-op), naming each rule it finds broken.
- :func:`play_episode` plays a list of actions and checks each step; with the hypothesis strategies in
  :mod:`skyrl_gym.testing.strategies` it makes property tests.
- :func:`conformance_test` turns a factory into a pytest test; the pytest plugin (loaded automatically once
  the package is installed) also offers the fixture ``skyrl_check_env``.

Importing this module imports hypothesis only through :mod:`skyrl_gym.testing.strategies`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from skyrl_gym.core import Env
from skyrl_gym.testing.checker import (
    RULES,
    CheckReport,
    ConformanceError,
    Failure,
    adversarial_action_list,
    check_env,
    check_step_output,
    play_episode,
)

__all__ = [
    "RULES",
    "CheckReport",
    "ConformanceError",
    "Failure",
    "adversarial_action_list",
    "check_env",
    "check_step_output",
    "conformance_test",
    "play_episode",
]


def conformance_test(factory: Callable[[], Env], **check_kwargs: Any) -> Callable[[], None]:
    """A pytest test function that runs :func:`check_env` on ``factory``::

    test_my_env_conforms = conformance_test(lambda: skyrl_gym.make("my_env"))
    """

    def test_conformance() -> None:
        check_env(factory, **check_kwargs)

    return test_conformance
