"""Wall time of one GRPO step: skyrl_train against TRL's GRPOTrainer, same model, batch, group and lengths.

Both sides train the embedded SmolLM2-135M-Instruct on this machine's CPU for ``--steps`` GRPO steps on the
same single-turn math prompts (8 prompts x 4 samples, up to 128 new tokens, temperature 1, learning rate
1e-6, no reference model, float32) with the same reward (the math environment's scorer), and report the
median seconds per step after the first (which warms caches up). TRL is installed for this benchmark only:

    pip install trl            # pulls datasets; not a dependency of the project
    python benchmarks/grpo_step_vs_trl.py [--steps 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from skyrl_gym.envs.math.scoring import score  # noqa: E402
from skyrl_gym.envs.math.tasks import task_for_seed  # noqa: E402

MODEL = "embedded:smollm2-135m"
PROMPTS, GROUP, MAX_TOKENS, LR = 8, 4, 128, 1e-6


def math_rows(n: int) -> list[dict]:
    rows = []
    for seed in range(n):
        task = task_for_seed(seed)
        rows.append({"prompt": task["prompt"], "env_class": "math", **task["extras"]})
    return rows


def run_ours(rows: list[dict], steps: int, workdir: Path) -> tuple[list[float], float]:
    from skyrl_train.config import load_config
    from skyrl_train.loop.trainer import Trainer

    data = workdir / "math.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_config(
        "sql_cpu",
        [
            f"data.train_data=[{data}]",
            "data.val_data=[]",
            f"trainer.run_dir={workdir / 'ours'}",
            "trainer.resume_mode=none",
            "trainer.sft_warmup.steps=0",
            "trainer.eval_before_train=false",
            "trainer.ckpt_interval=0",
            "trainer.max_wall_time_s=null",
            f"trainer.max_steps={steps}",
            f"trainer.train_batch_size={PROMPTS}",
            f"trainer.policy_mini_batch_size={PROMPTS}",
            "trainer.micro_train_batch_size_per_gpu=8",
            f"trainer.policy.optimizer_config.lr={LR}",
            "trainer.logger=[jsonl]",
            f"generator.n_samples_per_prompt={GROUP}",
            "generator.max_turns=1",
            f"generator.sampling_params.max_generate_length={MAX_TOKENS}",
            f"generator.max_tokens_per_trajectory={MAX_TOKENS}",
            "generator.sampling_params.stop=null",
            "environment.env_class=math",
        ],
    )
    with Trainer(cfg) as trainer:
        trainer.fit()
    lines = [json.loads(line) for line in (workdir / "ours" / "metrics.jsonl").read_text().splitlines()]
    steps_ = [line for line in lines if "time/step_s" in line]
    lengths = [line["generate/response_length_mean"] for line in steps_]
    return [line["time/step_s"] for line in steps_], statistics.mean(lengths)


def run_trl(rows: list[dict], steps: int, workdir: Path) -> tuple[list[float], float]:
    import torch
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from datasets import Dataset
    from skyrl_train.models import load_model, load_tokenizer

    truths = {r["prompt"][-1]["content"]: r["reward_spec"]["ground_truth"] for r in rows}

    def reward(completions, prompts, **kwargs):
        return [
            score(c[-1]["content"], truths[p[-1]["content"]])
            for c, p in zip(completions, prompts, strict=True)
        ]

    class Timer(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []
            self.lengths: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self._start)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "completions/mean_length" in logs:
                self.lengths.append(logs["completions/mean_length"])

    torch.manual_seed(0)
    tokenizer = load_tokenizer(MODEL)
    model = load_model(MODEL)
    model.train()
    dataset = Dataset.from_list([{"prompt": r["prompt"]} for r in rows])
    args = GRPOConfig(
        output_dir=str(workdir / "trl"),
        per_device_train_batch_size=PROMPTS * GROUP,
        num_generations=GROUP,
        max_completion_length=MAX_TOKENS,
        learning_rate=LR,
        beta=0.0,
        temperature=1.0,
        max_steps=steps,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        seed=0,
    )
    timer = Timer()
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.add_callback(timer)
    trainer.train()
    return timer.times, statistics.mean(timer.lengths) if timer.lengths else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    if importlib.util.find_spec("trl") is None:
        sys.exit("this benchmark compares with TRL: pip install trl (it is not a dependency of the project)")
    rows = math_rows(PROMPTS * max(args.steps, 1))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ours_times, ours_len = run_ours(rows, args.steps, work)
        trl_times, trl_len = run_trl(rows, args.steps, work)

    def typical(times: list[float]) -> float:
        return statistics.median(times[1:] if len(times) > 1 else times)

    base = typical(trl_times)
    print(f"GRPO step, {MODEL}, {PROMPTS} prompts x {GROUP} samples, <= {MAX_TOKENS} new tokens, CPU")
    print(f"{'side':14} {'median s/step':>14} {'all steps':>28} {'mean len':>9} {'ratio':>7}")
    for name, times, length in (("TRL GRPO", trl_times, trl_len), ("skyrl_train", ours_times, ours_len)):
        runs = ", ".join(f"{t:.1f}" for t in times)
        print(f"{name:14} {typical(times):14.1f} {runs:>28} {length:9.1f} {typical(times) / base:6.2f}x")


if __name__ == "__main__":
    main()
