"""vLLM (its CPU build) against the project's hf engine and ``model.generate``, on the main job's SQL prompts.

Runs in vLLM's environment (``make vllm-env``), on this machine's CPU, with the embedded model:

1. generation: ``--prompts`` compact text2sql prompts x ``--samples`` samples x ``--max-tokens`` tokens (EOS
   ignored, so every side makes the same number of tokens), repeated and interleaved; tokens per wall-second
   and per CPU-second (this process and its children: vLLM's engine core and worker are child processes);
2. episodes per minute: the multi-turn generator over the real text2sql environment with the main job's
   settings (2 turns, 80 tokens per turn, groups of 4), one engine after the other;
3. weight sync: pushing the whole policy (float32) into the engine, per step, and the weight-sync gate's
   share of it (digests of every tensor on both sides, and the probe's log-probabilities on both sides);
4. peak memory of the whole process tree (resident set, sampled every 0.2 s) per side.

Ratios are against the hf engine, in the same run.

    .venv-vllm/bin/python benchmarks/vllm_engine.py [--prompts 8 --samples 4 --max-tokens 64 --repeats 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

MODEL = "embedded:smollm2-135m"


class TreeMeter:
    """CPU seconds and peak resident memory of this process and all its descendants."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._me = psutil.Process()
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _procs(self) -> list:
        return [self._me, *self._me.children(recursive=True)]

    def cpu_seconds(self) -> float:
        total = 0.0
        for proc in self._procs():
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except self._psutil.Error:
                pass
        return total

    def rss(self) -> int:
        total = 0
        for proc in self._procs():
            try:
                total += proc.memory_info().rss
            except self._psutil.Error:
                pass
        return total

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, self.rss())

    def reset_peak(self) -> None:
        self.peak = self.rss()

    def close(self) -> None:
        self._stop.set()


def sql_prompts(tokenizer, n: int) -> tuple[list[dict], list[list[int]]]:
    from skyrl_gym.envs.sql.prompts import build_compact_prompt
    from skyrl_gym.envs.sql.tasks import load_split
    from skyrl_gym.runtime.sql.database import open_database

    rows = [r for r in load_split("train") if r["extra_info"]["level"] == "easy"][:n]
    for row in rows:
        with open_database(row["db_path"]) as db:
            row["prompt"] = build_compact_prompt(db, row["extra_info"]["question"])
    ids = [
        list(
            tokenizer.apply_chat_template(
                r["prompt"], add_generation_prompt=True, tokenize=True, return_dict=True
            )["input_ids"]
        )
        for r in rows
    ]
    return rows, ids


def timed(meter: TreeMeter, fn) -> tuple[object, float, float]:
    cpu0, wall0 = meter.cpu_seconds(), time.perf_counter()
    result = fn()
    return result, time.perf_counter() - wall0, meter.cpu_seconds() - cpu0


def engine_generate(engine, prompts, samples, max_tokens) -> int:
    from skyrl_train.inference import SamplingParams

    params = SamplingParams(temperature=1.0, max_tokens=max_tokens, ignore_eos=True, seed=0)
    outs = engine.generate_sync([p for p in prompts for _ in range(samples)], params)
    return sum(len(o.token_ids) for o in outs)


def episodes(engine, tokenizer, rows, samples) -> int:
    from skyrl_train.inference import SamplingParams
    from skyrl_train.rollout import MultiTurnGenerator

    generator = MultiTurnGenerator(
        engine, tokenizer, default_env_class="text2sql", max_turns=2, max_tokens_per_trajectory=160
    )
    params = SamplingParams(temperature=1.0, max_tokens=80, seed=0)
    out = asyncio.run(generator.generate(rows, samples, params))
    return len(out.trajectories)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--syncs", type=int, default=3)
    args = parser.parse_args()

    import torch
    from generator_throughput import baseline  # model.generate on the same batch, left-padded (this folder)

    from skyrl_train.inference import make_engine
    from skyrl_train.inference.weight_sync import gate
    from skyrl_train.models import load_model, load_tokenizer

    meter = TreeMeter()
    tokenizer = load_tokenizer(MODEL)
    model = load_model(MODEL)
    rows, prompts = sql_prompts(tokenizer, args.prompts)
    gen: dict[str, list[tuple[int, float, float]]] = {}
    eps: dict[str, tuple[int, float]] = {}
    peaks: dict[str, int] = {}

    # the hf engine (sharing the policy's model, as the main job does) and model.generate
    hf = make_engine("hf", model=model, tokenizer=tokenizer, max_batch_size=args.prompts * args.samples)
    meter.reset_peak()
    for _ in range(args.repeats):
        for name, fn in (
            (
                "model.generate",
                lambda: baseline(model, tokenizer, prompts, args.samples, args.max_tokens)[0],
            ),
            ("hf engine", lambda: engine_generate(hf, prompts, args.samples, args.max_tokens)),
        ):
            tokens, wall, cpu = timed(meter, fn)
            gen.setdefault(name, []).append((tokens, wall, cpu))
    count, wall, _ = timed(meter, lambda: episodes(hf, tokenizer, rows, args.samples))
    eps["hf engine"] = (count, wall)
    peaks["hf engine"] = meter.peak
    hf.close()

    # vLLM in float32 and bfloat16; the policy's model stays in this process, as in training
    sync_rows = []
    for dtype in ("float32", "bfloat16"):
        name = f"vllm {dtype}"
        meter.reset_peak()
        start = time.perf_counter()
        engine = make_engine("vllm", model_path=MODEL, dtype=dtype, max_model_len=2048)
        started = time.perf_counter() - start
        engine_generate(engine, prompts[:1], 1, 4)  # first request: kernels warm
        for _ in range(args.repeats):
            tokens, wall, cpu = timed(
                meter, lambda e=engine: engine_generate(e, prompts, args.samples, args.max_tokens)
            )
            gen.setdefault(name, []).append((tokens, wall, cpu))
        count, wall, _ = timed(meter, lambda e=engine: episodes(e, tokenizer, rows, args.samples))
        eps[name] = (count, wall)
        probe = gate.probe_tokens(tokenizer)
        for step in range(args.syncs):
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(1.0 + 1e-4 * (step + 1))
            t0 = time.perf_counter()
            asyncio.run(engine.update_weights(model.state_dict().items()))
            t1 = time.perf_counter()
            result = gate.compare_probe(
                gate.trainer_probe_logprobs(model, probe),
                gate.engine_probe_logprobs(engine, probe),
                tolerance=gate.PROBE_TOLERANCE[dtype],
            )
            t2 = time.perf_counter()
            digest = engine.last_sync["digest_seconds"]
            sync_rows.append((name, t1 - t0, digest, t2 - t1, result.max_diff, engine.last_sync["bytes"]))
        peaks[name] = meter.peak
        engine.close()
        print(f"{name}: engine start {started:.1f} s", flush=True)
    meter.close()

    base_wall = max(t / w for t, w, _ in gen["hf engine"])
    base_cpu = max(t / c for t, _, c in gen["hf engine"])
    print(f"\n{args.prompts} SQL prompts x {args.samples} samples x {args.max_tokens} tokens, {MODEL}, CPU")
    print(
        f"{'side':16} {'tok/s':>8} {'tok/CPU-s':>10} {'x hf (wall)':>12} {'x hf (CPU)':>11} {'peak GiB':>9}"
    )
    for name, runs in gen.items():
        wall = max(t / w for t, w, _ in runs)
        cpu = max(t / c for t, _, c in runs)
        peak = f"{peaks[name] / 2**30:9.2f}" if name in peaks else f"{'-':>9}"
        print(f"{name:16} {wall:8.1f} {cpu:10.1f} {wall / base_wall:11.2f}x {cpu / base_cpu:10.2f}x {peak}")
    base_eps = eps["hf engine"][0] / eps["hf engine"][1] * 60
    print(f"\nepisodes per minute (text2sql, 2 turns x 80 tokens, {args.prompts} x {args.samples})")
    for name, (count, wall) in eps.items():
        rate = count / wall * 60
        print(f"{name:16} {rate:8.1f} {rate / base_eps:6.2f}x")
    print("\nweight sync of the whole policy (float32 state dict) and the gate's share of it")
    print(
        f"{'engine':16} {'sync s':>7} {'digests s':>10} {'probe s':>8} {'gate share':>11} {'probe max diff':>15} {'MB':>6}"
    )
    for name, sync, digest, probe_s, diff, size in sync_rows:
        share = (digest * 2 + probe_s) / (sync + probe_s)  # digests on both sides, about equal work
        print(
            f"{name:16} {sync:7.2f} {digest:10.3f} {probe_s:8.3f} {share:10.1%} {diff:15.2e} {size / 1e6:6.0f}"
        )


if __name__ == "__main__":
    main()
