"""SkyRL's ``searchcode`` environment: a search tool and a sandboxed Python tool, one call per turn.

Module path and name are SkyRL's: ``skyrl_gym.envs.searchcode.env.SearchCodeEnv``.
"""

from skyrl_gym.envs.searchcode.env import SearchCodeConfig, SearchCodeEnv

__all__ = ["SearchCodeConfig", "SearchCodeEnv"]
