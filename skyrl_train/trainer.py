"""The training loop: rollouts -> advantages -> policy (and critic) update -> weight sync -> next batch.

One :class:`Trainer` owns the parts of a run, each built from the config:

- the policy (and, when needed, reference and critic) workers: in process for one worker, a
  :class:`~skyrl_train.workers.group.WorkerGroup` of FSDP2 processes for more;
- the inference engine (``hf``, ``vllm`` or ``remote``) and the multi-turn generator over skyrl_gym
  environments;
- the data iterator, the tracker (console, JSONL, TensorBoard, wandb), checkpoints and evaluation.

A step: generate ``train_batch_size`` prompts x ``n_samples_per_prompt`` trajectories, score them with the
policy (old log-probs), the reference model and the critic, compute advantages (error trajectories left
out), update, sync the new weights into the engine, log, checkpoint and evaluate on schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import math
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from skyrl_train import checkpoint as ckpt
from skyrl_train.config import Config
from skyrl_train.data import BatchIterator, PromptDataset, read_rows
from skyrl_train.inference.base import SamplingParams

__all__ = ["Trainer", "evaluate_rows", "pass_at_k"]


def _sampling(params: Any, *, seed: int | None) -> SamplingParams:
    return SamplingParams(
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k,
        max_tokens=params.max_generate_length,
        stop=list(params.stop) if params.stop else None,
        seed=seed,
    )


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al.'s estimator)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def evaluate_rows(
    generator: Any, rows: Sequence[dict], params: SamplingParams, n_samples: int, batch: int
) -> dict:
    """Roll out ``rows`` ``n_samples`` times each and report accuracy, valid-format rate and pass@k.

    A trajectory counts as correct when its reward reaches the generator's pass threshold (full reward);
    its format is valid when the environment says so (``format_valid`` metric) or, for environments that do
    not report it, when its reward is not negative. Error trajectories are counted apart, never as wrong.
    """
    trajectories = []
    for start in range(0, len(rows), batch):
        chunk = list(rows[start : start + batch])
        out = asyncio.run(generator.generate(chunk, n_samples, params, group_offset=start))
        trajectories += out.trajectories
    threshold = getattr(generator, "pass_threshold", 1.0)
    scored = [t for t in trajectories if not t.is_error]
    correct = [t.reward >= threshold for t in scored]

    def format_ok(t: Any) -> bool:
        value = (t.env_metrics or {}).get("format_valid")
        return bool(value) if value is not None else t.reward >= 0

    by_group: dict[int, list[bool]] = {}
    for t, ok in zip(scored, correct, strict=True):
        by_group.setdefault(t.group_id, []).append(ok)
    metrics = {
        "eval/num_prompts": float(len(rows)),
        "eval/num_trajectories": float(len(trajectories)),
        "eval/num_errors": float(len(trajectories) - len(scored)),
        "eval/accuracy": sum(correct) / max(len(scored), 1),
        "eval/valid_format_rate": sum(format_ok(t) for t in scored) / max(len(scored), 1),
        "eval/reward_mean": sum(t.reward for t in scored) / max(len(scored), 1),
        "eval/response_length_mean": sum(t.num_model_tokens for t in scored) / max(len(scored), 1),
    }
    for k in sorted({1, n_samples}):
        if by_group and all(len(v) >= k for v in by_group.values()):
            metrics[f"eval/pass@{k}"] = sum(pass_at_k(len(v), sum(v), k) for v in by_group.values()) / len(
                by_group
            )
    # group_id is the row's index (group_offset = the chunk's start): break accuracy down by level.
    per_level: dict[str, list[bool]] = {}
    for t, ok in zip(scored, correct, strict=True):
        level = (rows[t.group_id].get("extra_info") or {}).get("level")
        if level:
            per_level.setdefault(str(level), []).append(ok)
    for level, oks in sorted(per_level.items()):
        metrics[f"eval/accuracy/{level}"] = sum(oks) / len(oks)
    return metrics


class Trainer:
    """Runs a whole training job from a :class:`~skyrl_train.config.Config`; see the module docstring."""

    def __init__(self, config: Config):
        self.cfg = config
        self.run_dir = Path(config.trainer.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.step = 0
        self._closed = False
        self._build()

    # ------------------------------------------------------------------------------------------ setup
    def _build(self) -> None:
        from skyrl_train.generator import MultiTurnGenerator
        from skyrl_train.inference.base import make_engine
        from skyrl_train.models import load_model, load_tokenizer
        from skyrl_train.tracking import Tracker

        cfg, tr = self.cfg, self.cfg.trainer
        torch.manual_seed(tr.seed)
        policy_path = tr.policy.model.path
        self.tokenizer = load_tokenizer(policy_path)
        device = "cuda" if tr.placement.backend == "cuda" else "cpu"
        world = (
            cfg.policy_world_size if tr.placement.backend == "cuda" else tr.placement.policy_num_gpus_per_node
        )
        self.distributed = world > 1

        self.train_set = PromptDataset.from_files(cfg.data.train_data, self.tokenizer, tr.max_prompt_length)
        self.val_rows = [row for path in cfg.data.val_data for row in read_rows(path)]
        self.iterator = BatchIterator(
            self.train_set, tr.train_batch_size, tr.epochs, tr.seed, cfg.data.shuffle
        )
        total_steps = self.iterator.total_batches
        if tr.max_steps is not None:
            total_steps = min(total_steps, tr.max_steps)
        self.total_steps = total_steps
        updates_per_step = (tr.train_batch_size // tr.policy_mini_batch_size) * tr.update_epochs_per_batch
        self._policy_updates = total_steps * updates_per_step
        # One update per batch: the old log-probs are the current ones, computed in the training forward.
        self._on_policy = updates_per_step == 1 and not tr.algorithm.use_kl_in_reward
        # Tracker steps: the warm-up's steps come first, then RL's (checkpoints count RL steps only).
        self.log_offset = tr.sft_warmup.steps

        worker_kwargs = dict(
            device=device,
            bf16=tr.bf16,
            micro_batch_size=tr.micro_train_batch_size_per_gpu,
            forward_micro_batch_size=tr.micro_forward_batch_size_per_gpu,
            # the training forward divides the logits by the sampling temperature, as the sampler did
            temperature=cfg.generator.sampling_params.temperature or 1.0,
            seed=tr.seed,
            gradient_checkpointing=tr.gradient_checkpointing,
        )
        from skyrl_train.workers.fsdp import CriticWorker, PolicyWorker, RefWorker

        self.policy = self._worker(
            PolicyWorker,
            world,
            model_factory=functools.partial(load_model, policy_path),
            optimizer_cfg=tr.policy.optimizer_config,
            algorithm_cfg=tr.algorithm,
            total_steps=total_steps * updates_per_step,
            **worker_kwargs,
        )
        self.ref = None
        if tr.algorithm.needs_reference:
            ref_path = tr.ref.model.path or policy_path
            self.ref = self._worker(
                RefWorker, world, model_factory=functools.partial(load_model, ref_path), **worker_kwargs
            )
        self.critic = None
        if tr.algorithm.needs_critic:
            critic_path = tr.critic.model.path
            self.critic = self._worker(
                CriticWorker,
                world,
                model_factory=functools.partial(load_model, critic_path),
                optimizer_cfg=tr.critic.optimizer_config,
                algorithm_cfg=tr.algorithm,
                total_steps=total_steps * updates_per_step,
                **worker_kwargs,
            )

        gen = cfg.generator
        if gen.backend == "hf":
            # In process, the engine shares the policy's model object: weight sync is free.
            shared = None if self.distributed else self.policy.model
            self.engine = make_engine(
                "hf",
                model=shared,
                model_path=policy_path,
                tokenizer=self.tokenizer,
                max_batch_size=gen.max_concurrent_trajectories,
                seed=tr.seed,
            )
        elif gen.backend == "vllm":
            self.engine = make_engine(
                "vllm",
                model_path=policy_path,
                tensor_parallel_size=gen.inference_engine_tensor_parallel_size,
                gpu_memory_utilization=gen.gpu_memory_utilization,
                seed=tr.seed,
            )
        else:
            self.engine = make_engine(
                "remote",
                model_path=policy_path,
                base_url=gen.remote_inference_engine_urls[0],
                tokenizer=self.tokenizer,
            )
        self.generator = MultiTurnGenerator.from_config(self.engine, cfg)

        resume = self._resume_path()
        self.tracker = Tracker(
            tr.logger,
            self.run_dir,
            cfg,
            project_name=tr.project_name,
            run_name=tr.run_name,
            resume_step=self.log_offset + ckpt.checkpoint_step(resume) if resume is not None else None,
        )
        if resume is not None:
            state = ckpt.load_checkpoint(resume, self._workers())
            self.step = state.step
            if state.data_state is not None:
                self.iterator.load_state_dict(state.data_state)
            self._sync_weights()
            self.tracker.log({"resumed_from_step": float(state.step)}, step=self.log_offset + state.step)
        cfg.to_yaml(self.run_dir / "config.yaml")

    def _worker(self, cls: type, world: int, **kwargs: Any) -> Any:
        if world <= 1:
            return cls(**kwargs)
        from skyrl_train.workers.group import WorkerGroup

        cuda = self.cfg.trainer.placement.backend == "cuda"
        return WorkerGroup(cls, world, worker_kwargs=kwargs, device="cuda" if cuda else "cpu")

    def _workers(self) -> dict[str, Any]:
        workers = {"policy": self.policy}
        if self.critic is not None:
            workers["critic"] = self.critic
        return workers

    def _resume_path(self) -> Path | None:
        tr = self.cfg.trainer
        if tr.resume_mode == "none":
            return None
        if tr.resume_mode == "from_path":
            return Path(tr.resume_path)
        return ckpt.find_latest(self.run_dir)

    # ----------------------------------------------------------------------------------------- steps
    def _sync_weights(self) -> float:
        start = time.perf_counter()
        if self.distributed or self.cfg.generator.backend != "hf":
            state = self.policy.full_state_dict()
            asyncio.run(self.engine.update_weights(state.items()))
        else:
            asyncio.run(self.engine.update_weights(()))  # shared model: drops stale prefix caches
        return time.perf_counter() - start

    def train_step(self, rows: list[dict]) -> dict[str, float]:
        """One GRPO/PPO step on ``rows``; returns its metrics."""
        from skyrl_train.algorithms import compute_batch_advantages
        from skyrl_train.batch import TrainingBatch

        cfg, tr = self.cfg, self.cfg.trainer
        metrics: dict[str, float] = {}
        t0 = time.perf_counter()
        params = _sampling(cfg.generator.sampling_params, seed=tr.seed + self.step)
        group_offset = self.step * tr.train_batch_size
        out = asyncio.run(
            self.generator.generate(
                rows, cfg.generator.n_samples_per_prompt, params, group_offset=group_offset
            )
        )
        metrics.update(out.metrics)
        t1 = time.perf_counter()

        batch = TrainingBatch.from_trajectories(out.trajectories, self.tokenizer.pad_token_id)
        if not self._on_policy:
            batch.old_log_probs = self.policy.compute_log_probs(batch)
        if self.ref is not None:
            batch.ref_log_probs = self.ref.compute_log_probs(batch)
        if self.critic is not None:
            batch.values = self.critic.compute_values(batch)
        metrics.update(
            {f"advantage/{k}": v for k, v in compute_batch_advantages(batch, tr.algorithm).items()}
        )
        samples = cfg.generator.n_samples_per_prompt
        metrics.update(
            self.policy.train_batch(batch, tr.policy_mini_batch_size * samples, tr.update_epochs_per_batch)
        )
        if self.critic is not None:
            metrics.update(
                self.critic.train_batch(
                    batch, tr.critic_mini_batch_size * samples, tr.update_epochs_per_batch
                )
            )
        t2 = time.perf_counter()
        sync_s = self._sync_weights()
        metrics.update(
            {
                "time/generate_s": t1 - t0,
                "time/train_s": t2 - t1,
                "time/sync_s": sync_s,
                "time/step_s": time.perf_counter() - t0,
            }
        )
        return metrics

    def evaluate(self) -> dict[str, float]:
        """Evaluate on ``data.val_data`` with the evaluation sampling settings."""
        if not self.val_rows:
            return {}
        gen = self.cfg.generator
        params = _sampling(gen.eval_sampling_params, seed=self.cfg.trainer.seed)
        start = time.perf_counter()
        metrics = evaluate_rows(
            self.generator,
            self.val_rows,
            params,
            gen.eval_n_samples_per_prompt,
            self.cfg.trainer.eval_batch_size,
        )
        metrics["time/eval_s"] = time.perf_counter() - start
        return metrics

    def warmup(self) -> None:
        """The supervised warm-up (``trainer.sft_warmup``): gold trajectories, then a fresh RL optimizer."""
        from skyrl_train.generator import MultiTurnGenerator
        from skyrl_train.warmup import supervised_step

        tr, w = self.cfg.trainer, self.cfg.trainer.sft_warmup
        rows = list(self.train_set)
        random.Random(tr.seed).shuffle(rows)
        sampling = self.cfg.generator.sampling_params
        # gold answers are scripted, not sampled: no per-turn token cap beyond the generator's own budgets
        params = SamplingParams(temperature=0.0, max_tokens=4096, stop=sampling.stop)
        self.policy.reset_optimizer(
            dataclasses.replace(tr.policy.optimizer_config, lr=w.lr, num_warmup_steps=0)
        )
        bar_start = time.perf_counter()
        for i in range(w.steps):
            start = (i * w.batch_size) % len(rows)
            chunk = (rows + rows)[start : start + w.batch_size]
            metrics = supervised_step(
                self.policy,
                lambda engine: MultiTurnGenerator.from_config(engine, self.cfg),
                self.tokenizer,
                chunk,
                params,
                check_fraction=w.check_fraction,
                seed=tr.seed + i,
            )
            metrics["time/warmup_elapsed_s"] = time.perf_counter() - bar_start
            self.tracker.log(metrics, step=i + 1)
        self.policy.reset_optimizer(tr.policy.optimizer_config, self._policy_updates)
        self._sync_weights()

    # ---------------------------------------------------------------------------------------- the run
    def fit(self) -> dict[str, Any]:
        """Train until the data, ``max_steps`` or ``max_wall_time_s`` runs out; return the run summary."""
        from skyrl_train.progress import ProgressBar

        tr = self.cfg.trainer
        started = time.perf_counter()
        evals: list[dict[str, Any]] = []
        fresh = self.step == 0
        if tr.eval_before_train and fresh:
            before = self.evaluate()
            if before:
                self.tracker.log(before, step=0)
                evals.append({"stage": "before", "step": 0, **before})
        if fresh and tr.sft_warmup.steps > 0:
            self.warmup()
            if tr.sft_warmup.eval_after:
                result = self.evaluate()
                if result:
                    self.tracker.log(result, step=self.log_offset)
                    evals.append({"stage": "after warm-up", "step": 0, **result})
        bar = ProgressBar(total=self.total_steps, initial=self.step, desc="train")
        stop_reason = "data"
        try:
            for rows in self.iterator:
                if self.step >= self.total_steps:
                    stop_reason = "max_steps"
                    break
                metrics = self.train_step(rows)
                self.step += 1
                metrics["train/epoch"] = float(self.iterator.state_dict().get("epoch", 0))
                if tr.eval_interval and self.step % tr.eval_interval == 0 and self.step < self.total_steps:
                    result = self.evaluate()
                    metrics.update(result)
                    if result:
                        evals.append({"stage": "during RL", "step": self.step, **result})
                self.tracker.log(metrics, step=self.log_offset + self.step)
                bar.update(1, reward=metrics.get("generate/reward_mean", float("nan")))
                if tr.ckpt_interval and self.step % tr.ckpt_interval == 0:
                    self.save()
                if tr.max_wall_time_s is not None and time.perf_counter() - started >= tr.max_wall_time_s:
                    stop_reason = "max_wall_time_s"
                    break
            else:
                stop_reason = "data"
        finally:
            bar.close()
        if self.step >= self.total_steps and stop_reason == "data":
            stop_reason = "max_steps" if tr.max_steps is not None else "data"
        self.save()
        after = self.evaluate()
        if after:
            self.tracker.log(after, step=self.log_offset + self.step)
            evals.append({"stage": "after RL", "step": self.step, **after})
        summary = self._summary(evals, time.perf_counter() - started, stop_reason)
        return summary

    def save(self) -> Path:
        """Checkpoint the workers and the trainer state at the current step."""
        keep = None if self.cfg.trainer.max_ckpts_to_keep < 0 else self.cfg.trainer.max_ckpts_to_keep
        return ckpt.save_checkpoint(
            self.run_dir,
            self.step,
            self._workers(),
            data_state=self.iterator.state_dict(),
            config=self.cfg,
            keep_last=keep,
        )

    def _summary(self, evals: list[dict[str, Any]], wall_s: float, stop_reason: str) -> dict[str, Any]:
        from skyrl_train.plots import plot_learning_curves

        summary: dict[str, Any] = {
            "steps": self.step,
            "wall_time_s": round(wall_s, 1),
            "stopped_by": stop_reason,
            "train_prompts": len(self.train_set),
            "train_prompts_filtered": getattr(self.train_set, "num_filtered", 0),
            "eval_prompts": len(self.val_rows),
            "evaluations": evals,
        }
        summary["stages"] = [
            {
                "stage": e["stage"],
                "step": e["step"],
                "questions": int(e["eval/num_prompts"]),
                "correct": round(e["eval/accuracy"] * (e["eval/num_trajectories"] - e["eval/num_errors"])),
                "accuracy": e["eval/accuracy"],
                "valid_format_rate": e["eval/valid_format_rate"],
                "errors": int(e["eval/num_errors"]),
            }
            for e in evals
        ]
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        metrics_path = self.tracker.metrics_path
        if metrics_path is not None and metrics_path.exists():
            with contextlib.suppress(Exception):
                plot_learning_curves(metrics_path, self.run_dir / "learning_curve.png")
        return summary

    def close(self) -> None:
        """Stop worker processes and close the engine and the tracker (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for worker in (self.policy, self.ref, self.critic):
            if worker is not None:
                worker.shutdown()
        self.engine.close()
        self.tracker.close()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
