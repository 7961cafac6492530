"""RL algorithms: advantage estimators, policy losses, KL, entropy, value loss and loss reductions.

Importing this package registers the built-ins: estimators ``grpo``, ``dr_grpo``, ``rloo``, ``raft``,
``reinforce++``, ``gae`` and policy losses ``ppo`` (alias ``regular``), ``dual_clip``, ``gspo``. Add your own with
:func:`register_advantage_estimator` / :func:`register_policy_loss` and select them by name in the config.

Everything works on [B, T] tensors over the response positions of a
:class:`~skyrl_train.training.batch.TrainingBatch` with a ``response_mask`` (1 on model-generated tokens); masked-out
positions never contribute.
"""

from skyrl_train.training.algorithms.advantages import (
    compute_batch_advantages,
    dr_grpo,
    gae,
    grpo,
    raft,
    reinforce_plus_plus,
    rloo,
)
from skyrl_train.training.algorithms.kl import KL_ESTIMATORS, apply_kl_in_reward, kl_loss, kl_penalty
from skyrl_train.training.algorithms.logits import entropy_from_logits, log_probs_from_logits
from skyrl_train.training.algorithms.policy_loss import dual_clip_loss, gspo_loss, policy_objective, ppo_loss
from skyrl_train.training.algorithms.reductions import (
    LOSS_REDUCTIONS,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    reduce_loss,
)
from skyrl_train.training.algorithms.registry import (
    ADVANTAGE_ESTIMATORS,
    POLICY_LOSSES,
    UnknownAlgorithmError,
    get_advantage_estimator,
    get_policy_loss,
    register_advantage_estimator,
    register_policy_loss,
)
from skyrl_train.training.algorithms.value_loss import value_loss

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "KL_ESTIMATORS",
    "LOSS_REDUCTIONS",
    "POLICY_LOSSES",
    "UnknownAlgorithmError",
    "apply_kl_in_reward",
    "compute_batch_advantages",
    "dr_grpo",
    "dual_clip_loss",
    "entropy_from_logits",
    "gae",
    "get_advantage_estimator",
    "get_policy_loss",
    "grpo",
    "gspo_loss",
    "kl_loss",
    "kl_penalty",
    "log_probs_from_logits",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "policy_objective",
    "ppo_loss",
    "raft",
    "reduce_loss",
    "register_advantage_estimator",
    "register_policy_loss",
    "reinforce_plus_plus",
    "rloo",
    "value_loss",
]
