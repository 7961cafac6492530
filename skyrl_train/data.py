"""Datasets in SkyRL's format and the batch iterator that walks them for a number of epochs.

A row is a dict with ``prompt`` (a list of chat messages ``{"role", "content"}``), ``env_class`` (the
skyrl_gym environment id; optional when the config names one), usually ``reward_spec`` (``{"method":
"rule", "ground_truth": ...}``), and any other columns (``db_id``, ``data_source``, ``extra_info``...):
everything but ``prompt`` and ``env_class`` reaches the environment as ``extras``. Files are parquet or
JSONL (one JSON object a line).

:class:`BatchIterator` shuffles with a permutation derived only from ``(seed, epoch)``, so the order is the
same on every run and every machine, and its :meth:`~BatchIterator.state_dict` (epoch and position) is all
a resumed run needs to continue at exactly the next batch.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

# One reader for every dataset file (JSONL or parquet, errors naming file:line), re-exported here.
from skyrl_gym.rows import read_rows

if TYPE_CHECKING:
    from skyrl_train.config import DataConfig, TrainerConfig

__all__ = [
    "BatchIterator",
    "Datasets",
    "PromptDataset",
    "Task",
    "check_data_files",
    "prompt_length",
    "read_rows",
    "row_to_env_args",
    "row_value",
]


class Task(NamedTuple):
    """What a generator needs to start one environment from a dataset row."""

    env_class: str
    """The skyrl_gym environment id."""
    prompt: list[dict[str, str]]
    """The chat messages the model sees first."""
    extras: dict[str, Any]
    """Every other column of the row (``reward_spec``, ``db_id``...), passed to the environment."""


def check_data_files(data: DataConfig) -> None:
    """Raise :class:`FileNotFoundError` naming the first missing file of ``data.train_data``/``data.val_data``
    and ``data.build_command``, the command that builds it (cheap: call it before loading any model)."""
    hint = (
        f"build it with: {data.build_command}"
        if data.build_command
        else "build it first (the recipe's header comment may say how) or point data.train_data/data.val_data "
        "at your files"
    )
    for key in ("train_data", "val_data"):
        for name in getattr(data, key):
            if not Path(name).is_file():
                raise FileNotFoundError(f"data.{key} file {name} does not exist; {hint}")


def row_to_env_args(row: Mapping[str, Any], default_env_class: str | None = None) -> Task:
    """Split a row into ``(env_class, prompt, extras)``; ``default_env_class`` fills a missing env_class."""
    env_class = row.get("env_class") or default_env_class
    if not env_class:
        raise ValueError("the row has no env_class column and no default (environment.env_class) was given")
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    return Task(str(env_class), list(row["prompt"]), extras)


def _check_prompt(prompt: Any, where: str) -> list[dict[str, str]]:
    if isinstance(prompt, str):
        # Some datasets store the chat as a JSON string.
        try:
            prompt = json.loads(prompt)
        except json.JSONDecodeError:
            raise ValueError(f"{where}: prompt must be a list of chat messages, got a plain string") from None
    if (
        not isinstance(prompt, list)
        or not prompt
        or not all(isinstance(m, Mapping) and "role" in m and "content" in m for m in prompt)
    ):
        raise ValueError(f"{where}: prompt must be a non-empty list of {{'role', 'content'}} messages")
    return [dict(m) for m in prompt]


def prompt_length(tokenizer: Any, prompt: list[dict[str, str]]) -> int:
    """Tokens of ``prompt`` after the tokenizer's chat template, generation prompt included."""
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, Mapping):  # transformers 5 may return a BatchEncoding
        ids = ids["input_ids"]
    return len(ids)


class PromptDataset:
    """Rows of one or more dataset files, with over-long prompts filtered out and counted.

    ``num_filtered`` is how many rows were dropped because their chat-templated prompt is longer than
    ``max_prompt_length`` tokens (only checked when a tokenizer is given); ``num_read`` how many were read.
    """

    def __init__(
        self, rows: Sequence[Mapping[str, Any]], tokenizer: Any = None, max_prompt_length: int | None = None
    ):
        self.rows: list[dict[str, Any]] = []
        self.num_read = 0
        self.num_filtered = 0
        for i, row in enumerate(rows):
            self.num_read += 1
            where = str(row.get("_source", f"row {i}"))
            if "prompt" not in row:
                raise ValueError(
                    f"{where}: no 'prompt' column (SkyRL format: prompt, env_class, reward_spec...)"
                )
            row = {k: v for k, v in row.items() if k != "_source"}
            row["prompt"] = _check_prompt(row["prompt"], where)
            if (
                tokenizer is not None
                and max_prompt_length is not None
                and prompt_length(tokenizer, row["prompt"]) > max_prompt_length
            ):
                self.num_filtered += 1
                continue
            self.rows.append(row)

    @classmethod
    def from_files(
        cls,
        paths: str | Path | Sequence[str | Path],
        tokenizer: Any = None,
        max_prompt_length: int | None = None,
    ) -> PromptDataset:
        """Read parquet/JSONL files (in order) into one dataset; see the class docstring for filtering."""
        if isinstance(paths, (str, Path)):
            paths = [paths]
        rows: list[dict[str, Any]] = []
        for path in paths:
            for number, row in enumerate(read_rows(path), 1):
                rows.append({**row, "_source": f"{path} row {number}"})
        return cls(rows, tokenizer=tokenizer, max_prompt_length=max_prompt_length)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.rows[index]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows)


class BatchIterator:
    """Batches of rows for ``epochs`` passes, shuffled per epoch deterministically for ``seed``.

    Iterating yields lists of ``batch_size`` rows. With ``drop_last`` (the default, for training: every
    step sees a full batch) the tail of each epoch that does not fill a batch is skipped; evaluation uses
    ``shuffle=False, drop_last=False``. The iterator remembers where it is: :meth:`state_dict` taken after a
    batch was yielded points at the next one, and :meth:`load_state_dict` on a fresh iterator over the same
    dataset continues from there.
    """

    def __init__(
        self,
        dataset: Sequence[Any],
        batch_size: int,
        epochs: int = 1,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = True,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if drop_last and len(dataset) < batch_size:
            raise ValueError(
                f"the dataset has {len(dataset)} rows, fewer than one batch of {batch_size} "
                "(trainer.train_batch_size); lower the batch size or add data"
            )
        self.dataset = dataset
        self.batch_size = batch_size
        self.epochs = epochs
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.epoch = 0
        self.position = 0  # index of the next batch within the epoch

    @property
    def batches_per_epoch(self) -> int:
        """Batches in one epoch."""
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    @property
    def total_batches(self) -> int:
        """Batches over all epochs (the number of training steps without ``max_steps``)."""
        return self.batches_per_epoch * self.epochs

    @property
    def batches_done(self) -> int:
        """Batches already yielded (the global step a resumed run continues from)."""
        return self.epoch * self.batches_per_epoch + self.position

    def order(self, epoch: int) -> list[int]:
        """The row order of ``epoch``: a permutation that depends only on ``(seed, epoch)``."""
        indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(f"skyrl_train.data:{self.seed}:{epoch}").shuffle(indices)
        return indices

    def __iter__(self) -> Iterator[list[Any]]:
        while self.epoch < self.epochs:
            order = self.order(self.epoch)
            while self.position < self.batches_per_epoch:
                start = self.position * self.batch_size
                batch = [self.dataset[i] for i in order[start : start + self.batch_size]]
                self.position += 1
                yield batch
            self.epoch += 1
            self.position = 0

    def __len__(self) -> int:
        return self.total_batches - self.batches_done

    def state_dict(self) -> dict[str, Any]:
        """Where the iterator is: ``epoch``, ``position`` (next batch), and what it must be resumed with."""
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "num_rows": len(self.dataset),
            "shuffle": self.shuffle,
        }

    def state_after(self, batches: int) -> dict[str, Any]:
        """The :meth:`state_dict` of this iterator once ``batches`` batches (over all epochs) were yielded,
        wherever it is now: the position a run resumes from when its reader ran ahead of its training (the
        asynchronous mode's producer)."""
        epoch, position = divmod(batches, max(self.batches_per_epoch, 1))
        return {**self.state_dict(), "epoch": epoch, "position": position}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue where ``state`` was taken; the dataset, seed and batch size must be the same."""
        for key in ("seed", "batch_size", "shuffle"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"cannot resume the data iterator: {key} was {state[key]!r}, now {getattr(self, key)!r}"
                )
        if state["num_rows"] != len(self.dataset):
            raise ValueError(
                f"cannot resume the data iterator: the dataset had {state['num_rows']} rows, now "
                f"{len(self.dataset)} (the data files or trainer.max_prompt_length changed)"
            )
        self.epoch, self.position = int(state["epoch"]), int(state["position"])


@dataclasses.dataclass
class Datasets:
    """A run's data: the training rows, the iterator that batches them, and the evaluation rows."""

    train: PromptDataset
    """Training rows, over-long prompts filtered out."""
    iterator: BatchIterator
    """Training batches over the epochs."""
    val_rows: list[dict[str, Any]]
    """Evaluation rows, in file order, unfiltered."""

    @classmethod
    def from_config(cls, data: DataConfig, trainer: TrainerConfig, tokenizer: Any) -> Datasets:
        """Read ``data.train_data`` (filtered at ``trainer.max_prompt_length`` tokens) and ``data.val_data``,
        and batch the training rows by ``trainer.train_batch_size`` for ``trainer.epochs``, shuffled with
        ``trainer.seed`` when ``data.shuffle``. A missing file raises :class:`FileNotFoundError` saying how to
        build it."""
        check_data_files(data)
        train = PromptDataset.from_files(data.train_data, tokenizer, trainer.max_prompt_length)
        val_rows = [row for path in data.val_data for row in read_rows(path)]
        iterator = BatchIterator(train, trainer.train_batch_size, trainer.epochs, trainer.seed, data.shuffle)
        return cls(train=train, iterator=iterator, val_rows=val_rows)


def row_value(row: dict, column: str) -> Any:
    """The value at ``column`` of a dataset row, a dotted path into nested dicts (``"extra_info.level"``);
    None where the path does not exist."""
    value: Any = row
    for part in column.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value
