"""Training workers: the policy, reference and critic models on PyTorch FSDP2, in process or in a group.

``PolicyWorker`` / ``RefWorker`` / ``CriticWorker`` (:mod:`.fsdp`) run in the calling process (unsharded)
or, inside a :class:`WorkerGroup` (:mod:`.group`), one per process with the model sharded by FSDP2.
:func:`make_workers` picks between the two from the number of processes.
"""

from skyrl_train.workers.fsdp import CriticWorker, PolicyWorker, RefWorker, ValueModel
from skyrl_train.workers.group import WorkerGroup, WorkerGroupError, make_workers

__all__ = [
    "CriticWorker",
    "PolicyWorker",
    "RefWorker",
    "ValueModel",
    "WorkerGroup",
    "WorkerGroupError",
    "make_workers",
]
