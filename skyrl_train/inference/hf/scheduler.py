"""The hf engine's continuous batching: requests, sequences and the running batch of the decode loop.

A :class:`Request` is one ``generate`` call; each of its prompts is a :class:`Seq`. The
:class:`RunningBatch` holds the sequences being decoded together, their KV cache and attention mask.
Between decode steps it admits new sequences: identical prompts are prefilled once, cached prefixes are
reused (only the new tokens are computed), prefills are cut into chunks of at most ``max_prefill_tokens``
padded tokens, and the prefilled rows join the running batch. A sequence that finishes leaves the batch at
once, and its prompt + response KV goes to the prefix cache for the next turn of its conversation.

Rows are left padded with holes allowed: the attention mask and explicit position ids keep each row exactly
what it would be alone.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from skyrl_train.inference.base import GenerationOutput, SamplingParams
from skyrl_train.inference.hf.cache import (
    PrefixCache,
    SlabLayer,
    cache_of,
    prefix_layers,
    row_kv,
    stack_rows,
)
from skyrl_train.inference.hf.sampling import StopRule, sample_tokens

__all__ = ["Forward", "Prefill", "Request", "RunningBatch", "Seq"]

Forward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Any, bool], torch.Tensor]
"""``forward(input_ids, attention_mask, position_ids, cache, last_only) -> logits [rows, vocab]`` of each
row's last position (float32)."""


@dataclass(eq=False)
class Request:
    """One ``generate`` call: its sequences resolve the future together."""

    future: concurrent.futures.Future
    outputs: list[GenerationOutput | None]
    remaining: int

    def done(self, index: int, output: GenerationOutput) -> None:
        """Record sequence ``index``'s output; the last one resolves the future."""
        self.outputs[index] = output
        self.remaining -= 1
        if self.remaining == 0 and not self.future.done():
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                self.future.set_result(list(self.outputs))

    def fail(self, error: BaseException) -> None:
        """Fail the whole call (a step that raised)."""
        if not self.future.done():
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                self.future.set_exception(error)


@dataclass(eq=False)
class Seq:
    """One sequence being generated (a prompt of a request)."""

    request: Request
    index: int
    prompt: list[int]
    params: SamplingParams
    generator: torch.Generator | None
    max_new: int
    stop_ids: frozenset[int]
    stop_window: int
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    """The policy version that produced each token."""
    finish: str | None = None
    stop_string: str | None = None
    cached_tokens: int = 0

    def output(self) -> GenerationOutput:
        """What the engine answers for this sequence (``abort`` if it has not finished)."""
        return GenerationOutput(
            token_ids=list(self.tokens),
            logprobs=list(self.logprobs),
            stop_reason=self.finish or "abort",  # type: ignore[arg-type]
            stop_string=self.stop_string,
            policy_versions=list(self.versions),
            metrics={"prompt_tokens": len(self.prompt), "cached_prompt_tokens": self.cached_tokens},
        )


@dataclass
class Prefill:
    """A prefilled group of new sequences, before it joins the running batch."""

    layers: list[SlabLayer]
    mask: torch.Tensor  # [rows, length]
    seqs: list[Seq]
    rows: list[int]  # row of `layers` that holds each seq's KV


class RunningBatch:
    """The sequences decoded together, with their KV cache; see the module docstring.

    Args:
        forward: the model's forward pass (:data:`Forward`).
        prefix: the prefix cache (``max_tokens == 0``: off).
        stop: the stop rule applied to every new token.
        rng: draws for sequences without a seed of their own.
        pad_id: the token id of padding columns.
        device: where the batch's tensors live.
        max_prefill_tokens: most padded tokens in one prefill forward.
        stats: counters updated in place (``steps``, ``prefills``, ``generated_tokens``, ``prefill_tokens``,
            ``reused_tokens``).
    """

    def __init__(
        self,
        forward: Forward,
        prefix: PrefixCache,
        stop: StopRule,
        rng: torch.Generator,
        *,
        pad_id: int,
        device: torch.device,
        max_prefill_tokens: int,
        stats: dict[str, int],
    ) -> None:
        self.forward = forward
        self.prefix = prefix
        self.stop = stop
        self.rng = rng
        self.pad_id = pad_id
        self.device = device
        self.max_prefill_tokens = max_prefill_tokens
        self.stats = stats
        self.rows: list[Seq] = []
        self.cache: Any = None
        self.mask: torch.Tensor | None = None
        self.policy_version = 0
        """The version of the weights in use; every new token is stamped with it."""

    def __len__(self) -> int:
        return len(self.rows)

    def clear(self) -> None:
        """Forget every row (their requests are settled by the caller)."""
        self.rows, self.cache, self.mask = [], None, None

    # -- joining and leaving --------------------------------------------------------------------------
    def drop_cancelled(self) -> None:
        """Remove the rows whose request was cancelled or has failed."""
        if any(s.request.future.done() for s in self.rows):
            keep = [i for i, s in enumerate(self.rows) if not s.request.future.done()]
            self._rebuild(keep, None)

    def admit(self, seqs: Sequence[Seq], *, resumed: bool = False) -> None:
        """Prefill new sequences (identical prompts once, cached prefixes reused) and merge them in.

        ``resumed``: the sequences already hold tokens (their KV was dropped after a weight update): the
        prefill covers prompt + all tokens but the last, samples nothing, and the next decode step feeds the
        last token, so the sequence goes on exactly as if the new weights had computed its whole prefix.
        """
        groups: dict[tuple[int, ...], list[Seq]] = {}
        for seq in seqs:
            context = seq.prompt + seq.tokens[:-1] if resumed else seq.prompt
            groups.setdefault(tuple(context), []).append(seq)
        items = []
        for context, members in groups.items():
            prompt = torch.tensor(context, dtype=torch.long)
            reused, kv = self.prefix.lookup(prompt)
            items.append((prompt, reused, kv, members))
        items.sort(key=lambda item: item[0].numel() - item[1])
        chunk: list = []
        for item in items:
            new_tokens = item[0].numel() - item[1]
            longest = max([new_tokens] + [c[0].numel() - c[1] for c in chunk])
            if chunk and longest * (len(chunk) + 1) > self.max_prefill_tokens:
                self._merge(self._prefill(chunk, sample=not resumed))
                chunk = []
            chunk.append(item)
        if chunk:
            self._merge(self._prefill(chunk, sample=not resumed))

    def recompute(self) -> int:
        """Drop the running rows' KV and prefill it again with the current weights (after a weight update);
        returns how many rows were re-prefilled. Their tokens so far are kept."""
        seqs = [s for s in self.rows if s.finish is None]
        self.clear()
        if seqs:
            self.admit(seqs, resumed=True)
        return len(seqs)

    def _prefill(self, items: list, *, sample: bool = True) -> Prefill:
        k = len(items)
        past = max(item[1] for item in items)
        new = max(item[0].numel() - item[1] for item in items)
        device = self.device
        mask = torch.zeros(k, past + new, dtype=torch.long, device=device)
        input_ids = torch.full((k, new), self.pad_id, dtype=torch.long, device=device)
        positions = torch.zeros(k, new, dtype=torch.long, device=device)
        for i, (prompt, reused, _, _) in enumerate(items):
            n = prompt.numel() - reused
            mask[i, past - reused : past] = 1
            mask[i, past + new - n :] = 1
            input_ids[i, new - n :] = prompt[reused:].to(device)
            positions[i, new - n :] = torch.arange(reused, prompt.numel(), device=device)
        cache = cache_of(prefix_layers([(reused, kv) for _, reused, kv, _ in items], past, new))
        logits = self.forward(input_ids, mask, positions, cache, True)
        self.stats["prefills"] += 1
        self.stats["prefill_tokens"] += sum(item[0].numel() - item[1] for item in items)
        self.stats["reused_tokens"] += sum(item[1] for item in items)
        prefill = Prefill(list(cache.layers), mask, [], [])
        for i, (prompt, reused, _, members) in enumerate(items):
            if self.prefix.max_tokens > 0 and reused < prompt.numel() - 1:
                self.prefix.insert(prompt, row_kv(prefill.layers, i, mask[i]))
            for seq in members:
                if sample:
                    seq.cached_tokens = reused
                prefill.seqs.append(seq)
                prefill.rows.append(i)
        if sample:
            rows = torch.tensor(prefill.rows, device=device)
            self._append_tokens(logits.index_select(0, rows), prefill.seqs)
        return prefill

    def _merge(self, prefill: Prefill) -> None:
        """Drop finished rows from the running batch and append the prefilled sequences still going."""
        self._finish_rows(prefill.seqs, prefill.layers, prefill.mask, prefill.rows)
        live = [(s, r) for s, r in zip(prefill.seqs, prefill.rows, strict=True) if s.finish is None]
        keep = [i for i, s in enumerate(self.rows) if s.finish is None]
        new = (
            Prefill(prefill.layers, prefill.mask, [s for s, _ in live], [r for _, r in live])
            if live
            else None
        )
        self._rebuild(keep, new)

    def _rebuild(self, keep: list[int], new: Prefill | None) -> None:
        """Re-lay the batch: rows ``keep`` of the running batch, then ``new``'s sequences, right aligned."""
        if new is None and len(keep) == len(self.rows):
            return
        parts = []  # (layers, mask, row index tensor)
        if keep and self.cache is not None:
            parts.append((self.cache.layers, self.mask, torch.tensor(keep, device=self.device)))
        if new is not None:
            parts.append((new.layers, new.mask, torch.tensor(new.rows, device=self.device)))
        seqs = [self.rows[i] for i in keep] + (new.seqs if new is not None else [])
        if not seqs:
            self.clear()
            return
        # room for the tokens to come, so that most steps append in place
        growth = min(512, max(64, max(s.max_new - len(s.tokens) for s in seqs)))
        layers, mask = stack_rows(parts, growth)
        self.rows, self.cache, self.mask = seqs, cache_of(layers), mask

    # -- decoding -------------------------------------------------------------------------------------
    def decode_step(self) -> None:
        """One token for every running row; finished rows are delivered and leave the batch."""
        rows = self.rows
        device = self.device
        last = torch.tensor([[s.tokens[-1]] for s in rows], device=device)
        positions = torch.tensor([[len(s.prompt) + len(s.tokens) - 1] for s in rows], device=device)
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(rows), 1)], dim=1)
        logits = self.forward(last, self.mask, positions, self.cache, False)
        self.stats["steps"] += 1
        self._append_tokens(logits, rows)
        if any(s.finish for s in rows):
            self._finish_rows(rows, self.cache.layers, self.mask, list(range(len(rows))))
            self._rebuild([i for i, s in enumerate(rows) if s.finish is None], None)

    def _finish_rows(self, seqs: list[Seq], layers, mask: torch.Tensor, rows: list[int]) -> None:
        """Deliver finished sequences and keep their KV (prompt + response minus its last token) for reuse."""
        for seq, row in zip(seqs, rows, strict=True):
            if seq.finish is None:
                continue
            if self.prefix.max_tokens > 0 and len(seq.tokens) > 1:
                tokens = torch.tensor(seq.prompt + seq.tokens[:-1], dtype=torch.long)
                self.prefix.insert(tokens, row_kv(layers, row, mask[row]))
            seq.request.done(seq.index, seq.output())

    def _append_tokens(self, logits: torch.Tensor, seqs: list[Seq]) -> None:
        tokens, logprobs = sample_tokens(logits, seqs, self.rng)
        for seq, token, logprob in zip(seqs, tokens.tolist(), logprobs.tolist(), strict=True):
            seq.tokens.append(token)
            seq.logprobs.append(logprob)
            seq.versions.append(self.policy_version)
            self.stats["generated_tokens"] += 1
            self.stop.check(seq, token)
