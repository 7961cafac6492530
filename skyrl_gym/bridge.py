"""The Gymnasium bridge: every skyrl_gym environment as a real ``gymnasium.Env``.

``import skyrl_gym`` registers each environment id ``X`` as ``skyrl_gym/X`` in Gymnasium's registry, so::

    env = gymnasium.make("skyrl_gym/text2sql")
    obs, info = env.reset(seed=0)                      # a task from the environment's default set
    obs, info = env.reset(options={"prompt": [...], "extras": {...}})
    obs, reward, terminated, truncated, info = env.step("<sql>SELECT 1</sql>")

Observations and actions are strings. An observation is the text of the new chat messages (joined by a
blank line); ``info["messages"]`` holds the messages themselves. ``terminated`` is set when the task ended;
``truncated`` when a budget ran out or the environment failed (``info["end"]`` tells which).
"""

from __future__ import annotations

import copy
import string
from typing import Any

import gymnasium
from gymnasium import spaces

from skyrl_gym.envs import registration

__all__ = ["GymnasiumEnv", "TextSpace", "NAMESPACE", "register_all"]

NAMESPACE = "skyrl_gym"
MAX_TEXT_LENGTH = 2**31 - 1


class TextSpace(spaces.Text):
    """A string of any characters, up to ``max_length`` of them.

    Gymnasium's ``Text`` only contains strings over its charset; model output and tool output can hold any
    character, so membership here only checks the type and length. Samples are short printable strings
    (at most ``sample_max_length`` characters) so that checkers and tests stay fast.
    """

    def __init__(self, max_length: int = MAX_TEXT_LENGTH, *, sample_max_length: int = 64, seed: Any = None):
        super().__init__(max_length=max_length, min_length=0, charset=string.printable, seed=seed)
        self.sample_max_length = sample_max_length

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is None and probability is None:
            top = min(self.max_length, self.sample_max_length)
            length = int(self.np_random.integers(self.min_length, top + 1))
            return super().sample(mask=(length, None))
        return super().sample(mask=mask, probability=probability)

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"


def render_messages(messages: list[dict[str, Any]]) -> str:
    """The observation string for a list of chat messages: their contents, separated by a blank line."""
    return "\n\n".join(str(m.get("content", "")) for m in messages)


class GymnasiumEnv(gymnasium.Env[str, str]):
    """A skyrl_gym environment behind Gymnasium's API.

    Args:
        env_id: the skyrl_gym id.
        render_mode: must be ``None``; text environments do not render.
        make_kwargs: passed to :func:`skyrl_gym.make` (``env_config``, ``extras``, ``budget``...).
    """

    metadata = {"render_modes": []}

    def __init__(self, env_id: str, render_mode: str | None = None, **make_kwargs: Any):
        if render_mode is not None:
            raise ValueError(f"skyrl_gym environments do not render; got render_mode={render_mode!r}")
        self.render_mode = None
        self.env_id = env_id
        self.env = registration.make(env_id, **make_kwargs)
        self.observation_space = TextSpace()
        self.action_space = TextSpace()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        task_seed = int(self.np_random.integers(0, 2**31 - 1))
        messages, info = self.env.reset(seed=task_seed, options=copy.deepcopy(options))
        info = copy.deepcopy(dict(info or {}))
        info["messages"] = copy.deepcopy(list(messages))
        return render_messages(messages), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        output = self.env.step(action)
        info = copy.deepcopy(output.get("metadata") or {})
        done = bool(output["done"])
        terminated = done and info.get("end") == "terminated"
        truncated = done and not terminated
        info["messages"] = copy.deepcopy(list(output["observations"]))
        return render_messages(output["observations"]), float(output["reward"]), terminated, truncated, info

    def close(self) -> None:
        self.env.close()
        super().close()


def _gymnasium_id(env_id: str) -> str:
    return f"{NAMESPACE}/{env_id}"


def _register_one(env_spec: registration.EnvSpec) -> None:
    gym_id = _gymnasium_id(env_spec.id)
    if gym_id in gymnasium.registry:
        return
    gymnasium.register(
        id=gym_id,
        entry_point="skyrl_gym.bridge:GymnasiumEnv",
        kwargs={"env_id": env_spec.id},
        nondeterministic=env_spec.nondeterministic,
        disable_env_checker=False,
    )


def _deregister_one(env_id: str) -> None:
    gymnasium.registry.pop(_gymnasium_id(env_id), None)


def register_all() -> None:
    """Mirror the skyrl_gym registry into Gymnasium's, now and for every later registration."""
    for env_spec in list(registration.registry.values()):
        _register_one(env_spec)
    if _register_one not in registration._on_register:
        registration._on_register.append(_register_one)
        registration._on_deregister.append(_deregister_one)
