"""SkyRL's GSM8K environments: ``gsm8k`` (one answer) and ``gsm8k_multi_turn`` (per-turn rewards, retries).

Module paths and names are SkyRL's: ``skyrl_gym.envs.gsm8k.env.GSM8kEnv``,
``skyrl_gym.envs.gsm8k.multi_turn_env.GSM8kMultiTurnEnv`` and ``skyrl_gym.envs.gsm8k.utils.compute_score`` (the
scoring lives in :mod:`.scoring`; SkyRL's ``utils`` path is kept by :mod:`skyrl_gym.compat`).
Only the standard library is imported (reasoning-gym when its tasks are drawn).
"""

from skyrl_gym.envs.gsm8k.env import GSM8kConfig, GSM8kEnv
from skyrl_gym.envs.gsm8k.multi_turn_env import GSM8kMultiTurnConfig, GSM8kMultiTurnEnv
from skyrl_gym.envs.gsm8k.scoring import compute_score, extract_solution

__all__ = [
    "GSM8kConfig",
    "GSM8kEnv",
    "GSM8kMultiTurnConfig",
    "GSM8kMultiTurnEnv",
    "compute_score",
    "extract_solution",
]
