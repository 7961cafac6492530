"""The Tinker backend's plain types, shared by the backend and its sampler pool: the request errors, a training
example (:class:`Datum`), a forward's result (:class:`ForwardOutput`), what a training model is
(:class:`ModelSpec`) and the name of a checkpoint's weights file. Importable from
:mod:`skyrl_train.tinker.backend` too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["BadRequest", "Datum", "ForwardOutput", "ModelSpec", "UnknownModel", "UnsupportedLoss"]

_WEIGHTS = "weights.safetensors"
"""The file of a checkpoint's (or a sampler snapshot's) trainable weights."""


class UnknownModel(KeyError):
    """No such base model, training model or sampler."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class BadRequest(ValueError):
    """The request cannot be served as given (shapes, token ids, settings, checkpoints); the message says
    what to change."""


class UnsupportedLoss(ValueError):
    """A loss function this backend does not implement."""


@dataclass
class Datum:
    """One training example: the model input's tokens and the loss's inputs by name, each with one value
    (or, for cross-entropy candidates, one row) per token."""

    tokens: list[int]
    inputs: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class ForwardOutput:
    """Per datum its outputs (``logprobs`` of the target tokens and the ``elementwise_loss``), and the
    batch's metrics (``loss:sum``)."""

    outputs: list[dict[str, np.ndarray]]
    metrics: dict[str, float]


@dataclass(frozen=True)
class ModelSpec:
    """What a training model is: its base model and its adapters (``lora_rank`` 0: every weight trains)."""

    base_model: str
    lora_rank: int = 0
    lora_alpha: float = 32.0
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True

    def to_json(self) -> dict[str, Any]:
        """The spec as the checkpoint manifest stores it."""
        return {
            "base_model": self.base_model,
            "lora_rank": self.lora_rank,
            "lora_alpha": self.lora_alpha,
            "train_mlp": self.train_mlp,
            "train_attn": self.train_attn,
            "train_unembed": self.train_unembed,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelSpec:
        """The spec a manifest stored."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
