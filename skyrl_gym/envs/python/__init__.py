"""The ``python`` environment: math with a sandboxed Python interpreter (ToRL style), tasks from reasoning-gym.

See :mod:`skyrl_gym.envs.python.env` for the protocol and the reward, :mod:`.tasks` for the task set.
"""

from skyrl_gym.envs.python.env import PythonEnv, PythonEnvConfig, PythonToolGroup

__all__ = ["PythonEnv", "PythonEnvConfig", "PythonToolGroup"]
