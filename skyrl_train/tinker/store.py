"""What the Tinker server remembers of its clients: the training models and sampling sessions they created
(by the client's ids, with the backend's id and the lane their requests queue on), and the index of saved
checkpoints, written through to ``tinker_checkpoints.json`` so that saved weights outlive the client that
saved them and the server itself."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyrl_train.tinker.futures import Lane

__all__ = ["CheckpointIndex", "ModelRecord", "SamplerRecord"]


@dataclass
class ModelRecord:
    """A training model as the client knows it (``{session}:train:{n}``) and the backend's id for it."""

    model_id: str
    session_id: str
    base_model: str
    lora_rank: int | None
    lane: Lane
    backend_id: str | None = None
    user_metadata: dict[str, Any] | None = None
    last_request: float = field(default_factory=time.time)


@dataclass
class SamplerRecord:
    """A sampling session and the backend sampler (frozen weights) behind it."""

    sampler_id: str
    session_id: str
    base_model: str
    model_path: str | None
    lane: Lane
    backend_id: str | None = None
    clones: int = 0
    warm: bool = False  # has sampled once (its engine was built)


@dataclass
class CheckpointIndex:
    """Saved checkpoints by ``tinker://`` path -> where the backend keeps them; written through to disk."""

    path: Path
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def load(cls, path: Path) -> CheckpointIndex:
        """The index stored at ``path`` (empty when there is none yet)."""
        entries = json.loads(path.read_text()) if path.exists() else {}
        return cls(path=path, entries=entries)

    def get(self, tinker_path: str) -> dict[str, Any] | None:
        """The entry of a checkpoint path, or None."""
        with self._lock:
            return self.entries.get(tinker_path)

    def under(self, model_id: str) -> list[dict[str, Any]]:
        """The entries of every checkpoint a model saved."""
        prefix = f"tinker://{model_id}/"
        with self._lock:
            return [e for p, e in self.entries.items() if p.startswith(prefix)]

    def put(self, tinker_path: str, entry: dict[str, Any]) -> None:
        """Record a checkpoint and write the index atomically."""
        with self._lock:
            self.entries[tinker_path] = entry
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.entries, indent=1, sort_keys=True))
            os.replace(tmp, self.path)
