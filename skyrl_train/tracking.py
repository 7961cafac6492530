"""Metrics logging behind one call: ``Tracker.log(metrics, step)``.

Backends, chosen by name (``trainer.logger``):

- ``console``: one summary line per step (through the progress bar's writer, so the bar stays intact);
- ``jsonl``: ``run_dir/metrics.jsonl``, one JSON object per step (``step``, ``time`` and every metric);
- ``tensorboard``: event files under ``run_dir/tensorboard`` (``torch.utils.tensorboard``);
- ``wandb``: Weights & Biases, only when named here; a clear error when the package is missing.

On resume (``resume_step=N``) the JSONL file keeps only steps up to ``N`` and TensorBoard purges later
events, so a run killed after its last checkpoint does not leave duplicated steps behind.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

BACKENDS = ("console", "jsonl", "tensorboard", "wandb")
METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"

# Console lines show metrics whose names contain one of these, in this order.
_CONSOLE_PATTERNS = (
    "reward",
    "pass",
    "acc",
    "loss",
    "kl",
    "entropy",
    "grad_norm",
    "response_length",
    "time/",
)


def config_to_dict(config: Any) -> dict[str, Any]:
    """A plain, JSON-friendly dict of a config: a pydantic model, a dataclass, a mapping, an OmegaConf
    object or None."""
    if config is None:
        return {}
    if hasattr(config, "model_dump"):
        return dict(config.model_dump(mode="json"))
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return dataclasses.asdict(config)
    if hasattr(config, "to_dict"):
        return dict(config.to_dict())
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(config, DictConfig):
            return OmegaConf.to_container(config, resolve=True)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover - omegaconf is a core dependency
        pass
    if isinstance(config, Mapping):
        return dict(config)
    raise TypeError(f"cannot turn a {type(config).__name__} config into a dict")


def _as_number(value: Any) -> float | None:
    """A float for numbers, one-element tensors and numpy scalars; None for anything else."""
    if isinstance(value, bool | int | float):
        return float(value)
    if hasattr(value, "item"):
        size = value.numel() if callable(getattr(value, "numel", None)) else getattr(value, "size", None)
        if size == 1:
            try:
                return float(value.item())
            except (TypeError, ValueError):
                return None
    return None


def _json_value(value: Any) -> Any:
    number = _as_number(value)
    if number is not None:
        return number if math.isfinite(number) else None  # JSON has no NaN/inf
    if isinstance(value, str | type(None)):
        return value
    return str(value)


def format_console_line(metrics: Mapping[str, Any], step: int, keys: Iterable[str] | None = None) -> str:
    """``step 12 | reward/mean 0.312 | policy/loss -0.0123 | ...`` for the chosen (or default) keys."""
    numbers = {key: _as_number(value) for key, value in metrics.items()}
    numbers = {key: value for key, value in numbers.items() if value is not None}
    if keys is None:
        chosen: list[str] = []
        for pattern in _CONSOLE_PATTERNS:
            chosen += [key for key in numbers if pattern in key and key not in chosen]
    else:
        chosen = [key for key in keys if key in numbers]
    parts = [f"step {step}"] + [f"{key} {numbers[key]:.4g}" for key in chosen]
    return " | ".join(parts)


class Tracker:
    """Writes each step's metrics to every configured backend.

    ``backends`` is a list of names from :data:`BACKENDS`; unknown names are rejected. ``config`` (a
    dataclass or dict) is written to TensorBoard as text and to wandb as the run config. ``console_keys``
    picks the metrics of the console line (default: rewards, pass rates, accuracy, losses, KL, entropy,
    grad norm, lengths, times).
    """

    def __init__(
        self,
        backends: Iterable[str] = ("console", "jsonl"),
        run_dir: str | Path | None = None,
        config: Any = None,
        *,
        project_name: str = "skyrl",
        run_name: str | None = None,
        resume_step: int | None = None,
        console_keys: Iterable[str] | None = None,
    ) -> None:
        self.backends = list(dict.fromkeys(backends))
        unknown = [name for name in self.backends if name not in BACKENDS]
        if unknown:
            raise ValueError(f"unknown logger backend(s) {unknown}; choose from {list(BACKENDS)}")
        needs_dir = [name for name in self.backends if name in ("jsonl", "tensorboard")]
        if needs_dir and run_dir is None:
            raise ValueError(f"the {needs_dir} logger(s) need a run_dir")
        self.run_dir = Path(run_dir) if run_dir is not None else None
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self.config = config_to_dict(config)
        self.project_name = project_name
        self.run_name = run_name
        self.console_keys = list(console_keys) if console_keys is not None else None
        self._jsonl = None
        self._tensorboard = None
        self._wandb_run = None
        if "jsonl" in self.backends:
            self._jsonl = self._open_jsonl(resume_step)
        if "tensorboard" in self.backends:
            self._tensorboard = self._open_tensorboard(resume_step)
        if "wandb" in self.backends:
            self._wandb_run = self._open_wandb(project_name, run_name, resume_step)

    @classmethod
    def from_config(cls, config: Any, *, resume_step: int | None = None) -> Tracker:
        """A tracker for a run's :class:`~skyrl_train.config.Config`: ``trainer.logger`` backends writing
        into ``trainer.run_dir``, under ``trainer.project_name`` / ``trainer.run_name``, with the whole
        config recorded."""
        trainer = config.trainer
        return cls(
            trainer.logger,
            trainer.run_dir,
            config,
            project_name=trainer.project_name,
            run_name=trainer.run_name,
            resume_step=resume_step,
        )

    @property
    def metrics_path(self) -> Path | None:
        """The JSONL file, when the jsonl backend is on."""
        return self.run_dir / METRICS_FILE if self.run_dir is not None and "jsonl" in self.backends else None

    def _open_jsonl(self, resume_step: int | None):
        path = self.run_dir / METRICS_FILE
        if resume_step is not None and path.exists():
            kept = []
            for line in path.read_text().splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a kill
                if isinstance(record.get("step"), int | float) and record["step"] <= resume_step:
                    kept.append(line)
            tmp = path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(line + "\n" for line in kept))
            tmp.replace(path)
        return path.open("a", encoding="utf-8")

    def _open_tensorboard(self, resume_step: int | None):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise ImportError(
                "the tensorboard logger needs torch and tensorboard: pip install 'skyrl[train]', "
                "or drop 'tensorboard' from trainer.logger"
            ) from exc
        purge = resume_step + 1 if resume_step is not None else None
        writer = SummaryWriter(log_dir=str(self.run_dir / TENSORBOARD_DIR), purge_step=purge)
        if self.config and purge is None:
            text = json.dumps(self.config, indent=2, default=str)
            writer.add_text("config", "```\n" + text + "\n```", global_step=0)
        return writer

    def _open_wandb(self, project_name: str, run_name: str | None, resume_step: int | None):
        try:
            import wandb
        except ImportError as exc:
            raise ImportError(
                "the wandb logger needs the wandb package: pip install wandb (and wandb login), "
                "or drop 'wandb' from trainer.logger"
            ) from exc
        return wandb.init(
            project=project_name,
            name=run_name,
            config=self.config,
            dir=str(self.run_dir) if self.run_dir is not None else None,
            resume="allow" if resume_step is not None else None,
        )

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Record one step's metrics (numbers, 0-dim tensors; strings go to JSONL only)."""
        step = int(step)
        if self._jsonl is not None:
            record = {"step": step, "time": round(time.time(), 3)}
            record.update({key: _json_value(value) for key, value in metrics.items()})
            self._jsonl.write(json.dumps(record) + "\n")
            self._jsonl.flush()
        numbers = {key: _as_number(value) for key, value in metrics.items()}
        numbers = {key: value for key, value in numbers.items() if value is not None}
        if self._tensorboard is not None:
            for key, value in numbers.items():
                self._tensorboard.add_scalar(key, value, global_step=step)
            self._tensorboard.flush()
        if self._wandb_run is not None:
            self._wandb_run.log(numbers, step=step)
        if "console" in self.backends:
            from skyrl_train.progress import write

            write(format_console_line(metrics, step, self.console_keys))

    def close(self) -> None:
        """Flush and close every backend; safe to call twice."""
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        if self._tensorboard is not None:
            self._tensorboard.close()
            self._tensorboard = None
        if self._wandb_run is not None:
            self._wandb_run.finish()
            self._wandb_run = None

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a metrics JSONL file (lines cut short by a kill are skipped)."""
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records
