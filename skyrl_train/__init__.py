"""skyrl_train: multi-turn RL training of language models on skyrl_gym environments."""

from skyrl_train import compat as _compat

_compat.install()  # the earlier import paths of moved modules (see skyrl_train.compat)
