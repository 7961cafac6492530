"""skyrl_wordle: a Wordle-style environment for skyrl_gym, packaged the way you would package your own.

Installing the package is enough: its ``pyproject.toml`` names :func:`register_envs` in the entry-point
group ``skyrl_gym.envs``, which ``import skyrl_gym`` loads, so ``skyrl_gym.make("wordle")`` and
``gymnasium.make("skyrl_gym/wordle")`` find the environment.
"""

from __future__ import annotations

__all__ = ["register_envs"]
__version__ = "0.1.0"


def register_envs() -> None:
    """Register ``wordle`` with skyrl_gym (called through the ``skyrl_gym.envs`` entry point).

    The entry point is a ``"module:Class"`` string, so the environment's module is imported only when the
    environment is made. Registering again with the same arguments does nothing.
    """
    import skyrl_gym

    skyrl_gym.register(
        id="wordle",
        entry_point="skyrl_wordle.env:WordleEnv",
        budget={"step_timeout_s": 5.0, "episode_timeout_s": 300.0, "max_observation_chars": 1024},
        description="guess a five-letter word in six tries, with per-letter feedback (<guess>word</guess>)",
    )
