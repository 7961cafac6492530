"""The Ray layout's cost per training step against the spawned-process layout, on this machine.

Both layouts run the same work: two FSDP2 policy workers (gloo) train a small random Llama on the same
fixed batches (log-probs, then one optimizer step per batch), and the full weights go to an hf engine after
each step (in this process for the spawned layout; in the engine actor, straight from rank 0, for Ray). The
start (workers up, model built) and the steady step are timed apart; the ratio of the mean steps is printed,
with the peak resident memory of the driver and of each worker (VmHWM).

    python benchmarks/ray_overhead.py [--steps 5] [--hidden 256] [--layers 4]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import tempfile
import time


def _peak_gb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
        return kib / 2**20
    except (OSError, StopIteration):
        return float("nan")


def _model_dir(hidden: int, layers: int) -> str:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from skyrl_train.models import load_tokenizer

    path = tempfile.mkdtemp(prefix="ray_overhead_")
    tokenizer = load_tokenizer("embedded:smollm2-135m")
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    return path


def _batch(seed: int, rows: int = 8, prompt: int = 32, response: int = 64) -> dict:
    import torch

    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 1000, (rows, prompt + response), generator=gen)
    mask = torch.ones(rows, response, dtype=torch.long)
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "response_mask": mask,
        "advantages": torch.randn(rows, response, generator=gen),
    }


def run(layout: str, model_dir: str, steps: int) -> dict:
    """Start the layout, take ``steps`` steps; times and peak memory."""
    from skyrl_train.config import AlgorithmConfig, OptimizerConfig
    from skyrl_train.models import load_model
    from skyrl_train.training.workers import PolicyWorker

    kwargs = {
        "model_factory": functools.partial(load_model, model_dir),
        "optimizer_cfg": OptimizerConfig(lr=1e-4),
        "algorithm_cfg": AlgorithmConfig(),
        "micro_batch_size": 4,
        "seed": 0,
    }
    started = time.perf_counter()
    if layout == "process":
        from skyrl_train.inference.hf import HFEngine
        from skyrl_train.training.workers import WorkerGroup

        group = WorkerGroup(PolicyWorker, 2, kwargs)
        engine = HFEngine.create(model_path=model_dir)
        pids = group.pids

        def sync() -> None:
            engine.load_weights(group.full_state_dict().items())
    else:
        import ray

        from skyrl_train.config import GeneratorConfig
        from skyrl_train.models import load_tokenizer
        from skyrl_train.ray_layout.engine import RayEngine
        from skyrl_train.training.workers.ray_group import RayWorkerGroup

        ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False)
        group = RayWorkerGroup(PolicyWorker, 2, kwargs)
        engine = RayEngine(
            kind="hf",
            generator=GeneratorConfig(),
            model_path=model_dir,
            tokenizer=load_tokenizer(model_dir),
            seed=0,
            device="cpu",
            actor_options={"num_cpus": 0},
            start_timeout_s=600,
            call_timeout_s=600,
        )
        pids = [*group.pids, engine.pid]

        def sync() -> None:
            engine.sync_from(group)

    start_s = time.perf_counter() - started
    times = []
    for step in range(steps):
        batch = _batch(step)
        t0 = time.perf_counter()
        batch["old_log_probs"] = group.compute_log_probs(batch)
        group.train_step(batch)
        sync()
        times.append(time.perf_counter() - t0)
    peaks = {pid: _peak_gb(pid) for pid in pids}
    group.shutdown()
    engine.close()
    if layout == "ray":
        import ray

        ray.shutdown()
    return {"start_s": start_s, "step_s": times, "peaks": peaks, "driver_gb": _peak_gb(os.getpid())}


def main() -> None:
    """Run both layouts one after the other and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    model_dir = _model_dir(args.hidden, args.layers)
    results = {layout: run(layout, model_dir, args.steps) for layout in ("process", "ray")}
    print(f"{'layout':<8} {'start s':>8} {'step s (mean of later)':>24} {'worker peak GB':>16}")
    means = {}
    for layout, r in results.items():
        later = r["step_s"][1:] or r["step_s"]  # the first step warms caches up in both layouts
        means[layout] = statistics.mean(later)
        peaks = " ".join(f"{gb:.2f}" for gb in r["peaks"].values())
        print(f"{layout:<8} {r['start_s']:>8.1f} {means[layout]:>24.3f} {peaks:>16}")
    print(f"ray/process step time ratio: {means['ray'] / means['process']:.2f}")
    print(f"driver peak resident memory after both: {results['ray']['driver_gb']:.2f} GB")


if __name__ == "__main__":
    main()
