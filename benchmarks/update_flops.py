"""Achieved FLOP/s of the policy update against this CPU's matmul rate: the padded path and the packed path.

In one run: the matmul rate of this machine (``torch.matmul`` of two large float32 matrices, best of a few
repetitions), then, for each path in a fresh process (so each has its own peak resident memory), the wall
time of ``PolicyWorker.train_step`` (forward, backward and optimizer step) on the embedded SmolLM2-135M with
a batch shaped like the main job's (``--prompts`` text-to-SQL prompts of the compact data set, or
~280-token stand-ins, times ``--group`` sampled responses of 30 to ``--max-response`` tokens).

FLOPs are counted analytically for the work the step needs, the same number for both paths: each group's
prompt once plus every response token through the decoder layers (``2 * params`` per token and pass), the
output head on the positions that predict a response token only, and attention over the query-key pairs
causality allows (``4 * width`` per pair and layer), times 3 for forward and backward. The padded path
executes more than that (padding, the prompt once per sample, the head on every position); the ``executed``
column shows its own count.

The packed path with activation checkpointing (the sql_cpu recipe's setting) is measured too, and both packed
paths with LoRA adapters (``trainer.policy.lora``, rank ``--lora-rank`` on every attention and MLP projection):
the frozen base needs no weight gradients and no Adam state, which shows in the time and the peak memory (the
FLOP columns count full fine-tuning's work for every path).

    python benchmarks/update_flops.py [--steps 3] [--prompts 4] [--group 4] [--lora-rank 16]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

MODEL = "embedded:smollm2-135m"
DATA = Path("data/text2sql/train.parquet")
PATHS = ("padded", "packed", "packed+ckpt", "packed+ckpt+lora", "packed+lora")
"""The plain padded forward (before), the packed one (after), the packed one with activation checkpointing
(what the sql_cpu recipe runs, for its memory), and the packed ones training LoRA adapters."""


def matmul_rate(size: int = 2048, repeats: int = 5) -> float:
    """Best float32 matmul rate of ``repeats`` products of two ``size x size`` matrices, in FLOP/s."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.matmul(a, b)  # warm-up: thread pool, allocator
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def prompts(tokenizer, count: int) -> list[list[int]]:
    """Token ids of the first ``count`` prompts of the compact text-to-SQL data (stand-ins without it)."""
    import torch

    if DATA.exists():
        from skyrl_train.data import read_rows

        out = []
        for row in read_rows(DATA)[:count]:
            ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
            out.append(list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids))
        return out
    gen = torch.Generator().manual_seed(1)
    return [torch.randint(10, 40000, (270 + 10 * i,), generator=gen).tolist() for i in range(count)]


def make_batch(tokenizer, n_prompts: int, group: int, max_response: int):
    """A TrainingBatch of ``n_prompts`` groups of ``group`` random responses with random advantages."""
    from types import SimpleNamespace

    import torch

    from skyrl_train.training.batch import TrainingBatch

    gen = torch.Generator().manual_seed(0)
    trajectories = []
    for g, prompt in enumerate(prompts(tokenizer, n_prompts)):
        for _ in range(group):
            n = int(torch.randint(30, max_response + 1, (1,), generator=gen))
            response = torch.randint(10, 40000, (n,), generator=gen).tolist()
            trajectories.append(
                SimpleNamespace(prompt_ids=prompt, response_ids=response, loss_mask=[1] * n, group_id=g)
            )
    batch = TrainingBatch.from_trajectories(trajectories, tokenizer.pad_token_id)
    batch.advantages = torch.randn(batch.response_mask.shape, generator=gen) * batch.response_mask
    return batch


def useful_flops(model, batch, micro_batch_size: int) -> tuple[float, float]:
    """(needed, executed by the padded path, executed by the packed path) FLOPs of one forward+backward
    over ``batch``."""
    from skyrl_train.training.workers.batching import batch_tensors, iter_micro_batches, pack_micro_batch

    cfg = model.config
    hidden, vocab, layers = cfg.hidden_size, cfg.vocab_size, cfg.num_hidden_layers
    width = cfg.num_attention_heads * getattr(cfg, "head_dim", hidden // cfg.num_attention_heads)
    head = hidden * vocab
    decoder = sum(p.numel() for p in model.parameters()) - head  # the tied embedding is the head
    needed = recompute = 0.0
    tensors = batch_tensors(batch)
    for mb in iter_micro_batches(tensors, micro_batch_size):
        packed = pack_micro_batch(mb)
        needed += 2 * decoder * packed.tokens + 2 * head * packed.labels.numel()
        needed += 4 * width * layers * packed.attended
        recompute += 2 * head * packed.labels.numel()  # the chunked head's forward, again in the backward
    rows, length = batch.input_ids.shape
    # the padded path: every column of every row (trimmed to the micro-batch's widest), the head everywhere
    executed = 0.0
    for mb in iter_micro_batches(tensors, micro_batch_size):
        used = mb["attention_mask"].bool().any(0).nonzero()
        cols = int(used[-1]) - int(used[0]) + 1
        b = mb["input_ids"].shape[0]
        executed += (2 * (decoder + head) * cols + 4 * width * layers * cols * cols) * b
    return 3 * needed, 3 * executed, 3 * needed + recompute


def run_path(args: argparse.Namespace) -> dict:
    """Time ``train_step`` on one path in this process; report seconds, FLOPs and peak memory."""
    import torch

    from skyrl_train.config import AlgorithmConfig, OptimizerConfig
    from skyrl_train.models import load_model, load_tokenizer
    from skyrl_train.training.workers import PolicyWorker

    torch.manual_seed(0)
    tokenizer = load_tokenizer(MODEL)
    worker = PolicyWorker(
        lambda: load_model(MODEL),
        OptimizerConfig(lr=1e-6),
        AlgorithmConfig(eps_clip_high=0.28),
        micro_batch_size=args.micro,
        packed=args.path != "padded",
        gradient_checkpointing="+ckpt" in args.path,
        lora={"rank": args.lora_rank} if "+lora" in args.path else None,
    )
    batch = make_batch(tokenizer, args.prompts, args.group, args.max_response)
    needed, padded, packed = useful_flops(worker.model, batch, args.micro)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        worker.train_step(batch)
        times.append(time.perf_counter() - start)
    peak_kb = next(
        int(line.split()[1])
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmHWM")
    )
    return {
        "path": args.path,
        "times": times,
        "needed_flops": needed,
        # checkpointing runs the decoder's forward twice
        "executed_flops": padded if args.path == "padded" else packed + ("+ckpt" in args.path) * needed / 3,
        "rows": batch.batch_size,
        "padded_tokens": int(batch.input_ids.numel()),
        "peak_rss_gb": peak_kb / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--steps", type=int, default=3, help="timed train steps per path (the first warms up)"
    )
    parser.add_argument("--prompts", type=int, default=4, help="groups in the batch (the main job: 4)")
    parser.add_argument("--group", type=int, default=4, help="responses per prompt (the main job: 4)")
    parser.add_argument("--max-response", type=int, default=160, help="longest response, tokens")
    parser.add_argument("--micro", type=int, default=8, help="rows per micro-batch (the main job: 8)")
    parser.add_argument("--lora-rank", type=int, default=16, help="adapter rank of the +lora paths")
    parser.add_argument(
        "--paths",
        default=",".join(PATHS),
        help="comma-separated paths to run, the first being the baseline of the ratios (default: all)",
    )
    parser.add_argument("--path", choices=list(PATHS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.path:  # the child process of one path
        print(json.dumps(run_path(args)))
        return

    import torch

    rate = matmul_rate()
    results = []
    chosen = args.paths.split(",")
    if unknown := [p for p in chosen if p not in PATHS]:
        parser.error(f"unknown paths {unknown}; known: {', '.join(PATHS)}")
    for path in chosen:
        cmd = [sys.executable, __file__, "--path", path] + [
            f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("path", "paths")
        ]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    rate_after = matmul_rate()
    print(
        f"policy update, {MODEL}, {results[0]['rows']} rows ({args.prompts} prompts x {args.group}), "
        f"micro-batch {args.micro}, float32, {torch.get_num_threads()} threads"
    )
    print(f"matmul rate: {rate / 1e9:.1f} GFLOP/s before, {rate_after / 1e9:.1f} GFLOP/s after the paths")
    rate = max(rate, rate_after)
    print(
        f"{'path':16} {'median s':>9} {'all steps':>22} {'needed GFLOP':>13} {'executed':>9} "
        f"{'GFLOP/s':>8} {'share':>6} {'peak RSS':>9}"
    )
    for r in results:
        typical = statistics.median(r["times"][1:] if len(r["times"]) > 1 else r["times"])
        executed = r["executed_flops"]
        achieved = r["needed_flops"] / typical
        runs = ", ".join(f"{t:.1f}" for t in r["times"])
        print(
            f"{r['path']:16} {typical:9.2f} {runs:>22} {r['needed_flops'] / 1e9:13.0f} "
            f"{executed / 1e9:9.0f} {achieved / 1e9:8.1f} {achieved / rate:6.1%} {r['peak_rss_gb']:8.2f}G"
        )
    before, *after = (statistics.median(r["times"][1:] or r["times"]) for r in results)
    print(
        f"speed-up of the update over the {results[0]['path']} path: "
        + ", ".join(f"{r['path']} {before / t:.2f}x" for r, t in zip(results[1:], after, strict=True))
    )


if __name__ == "__main__":
    main()
