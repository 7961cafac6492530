"""The hf engine's KV memory: per-layer slabs appended in place, the prefix cache, and re-laying rows.

transformers' ``DynamicCache`` concatenates on every token, copying the whole cache each step; a
:class:`SlabLayer` keeps each layer's keys and values in a preallocated buffer ``[batch, heads, capacity,
head_dim]`` and writes new columns in place. :class:`PrefixCache` keeps the KV of recent token sequences
(prompts and finished responses), so that the next turn of a conversation prefills only its new tokens and
the samples of a group share their prompt's prefill. :func:`stack_rows` lays chosen rows of several batches
into one right-aligned batch, which is how sequences join and leave the running batch.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

__all__ = ["KV", "PrefixCache", "SlabLayer", "cache_of", "prefix_layers", "row_kv", "stack_rows"]

KV = list[tuple[torch.Tensor, torch.Tensor]]
"""One sequence's KV, compact: per layer ``(keys [heads, n, head_dim], values)``."""


class SlabLayer(DynamicLayer):
    """One layer's KV cache in a preallocated buffer `[batch, heads, capacity, head_dim]`.

    Appending writes in place and returns views; the buffer grows by `growth` extra columns when full.
    """

    def __init__(
        self,
        keys: torch.Tensor | None = None,
        values: torch.Tensor | None = None,
        length: int = 0,
        growth: int = 0,
    ) -> None:
        super().__init__()
        self._kbuf, self._vbuf, self._len, self._growth = keys, values, length, growth
        if keys is not None:
            self.is_initialized = True
            self.device = keys.device
            self._refresh()

    def _refresh(self) -> None:
        self.keys = self._kbuf[:, :, : self._len]
        self.values = self._vbuf[:, :, : self._len]

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        b, h, _, d = key_states.shape
        self._kbuf = key_states.new_zeros(b, h, 0, d)
        self._vbuf = value_states.new_zeros(b, value_states.shape[1], 0, value_states.shape[-1])
        self._len = 0
        self.device = key_states.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self._len + key_states.shape[-2]
        if end > self._kbuf.shape[-2]:
            self._kbuf = grow(self._kbuf, self._len, end + self._growth)
            self._vbuf = grow(self._vbuf, self._len, end + self._growth)
        self._kbuf[:, :, self._len : end] = key_states
        self._vbuf[:, :, self._len : end] = value_states
        self._len = end
        self._refresh()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._len

    @property
    def buffers(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._kbuf, self._vbuf


def grow(buf: torch.Tensor, used: int, capacity: int) -> torch.Tensor:
    """A copy of ``buf``'s first ``used`` columns in a zeroed buffer of ``capacity`` columns."""
    new = buf.new_zeros(*buf.shape[:2], capacity, buf.shape[-1])
    new[:, :, :used] = buf[:, :, :used]
    return new


def cache_of(layers: list[SlabLayer] | None) -> DynamicCache:
    """A transformers cache over ``layers`` (empty: the model fills it with new slabs)."""
    cache = DynamicCache()
    if layers:
        cache.layers = layers
    cache.layer_class_to_replicate = SlabLayer
    return cache


def row_kv(layers: Sequence[SlabLayer], row: int, mask_row: torch.Tensor) -> KV:
    """One row's KV over its real tokens (where ``mask_row`` is 1), compact."""
    index = mask_row.nonzero().squeeze(1)
    out = []
    for layer in layers:
        kbuf, vbuf = layer.buffers
        out.append((kbuf[row].index_select(1, index), vbuf[row].index_select(1, index)))
    return out


def prefix_layers(prefixes: Sequence[tuple[int, KV | None]], past: int, new: int) -> list[SlabLayer] | None:
    """The KV layers of a prefill batch whose row ``i`` reuses the first ``prefixes[i][0]`` tokens of
    ``prefixes[i][1]`` (right aligned in the first ``past`` columns), with room for ``new`` more columns;
    ``None`` when no row reuses anything."""
    if not past:
        return None
    rows = len(prefixes)
    ref = next(kv for reused, kv in prefixes if reused)
    layers = []
    for layer, (k_ref, v_ref) in enumerate(ref):
        kbuf = k_ref.new_zeros(rows, k_ref.shape[0], past + new, k_ref.shape[-1])
        vbuf = v_ref.new_zeros(rows, v_ref.shape[0], past + new, v_ref.shape[-1])
        for i, (reused, kv) in enumerate(prefixes):
            if reused:
                kbuf[i, :, past - reused : past] = kv[layer][0][:, :reused]
                vbuf[i, :, past - reused : past] = kv[layer][1][:, :reused]
        layers.append(SlabLayer(kbuf, vbuf, length=past))
    return layers


def stack_rows(
    parts: Sequence[tuple[Sequence[SlabLayer], torch.Tensor, torch.Tensor]], growth: int
) -> tuple[list[SlabLayer], torch.Tensor]:
    """One batch from rows of several: each part is ``(layers, mask [rows, length], row index)``.

    The rows come in the order of the parts, right aligned (columns that are padding in every chosen row of
    a part are dropped first), with ``growth`` free columns after them for the tokens to come. Returns the
    new layers and attention mask.
    """
    trimmed = []
    for layers, mask, index in parts:
        sub = mask.index_select(0, index)
        used = sub.any(0).nonzero()
        start = int(used[0]) if used.numel() else sub.shape[1]
        trimmed.append((layers, sub[:, start:], index, start))
    rows = sum(len(index) for _, _, index, _ in trimmed)
    length = max(sub.shape[1] for _, sub, _, _ in trimmed)
    mask = torch.zeros(rows, length, dtype=torch.long, device=trimmed[0][1].device)
    row = 0
    for _, sub, _, _ in trimmed:
        mask[row : row + sub.shape[0], length - sub.shape[1] :] = sub
        row += sub.shape[0]
    new_layers = []
    for layer_idx in range(len(trimmed[0][0])):
        kref, vref = trimmed[0][0][layer_idx].buffers
        kbuf = kref.new_zeros(rows, kref.shape[1], length + growth, kref.shape[-1])
        vbuf = vref.new_zeros(rows, vref.shape[1], length + growth, vref.shape[-1])
        row = 0
        for layers, sub, index, start in trimmed:
            width = sub.shape[1]
            src_k, src_v = layers[layer_idx].buffers
            end = start + width
            kbuf[row : row + len(index), :, length - width : length] = src_k[index, :, start:end]
            vbuf[row : row + len(index), :, length - width : length] = src_v[index, :, start:end]
            row += len(index)
        new_layers.append(SlabLayer(kbuf, vbuf, length=length, growth=growth))
    return new_layers, mask


class PrefixCache:
    """KV of recent token sequences, reused when a new prompt starts with the same tokens.

    Entries are compact per-layer `(keys [heads, n, head_dim], values)`, evicted least recently used first
    once they hold more than `max_tokens` tokens. An entry that is a prefix of a newer one is dropped.
    """

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.entries: OrderedDict[int, tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]] = (
            OrderedDict()
        )
        self.total = 0
        self._next_id = 0

    def clear(self) -> None:
        self.entries.clear()
        self.total = 0

    def lookup(self, prompt: torch.Tensor) -> tuple[int, list[tuple[torch.Tensor, torch.Tensor]] | None]:
        """Longest reusable prefix of `prompt` (at most all but its last token) and the entry holding it."""
        best, best_id = 0, None
        limit = prompt.numel() - 1
        for eid, (tokens, _) in self.entries.items():
            n = min(tokens.numel(), limit)
            if n <= best:
                continue
            eq = tokens[:n] == prompt[:n]
            common = n if bool(eq.all()) else int(eq.to(torch.int8).argmin())
            if common > best:
                best, best_id = common, eid
        if best_id is None:
            return 0, None
        self.entries.move_to_end(best_id)
        return best, self.entries[best_id][1]

    def insert(self, tokens: torch.Tensor, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        n = tokens.numel()
        if self.max_tokens <= 0 or n > self.max_tokens or n == 0:
            return
        for eid, (old, _) in list(self.entries.items()):
            m = old.numel()
            if m <= n and torch.equal(old, tokens[:m]):
                del self.entries[eid]
                self.total -= m
            elif m > n and torch.equal(old[:n], tokens):
                self.entries.move_to_end(eid)  # already covered by a longer entry
                return
        self.entries[self._next_id] = (tokens, kv)
        self._next_id += 1
        self.total += n
        while self.total > self.max_tokens:
            _, (old, _) = self.entries.popitem(last=False)
            self.total -= old.numel()
