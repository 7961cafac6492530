"""A short check of the GPU paths on one GPU, one row per path, each in its own process, as a table.

Every row runs as ``python benchmarks/gpu_check.py --row NAME ...`` under its own timeout. Its line is printed
as soon as it ends: ``ok (wall seconds): what it measured``, ``skipped: why``, ``FAILED``, ``TIMEOUT`` or
``CRASHED`` with the last lines of the row's output. A hung or crashed row costs only its own timeout, and a
row that would start after ``--deadline-s`` is skipped. The whole table is printed again at the end; the
exit code is 1 when a row failed, timed out or crashed. Each row's full output is kept in ``--log-dir``.

Rows:

- ``fsdp2_bf16_step``: one FSDP2 (``fully_shard`` per decoder layer and at the root) AdamW step, bf16
  compute with float32 gradient reduction, on a batch of random token ids; the single-rank process group
  is created and destroyed inside the row's process. After one warm-up step.
- ``train_step``: the project's ``PolicyWorker.train_step`` (PPO-clip policy-gradient loss, bf16 autocast,
  float32 weights, micro-batches of ``--micro-batch`` rows) on random prompts and responses with random
  advantages; mean seconds over ``--steps`` steps after one warm-up step; checks the loss is finite and
  the weights moved.
- ``mfu``: model FLOP utilisation of that step: ``6 * N * tokens`` (``8 * N`` with
  ``--gradient-checkpointing``), N the non-embedding parameter count, tokens the step's real token count
  (batch x (prompt + response), no padding), over the step's seconds and the GPU's dense bf16 peak
  (:data:`PEAK_BF16_TFLOPS`). Attention scores and the output head are left out, so it is a lower bound.
- ``vllm_generate``: tokens/s of the project's ``VLLMEngine`` on ``--vllm-prompts`` random prompts.
- ``sync_nccl`` / ``sync_cuda_ipc``: seconds and GB/s of pushing the model's bf16 weights into the engine
  with that strategy (nccl needs the trainer and the engine on two GPUs: skipped on one).

The vLLM rows are skipped ("vllm not installed") where vllm cannot be imported.

Model (``--model``): a folder with a Hugging Face checkpoint; ``auto`` (the default) takes a Qwen2.5-0.5B
or SmolLM2-135M checkpoint from the local Hugging Face cache, else builds a random ``qwen2-0.5b``; the
names ``qwen2-0.5b`` and ``smollm2-135m`` build a randomly initialised model of that shape
(:data:`SHAPES`). Inputs are random token ids, so no tokenizer is needed; the vLLM rows save a random
model with a word-level tokenizer over its vocabulary ("t0", "t1", ...).

The project's modules need ``pydantic`` (the config), which a bare GPU machine may lack. Fetch its wheels
on a machine with network; ``pydantic-core`` is built per Python version, hence the loop (9.2 MiB in all)::

    for py in 3.10 3.11 3.12 3.13; do
        pip download --only-binary=:all: --platform manylinux2014_x86_64 --python-version $py \\
            -d wheels/ pydantic
    done

copy ``wheels/`` (ignored by git) along with the repository, and pass ``--wheels wheels/``: before the
rows run, the script installs them into the running interpreter's environment with ``python -m pip install
--no-index --find-links wheels/ pydantic`` (PyYAML comes with transformers). Nothing else is needed besides
torch and transformers: the rows import ``skyrl_gym.registries`` without running ``skyrl_gym/__init__.py``
(which imports gymnasium), and never import gymnasium, omegaconf, duckdb, sqlglot or gguf.

``--dry-run`` runs the same plumbing on the CPU: every row in its own process, a tiny model (2 layers,
hidden 64), float32 and gloo; the vLLM rows are skipped. The test suite runs it.

    python benchmarks/gpu_check.py --wheels wheels/   # on the GPU machine
    python benchmarks/gpu_check.py --dry-run          # anywhere
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).resolve()
ROWS = ("fsdp2_bf16_step", "train_step", "mfu", "vllm_generate", "sync_nccl", "sync_cuda_ipc")
WHEEL_REQUIREMENTS = ("pydantic",)
"""What ``--wheels`` installs (its dependencies come from the same folder when missing)."""
WHEEL_MODULES = {"pydantic", "pydantic_core", "annotated_types", "typing_inspection", "typing_extensions"}
FAULT_ENV = "SKYRL_GPU_CHECK_FAULT"
"""Test hook: ``row=hang`` or ``row=crash`` (comma-separated) makes those rows hang or exit with code 3."""

PEAK_BF16_TFLOPS = (
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),
    ("GH200", 989.0),
    ("H200", 989.0),
    ("H800", 989.0),
    ("B200", 2250.0),
    ("A100", 312.0),
    ("L40S", 362.0),
)
"""Dense bf16 peak (TFLOP/s) by a part of the device name; the first match wins."""

SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen2-0.5b": (
        "Qwen2Config",
        {
            "hidden_size": 896,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "intermediate_size": 4864,
            "vocab_size": 151936,
            "tie_word_embeddings": True,
        },
    ),
    "smollm2-135m": (
        "LlamaConfig",
        {
            "hidden_size": 576,
            "num_hidden_layers": 30,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
            "intermediate_size": 1536,
            "vocab_size": 49152,
            "tie_word_embeddings": True,
        },
    ),
    "tiny": (
        "LlamaConfig",
        {
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "intermediate_size": 128,
            "vocab_size": 256,
            "tie_word_embeddings": True,
        },
    ),
}
"""Model shapes built with random weights when no checkpoint is used; ``tiny`` is the dry run's."""

CACHED_CHECKPOINTS = ("models--Qwen--Qwen2.5-0.5B*", "models--HuggingFaceTB--SmolLM2-135M*")


class Skip(Exception):
    """Raised by a row that cannot run here; the message says why."""


# ------------------------------------------------------------------------------------------------ models


def find_cached_checkpoint() -> str | None:
    """A Qwen2.5-0.5B (else SmolLM2-135M) snapshot with safetensors in the local Hugging Face cache."""
    hf_home = os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface"))
    hub = Path(os.environ.get("HF_HUB_CACHE", os.path.join(hf_home, "hub")))
    for pattern in CACHED_CHECKPOINTS:
        for config in sorted(hub.glob(f"{pattern}/snapshots/*/config.json")):
            if any(config.parent.glob("*.safetensors")):
                return str(config.parent)
    return None


def resolve_model(choice: str, dry_run: bool) -> str:
    """The model the rows use: a checkpoint folder or a name of :data:`SHAPES` (always ``tiny`` dry)."""
    if dry_run:
        return "tiny"
    if choice == "auto":
        return find_cached_checkpoint() or "qwen2-0.5b"
    if choice in SHAPES or Path(choice, "config.json").is_file():
        return choice
    raise SystemExit(f"--model {choice!r} is neither a checkpoint folder nor one of {sorted(SHAPES)}")


def build_model(model: str, device: Any, dtype: Any = None) -> Any:
    """The checkpoint at ``model``, or a randomly initialised model of that shape (the caller seeds it)."""
    import torch
    import transformers

    dtype = dtype or torch.float32
    if model not in SHAPES:
        return transformers.AutoModelForCausalLM.from_pretrained(model, dtype=dtype).to(device)
    config_class, settings = SHAPES[model]
    config = getattr(transformers, config_class)(**settings)
    with torch.device(device):  # initialise where it will run: seconds on a GPU, not a minute on the CPU
        return transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)


def non_embedding_parameters(model: Any) -> int:
    """Parameters outside the input embedding and an untied output head (tied ones are counted once)."""
    embedding = {id(p) for p in model.get_input_embeddings().parameters()}
    head = model.get_output_embeddings()
    embedding |= {id(p) for p in head.parameters()} if head is not None else set()
    unique = {id(p): p for p in model.parameters()}
    return sum(p.numel() for key, p in unique.items() if key not in embedding)


def random_ids(rows: int, length: int, vocab_size: int, device: Any = "cpu") -> Any:
    """``[rows, length]`` random token ids (0 and 1 left out: the pad and EOS ids), the same every run."""
    import torch

    generator = torch.Generator().manual_seed(0)
    return torch.randint(2, vocab_size, (rows, length), generator=generator).to(device)


def decoder_layers(model: Any) -> list[Any]:
    """The modules of the model's ``_no_split_modules`` classes (the decoder layers), sharded one by one."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [m for m in model.modules() if type(m).__name__ in names]


def synchronize(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def row_device(args: argparse.Namespace) -> Any:
    """CPU on a dry run; otherwise the first GPU, or :class:`Skip` without one."""
    import torch

    if args.dry_run:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise Skip("no CUDA (--dry-run runs the plumbing on the CPU)")
    torch.cuda.set_device(0)
    return torch.device("cuda", 0)


def device_name(device: Any) -> str:
    import torch

    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def peak_memory(device: Any) -> str:
    import torch

    if device.type != "cuda":
        return ""
    return f", peak memory {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB"


# -------------------------------------------------------------------------------------------- training rows


def fsdp2_bf16_step(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """One FSDP2 AdamW step (bf16 compute, float32 reduction) after a warm-up step, in a one-rank group."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from skyrl_train import distributed as dist_utils

    device = row_device(args)
    backend = dist_utils.default_backend(device.type)
    dist_utils.init_process_group(0, 1, backend=backend, master_port=dist_utils.find_free_port())
    try:
        torch.manual_seed(0)
        model = build_model(args.model, device).train()
        mesh = init_device_mesh(device.type, (1,))
        compute = torch.bfloat16 if device.type == "cuda" else torch.float32
        policy = MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32)
        for layer in decoder_layers(model):
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ids = random_ids(args.batch, args.prompt_len + args.response_len, model.config.vocab_size, device)

        def step() -> float:
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return float(loss)

        step()  # warm-up: kernels, allocator, optimizer state
        probe = next(model.parameters())
        before = probe.full_tensor().detach().clone()
        synchronize(device)
        start = time.perf_counter()
        loss = step()
        synchronize(device)
        seconds = time.perf_counter() - start
        moved = not torch.equal(before, probe.full_tensor())
        memory = peak_memory(device)
    finally:
        dist_utils.destroy_process_group()
    if not math.isfinite(loss) or not moved:
        raise RuntimeError(f"loss {loss}, weights moved: {moved}")
    tokens = ids.numel()
    detail = (
        f"step {seconds:.4g} s on {tokens} tokens ({tokens / seconds:.0f} tok/s), loss {loss:.3f}, "
        f"weights moved, {backend} group of 1 created and destroyed, {compute} compute on "
        f"{device_name(device)}{memory}"
    )
    return detail, {"step_s": seconds, "tokens": tokens, "loss": loss}


def train_step(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The project's ``PolicyWorker.train_step`` on random prompts, responses and advantages."""
    import torch

    from skyrl_train.training.workers.policy import PolicyWorker

    device = row_device(args)
    ids = random_ids(args.batch, args.prompt_len + args.response_len, model_vocab_size(args.model))
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "response_mask": torch.ones(args.batch, args.response_len),
        "advantages": torch.randn(args.batch, args.response_len, generator=torch.Generator().manual_seed(1)),
    }
    worker = PolicyWorker(
        lambda: build_model(args.model, device),
        {"lr": 1e-5},
        {"policy_loss_type": "ppo"},
        device=device,
        bf16=device.type == "cuda",
        micro_batch_size=args.micro_batch,
        max_tokens_per_micro_batch=args.micro_batch * ids.shape[1],
        gradient_checkpointing=args.gradient_checkpointing,
    )
    worker.train_step(batch)  # warm-up
    probe = next(worker.model.parameters())
    before = probe.detach().clone()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(args.steps):
        metrics = worker.train_step(batch)
    synchronize(device)
    seconds = (time.perf_counter() - start) / args.steps
    loss = metrics["policy/loss"]
    moved = not torch.equal(before, probe.detach())
    if not math.isfinite(loss) or not moved:
        raise RuntimeError(f"loss {loss}, weights moved: {moved}")
    tokens = int(batch["attention_mask"].sum())
    name = device_name(device)
    detail = (
        f"step {seconds:.4g} s (mean of {args.steps}) on {tokens} tokens = {args.batch} x "
        f"({args.prompt_len} + {args.response_len}) ({tokens / seconds:.0f} tok/s), loss {loss:.4f}, "
        f"grad norm {metrics['policy/grad_norm']:.3f}, weights moved, model {args.model} on {name}"
        f"{peak_memory(device)}"
    )
    return detail, {
        "step_s": seconds,
        "tokens": tokens,
        "batch": args.batch,
        "prompt_len": args.prompt_len,
        "response_len": args.response_len,
        "non_embedding_params": non_embedding_parameters(worker.model),
        "gradient_checkpointing": args.gradient_checkpointing,
        "device_name": name,
        "loss": loss,
    }


def model_vocab_size(model: str) -> int:
    if model in SHAPES:
        return SHAPES[model][1]["vocab_size"]
    return int(json.loads(Path(model, "config.json").read_text())["vocab_size"])


def peak_bf16_tflops(name: str) -> float | None:
    return next((peak for part, peak in PEAK_BF16_TFLOPS if part in name), None)


def mfu(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """Model FLOP utilisation of the train_step row's step, from its real token count and seconds."""
    path = Path(args.results_dir, "train_step.json")
    if not path.is_file():
        raise Skip("no train_step result (that row did not finish)")
    step = json.loads(path.read_text())
    if step["status"] != "ok":
        raise Skip(f"train_step did not run ({step['status']})")
    m = step["metrics"]
    tokens, n_params, seconds = m["tokens"], m["non_embedding_params"], m["step_s"]
    factor = 8 if m["gradient_checkpointing"] else 6
    achieved = factor * n_params * tokens / seconds / 1e12
    peak = peak_bf16_tflops(m["device_name"])
    if peak is None:
        utilisation = f"MFU n/a: no peak bf16 rate known for '{m['device_name']}'"
    else:
        utilisation = f"{100 * achieved / peak:.1f}% MFU of {peak:.0f} TFLOP/s ({m['device_name']})"
    detail = (
        f"{achieved:.4g} TFLOP/s = {factor} x {n_params} non-embedding params x tokens {tokens} = "
        f"{m['batch']} x ({m['prompt_len']} + {m['response_len']}) / step {seconds:.4g} s; {utilisation}"
    )
    return detail, {"tflops": achieved, "tokens": tokens, "mfu": achieved / peak if peak else None}


# ------------------------------------------------------------------------------------------------ vLLM rows


def require_vllm(args: argparse.Namespace) -> None:
    if importlib.util.find_spec("vllm") is None:
        raise Skip("vllm not installed")
    if args.dry_run:
        raise Skip("dry run (the vLLM rows need CUDA)")


def vllm_model_folder(args: argparse.Namespace) -> str:
    """A checkpoint folder for the engine: the checkpoint itself, or a random model saved in bf16 with a
    word-level tokenizer over its vocabulary (token i is "t<i>"; 0 is the pad, 1 the EOS token)."""
    if args.model not in SHAPES:
        return args.model
    import torch
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    folder = Path(args.log_dir, f"model-{args.model}")
    if (folder / "config.json").is_file():
        return str(folder)
    torch.manual_seed(0)
    model = build_model(args.model, "cpu", torch.bfloat16)
    vocab_size = model.config.vocab_size
    model.config.pad_token_id, model.config.eos_token_id, model.config.bos_token_id = 0, 1, 1
    model.save_pretrained(folder)
    words = Tokenizer(WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=words, pad_token="t0", eos_token="t1", unk_token="t0"
    )
    tokenizer.save_pretrained(folder)
    return str(folder)


def vllm_generate(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """Tokens/s of the project's vLLM engine on random prompts, after a warm-up call."""
    require_vllm(args)
    device = row_device(args)
    from skyrl_train.config import SamplingParams
    from skyrl_train.inference.vllm import VLLMEngine

    folder = vllm_model_folder(args)
    prompts = random_ids(args.vllm_prompts, args.prompt_len, model_vocab_size(folder)).tolist()
    params = SamplingParams(temperature=1.0, max_tokens=args.response_len, ignore_eos=True, seed=0)

    async def measure() -> tuple[int, float]:
        engine = VLLMEngine(folder, dtype="bfloat16", gpu_memory_utilization=0.5)
        try:
            await engine.generate(prompts[:2], params)  # warm-up
            start = time.perf_counter()
            outputs = await engine.generate(prompts, params)
            return sum(len(o.token_ids) for o in outputs), time.perf_counter() - start
        finally:
            engine.close()

    tokens, seconds = asyncio.run(measure())
    detail = (
        f"{tokens} new tokens for {len(prompts)} prompts of {args.prompt_len} in {seconds:.3g} s "
        f"({tokens / seconds:.0f} tok/s) on {device_name(device)}"
    )
    return detail, {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def weight_sync(args: argparse.Namespace, strategy: str) -> tuple[str, dict[str, Any]]:
    """Seconds and GB/s of one push of the model's bf16 weights into the engine, after a first push that
    sets the strategy up."""
    require_vllm(args)
    device = row_device(args)
    import torch

    if strategy == "nccl" and torch.cuda.device_count() < 2:
        raise Skip("nccl needs the trainer and the engine on two GPUs; this machine has one")
    from skyrl_train.inference.vllm import VLLMEngine

    folder = vllm_model_folder(args)
    trainer_device = torch.device("cuda", 1) if strategy == "nccl" else device
    model = build_model(folder, trainer_device, torch.bfloat16)
    named = list(model.state_dict().items())
    size = sum(t.numel() * t.element_size() for _, t in named)

    async def measure() -> float:
        # the strategy is chosen once, when the engine is built
        engine = VLLMEngine(
            folder, dtype="bfloat16", gpu_memory_utilization=0.3, weight_sync_backend=strategy
        )
        try:
            await engine.update_weights(named)  # sets the strategy up (group, handles)
            synchronize(trainer_device)
            start = time.perf_counter()
            await engine.update_weights(named)
            synchronize(trainer_device)
            return time.perf_counter() - start
        finally:
            engine.close()

    seconds = asyncio.run(measure())
    detail = (
        f"{seconds:.3g} s for {size / 1e9:.2f} GB in {len(named)} tensors ({size / seconds / 1e9:.1f} GB/s)"
    )
    return detail, {"seconds": seconds, "bytes": size}


ROW_FUNCTIONS = {
    "fsdp2_bf16_step": fsdp2_bf16_step,
    "train_step": train_step,
    "mfu": mfu,
    "vllm_generate": vllm_generate,
    "sync_nccl": lambda args: weight_sync(args, "nccl"),
    "sync_cuda_ipc": lambda args: weight_sync(args, "cuda_ipc"),
}


# ----------------------------------------------------------------------------------------- one row's process


def import_skyrl_gym_registries_only() -> None:
    """Make ``skyrl_gym`` importable as a bare package: its ``__init__`` imports gymnasium (absent on a
    bare GPU machine) and environment plugins, while the trainer's modules need only
    ``skyrl_gym.registries``, which imports nothing else."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    if "skyrl_gym" not in sys.modules:
        package = types.ModuleType("skyrl_gym")
        package.__path__ = [str(REPO / "skyrl_gym")]
        sys.modules["skyrl_gym"] = package


def injected_faults() -> dict[str, str]:
    pairs = (item.split("=", 1) for item in os.environ.get(FAULT_ENV, "").split(",") if "=" in item)
    return {row.strip(): fault.strip() for row, fault in pairs}


def run_row(args: argparse.Namespace) -> int:
    """Run one row in this process and write its result (status, detail, metrics) to ``--result``."""
    fault = injected_faults().get(args.row)
    if fault == "hang":
        print(f"{args.row}: hanging on purpose ({FAULT_ENV})", file=sys.stderr, flush=True)
        time.sleep(3600)
    elif fault == "crash":
        print(f"{args.row}: crashing on purpose ({FAULT_ENV})", file=sys.stderr, flush=True)
        os._exit(3)
    import_skyrl_gym_registries_only()
    try:
        detail, metrics = ROW_FUNCTIONS[args.row](args)
        status = "ok"
    except Skip as reason:
        status, detail, metrics = "skipped", str(reason), {}
    except Exception as error:  # reported in the table; the traceback goes to the row's log
        traceback.print_exc()
        status, metrics = "failed", {}
        detail = f"{type(error).__name__}: {error}"[:400]
        if isinstance(error, ImportError) and (error.name or "").split(".")[0] in WHEEL_MODULES:
            detail += " (copy the wheels and pass --wheels DIR; see the module docstring)"
    Path(args.result).write_text(json.dumps({"status": status, "detail": detail, "metrics": metrics}))
    return 1 if status == "failed" else 0


# ---------------------------------------------------------------------------------------------- the table


def last_lines(log: Path, count: int = 3) -> str:
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no output)"
    return " / ".join(lines[-count:])[-400:] or "(no output)"


def spawn_row(name: str, args: argparse.Namespace, timeout: float) -> str:
    """Run one row in a child process; its verdict, with the wall time read after the child ended."""
    result = Path(args.log_dir, f"{name}.json")
    log = Path(args.log_dir, f"{name}.log")
    result.unlink(missing_ok=True)
    command = [sys.executable, str(SCRIPT), "--row", name, "--result", str(result), *row_arguments(args)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # no network: never wait on it
    start = time.perf_counter()
    with open(log, "w") as output:
        child = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True
        )
        try:
            code = child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)  # the row's whole session: engine workers included
            child.wait()
            return f"TIMEOUT after {timeout:.0f} s; last output: {last_lines(log)}"
    wall = time.perf_counter() - start
    if not result.is_file():
        how = f"exit code {code}" if code >= 0 else f"signal {-code}"
        return f"CRASHED ({how}) after {wall:.1f} s; last output: {last_lines(log)}"
    outcome = json.loads(result.read_text())
    if outcome["status"] == "ok":
        return f"ok ({wall:.1f} s): {outcome['detail']}"
    if outcome["status"] == "skipped":
        return f"skipped: {outcome['detail']}"
    return f"FAILED ({wall:.1f} s): {outcome['detail']}; log {log}"


def row_arguments(args: argparse.Namespace) -> list[str]:
    """The settings a row process needs, as command-line arguments."""
    settings = [
        f"--model={args.model}",
        f"--log-dir={args.log_dir}",
        f"--results-dir={args.log_dir}",
        f"--batch={args.batch}",
        f"--prompt-len={args.prompt_len}",
        f"--response-len={args.response_len}",
        f"--micro-batch={args.micro_batch}",
        f"--steps={args.steps}",
        f"--vllm-prompts={args.vllm_prompts}",
    ]
    settings += ["--dry-run"] if args.dry_run else []
    settings += ["--gradient-checkpointing"] if args.gradient_checkpointing else []
    return settings


def install_wheels(folder: str) -> str:
    """``pip install --no-index --find-links folder`` of :data:`WHEEL_REQUIREMENTS` into this environment."""
    command = [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", folder]
    done = subprocess.run([*command, *WHEEL_REQUIREMENTS], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        return f"FAILED (pip exit code {done.returncode}): {' / '.join(lines[-3:])}"
    return f"installed {', '.join(WHEEL_REQUIREMENTS)} from {folder}"


def run_table(args: argparse.Namespace) -> int:
    """Run the rows one after another, printing each verdict as it comes, then the whole table."""
    rows = [row.strip() for row in args.only.split(",")] if args.only else list(ROWS)
    unknown = sorted(set(rows) - set(ROWS))
    if unknown:
        raise SystemExit(f"unknown rows {unknown}; choose from {', '.join(ROWS)}")
    Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    width = max(len(row) for row in ROWS)
    print(f"model: {args.model}; batch {args.batch} x ({args.prompt_len} + {args.response_len})", flush=True)
    print(f"row logs: {args.log_dir}", flush=True)
    if args.wheels:
        print(f"wheels: {install_wheels(args.wheels)}", flush=True)
    deadline = time.perf_counter() + args.deadline_s
    verdicts: dict[str, str] = {}
    for name in rows:
        remaining = deadline - time.perf_counter()
        if remaining < 1:
            verdicts[name] = "skipped: out of time (--deadline-s)"
        else:
            verdicts[name] = spawn_row(name, args, min(args.row_timeout, remaining))
        print(f"{name.ljust(width)} | {verdicts[name]}", flush=True)
    print(f"\n{'row'.ljust(width)} | result\n{'-' * width}-|-{'-' * 70}")
    for name in rows:
        print(f"{name.ljust(width)} | {verdicts[name]}")
    bad = ("FAILED", "TIMEOUT", "CRASHED")
    return 1 if any(verdict.startswith(bad) for verdict in verdicts.values()) else 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="the plumbing on the CPU with a tiny model")
    parser.add_argument("--model", default="auto", help="checkpoint folder, auto, qwen2-0.5b or smollm2-135m")
    parser.add_argument("--wheels", help="install pydantic from this folder of wheels first (no network)")
    parser.add_argument("--only", help="comma-separated rows to run (default: all, in table order)")
    parser.add_argument("--row-timeout", type=float, default=240.0, help="seconds one row may take")
    parser.add_argument("--deadline-s", type=float, default=480.0, help="no row starts after this many s")
    parser.add_argument("--log-dir", help="where each row's output goes (default: a new temporary folder)")
    parser.add_argument("--batch", type=int, help="sequences per step (default 16; dry run 4)")
    parser.add_argument("--prompt-len", type=int, help="prompt tokens per sequence (default 256; dry 8)")
    parser.add_argument("--response-len", type=int, help="response tokens per sequence (default 256; dry 8)")
    parser.add_argument("--micro-batch", type=int, help="sequences per micro-batch (default 4; dry 2)")
    parser.add_argument("--steps", type=int, default=None, help="timed train steps (default 2; dry 1)")
    parser.add_argument("--gradient-checkpointing", action="store_true", help="train_step recomputes layers")
    parser.add_argument("--vllm-prompts", type=int, default=64, help="prompts of the vllm_generate row")
    parser.add_argument("--row", choices=ROWS, help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--results-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    defaults = {"batch": (4, 16), "prompt_len": (8, 256), "response_len": (8, 256), "micro_batch": (2, 4)}
    defaults["steps"] = (1, 2)
    for key, (dry, gpu) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, dry if args.dry_run else gpu)
    if args.row is None:
        args.model = resolve_model(args.model, args.dry_run)
        args.log_dir = args.log_dir or tempfile.mkdtemp(prefix="gpu_check-")
    return args


def main(argv: list[str] | None = None) -> int:
    """The table (or, with the hidden ``--row``, one row in this process)."""
    args = parse_args(argv)
    return run_row(args) if args.row else run_table(args)


if __name__ == "__main__":
    sys.exit(main())
