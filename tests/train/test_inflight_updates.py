"""In-flight weight updates in the hf engine: pause at a token boundary, new weights, resume.

A request paused mid-generation keeps the tokens it produced with the old weights (equal to generating with
the old weights alone), and after the update it continues exactly as the new model continues its prefix
(greedy); every token carries the policy version that produced it, and no request is lost.
"""

from __future__ import annotations

import asyncio
import copy
import threading

import pytest

torch = pytest.importorskip("torch")

from skyrl_train.config import SamplingParams  # noqa: E402
from skyrl_train.inference.hf import HFEngine  # noqa: E402

from .tiny_models import special_ids, tiny_llama  # noqa: E402

NEW_TOKENS = 24
PAUSE_AT_STEP = 7  # decode steps before the pause: every request holds 8 tokens (1 from its prefill)


def _model(tokenizer, seed: int):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = tiny_llama(vocab_size=len(tokenizer), max_position_embeddings=512, **special_ids(tokenizer))
    return model.eval()


@pytest.fixture(scope="module")
def models(tokenizer):
    return _model(tokenizer, 0), _model(tokenizer, 1)


class PausingEngine(HFEngine):
    """The real engine, asking for a pause right after its ``pause_at``-th decode step (so that the test
    knows where generation stands when the weights change)."""

    def __init__(self, *args, pause_at: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.pause_at = pause_at
        self.reached = threading.Event()

    def _forward(self, input_ids, attention_mask, position_ids, cache, last_only):
        logits = super()._forward(input_ids, attention_mask, position_ids, cache, last_only)
        if not last_only and self.stats["steps"] + 1 == self.pause_at:
            self.pause(wait=False)
            self.reached.set()
        return logits


GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
PROMPTS = [[1, 42, 7, 99, 5], [1, 300, 301], [1, 42, 7, 99, 5, 8, 12, 600]]


def _alone(model, tokenizer, prompts, params):
    with HFEngine(model, tokenizer, prefix_cache_tokens=0) as engine:
        return engine.generate_sync(prompts, params)


def test_paused_request_keeps_old_tokens_and_continues_with_new_weights(models, tokenizer):
    old, new = models
    engine = PausingEngine(copy.deepcopy(old), tokenizer, pause_at=PAUSE_AT_STEP)
    try:
        futures = [engine.submit([p], GREEDY) for p in PROMPTS]
        assert engine.reached.wait(120), "the engine never reached the pause step"
        held = engine.pause()
        assert held == len(PROMPTS)
        assert not any(f.done() for f in futures)
        engine.load_weights(new.state_dict().items())
        assert engine.policy_version == 1
        engine.resume()
        outputs = [f.result(timeout=120)[0] for f in futures]
        stats = dict(engine.stats)
    finally:
        engine.close()

    old_alone = _alone(old, tokenizer, PROMPTS, GREEDY)
    for prompt, out, reference in zip(PROMPTS, outputs, old_alone, strict=True):
        assert len(out.token_ids) == NEW_TOKENS and out.stop_reason == "length"
        switch = out.policy_versions.index(1)
        assert out.policy_versions == [0] * switch + [1] * (NEW_TOKENS - switch)
        assert switch == PAUSE_AT_STEP + 1  # the prefill's token and one per decode step before the pause
        assert out.token_ids[:switch] == reference.token_ids[:switch]
        prefix = prompt + out.token_ids[:switch]
        rest = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS - switch, ignore_eos=True)
        (continuation,) = _alone(new, tokenizer, [prefix], rest)
        assert out.token_ids[switch:] == continuation.token_ids
        # and the new model's logprobs, not the old ones, on the tokens after the switch
        assert out.logprobs[switch:] == pytest.approx(continuation.logprobs, abs=1e-4)
    # the new weights really make different tokens here, or the test would prove nothing
    assert any(
        out.token_ids[out.policy_versions.index(1) :] != ref.token_ids[out.policy_versions.index(1) :]
        for out, ref in zip(outputs, old_alone, strict=True)
    )
    assert stats["pauses"] == 1 and stats["resumes"] == 1 and stats["weight_updates"] == 1
    assert stats["recomputed_rows"] == len(PROMPTS)


def test_update_without_pause_and_queued_requests(models, tokenizer):
    """An update between two steps (no pause) also recomputes the running rows' KV; requests submitted
    while paused wait and then run with the new weights; nothing is lost."""
    old, new = models
    with HFEngine(copy.deepcopy(old), tokenizer) as engine:
        engine.pause()
        queued = engine.submit(PROMPTS, GREEDY)
        engine.load_weights(new.state_dict().items(), version=5)
        engine.resume()
        outputs = queued.result(timeout=120)
        assert [o.policy_versions for o in outputs] == [[5] * NEW_TOKENS] * len(PROMPTS)
        assert [o.token_ids for o in outputs] == [
            o.token_ids for o in _alone(new, tokenizer, PROMPTS, GREEDY)
        ]

        # an update while requests run: their later tokens carry the next version
        async def run_and_update():
            task = asyncio.ensure_future(engine.generate(PROMPTS, GREEDY))
            while engine.stats["steps"] < 3:
                await asyncio.sleep(0.001)
            await engine.update_weights(old.state_dict().items())
            return await task

        outputs = asyncio.run(run_and_update())
        assert len(outputs) == len(PROMPTS)
        for out in outputs:
            assert len(out.token_ids) == NEW_TOKENS
            assert out.policy_versions == sorted(out.policy_versions)
            assert set(out.policy_versions) <= {5, 6}
        assert engine.policy_version == 6
        assert engine.stats["pauses"] == 1 and engine.stats["resumes"] == 1


def test_close_while_paused_aborts_and_keeps_partial_output(models, tokenizer):
    old, _ = models
    engine = PausingEngine(copy.deepcopy(old), tokenizer, pause_at=3)
    future = engine.submit(PROMPTS[:1], GREEDY)
    assert engine.reached.wait(120)
    engine.pause()
    engine.close()
    (out,) = future.result(timeout=60)
    assert out.stop_reason == "abort"
    assert len(out.token_ids) == 4 and out.policy_versions == [0] * 4
