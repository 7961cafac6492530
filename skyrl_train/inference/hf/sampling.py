"""The hf engine's token choice: per-row sampling and the stop rules.

Every row of a decode step has its own :class:`~skyrl_train.config.SamplingParams`: temperature, top-k,
min-p and top-p filter its distribution, then one uniform draw per row picks the token by inverse CDF, from
the row's own generator when its request has a seed (so a seeded request samples the same tokens whatever
batch it lands in). Logprobs are those of the sampled tokens under the raw distribution (log-softmax at
temperature 1, before any filtering: vLLM's default), which is what the trainer's forward pass recomputes.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["StopRule", "eos_token_ids", "sample_tokens"]


def sample_tokens(
    logits: torch.Tensor, seqs: Sequence[Any], rng: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row of ``logits [rows, vocab]`` and its logprob at temperature 1.

    Each row's sequence (anything with ``params``, a :class:`~skyrl_train.config.SamplingParams`, and ``generator``, a
    ``torch.Generator`` or ``None``) samples with its own temperature / top-k / min-p / top-p, or takes the
    argmax when greedy; rows without a generator draw from ``rng``.
    """
    logprobs_all = torch.log_softmax(logits, dim=-1)
    tokens = logits.argmax(dim=-1)
    sampled = [i for i, s in enumerate(seqs) if not s.params.greedy]
    if sampled:
        index = torch.tensor(sampled, device=logits.device)
        temps = torch.tensor([seqs[i].params.temperature for i in sampled], device=logits.device)
        x = logits.index_select(0, index) / temps[:, None]
        vocab = x.shape[-1]
        ks = torch.tensor(
            [seqs[i].params.top_k if 0 < seqs[i].params.top_k < vocab else vocab for i in sampled],
            device=logits.device,
        )
        filtered = ks < vocab
        if bool(filtered.any()):
            kth = torch.topk(x, int(ks[filtered].max()), dim=-1).values
            thresholds = kth.gather(1, (ks.clamp(max=kth.shape[-1]) - 1)[:, None]).squeeze(1)
            thresholds = thresholds.masked_fill(~filtered, float("-inf"))
            x = x.masked_fill(x < thresholds[:, None], float("-inf"))
        min_ps = torch.tensor([seqs[i].params.min_p for i in sampled], device=logits.device)
        if bool((min_ps > 0).any()):
            floor = x.max(dim=-1, keepdim=True).values + torch.log(min_ps)[:, None]
            x = x.masked_fill(x < floor, float("-inf"))
        ps = torch.tensor([seqs[i].params.top_p for i in sampled], device=logits.device)
        if bool((ps < 1).any()):
            sorted_x, order = torch.sort(x, dim=-1, descending=True)
            probs = torch.softmax(sorted_x, dim=-1)
            mass_before = probs.cumsum(dim=-1) - probs
            sorted_x = sorted_x.masked_fill(mass_before >= ps[:, None], float("-inf"))
            x = torch.full_like(x, float("-inf")).scatter(1, order, sorted_x)
        # Inverse-CDF sampling: one uniform draw per row, from the row's own generator when it has a seed.
        cdf = torch.softmax(x, dim=-1).cumsum(dim=-1)
        uniform = torch.empty(len(sampled), device=logits.device)
        shared = [j for j, i in enumerate(sampled) if seqs[i].generator is None]
        if shared:
            uniform[shared] = torch.rand(len(shared), generator=rng, device=logits.device)
        for j, i in enumerate(sampled):
            if seqs[i].generator is not None:
                uniform[j] = torch.rand(1, generator=seqs[i].generator, device=logits.device)
        # 1 - u lies in (0, 1], so the search never lands on a zero-probability token at the start.
        targets = ((1.0 - uniform) * cdf[:, -1])[:, None]
        draws = torch.searchsorted(cdf, targets).squeeze(1).clamp(max=vocab - 1)
        tokens[index] = draws
    logprobs = logprobs_all.gather(1, tokens[:, None]).squeeze(1)
    return tokens, logprobs


class StopRule:
    """When a sequence ends: a stop token, a stop string in the last tokens' text, or its token budget.

    The stop strings are found by decoding a window of the last tokens with the engine thread's own copy of
    the tokenizer (a Rust tokenizer should not be shared across threads), made on first use: a large
    vocabulary takes a while to copy, and many engines never need it.
    """

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._decoder: Any = None

    def _stop_decoder(self) -> Any:
        if self._decoder is None:
            try:
                self._decoder = copy.deepcopy(self._tokenizer)
            except Exception:
                self._decoder = self._tokenizer
        return self._decoder

    def check(self, seq: Any, token: int) -> None:
        """Set ``seq.finish`` (and ``seq.stop_string``) if ``token``, just appended, ends the sequence."""
        if token in seq.stop_ids:
            seq.finish = "stop"
            return
        if seq.params.stop:
            text = self._stop_decoder().decode(seq.tokens[-seq.stop_window :], skip_special_tokens=False)
            hits = [(text.find(s), s) for s in seq.params.stop if s in text]
            if hits:
                seq.finish, seq.stop_string = "stop", min(hits)[1]
                return
        if len(seq.tokens) >= seq.max_new:
            seq.finish = "length"


def eos_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """The tokens that end a response: the model's generation config's EOS ids and the tokenizer's."""
    ids: set[int] = set()
    generation_config = getattr(model, "generation_config", None)
    eos = getattr(generation_config, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, list | tuple):
        ids.update(int(e) for e in eos)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids
