"""SkyRL's ``lcb`` environment: LiveCodeBench-style programs judged by their tests in the sandbox.

Module paths and names are SkyRL's: ``skyrl_gym.envs.lcb.env.LCBEnv`` and
``skyrl_gym.envs.lcb.livecodebench.compute_score`` (the judging lives in :mod:`.scoring`; SkyRL's
``livecodebench`` path is kept by :mod:`skyrl_gym.compat`).
"""

from skyrl_gym.envs.lcb.env import LCBConfig, LCBEnv
from skyrl_gym.envs.lcb.scoring import compute_score, extract_code_from_model

__all__ = ["LCBConfig", "LCBEnv", "compute_score", "extract_code_from_model"]
