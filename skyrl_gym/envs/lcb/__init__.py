"""SkyRL's ``lcb`` environment: LiveCodeBench-style programs judged by their tests in the sandbox.

Module paths and names are SkyRL's: ``skyrl_gym.envs.lcb.env.LCBEnv`` and
``skyrl_gym.envs.lcb.livecodebench.compute_score``.
"""

from skyrl_gym.envs.lcb.env import LCBConfig, LCBEnv
from skyrl_gym.envs.lcb.livecodebench import compute_score, extract_code_from_model

__all__ = ["LCBConfig", "LCBEnv", "compute_score", "extract_code_from_model"]
