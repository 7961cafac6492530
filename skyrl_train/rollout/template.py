"""The chat template of a rollout: applied once to the prompt, then only as text deltas for observations.

:class:`ChatTemplate` is the one place where the agent layer applies a tokenizer's chat template. Nothing
already in a trajectory's token list is ever re-tokenised: each observation is appended as the *text delta*
of the template (``render(history + observations, add_generation_prompt=True)`` minus ``render(history)``),
tokenised on its own. :func:`stop_strings_for` and :func:`sample_seed` are the per-turn sampling rules.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ChatTemplate", "sample_seed", "stop_strings_for"]

_SENTINEL = "\x00skyrl-end-of-turn-probe\x00"


class ChatTemplate:
    """The one place where the generator applies a tokenizer's chat template.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        chat_template_kwargs: extra keyword arguments for ``apply_chat_template`` (``tools=...``,
            ``enable_thinking=...``).
    """

    _BASE_CONVERSATION = ({"role": "user", "content": "base"}, {"role": "assistant", "content": "base"})

    def __init__(self, tokenizer: Any, chat_template_kwargs: Mapping[str, Any] | None = None):
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.end_of_turn_text = self._probe_end_of_turn()
        """What the template writes after an assistant message's content (``<|im_end|>\\n`` for ChatML)."""
        self.special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])
        eos = getattr(tokenizer, "eos_token_id", None)
        if isinstance(eos, int):
            self.special_ids.add(eos)

    def render(self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool) -> str:
        """The template's text for ``messages``."""
        return self.tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **self.chat_template_kwargs,
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of template text (special tokens in it are recognised; none are added)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids, special tokens kept, nothing cleaned up."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def prompt_ids(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """The prompt's token ids, ending with the generation prompt."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def observation_delta(
        self, history: Sequence[Mapping[str, str]], observations: Sequence[Mapping[str, str]]
    ) -> str:
        """The text the template adds for ``observations`` after ``history``, up to the next generation prompt.

        ``history`` ends with an assistant message. If the template renders the history differently once
        more messages follow (some drop earlier reasoning), the delta is taken after a fixed two-message
        conversation instead, which gives the same text for templates that render each message on its own.
        """
        before = self.render(history, add_generation_prompt=False)
        after = self.render([*history, *observations], add_generation_prompt=True)
        if after.startswith(before):
            return after[len(before) :]
        base = list(self._BASE_CONVERSATION)
        before = self.render(base, add_generation_prompt=False)
        after = self.render([*base, *observations], add_generation_prompt=True)
        if not after.startswith(before):
            raise ValueError(
                "the chat template renders earlier messages differently once observations follow; "
                "the observation delta cannot be computed without re-tokenising the history"
            )
        return after[len(before) :]

    def _probe_end_of_turn(self) -> str:
        messages = [*self._BASE_CONVERSATION[:1], {"role": "assistant", "content": _SENTINEL}]
        text = self.render(messages, add_generation_prompt=False)
        at = text.find(_SENTINEL)
        if at < 0:
            return getattr(self.tokenizer, "eos_token", None) or ""
        return text[at + len(_SENTINEL) :]


def stop_strings_for(env: Any, extra: Sequence[str] | None = None) -> list[str]:
    """The stop strings of a turn: the environment's own (its ``stop_strings``, see
    :attr:`skyrl_gym.Env.stop_strings`), then ``extra`` (``generator.stop``), without duplicates."""
    declared = getattr(env, "stop_strings", None) or ()
    if isinstance(declared, str):
        declared = [declared]
    found: list[str] = []
    for stop in [*declared, *(extra or [])]:
        if stop and stop not in found:
            found.append(stop)
    return found


def sample_seed(seed: int, group_id: int, sample_index: int, turn: int) -> int:
    """The sampling seed of one turn of one sample: a 31-bit hash, different for every sample and turn."""
    digest = hashlib.blake2b(f"{seed}/{group_id}/{sample_index}/{turn}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF
