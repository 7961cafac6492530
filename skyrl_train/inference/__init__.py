"""Inference engines behind one async interface: `hf` (transformers), `vllm` (GPU), `remote` (HTTP).

Importing this package is light: an engine's module (and torch, transformers or vllm) is imported only when
`make_engine` chooses it or when it is imported directly.
"""

from skyrl_train.inference.base import (
    ENGINES,
    GenerationOutput,
    InferenceEngine,
    SamplingParams,
    StopReason,
    make_engine,
    register_engine,
)

__all__ = [
    "ENGINES",
    "GenerationOutput",
    "InferenceEngine",
    "SamplingParams",
    "StopReason",
    "make_engine",
    "register_engine",
]
