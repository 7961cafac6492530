"""``ScriptedEngine``: an inference engine that plays scripted assistant texts.

It stands in for a model where the answers are known: tests without a model, and the supervised warm-up
(:mod:`skyrl_train.loop.warmup`), which plays gold answers through the real environments to get trajectories
with exactly the tokens, observations and loss masks a model's own rollout would have.

The script is a function of the conversation so far (the decoded prompt, chat template and all) that returns
the assistant's next text. The engine tokenises that text with the real tokenizer and answers the way a real
engine does: it stops at the first stop string (included in the output, like vLLM's
``include_stop_str_in_output``), cuts at ``max_tokens`` (``stop_reason == "length"``) and otherwise ends
with the tokenizer's EOS token (``stop_reason == "stop"``, no stop string). Every call is recorded, and an
optional delay (an ``asyncio.sleep``) shows whether calls overlap.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from skyrl_train.inference.base import GenerationOutput, InferenceEngine, SamplingParams

__all__ = ["EngineCall", "GenerationOutput", "SamplingParams", "ScriptedEngine"]

Script = Callable[[str], str]
"""The assistant's next text, given the decoded conversation so far."""


@dataclasses.dataclass
class EngineCall:
    """One prompt of one ``generate`` call, and what the engine answered."""

    prompt_ids: list[int]
    params: Any
    output: Any


class ScriptedEngine(InferenceEngine):
    """Answers each prompt with ``script(decoded prompt)``, tokenised; see the module docstring.

    Args:
        tokenizer: the tokenizer to encode the scripted texts with.
        script: the assistant's next text for a conversation; raising in it makes ``generate`` raise.
        delay_s: seconds each ``generate`` call sleeps before answering.
        logprob: the log-probability reported for every token (``None``: report none).
        eos_token_id: the token a finished answer ends with (default: the tokenizer's EOS).
    """

    def __init__(
        self,
        tokenizer: Any,
        script: Script,
        *,
        delay_s: float = 0.0,
        logprob: float | None = -0.5,
        eos_token_id: int | None = None,
    ):
        self._tokenizer = tokenizer
        self.script = script
        self.delay_s = delay_s
        self.logprob = logprob
        self.eos_token_id = tokenizer.eos_token_id if eos_token_id is None else eos_token_id
        self.calls: list[EngineCall] = []
        self.in_flight = 0
        self.max_in_flight = 0

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    async def generate(self, prompts: Sequence[Sequence[int]], params: Any) -> list[Any]:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            outputs = [self._answer(list(prompt), params) for prompt in prompts]
        finally:
            self.in_flight -= 1
        for prompt, output in zip(prompts, outputs, strict=True):
            self.calls.append(EngineCall(list(prompt), params, output))
        return outputs

    async def update_weights(self, named_tensors: Iterable[Any]) -> None:
        """Nothing to update: the script is the policy."""

    def close(self) -> None:
        """Nothing to release."""

    def output_for(self, prompt_ids: Sequence[int]) -> Any:
        """The recorded output of the call whose prompt was ``prompt_ids``."""
        for call in self.calls:
            if call.prompt_ids == list(prompt_ids):
                return call.output
        raise KeyError("no call had this prompt")

    def _answer(self, prompt: list[int], params: Any) -> Any:
        text = self.script(self.tokenizer.decode(prompt, skip_special_tokens=False))
        stop_string = None
        cut = None
        for stop in params.stop or []:
            at = text.find(stop)
            if at >= 0 and (cut is None or at + len(stop) < cut):
                cut, stop_string = at + len(stop), stop
        if cut is not None:
            text = text[:cut]
        tokens = list(self.tokenizer.encode(text, add_special_tokens=False))
        if len(tokens) > params.max_tokens:
            tokens, reason, stop_string = tokens[: params.max_tokens], "length", None
        elif stop_string is not None:
            reason = "stop"
        elif len(tokens) < params.max_tokens:
            tokens, reason = [*tokens, self.eos_token_id], "stop"
        else:
            reason = "length"
        logprobs = None if self.logprob is None else [self.logprob] * len(tokens)
        return GenerationOutput(
            token_ids=tokens, logprobs=logprobs, stop_reason=reason, stop_string=stop_string
        )
