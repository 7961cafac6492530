"""A Tinker-compatible training API: the official ``tinker`` client trains and samples through this project.

``skyrl-train serve`` starts the server (:mod:`skyrl_train.tinker.server`: the HTTP routes) over
:mod:`skyrl_train.tinker.service` (sessions and requests; what it records in :mod:`skyrl_train.tinker.store`);
the wire format is described in :mod:`skyrl_train.tinker.protocol`, the queues, batching and futures in
:mod:`skyrl_train.tinker.futures`, and the model work in :mod:`skyrl_train.tinker.backend` (its samplers in
:mod:`skyrl_train.tinker.samplers`). Importing this package imports no heavy library.
"""
