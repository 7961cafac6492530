"""The ``hf`` inference engine: a transformers model with continuous batching and a prefix cache.

:class:`HFEngine` (:mod:`.engine`) runs the decode loop on a worker thread; :mod:`.scheduler` holds the
running batch, :mod:`.cache` the KV slabs and the prefix cache, :mod:`.sampling` the per-row sampling and
stop rules.
"""

from skyrl_train.inference.hf.engine import DEFAULT_PREFIX_CACHE_TOKENS, HFEngine

__all__ = ["DEFAULT_PREFIX_CACHE_TOKENS", "HFEngine"]
