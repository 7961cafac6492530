"""Training workers: the policy, reference and critic models on PyTorch FSDP2, in process or in a group.

``PolicyWorker`` (:mod:`.policy`), ``RefWorker`` (:mod:`.reference`) and ``CriticWorker`` (:mod:`.critic`)
share :class:`~skyrl_train.training.workers.base.FSDPWorker` (model building, sharding, forward passes, optimizer,
checkpoints) and :mod:`.batching` (slices, micro-batches, loss weights). Each runs in the calling process
(unsharded) or, inside a :class:`WorkerGroup` (:mod:`.group`), one per process with the model sharded by
FSDP2. :func:`make_workers` picks between the two from the number of processes.
"""

from skyrl_train.training.workers.base import FSDPWorker, build_lr_scheduler
from skyrl_train.training.workers.critic import CriticWorker, ValueModel
from skyrl_train.training.workers.group import (
    WORKER_GROUPS,
    WorkerGroup,
    WorkerGroupError,
    WorkerLostError,
    make_workers,
)
from skyrl_train.training.workers.policy import PolicyWorker
from skyrl_train.training.workers.reference import RefWorker

__all__ = [
    "WORKER_GROUPS",
    "CriticWorker",
    "FSDPWorker",
    "PolicyWorker",
    "RefWorker",
    "ValueModel",
    "WorkerGroup",
    "WorkerGroupError",
    "WorkerLostError",
    "build_lr_scheduler",
    "make_workers",
]
