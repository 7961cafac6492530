"""The ``rlm`` environment: recursive language models (SkyRL's RLM protocol) with the REPL in a sandbox.

See :mod:`skyrl_gym.envs.rlm.env` for the episode, :mod:`.repl` for the REPL and its LM callbacks,
:mod:`.tasks` for the bundled long-context tasks.
"""

from skyrl_gym.envs.rlm.env import BaseRLMEnv, RLMEnv, RLMEnvConfig
from skyrl_gym.envs.rlm.repl import PersistentREPL, REPLResult, RLMSandboxError

__all__ = ["BaseRLMEnv", "PersistentREPL", "REPLResult", "RLMEnv", "RLMEnvConfig", "RLMSandboxError"]
