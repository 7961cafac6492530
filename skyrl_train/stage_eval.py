"""The old import path of :mod:`skyrl_train.evaluation.stages`, kept for one release."""

from skyrl_train.evaluation.stages import STAGES, EvalSet, StageEvaluator, StageRecord

__all__ = ["STAGES", "EvalSet", "StageEvaluator", "StageRecord"]
