"""One short run on one GPU that shows the GPU paths working, as a table (no network: local models only).

Rows, each in its own try/except so that one failure does not hide the others, under one deadline (default
7.5 minutes: a row that would start after it is reported as skipped):

- vllm_generate: the project's vLLM engine on a batch of prompts, tokens/s, against raw vLLM (``vllm.LLM``)
  on the same prompts;
- sync_nccl / sync_cuda_ipc: the trainer's weights pushed into the vLLM engine by each strategy, seconds and
  GB/s (nccl needs the engine on a second GPU: skipped on one);
- fsdp2_bf16_step: one FSDP2 (``fully_shard``) optimizer step in bf16 on CUDA;
- sql_step: one full training step of the SQL recipe scaled to one GPU (a Qwen2.5-0.5B-class model if one
  is in the local Hugging Face cache, else the embedded model);
- mfu: the training step's model FLOP utilisation (6 * params * tokens / time / the GPU's peak bf16 rate).

``--dry-run`` runs nothing on a GPU: every row says "skipped: no CUDA" (or "skipped: dry run" on a GPU
machine); the test suite runs it that way.

    python benchmarks/gpu_check.py            # on the GPU machine
    python benchmarks/gpu_check.py --dry-run  # anywhere
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

ROWS = ("vllm_generate", "sync_nccl", "sync_cuda_ipc", "fsdp2_bf16_step", "sql_step", "mfu")
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0}
"""Dense bf16 peak of the GPUs this is likely to run on (TFLOP/s), for the MFU row."""


def local_model() -> str:
    """A Qwen2.5-0.5B-class model from the local Hugging Face cache, else the embedded model."""
    roots = [os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "/models", "/data/models"]
    for root in roots:
        for pattern in ("**/Qwen2.5-0.5B-Instruct/**/config.json", "**/*Qwen2.5-0.5B*/**/config.json"):
            hits = glob.glob(os.path.join(root, pattern), recursive=True)
            if hits:
                return os.path.dirname(sorted(hits)[0])
    return "embedded:smollm2-135m"


def _prompts(tokenizer: Any, n: int = 64) -> list[list[int]]:
    questions = [f"Write a SQL query that counts the rows of table t{i} where x > {i}." for i in range(n)]
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True
        )
        for q in questions
    ]


class Check:
    """The rows' shared state (the engine, the model path) and their results."""

    def __init__(self, model: str, deadline_s: float) -> None:
        self.model = model
        self.deadline = time.perf_counter() + deadline_s
        self.engine: Any = None
        self.results: dict[str, str] = {}
        self.step: dict[str, float] = {}

    def run(self, name: str, row: Callable[[], str]) -> None:
        """Run one row, catching everything; past the deadline it is skipped."""
        if time.perf_counter() > self.deadline:
            self.results[name] = "skipped: out of time"
            return
        start = time.perf_counter()
        try:
            self.results[name] = f"ok ({time.perf_counter() - start:.0f} s): " + row()
        except Exception as error:  # one failure must not hide the other rows
            last = traceback.format_exc().strip().splitlines()[-1]
            self.results[name] = f"FAILED: {type(error).__name__}: {last[:200]}"

    # -------------------------------------------------------------------------------------- rows
    def vllm_generate(self) -> str:
        import vllm

        from skyrl_train.config import SamplingParams
        from skyrl_train.inference.vllm import VLLMEngine
        from skyrl_train.models import load_tokenizer, resolve_model_path

        tokenizer = load_tokenizer(self.model)
        prompts = _prompts(tokenizer)
        params = SamplingParams(temperature=1.0, max_tokens=256, ignore_eos=True, seed=0)
        self.engine = VLLMEngine(
            self.model, tokenizer=tokenizer, gpu_memory_utilization=0.35, enable_sleep_mode=True
        )
        self.engine.generate_sync(prompts[:2], params)  # warm-up
        start = time.perf_counter()
        outputs = self.engine.generate_sync(prompts, params)
        ours = sum(len(o.token_ids) for o in outputs) / (time.perf_counter() - start)
        raw = vllm.LLM(model=resolve_model_path(self.model), gpu_memory_utilization=0.3, seed=0)
        raw_params = vllm.SamplingParams(temperature=1.0, max_tokens=256, ignore_eos=True)
        inputs = [{"prompt_token_ids": p} for p in prompts]
        raw.generate(inputs[:2], raw_params)
        start = time.perf_counter()
        raw_out = raw.generate(inputs, raw_params)
        theirs = sum(len(o.outputs[0].token_ids) for o in raw_out) / (time.perf_counter() - start)
        del raw
        return f"{ours:.0f} tok/s vs raw vLLM {theirs:.0f} tok/s (ratio {ours / theirs:.2f})"

    def _sync(self, strategy: str) -> str:
        import torch

        from skyrl_train.models import load_model
        from skyrl_train.weight_sync import make_weight_sync

        if self.engine is None:
            raise RuntimeError("no vLLM engine (the vllm_generate row failed)")
        if strategy == "nccl" and torch.cuda.device_count() < 2:
            return "skipped: nccl needs the engine and the trainer on two GPUs (NCCL has no two ranks on one)"
        model = load_model(self.model, dtype="bfloat16", device="cuda")
        state = list(model.state_dict().items())
        sync = make_weight_sync(strategy)
        sync.push(self.engine, state)  # sets up the group / handles
        start = time.perf_counter()
        report = sync.push(self.engine, state)
        seconds = time.perf_counter() - start
        sync.close()
        return f"{seconds:.3f} s, {report.bytes / seconds / 1e9:.1f} GB/s, version {report.version}"

    def sync_nccl(self) -> str:
        return self._sync("nccl")

    def sync_cuda_ipc(self) -> str:
        return self._sync("cuda_ipc")

    def fsdp2_bf16_step(self) -> str:
        import torch
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        from skyrl_train.distributed import find_free_port
        from skyrl_train.models import load_model

        if not dist.is_initialized():
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(find_free_port()))
            dist.init_process_group("nccl", rank=0, world_size=1)
        mesh = init_device_mesh("cuda", (1,))
        model = load_model(self.model, dtype="float32", device="cuda").train()
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        ids = torch.randint(0, 1000, (8, 512), device="cuda")
        before = next(model.parameters()).full_tensor().clone()
        start = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        moved = not torch.equal(before, next(model.parameters()).full_tensor())
        return f"loss {loss.item():.3f}, {seconds:.2f} s, weights moved: {moved}"

    def sql_step(self) -> str:
        from skyrl_train.config import load_config
        from skyrl_train.trainer import Trainer

        recipe = os.path.join(os.path.dirname(__file__), "..", "skyrl_train", "recipes", "sql_cpu.yaml")
        overrides = [
            f"trainer.policy.model.path={self.model}",
            "trainer.placement.backend=cuda",
            "trainer.bf16=true",
            "generator.backend=vllm",
            "generator.gpu_memory_utilization=0.3",
            "trainer.max_steps=1",
            "trainer.eval_before_train=false",
            "trainer.eval_interval=0",
            "trainer.sft_warmup.steps=0",
            "trainer.run_dir=/tmp/gpu_check_sql",
            "trainer.resume_mode=none",
            "trainer.logger=[jsonl]",
        ]
        if self.engine is not None:  # one vLLM engine on the GPU at a time
            with contextlib.suppress(Exception):
                self.engine.close()
            self.engine = None
        config = load_config(recipe, overrides)
        with Trainer(config) as trainer:
            rows = next(iter(trainer.iterator))
            metrics = trainer.train_step(rows)
        self.step = metrics
        n_params = sum(p.numel() for p in trainer.policy.model.parameters())
        self.step["n_params"] = float(n_params)
        self.step["tokens"] = float(
            metrics.get("generate/num_tokens", 0.0) or metrics.get("batch/tokens", 0.0)
        )
        return (
            f"step {metrics['time/step_s']:.1f} s (generate {metrics['time/generate_s']:.1f}, train "
            f"{metrics['time/train_s']:.1f}, sync {metrics['time/sync_s']:.2f}), reward "
            f"{metrics.get('generate/reward_mean', float('nan')):.3f}"
        )

    def mfu(self) -> str:
        import torch

        if not self.step:
            raise RuntimeError("no training step (the sql_step row failed)")
        name = torch.cuda.get_device_name(0)
        peak = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
        if peak is None:
            return f"skipped: no peak rate known for {name}"
        tokens = self.step["tokens"]
        if not tokens:
            return "skipped: the step reported no token count"
        achieved = 6 * self.step["n_params"] * tokens / self.step["time/train_s"] / 1e12
        return f"{achieved:.1f} TFLOP/s of {peak:.0f} ({100 * achieved / peak:.1f}% MFU) on {name}"


def main(argv: list[str] | None = None) -> int:
    """Run (or with ``--dry-run`` list) the rows and print the table; exit code 0 unless a row failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="run nothing on a GPU; every row is skipped")
    parser.add_argument(
        "--deadline-s", type=float, default=450.0, help="no row starts after this many seconds"
    )
    parser.add_argument(
        "--model", default=None, help="model path (default: a local Qwen2.5-0.5B, else embedded)"
    )
    args = parser.parse_args(argv)

    cuda = False
    with contextlib.suppress(Exception):
        import torch

        cuda = torch.cuda.is_available()
    check = Check(args.model or local_model(), args.deadline_s)
    for name in ROWS:
        if not cuda:
            check.results[name] = "skipped: no CUDA"
        elif args.dry_run:
            check.results[name] = "skipped: dry run"
        else:
            check.run(name, getattr(check, name))
    if check.engine is not None:
        with contextlib.suppress(Exception):
            check.engine.close()
    width = max(len(r) for r in ROWS)
    print(f"model: {check.model}")
    print(f"{'row'.ljust(width)} | result")
    print(f"{'-' * width}-|-{'-' * 60}")
    for name in ROWS:
        print(f"{name.ljust(width)} | {check.results[name]}")
    return 1 if any(v.startswith("FAILED") for v in check.results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
