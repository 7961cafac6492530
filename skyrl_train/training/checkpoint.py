"""Run-level checkpoints: the workers' state plus the trainer's, written atomically.

Layout::

    run_dir/checkpoints/
        step_3/                 one complete checkpoint
            policy/             PolicyWorker.save_checkpoint (model, optimizer, scheduler)
            critic/             ... one folder per worker passed in
            trainer_state.pt    global step, data iterator state, RNG states, extra
            config.json         the run's config, for people and tools
        step_4/
        latest                  "step_4": written last

A checkpoint is first written into a hidden temporary folder beside the others and renamed into place
when complete; only then is ``latest`` replaced (also by rename). A run killed at any moment therefore
leaves either the previous checkpoint or the new one, never a half-written one that looks complete, and
resumes at the step after the checkpoint :func:`find_latest` returns.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyrl_train.tracking import config_to_dict

CHECKPOINTS_DIR = "checkpoints"
LATEST_FILE = "latest"
TRAINER_STATE_FILE = "trainer_state.pt"
CONFIG_FILE = "config.json"
_STEP_DIR = re.compile(r"^step_(\d+)$")
_TMP_PREFIX = ".tmp-"


@dataclass
class TrainerState:
    """What the trainer needs besides the workers to continue a run.

    ``step`` is the number of training steps completed when the checkpoint was written: a resumed run
    continues with step ``step + 1``.
    """

    step: int
    data_state: Any = None
    config: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    rng: dict[str, Any] = field(default_factory=dict)


def checkpoints_root(run_dir: str | Path) -> Path:
    """``run_dir/checkpoints``."""
    return Path(run_dir) / CHECKPOINTS_DIR


def checkpoint_path(run_dir: str | Path, step: int) -> Path:
    """The folder of the checkpoint written after step ``step``."""
    return checkpoints_root(run_dir) / f"step_{int(step)}"


def _step_of(path: Path) -> int | None:
    match = _STEP_DIR.match(path.name)
    return int(match.group(1)) if match else None


def checkpoint_step(path: str | Path) -> int:
    """The step of a checkpoint folder (``.../step_12`` -> 12), e.g. for ``Tracker(resume_step=...)``."""
    step = _step_of(Path(path))
    if step is None:
        raise ValueError(f"'{path}' is not a checkpoint folder (expected a name like step_12)")
    return step


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints as ``(step, folder)``, oldest first."""
    root = checkpoints_root(run_dir)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        step = _step_of(child)
        if step is not None and (child / TRAINER_STATE_FILE).is_file():
            found.append((step, child))
    return sorted(found)


def find_latest(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run, or None.

    Trusts the ``latest`` marker when it names a complete checkpoint, else takes the highest step.
    """
    root = checkpoints_root(run_dir)
    marker = root / LATEST_FILE
    if marker.is_file():
        candidate = root / marker.read_text().strip()
        if _step_of(candidate) is not None and (candidate / TRAINER_STATE_FILE).is_file():
            return candidate
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def capture_rng_state() -> dict[str, Any]:
    """The random states of Python, NumPy (when installed) and torch (CPU and every CUDA device)."""
    state: dict[str, Any] = {"python": random.getstate()}
    try:
        import numpy as np

        state["numpy"] = np.random.get_state()
    except ImportError:  # pragma: no cover - numpy comes with torch
        pass
    import torch

    state["torch"] = torch.get_rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Put back what :func:`capture_rng_state` returned."""
    import torch

    if "python" in state:
        random.setstate(state["python"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _write_json(path: Path, data: Any) -> None:
    with path.open("w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, default=str)
        handle.flush()
        os.fsync(handle.fileno())


def _replace_marker(root: Path, name: str) -> None:
    tmp = root / f"{LATEST_FILE}.{uuid.uuid4().hex}.tmp"
    with tmp.open("w") as handle:
        handle.write(name + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, root / LATEST_FILE)


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    workers: Mapping[str, Any],
    *,
    data_state: Any = None,
    config: Any = None,
    extra: Mapping[str, Any] | None = None,
    keep_last: int | None = None,
) -> Path:
    """Write the checkpoint of step ``step`` (steps completed) and return its folder.

    ``workers`` maps a name (``"policy"``, ``"critic"``) to a worker or WorkerGroup; each writes into its
    own sub-folder. ``data_state`` is the data iterator's ``state_dict()``; ``extra`` any small picklable
    trainer values. The random states of this process are saved too. With ``keep_last`` only that many
    newest checkpoints are kept.
    """
    import torch

    root = checkpoints_root(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(_TMP_PREFIX + "*"):  # left by a run killed while saving
        shutil.rmtree(stale, ignore_errors=True)
    tmp = root / f"{_TMP_PREFIX}step_{int(step)}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    for name, worker in workers.items():
        worker.save_checkpoint(tmp / name)
    config_dict = config_to_dict(config)
    state = {
        "step": int(step),
        "data_state": data_state,
        "config": config_dict,
        "extra": dict(extra or {}),
        "rng": capture_rng_state(),
        "workers": sorted(workers),
    }
    with (tmp / TRAINER_STATE_FILE).open("wb") as handle:
        torch.save(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    _write_json(tmp / CONFIG_FILE, config_dict)
    final = checkpoint_path(run_dir, step)
    if final.exists():  # the same step saved again (a resumed run that redid it): replace it
        trash = root / f"{_TMP_PREFIX}old-{final.name}-{uuid.uuid4().hex[:8]}"
        os.rename(final, trash)
        shutil.rmtree(trash, ignore_errors=True)
    os.rename(tmp, final)
    _replace_marker(root, final.name)
    if keep_last is not None:
        prune_checkpoints(run_dir, keep_last)
    return final


def load_checkpoint(
    path: str | Path, workers: Mapping[str, Any], *, restore_rng: bool = True, strict: bool = True
) -> TrainerState:
    """Load the workers' state from checkpoint folder ``path`` and return the trainer's state.

    Restores this process's random states unless ``restore_rng`` is False. With ``strict`` every worker
    saved in the checkpoint must be passed (a missing one would silently start from scratch); pass
    ``strict=False`` to load some of them, e.g. only the policy for evaluation.
    """
    import torch

    path = Path(path)
    state_file = path / TRAINER_STATE_FILE
    if not state_file.is_file():
        raise FileNotFoundError(f"'{path}' is not a complete checkpoint (no {TRAINER_STATE_FILE})")
    # Our own file, holding Python RNG tuples and the data iterator state: a full unpickle is needed.
    state = torch.load(state_file, map_location="cpu", weights_only=False)
    saved = set(state.get("workers", []))
    missing = sorted(saved - set(workers))
    if missing and strict:
        raise ValueError(f"checkpoint '{path}' has worker state for {missing}; pass those workers too")
    for name, worker in workers.items():
        if name not in saved:
            raise ValueError(f"checkpoint '{path}' has no state for worker '{name}'; it has {sorted(saved)}")
        worker.load_checkpoint(path / name)
    if restore_rng:
        restore_rng_state(state["rng"])
    return TrainerState(
        step=int(state["step"]),
        data_state=state.get("data_state"),
        config=state.get("config", {}),
        extra=state.get("extra", {}),
        rng=state["rng"],
    )


def prune_checkpoints(run_dir: str | Path, keep_last: int) -> list[Path]:
    """Delete all but the ``keep_last`` newest checkpoints (never the one ``latest`` names)."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last}")
    latest = find_latest(run_dir)
    found = list_checkpoints(run_dir)
    removed = []
    for _, folder in found[: max(0, len(found) - keep_last)]:
        if latest is not None and folder == latest:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def export_model(source: str | Path, out: str | Path) -> Path:
    """Write the policy of a checkpoint as a Hugging Face model folder (weights, config, tokenizer) that
    ``trainer.policy.model.path``, the engines and ``transformers`` load.

    ``source`` is a checkpoint folder (``.../checkpoints/step_N``) or a run folder (its newest complete
    checkpoint). The architecture and the tokenizer come from the model the run started from (the
    checkpoint's ``config.json``); the weights from the policy's ``dcp`` shards, LoRA adapters merged. ValueError when there is no
    checkpoint, or when the saved weights do not fit that model.
    """
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    from transformers import AutoModelForCausalLM

    from skyrl_train.models import load_tokenizer, resolve_model_path
    from skyrl_train.training.lora import is_lora_state, merged_state_dict

    source, out = Path(source), Path(out)
    checkpoint = source if _step_of(source) is not None else find_latest(source)
    if checkpoint is None or not (checkpoint / "policy" / "dcp").is_dir():
        raise ValueError(f"no policy checkpoint in {source}")
    config = json.loads((checkpoint / CONFIG_FILE).read_text())
    base = resolve_model_path(config["trainer"]["policy"]["model"]["path"])
    out.mkdir(parents=True, exist_ok=True)
    flat = out / f".{uuid.uuid4().hex}.pt"
    try:
        dcp_to_torch_save(str(checkpoint / "policy" / "dcp"), str(flat))
        weights = torch.load(flat, map_location="cpu", weights_only=False)["model"]
    finally:
        flat.unlink(missing_ok=True)
    if is_lora_state(weights):  # a policy trained with LoRA: its adapters merged into the weights they adapt
        lora = config["trainer"]["policy"]["lora"]
        weights = merged_state_dict(weights, scaling=float(lora["alpha"]) / int(lora["rank"]))
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise ValueError(
            f"the checkpoint's weights do not fit {base}: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    model.save_pretrained(out)
    load_tokenizer(base).save_pretrained(out)
    return out
