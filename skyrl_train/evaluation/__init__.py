"""Evaluation: how well a policy plays an environment's tasks, and how much a stage of training changed that.

- :mod:`~skyrl_train.evaluation.passk`: rows rolled out through the agent runner (``play_rows``) and scored
  (``score_trajectories``: accuracy, pass@k, per task family); ``skyrl-train eval --env/--data``.
- :mod:`~skyrl_train.evaluation.stages`: the run's one evaluation mechanism: its evaluation sets
  (``data.eval_sets``, and ``data.val_data`` as the set ``val``) scored question by question before training,
  after the warm-up, during RL and after it, and the run's stage table.
- :mod:`~skyrl_train.evaluation.stats`: standard errors, paired changes and behaviour shares.

The package rolls out through the agent runner and an inference engine and never reaches the training side
(workers, algorithms, the trainer's loop): ``tests/test_structure.py`` holds it to that.
"""

from skyrl_train.evaluation.passk import (
    env_rows,
    evaluate_rows,
    format_episodes,
    format_table,
    pass_at_k,
    pass_at_k_table,
    play_rows,
    read_rows,
    run_eval,
    score_trajectories,
)
from skyrl_train.evaluation.stages import STAGES, VAL_SET, EvalSet, StageEvaluator, StageRecord
from skyrl_train.evaluation.stats import behaviour_shares, episode_behaviour, mean_se, paired_change

__all__ = [
    "STAGES",
    "VAL_SET",
    "EvalSet",
    "StageEvaluator",
    "StageRecord",
    "behaviour_shares",
    "env_rows",
    "episode_behaviour",
    "evaluate_rows",
    "format_episodes",
    "format_table",
    "mean_se",
    "paired_change",
    "pass_at_k",
    "pass_at_k_table",
    "play_rows",
    "read_rows",
    "run_eval",
    "score_trajectories",
]
