"""Tokens per second of the rollout generator against calling ``model.generate`` directly, same prompts.

Both sides sample ``--samples`` completions of ``--max-tokens`` tokens for each of ``--prompts`` chat prompts
from the embedded model (SmolLM2-135M-Instruct) on this machine's CPU, with EOS ignored so both produce
exactly the same number of tokens:

- baseline: one batched ``model.generate`` call (left padding, attention mask, sampling);
- ours: :class:`~skyrl_train.rollout.MultiTurnGenerator` over the math environment (single turn) with the
  ``hf`` engine: chat templating, concurrent trajectories, environment steps and all.

    python benchmarks/generator_throughput.py [--prompts 8 --samples 4 --max-tokens 64 --repeats 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from skyrl_gym.envs.math.tasks import task_for_seed  # noqa: E402
from skyrl_train.inference.base import SamplingParams, make_engine  # noqa: E402
from skyrl_train.models import load_model, load_tokenizer  # noqa: E402
from skyrl_train.rollout import MultiTurnGenerator  # noqa: E402

MODEL = "embedded:smollm2-135m"


def rows(n: int) -> list[dict]:
    out = []
    for seed in range(n):
        task = task_for_seed(seed)
        out.append({"prompt": task["prompt"], "env_class": "math", **task["extras"]})
    return out


def baseline(model, tokenizer, prompts: list[list[int]], samples: int, max_tokens: int) -> tuple[int, float]:
    tokenizer.padding_side = "left"
    batch = [p for p in prompts for _ in range(samples)]
    width = max(len(p) for p in batch)
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in batch])
    mask = (torch.arange(width)[None, :] >= torch.tensor([width - len(p) for p in batch])[:, None]).long()
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=True,
            temperature=1.0,
            max_new_tokens=max_tokens,
            min_new_tokens=max_tokens,
            pad_token_id=tokenizer.pad_token_id,
        )
    elapsed = time.perf_counter() - start
    return int((out.shape[1] - width) * out.shape[0]), elapsed


def ours(generator, data: list[dict], samples: int, max_tokens: int) -> tuple[int, float]:
    params = SamplingParams(temperature=1.0, max_tokens=max_tokens, ignore_eos=True, seed=0)
    start = time.perf_counter()
    out = asyncio.run(generator.generate(data, samples, params))
    elapsed = time.perf_counter() - start
    return sum(t.num_model_tokens for t in out.trajectories), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    tokenizer = load_tokenizer(MODEL)
    model = load_model(MODEL)
    data = rows(args.prompts)
    prompts = [
        tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True) for r in data
    ]
    prompts = [list(p["input_ids"]) if hasattr(p, "keys") else list(p) for p in prompts]
    engine = make_engine("hf", model=model, tokenizer=tokenizer, max_batch_size=args.prompts * args.samples)
    generator = MultiTurnGenerator(engine, tokenizer, default_env_class="math", max_turns=1)

    results: dict[str, list[float]] = {"model.generate": [], "generator": []}
    for _ in range(args.repeats):  # interleaved, so that machine noise hits both sides alike
        tokens, seconds = baseline(model, tokenizer, prompts, args.samples, args.max_tokens)
        results["model.generate"].append(tokens / seconds)
        tokens, seconds = ours(generator, data, args.samples, args.max_tokens)
        results["generator"].append(tokens / seconds)
    engine.close()

    base = max(results["model.generate"])
    print(f"{args.prompts} prompts x {args.samples} samples x {args.max_tokens} tokens, {MODEL}, CPU")
    print(f"{'side':16} {'best tok/s':>10} {'all runs':>24} {'ratio':>7}")
    for name, speeds in results.items():
        runs = ", ".join(f"{s:.1f}" for s in speeds)
        print(f"{name:16} {max(speeds):10.1f} {runs:>24} {max(speeds) / base:6.2f}x")


if __name__ == "__main__":
    main()
