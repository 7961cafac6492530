"""A Tinker-compatible training API: the official ``tinker`` client trains and samples through this project.

``skyrl-train serve`` starts the server (:mod:`skyrl_train.tinker.server`); the wire format is described in
:mod:`skyrl_train.tinker.protocol`, the queues, batching and futures in :mod:`skyrl_train.tinker.futures`,
and the model work in :mod:`skyrl_train.tinker.backend`. Importing this package imports no heavy library.
"""
