"""Evaluation: how well a policy plays an environment's tasks, and how much a stage of training changed that.

- :mod:`~skyrl_train.evaluation.passk`: rows rolled out through the agent runner and scored as pass@k per
  task family (the trainer's ``data.val_data`` evaluation and ``skyrl-train eval``).
- :mod:`~skyrl_train.evaluation.stages`: the stage evaluations of ``data.eval_sets``, question by question
  before training, after the warm-up and after RL, and the run's stage table.
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
    read_rows,
    run_eval,
)
from skyrl_train.evaluation.stages import STAGES, EvalSet, StageEvaluator, StageRecord
from skyrl_train.evaluation.stats import behaviour_shares, episode_behaviour, mean_se, paired_change

__all__ = [
    "STAGES",
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
    "read_rows",
    "run_eval",
]
