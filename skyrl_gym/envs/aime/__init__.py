"""SkyRL's ``aime`` environment: competition math scored 1.0 / -1.0 by Minerva's answer normalisation.

Module paths and names are SkyRL's: ``skyrl_gym.envs.aime.env.AIMEEnv`` and
``skyrl_gym.envs.aime.utils.compute_score`` (the scoring lives in :mod:`.scoring`; SkyRL's ``utils`` path is kept
by :mod:`skyrl_gym.compat`). Only the standard library is imported.
"""

from skyrl_gym.envs.aime.env import AIMEEnv
from skyrl_gym.envs.aime.scoring import compute_score, normalize_final_answer

__all__ = ["AIMEEnv", "compute_score", "normalize_final_answer"]
