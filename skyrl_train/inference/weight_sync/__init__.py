"""Weight sync from the trainer to the inference engine: one strategy per run, chosen by name.

See :mod:`skyrl_train.inference.weight_sync.base` for the interface and the strategies (``in_process``,
``shared_memory``, ``gloo``, ``nccl``, ``cuda_ipc``).
"""

from skyrl_train.inference.weight_sync.base import (
    WEIGHT_SYNCS,
    SyncReport,
    WeightReceiver,
    WeightSync,
    make_weight_sync,
    weight_sync_name,
)

__all__ = [
    "WEIGHT_SYNCS",
    "SyncReport",
    "WeightReceiver",
    "WeightSync",
    "make_weight_sync",
    "weight_sync_name",
]
