"""skyrl_gym: Gymnasium-style text environments for LLM agents, compatible with SkyRL's ``skyrl_gym``.

    import skyrl_gym
    env = skyrl_gym.make("math", extras={...})
    observations, info = env.init(prompt)
    output = env.step("#### 42")

Importing the package registers the built-in environments, loads installed plugins (the entry-point group
``skyrl_gym.envs``) and mirrors every id into Gymnasium as ``skyrl_gym/<id>``. It imports nothing heavy.
As in SkyRL, the sub-modules ``envs``, ``tools`` and ``error`` are attributes of the package.
"""

# SkyRL exposes these modules on the package; ``error`` is its name for the errors module
from skyrl_gym import envs, errors as error, tools  # noqa: E402,I001
from skyrl_gym import compat as _compat
from skyrl_gym.budget import Budget
from skyrl_gym.core import Continuation, ConversationType, Env, EnvStepOutput, MessageType, Misstep, Task
from skyrl_gym.envs import (
    EnvSpec,
    deregister,
    load_plugins,
    make,
    pprint_registry,
    register,
    registry,
    spec,
)
from skyrl_gym.errors import (
    BudgetExceeded,
    EpisodeEndedError,
    EpisodeNotStartedError,
    Error,
    RegistrationError,
    UnknownEnvironmentError,
)
from skyrl_gym.guard import EpisodeGuard

__version__ = "0.1.0"

__all__ = [
    "Budget",
    "BudgetExceeded",
    "Continuation",
    "ConversationType",
    "Env",
    "EnvSpec",
    "EnvStepOutput",
    "EpisodeEndedError",
    "EpisodeGuard",
    "EpisodeNotStartedError",
    "Error",
    "MessageType",
    "Misstep",
    "RegistrationError",
    "Task",
    "UnknownEnvironmentError",
    "deregister",
    "envs",
    "error",
    "load_plugins",
    "make",
    "pprint_registry",
    "register",
    "registry",
    "spec",
    "tools",
]

_compat.install()  # the earlier import paths of moved modules (skyrl_gym.compat), before any plugin imports one
load_plugins()

from skyrl_gym import bridge as _bridge  # noqa: E402  (after the registry is filled)

_bridge.register_all()
