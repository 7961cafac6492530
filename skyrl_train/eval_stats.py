"""The old import path of :mod:`skyrl_train.evaluation.stats`, kept for one release."""

from skyrl_train.evaluation.stats import behaviour_shares, episode_behaviour, mean_se, paired_change

__all__ = ["behaviour_shares", "episode_behaviour", "mean_se", "paired_change"]
