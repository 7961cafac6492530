"""Earlier import paths of moved modules, kept for one release.

:data:`MOVED` maps each old dotted name to its new home, a package's old name covering its submodules
(``skyrl_train.workers.policy`` is ``skyrl_train.training.workers.policy``). An import finder, installed when
``skyrl_train`` is imported, answers an old name with the very module object of its new home, imported on
first use; ``sys.modules`` then holds it under both names, so an old import, ``isinstance`` checks and a
patch through the old name all reach the one module, and an old name costs nothing until it is used. The
finder is a :class:`skyrl_gym.compat.MovedModules`, the class ``skyrl_gym`` uses for its own moved names.
"""

from __future__ import annotations

from skyrl_gym.compat import MovedModules

__all__ = ["MOVED", "install", "new_name"]

MOVED: dict[str, str] = {
    # rollouts
    "skyrl_train.agent.registry": "skyrl_train.rollout.agents",
    # the agent tools live with every other tool
    "skyrl_train.agent.tools": "skyrl_gym.tools.agent",
    "skyrl_train.rollout.tools": "skyrl_gym.tools.agent",
    "skyrl_train.agent": "skyrl_train.rollout",
    "skyrl_train.dispatch": "skyrl_train.rollout.dispatch",
    "skyrl_train.generator.base": "skyrl_train.rollout.records",
    "skyrl_train.generator.multi_turn": "skyrl_train.rollout",
    "skyrl_train.generator": "skyrl_train.rollout",
    # evaluation
    "skyrl_train.stage_eval": "skyrl_train.evaluation.stages",
    "skyrl_train.eval_stats": "skyrl_train.evaluation.stats",
    # training: tensors in, tensors out
    "skyrl_train.workers": "skyrl_train.training.workers",
    "skyrl_train.algorithms": "skyrl_train.training.algorithms",
    "skyrl_train.batch": "skyrl_train.training.batch",
    "skyrl_train.checkpoint": "skyrl_train.training.checkpoint",
    "skyrl_train.lora": "skyrl_train.training.lora",
    # the loop
    "skyrl_train.trainer": "skyrl_train.loop.trainer",
    "skyrl_train.async_training": "skyrl_train.loop.async_training",
    "skyrl_train.warmup": "skyrl_train.loop.warmup",
    "skyrl_train.dynamic_sampling": "skyrl_train.loop.dynamic_sampling",
    # inference
    "skyrl_train.weight_sync": "skyrl_train.inference.weight_sync",
}
"""Old dotted name -> new dotted name; the longest matching old prefix wins."""


_FINDER = MovedModules("skyrl_train.", MOVED)
new_name = _FINDER.new_name
"""The new home of an old module name (None: not a moved name)."""


def install() -> None:
    """Answer the old names (``skyrl_train/__init__.py`` calls it; see :class:`skyrl_gym.compat.MovedModules`)."""
    _FINDER.install()
