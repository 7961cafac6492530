"""The training loop: the :class:`~skyrl_train.loop.trainer.Trainer` (rollouts, then updates, step by step;
checkpoints, evaluations, recovery), its asynchronous form (``async_training.py``: rollouts run ahead of the
updates), the supervised warm-up (``warmup.py``) and dynamic sampling of groups (``dynamic_sampling.py``).

The loop joins the other packages: rollouts (:mod:`skyrl_train.rollout`), engines
(:mod:`skyrl_train.inference`), training (:mod:`skyrl_train.training`) and evaluation
(:mod:`skyrl_train.evaluation`). None of them imports it back.
"""
