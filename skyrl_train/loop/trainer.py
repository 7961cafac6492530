"""The training loop: rollouts -> advantages -> policy (and critic) update -> weight sync -> next batch.

One :class:`Trainer` owns the parts of a run, each built from its own section of the config:

- the policy (and, when needed, reference and critic) workers (:func:`~skyrl_train.training.workers.plan.plan_workers`, each worker's
  ``config_kwargs``): in process for one worker, a :class:`~skyrl_train.training.workers.group.WorkerGroup` of FSDP2
  processes for more;
- the inference engine (``engine_class(generator.backend).from_config(generator, ...)``: ``hf``, ``vllm`` or
  ``remote``) and the multi-turn generator over skyrl_gym environments (``MultiTurnGenerator.from_config``);
- the data (``Datasets.from_config``), the tracker (``Tracker.from_config``), and what the loop does when:
  evaluations, checkpoints, the warm-up, the time budget (:class:`LoopPlan`).

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
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from skyrl_train.config import Config, ConfigError, SamplingParams
from skyrl_train.cost import CostTotals, cpu_seconds, step_cost
from skyrl_train.data import Datasets, row_value
from skyrl_train.evaluation.passk import evaluate_rows, pass_at_k
from skyrl_train.evaluation.stages import STAGES, VAL_SET, StageEvaluator
from skyrl_train.sampling import eval_sampling, rollout_sampling
from skyrl_train.training import checkpoint as ckpt
from skyrl_train.training.workers.group import WorkerLostError
from skyrl_train.training.workers.plan import (
    WorkerPlan,
    build_worker,
    engine_shares_policy,
    engine_sleeps_while_training,
    plan_workers,
)

__all__ = [
    "LoopPlan",
    "Trainer",
    "WorkerPlan",
    "build_worker",
    "engine_shares_policy",
    "eval_sampling",
    "evaluate_rows",
    "pass_at_k",
    "plan_workers",
    "resume_path",
    "rollout_sampling",
    "row_value",
]


def resume_path(config: Config) -> Path | None:
    """The checkpoint a run continues from (``trainer.resume_mode``): none, ``trainer.resume_path``, or the
    latest complete one under ``trainer.run_dir``."""
    tr = config.trainer
    if tr.resume_mode == "none":
        return None
    if tr.resume_mode == "from_path":
        return Path(tr.resume_path)
    return ckpt.find_latest(tr.run_dir)


SELF_CORRECTION_SEEDS = 1_000_000
"""The sampling seed offset of the warm-up's self-correction steps (RL's step ``s`` samples with seed + s)."""


@dataclasses.dataclass(frozen=True)
class LoopPlan:
    """What the training loop does when, from the ``trainer`` and ``generator`` sections."""

    total_steps: int
    """RL steps of the run: the batches over all epochs, capped by ``trainer.max_steps``."""
    n_samples: int
    """Trajectories per training prompt."""
    policy_mini_batch: int
    """Sequences per policy optimizer step."""
    critic_mini_batch: int
    """Sequences per critic optimizer step."""
    update_epochs: int
    """Passes of updates over each batch."""
    updates_per_step: int
    """Optimizer steps per training step: mini-batches per batch times ``update_epochs``."""
    eval_before_train: bool
    """Evaluate before the first step of a fresh run."""
    eval_interval: int
    """Evaluate every this many steps (0: never during training)."""
    ckpt_interval: int
    """Checkpoint every this many steps (0: only at the end)."""
    keep_checkpoints: int | None
    """Checkpoints kept (None: all)."""
    max_wall_time_s: float | None
    """Time budget of the run."""
    warmup_steps: int
    """Supervised warm-up steps of a fresh run."""
    warmup_batch_size: int
    """Rows per warm-up step."""
    warmup_lr: float
    """Learning rate of the warm-up."""
    warmup_base: bool
    """The warm-up trains the base weights of a policy with LoRA adapters (``trainer.policy.lora.full_warmup``)
    and RL the adapters alone."""
    warmup_episode_fraction: float
    """Share of warm-up rows played with the environment's reference episode instead of its single
    reference action."""
    warmup_loss_reduction: str
    """How the warm-up reduces its loss (``trainer.sft_warmup.loss_reduction``, else RL's own)."""
    self_correction_steps: int
    """Warm-up steps on the model's own episodes after the reference ones."""
    self_correction_samples: int
    """Samples per row in a self-correction step."""
    eval_after_warmup: bool
    """Evaluate once after the warm-up."""
    max_restarts: int
    """Times the loop rebuilds lost workers and resumes from the latest checkpoint
    (``trainer.placement.max_restarts``)."""

    @classmethod
    def from_config(cls, config: Config, batches: int) -> LoopPlan:
        """The plan of a run whose data gives ``batches`` training batches over all its epochs."""
        tr, gen, w = config.trainer, config.generator, config.trainer.sft_warmup
        total = batches if tr.max_steps is None else min(batches, tr.max_steps)
        return cls(
            total_steps=total,
            n_samples=gen.n_samples_per_prompt,
            policy_mini_batch=tr.policy_mini_batch_size * gen.n_samples_per_prompt,
            critic_mini_batch=tr.critic_mini_batch_size * gen.n_samples_per_prompt,
            update_epochs=tr.update_epochs_per_batch,
            updates_per_step=(tr.train_batch_size // tr.policy_mini_batch_size) * tr.update_epochs_per_batch,
            eval_before_train=tr.eval_before_train,
            eval_interval=tr.eval_interval,
            ckpt_interval=tr.ckpt_interval,
            keep_checkpoints=None if tr.max_ckpts_to_keep < 0 else tr.max_ckpts_to_keep,
            max_wall_time_s=tr.max_wall_time_s,
            warmup_steps=w.steps,
            warmup_batch_size=w.batch_size,
            warmup_lr=w.lr,
            warmup_base=tr.policy.lora.full_warmup and tr.policy.lora.rank > 0,
            warmup_episode_fraction=w.episode_fraction,
            warmup_loss_reduction=w.loss_reduction or tr.algorithm.loss_reduction,
            self_correction_steps=w.self_correction_steps,
            self_correction_samples=w.self_correction_samples,
            eval_after_warmup=w.eval_after,
            max_restarts=tr.placement.max_restarts,
        )

    def evaluates_after(self, step: int) -> bool:
        """Whether the loop evaluates after training step ``step`` (the final evaluation aside)."""
        return bool(self.eval_interval) and step % self.eval_interval == 0 and step < self.total_steps

    def checkpoints_after(self, step: int) -> bool:
        """Whether the loop checkpoints after training step ``step`` (the final checkpoint aside)."""
        return bool(self.ckpt_interval) and step % self.ckpt_interval == 0

    def out_of_time(self, elapsed_s: float) -> bool:
        """Whether the time budget is spent after ``elapsed_s`` seconds of the run."""
        return self.max_wall_time_s is not None and elapsed_s >= self.max_wall_time_s


def _peak_rss_gb() -> float:
    """Peak resident memory of this process so far (VmHWM), in GiB: the trainer with its in-process workers
    and engine (worker processes of a group are not included)."""
    import resource

    with contextlib.suppress(OSError, StopIteration, ValueError):
        with open("/proc/self/status") as status:
            kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
        return round(kib / 2**20, 2)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)  # KiB on Linux


def update_on_batch(
    parts: Any, batch: Any, groups: int, *, before_update: Callable[[Any], dict[str, float]] | None = None
) -> dict[str, float]:
    """The update of one RL step on ``batch`` (``groups`` prompts): the old, reference and critic values it
    needs, the advantages, then the policy's and the critic's optimizer steps; returns their metrics.

    ``parts`` holds ``cfg``, ``loop`` (a :class:`LoopPlan`), ``policy``, ``ref`` and ``critic`` (None when
    unused) and ``on_policy`` (one update per batch: the old log-probs come from the training forward): the
    :class:`Trainer`, or :func:`skyrl_train.replay.replay_training` rerunning a recorded step.
    ``before_update(batch)`` runs once the advantages are in, before the weights change (the record)."""
    from skyrl_train.training.algorithms import compute_batch_advantages

    tr, loop = parts.cfg.trainer, parts.loop
    if not parts.on_policy:
        batch.old_log_probs = parts.policy.compute_log_probs(batch)
    if parts.ref is not None:
        batch.ref_log_probs = parts.ref.compute_log_probs(batch)
    if parts.critic is not None:
        batch.values = parts.critic.compute_values(batch)
    metrics = {f"advantage/{k}": v for k, v in compute_batch_advantages(batch, tr.algorithm).items()}
    policy_mini, critic_mini = loop.policy_mini_batch, loop.critic_mini_batch
    if groups < tr.train_batch_size:  # dynamic sampling kept fewer groups than a full batch
        from skyrl_train.loop.dynamic_sampling import mini_batch_groups

        n = loop.n_samples
        policy_mini = n * mini_batch_groups(
            groups, tr.policy_mini_batch_size, tr.train_batch_size // tr.policy_mini_batch_size
        )
        critic_mini = n * mini_batch_groups(
            groups, tr.critic_mini_batch_size, tr.train_batch_size // tr.critic_mini_batch_size
        )
    if before_update is not None:
        metrics.update(before_update(batch))
    metrics.update(parts.policy.train_batch(batch, policy_mini, loop.update_epochs))
    if parts.critic is not None:
        metrics.update(parts.critic.train_batch(batch, critic_mini, loop.update_epochs))
    return metrics


class Trainer:
    """Runs a whole training job from a :class:`~skyrl_train.config.Config`; see the module docstring."""

    def __init__(self, config: Config, *, evaluate_only: bool = False):
        self.cfg = config
        self.evaluate_only = evaluate_only
        """Built to evaluate (``skyrl-train eval``): a checkpoint gives its weights and step, not the data
        iterator's position, so batch settings other than the training run's are not refused."""
        self.run_dir = Path(config.trainer.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.step = 0
        self.restarts = 0
        """Times the run rebuilt its workers and engine after one died (``trainer.placement.max_restarts``)."""
        self.layout: Any = None
        """The :class:`~skyrl_train.ray_layout.RayLayout` (backend ray), else None."""
        self.async_producer: Any = None
        """The :class:`~skyrl_train.loop.async_training.RolloutProducer` of the asynchronous mode's last loop."""
        self._closed = False
        self._build()

    # ------------------------------------------------------------------------------------------ setup
    def _build(self) -> None:
        from skyrl_gym.envs.registration import check_env_configs
        from skyrl_train.models import load_tokenizer
        from skyrl_train.tracking import Tracker

        cfg, tr = self.cfg, self.cfg.trainer
        # before any model loads: an environment setting the environment would refuse, or one for an id no
        # environment has, would otherwise surface at the first episode (possibly inside a Ray actor)
        problems = check_env_configs(cfg.environment.skyrl_gym)
        if problems:
            raise ConfigError([f"environment.skyrl_gym.{problem}" for problem in problems])
        torch.manual_seed(tr.seed)
        policy_path = tr.policy.model.path
        self.tokenizer = load_tokenizer(policy_path)
        device = tr.placement.device

        data = Datasets.from_config(cfg.data, tr, self.tokenizer)
        self.train_set, self.val_rows, self.iterator = data.train, data.val_rows, data.iterator
        self.evaluator = StageEvaluator.from_config(cfg, val_rows=self.val_rows)
        """Every evaluation of the run: ``data.val_data`` (the set ``val``) and ``data.eval_sets``."""
        if not self.evaluate_only:  # an evaluation of a checkpoint leaves its run's folder as it was
            self.evaluator.outcomes_path = self.run_dir / "eval_outcomes.jsonl"
        from skyrl_train.loop.dynamic_sampling import DynamicSampler

        self.dynamic_sampler = DynamicSampler.from_config(cfg)
        from skyrl_train.record import RecordSettings, RolloutRecorder

        self.recorder = RolloutRecorder(self.run_dir, RecordSettings.from_config(cfg))
        self._batches: Any = None
        """The training loop's pass over the data (dynamic sampling draws further batches from it)."""
        self.costs = CostTotals()
        """The RL steps' summed costs (``summary.json``'s ``cost``)."""
        self.eval_time_s = 0.0
        """Seconds spent evaluating so far: outside ``trainer.max_wall_time_s``."""
        self._rl_clock = (time.perf_counter(), 0.0)
        """When RL began (after the warm-up) and ``eval_time_s`` then: see :meth:`rl_elapsed_s`."""
        self.loop = LoopPlan.from_config(cfg, self.iterator.total_batches)
        self.total_steps = self.loop.total_steps
        self._policy_updates = self.total_steps * self.loop.updates_per_step
        # One update per batch: the old log-probs are the current ones, computed in the training forward.
        self.on_policy = self.loop.updates_per_step == 1 and not tr.algorithm.use_kl_in_reward
        # Tracker steps: the warm-up's steps come first, then RL's (checkpoints count RL steps only).
        self.log_offset = self.loop.warmup_steps + self.loop.self_correction_steps
        self.recorder.plan = {
            "log_offset": self.log_offset,
            "policy_updates": self._policy_updates,
            "on_policy": self.on_policy,
            # a sum split over another number of threads is summed in another order: a replay uses these
            "torch_threads": torch.get_num_threads(),
        }

        self._build_parts(device)

        resume = resume_path(cfg)
        self.tracker = Tracker.from_config(
            cfg, resume_step=self.log_offset + ckpt.checkpoint_step(resume) if resume is not None else None
        )
        if resume is not None:
            self._resume(resume)
            self.tracker.log({"resumed_from_step": float(self.step)}, step=self.log_offset + self.step)
        if not self.evaluate_only:  # an evaluation leaves the training run's config as it was
            cfg.to_yaml(self.run_dir / "config.yaml")

    def _build_parts(self, device: str) -> None:
        """The workers, the engine and the runner (again after a lost worker): in this process or spawned
        processes, or as Ray actors (``trainer.placement.backend=ray``)."""
        from skyrl_train.inference.base import engine_class
        from skyrl_train.rollout import MultiTurnGenerator

        cfg, tr = self.cfg, self.cfg.trainer
        if tr.placement.backend == "ray":
            from skyrl_train.ray_layout import RayLayout

            self.layout = RayLayout.from_config(cfg)
        plans = plan_workers(cfg)
        self.policy = build_worker(plans["policy"], layout=self.layout, total_steps=self._policy_updates)
        self.ref = build_worker(plans["ref"], layout=self.layout) if "ref" in plans else None
        self.critic = (
            build_worker(plans["critic"], layout=self.layout, total_steps=self._policy_updates)
            if "critic" in plans
            else None
        )

        # Sharing the policy's model object, the hf engine sees every update at once: weight sync is free.
        self._shares_policy = engine_shares_policy(cfg)
        # On the policy's GPUs (colocate_all) the engine frees its memory while the policy trains.
        self._engine_sleeps = engine_sleeps_while_training(cfg)
        self._engine_asleep = False
        self._probe: list[int] | None = None
        self.last_weight_check: dict[str, float] = {}
        """What the weight-sync gate measured after the last push (see :meth:`_check_weights`)."""
        if self.layout is not None:
            self.engine = self.layout.build_engine(cfg, self.tokenizer)
            self.generator = self.layout.build_generator(cfg, self.engine)
            return
        self.engine = engine_class(cfg.generator.backend).from_config(
            cfg.generator,
            model_path=tr.policy.model.path,
            tokenizer=self.tokenizer,
            model=self.policy.model if self._shares_policy else None,
            seed=tr.seed,
            device=device,
        )
        self.generator = MultiTurnGenerator.from_config(self.engine, cfg)

    def _resume(self, path: Path) -> None:
        state = ckpt.load_checkpoint(path, self._workers())
        self.step = state.step
        if state.data_state is not None and not self.evaluate_only:
            self.iterator.load_state_dict(state.data_state)
        # the engine continues the run's count of weight versions (the record's policy_versions), not its own
        self._sync_weights(version=state.extra.get("policy_version"))

    def _teardown_parts(self) -> None:
        for worker in (self.policy, self.ref, self.critic):
            if worker is not None and hasattr(worker, "shutdown"):
                worker.shutdown()
        self.engine.close()
        if self.layout is not None:
            self.layout.shutdown()
            self.layout = None

    def _recover(self, error: Exception) -> None:
        """After a worker or the engine died: new ones, and the latest checkpoint of this run (or a fresh
        start when there is none yet)."""
        import logging

        self.restarts += 1
        logging.getLogger("skyrl_train.loop.trainer").warning(
            "%s; restart %d of %d: rebuilding the workers and the engine and resuming from the latest "
            "checkpoint",
            error,
            self.restarts,
            self.loop.max_restarts,
        )
        failed_at = self.step
        self._teardown_parts()
        self._build_parts(self.cfg.trainer.placement.device)
        latest = ckpt.find_latest(self.run_dir) or resume_path(self.cfg)
        if latest is not None:
            self._resume(latest)
        else:
            self.step = 0
            self.iterator.load_state_dict({**self.iterator.state_dict(), "epoch": 0, "position": 0})
            self._sync_weights()
        self.tracker.log(
            {"restart/count": float(self.restarts), "restart/failed_at_step": float(failed_at + 1)},
            step=self.log_offset + self.step,
        )

    def _workers(self) -> dict[str, Any]:
        workers = {"policy": self.policy}
        if self.critic is not None:
            workers["critic"] = self.critic
        return workers

    # ----------------------------------------------------------------------------------------- steps
    def _sleep_engine(self) -> None:
        """Free the engine's memory for the update (see :func:`engine_sleeps_while_training`)."""
        if self._engine_sleeps and not self._engine_asleep:
            asyncio.run(self.engine.sleep())
            self._engine_asleep = True

    def _wake_engine(self, tags: list[str]) -> None:
        """Wake part of a sleeping engine; an engine whose ``wake_up`` takes no tags wakes whole, once,
        before the weights arrive."""
        import inspect

        parameters = inspect.signature(self.engine.wake_up).parameters
        if "tags" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            asyncio.run(self.engine.wake_up(tags=tags))
        elif tags == ["weights"]:
            asyncio.run(self.engine.wake_up())

    def _sync_weights(self, *, check: bool = True, version: int | None = None) -> float:
        """Push the policy's weights into the engine, waking a sleeping engine around it, then (``check``)
        run the weight-sync gate; the seconds it took (0 with ``trainer.sync_weights=false``: the engine
        keeps its own weights, for evaluation or a rollout policy that is not trained). An in-flight push
        checks after it resumed the engine (``check=False`` here). ``version``: the policy version the engine
        takes on with these weights, where it counts versions (default: one more than its own)."""
        start = time.perf_counter()
        asleep, self._engine_asleep = self._engine_asleep, False
        if asleep:
            self._wake_engine(["weights"])  # the weights' memory first: the sync writes into it
        if self.cfg.trainer.sync_weights:
            self._push_weights(version)
        if asleep:
            self._wake_engine(["kv_cache"])  # the KV cache after the sync: the sync's buffers are gone
        if self.cfg.trainer.sync_weights and check:
            self._check_weights()
        return time.perf_counter() - start if self.cfg.trainer.sync_weights else 0.0

    def _push_weights(self, version: int | None = None) -> None:
        # the engines that count policy versions take the version to set with the weights
        counted = {"version": version} if version is not None and self._engine_version() is not None else {}
        if self.layout is not None:
            self.engine.sync_from(self.policy)  # training actors -> engine actor
        elif self._shares_policy:
            asyncio.run(self.engine.update_weights((), **counted))  # shared model: drops stale prefix caches
        else:
            state = self.policy.full_state_dict()
            asyncio.run(self.engine.update_weights(state.items(), **counted))

    def _engine_version(self) -> int | None:
        """The policy version of the engine's weights, where the engine counts them."""
        version = getattr(self.engine, "policy_version", None)
        return int(version) if isinstance(version, int) else None

    def _check_weights(self) -> None:
        """The weight-sync gate (:mod:`skyrl_train.inference.weight_sync.gate`) after a push: the engine's
        log-probabilities of a fixed probe sequence must equal the policy's (each tensor's digest was already
        compared by the engine's transport, where it has one). Raises
        :class:`~skyrl_train.inference.weight_sync.gate.WeightSyncError`; what it measured is in
        ``self.last_weight_check``. Nothing is checked where nothing travelled (an engine sharing the policy's
        model), with ``generator.weight_sync_check=false``, or for a policy spread over several processes
        (the engine's digests still are)."""
        from skyrl_train.inference.weight_sync import gate

        self.last_weight_check = {}
        settings = gate.GateSettings.from_config(self.cfg)
        model = getattr(self.policy, "model", None)
        nothing_travelled = self._shares_policy or self.layout is not None
        if (
            not settings.enabled
            or nothing_travelled
            or model is None
            or getattr(self.policy, "sharded", False)
        ):
            return
        start = time.perf_counter()
        if self._probe is None:
            self._probe = gate.probe_tokens(self.tokenizer)
        engine_logprobs = gate.engine_probe_logprobs(self.engine, self._probe)
        trainer_logprobs = gate.trainer_probe_logprobs(model, self._probe)
        result = gate.compare_probe(trainer_logprobs, engine_logprobs, tolerance=settings.tolerance)
        self.last_weight_check = {
            "sync/probe_max_diff": result.max_diff,
            "sync/probe_mean_diff": result.mean_diff,
            "time/sync_check_s": time.perf_counter() - start,
        }

    def train_step(
        self, rows: list[dict], *, rollouts: Any = None, tasks: dict[int, dict] | None = None
    ) -> dict[str, float]:
        """One GRPO/PPO step on ``rows``; returns its metrics. With ``rollouts`` (a ``GeneratorOutput`` made
        already: the asynchronous mode) it trains on those and leaves the weight push to its caller; ``tasks``
        maps their group ids to their rows for the record (default: the ids this step gives ``rows``)."""
        from skyrl_train.training.batch import TrainingBatch

        cfg, tr = self.cfg, self.cfg.trainer
        metrics: dict[str, float] = {}
        t0, cpu0 = time.perf_counter(), cpu_seconds()
        params = rollout_sampling(cfg, self.step)
        group_offset = self.step * tr.train_batch_size
        if rollouts is None:
            out = asyncio.run(
                self.generator.generate(rows, self.loop.n_samples, params, group_offset=group_offset)
            )
        else:
            out = rollouts
        if self.layout is not None:
            self.engine.raise_if_lost()  # not a batch of error trajectories: the step stops here
        metrics.update(out.metrics)
        if self.dynamic_sampler is not None and rollouts is None:
            out, sampling_metrics = self.dynamic_sampler.collect(
                out, functools.partial(self._sample_more, params), seed=tr.seed * 100_003 + self.step
            )
            metrics.update(sampling_metrics)
            if not out.trajectories:  # no group with reward variance: nothing to learn from this step
                metrics.update(
                    {"time/generate_s": time.perf_counter() - t0, "time/step_s": time.perf_counter() - t0}
                )
                metrics.update(self._cost(out.trajectories, t0, cpu0))
                return metrics
        t1 = time.perf_counter()
        if rollouts is None:
            self._sleep_engine()  # the rollouts are done: the scoring and the update get the GPUs

        batch = TrainingBatch.from_trajectories(out.trajectories, self.tokenizer.pad_token_id)
        if self._shares_policy and hasattr(self.engine, "reset_prefix_cache"):
            # the update makes every cached prefix stale: free them now, not after the update (up to 1.5 GB)
            self.engine.reset_prefix_cache()
        if tasks is None:
            tasks = {group_offset + i: row for i, row in enumerate(rows)}

        def record(batch: Any) -> dict[str, float]:
            trainer_log_probs = None
            if batch.old_log_probs is None and self.recorder.wants_trainer_log_probs:
                trainer_log_probs = self.policy.compute_log_probs(batch)  # for the record only
            return self.recorder.record(self.step + 1, out.trajectories, batch, tasks, trainer_log_probs)

        groups = len({t.group_id for t in out.trajectories})
        metrics.update(update_on_batch(self, batch, groups, before_update=record))
        t2 = time.perf_counter()
        sync_s = self._sync_weights() if rollouts is None else 0.0
        metrics.update(
            {
                "time/generate_s": t1 - t0,
                "time/train_s": t2 - t1,
                "time/sync_s": sync_s,
                **(self.last_weight_check if rollouts is None else {}),
                "time/step_s": time.perf_counter() - t0,
                "memory/peak_rss_gb": _peak_rss_gb(),
            }
        )
        metrics.update(self._cost(out.trajectories, t0, cpu0))
        return metrics

    def _cost(self, trajectories: list[Any], t0: float, cpu0: float) -> dict[str, float]:
        """The step's ``cost/*`` metrics (:mod:`skyrl_train.cost`), added to the run's totals."""
        device = str(self.cfg.trainer.placement.device)
        metrics = step_cost(
            trajectories,
            cpu_s=cpu_seconds() - cpu0,
            wall_s=time.perf_counter() - t0,
            gpus=torch.cuda.device_count() if device.startswith("cuda") else 0,
            pass_threshold=getattr(self.generator, "pass_threshold", 1.0),
        )
        self.costs.add(metrics)
        return metrics

    def _sample_more(self, params: SamplingParams) -> Any:
        """The next batch of training prompts rolled out (dynamic sampling), or ``None`` when the data ran
        out; its group ids follow the batch's global index, apart from every step's first batch."""
        rows = next(self._batches, None) if self._batches is not None else None
        if rows is None:
            return None
        offset = (
            self.iterator.total_batches + self.iterator.batches_done
        ) * self.cfg.trainer.train_batch_size
        return asyncio.run(self.generator.generate(rows, self.loop.n_samples, params, group_offset=offset))

    def evaluate(self) -> dict[str, float]:
        """Evaluate ``data.val_data`` now with the evaluation sampling settings (``skyrl-train eval``); its
        ``eval/`` metrics. The evaluation is kept (the set ``val``'s stage table) as one after RL."""
        return self._evaluate("after_rl", only=(VAL_SET,))

    def _evaluate(self, stage: str, only: Sequence[str] | None = None) -> dict[str, float]:
        """Every evaluation set that names ``stage`` (see :mod:`skyrl_train.evaluation.stages`); their
        metrics. Their time is counted apart (outside ``trainer.max_wall_time_s``)."""
        if not self.evaluator:
            return {}
        start = time.perf_counter()
        metrics = self.evaluator.run(self.generator, stage, self.step, only=only)
        self.eval_time_s += time.perf_counter() - start
        return metrics

    def _evaluate_stage(
        self, stage: str, log_step: int | None, evals: list[dict[str, Any]]
    ) -> dict[str, float]:
        """:meth:`_evaluate` at ``stage``; its metrics are logged at tracker step ``log_step`` (``None``: the
        caller logs them with the step's own), and ``data.val_data``'s go into ``evals`` (the summary's
        ``evaluations``)."""
        done = len(self.evaluator.records.get(VAL_SET, ()))
        metrics = self._evaluate(stage)
        if metrics and log_step is not None:
            self.tracker.log(metrics, step=log_step)
        records = self.evaluator.records.get(VAL_SET, ())
        if len(records) > done:
            evals.append({"stage": STAGES[stage], "step": self.step, **records[-1].metrics})
        return metrics

    def warmup(self) -> None:
        """The supervised warm-up (``trainer.sft_warmup``): the environments' reference trajectories, then a
        fresh RL optimizer."""
        from skyrl_train.loop.warmup import self_correction_step, supervised_step
        from skyrl_train.rollout import MultiTurnGenerator

        tr, loop = self.cfg.trainer, self.loop
        rows = list(self.train_set)
        random.Random(tr.seed).shuffle(rows)
        sampling = self.cfg.generator.sampling_params
        # reference answers are scripted, not sampled: no per-turn token cap beyond the generator's own budgets
        params = SamplingParams(temperature=0.0, max_tokens=4096, stop=sampling.stop)
        self.policy.reset_optimizer(
            tr.policy.optimizer_config.model_copy(update={"lr": loop.warmup_lr, "num_warmup_steps": 0}),
            base=loop.warmup_base,
        )
        bar_start = time.perf_counter()
        for i in range(loop.warmup_steps):
            start = (i * loop.warmup_batch_size) % len(rows)
            chunk = (rows + rows)[start : start + loop.warmup_batch_size]
            metrics = supervised_step(
                self.policy,
                lambda engine: MultiTurnGenerator.from_config(engine, self.cfg),
                self.tokenizer,
                chunk,
                params,
                episode_fraction=loop.warmup_episode_fraction,
                seed=tr.seed + i,
                loss_reduction=loop.warmup_loss_reduction,
            )
            metrics["time/warmup_elapsed_s"] = time.perf_counter() - bar_start
            self.tracker.log(metrics, step=i + 1)
        for j in range(loop.self_correction_steps):
            i = loop.warmup_steps + j
            start = (i * loop.warmup_batch_size) % len(rows)
            chunk = (rows + rows)[start : start + loop.warmup_batch_size]
            self._sync_weights(check=False)  # the model samples its own episodes with the weights so far
            # seeds of their own, apart from the RL steps' (seed + step)
            sampling_params = rollout_sampling(self.cfg, SELF_CORRECTION_SEEDS + j)
            sampled = asyncio.run(
                self.generator.generate(chunk, loop.self_correction_samples, sampling_params)
            )
            self._sleep_engine()
            metrics = self_correction_step(
                self.policy,
                lambda engine: MultiTurnGenerator.from_config(engine, self.cfg),
                self.tokenizer,
                chunk,
                sampled.trajectories,
                params,
                episode_fraction=loop.warmup_episode_fraction,
                seed=tr.seed + i,
                loss_reduction=loop.warmup_loss_reduction,
            )
            metrics["time/warmup_elapsed_s"] = time.perf_counter() - bar_start
            self.tracker.log(metrics, step=i + 1)
        self.policy.reset_optimizer(tr.policy.optimizer_config, self._policy_updates)
        self._sync_weights()

    # ---------------------------------------------------------------------------------------- the run
    def fit(self) -> dict[str, Any]:
        """Train until the data, ``max_steps`` or ``max_wall_time_s`` runs out; return the run summary."""
        from skyrl_train.progress import ProgressBar

        tr, loop = self.cfg.trainer, self.loop
        started = time.perf_counter()
        evals: list[dict[str, Any]] = []
        fresh = self.step == 0
        if loop.eval_before_train and fresh:
            self._evaluate_stage("before", 0, evals)
        if fresh and (loop.warmup_steps > 0 or loop.self_correction_steps > 0):
            self.warmup()
            if loop.eval_after_warmup:
                self._evaluate_stage("after_warmup", self.log_offset, evals)
        # RL's own clock: the time budget counts neither the warm-up nor any evaluation
        self._rl_clock = (time.perf_counter(), self.eval_time_s)
        bar = ProgressBar(total=self.total_steps, initial=self.step, desc="train")
        try:
            while True:
                try:
                    stop_reason = self._train_loop(bar, evals)
                    break
                except WorkerLostError as error:  # a worker or the engine died: resume from a checkpoint
                    if self.restarts >= loop.max_restarts:
                        raise
                    self._recover(error)
                    bar.n = self.step
        finally:
            bar.close()
        if self.step >= self.total_steps and stop_reason == "data":
            stop_reason = "max_steps" if tr.max_steps is not None else "data"
        self.save()
        self._evaluate_stage("after_rl", self.log_offset + self.step, evals)
        rl_s = self.rl_elapsed_s()
        summary = self._summary(evals, time.perf_counter() - started, stop_reason, rl_wall_s=rl_s)
        return summary

    def rl_elapsed_s(self) -> float:
        """Seconds of RL so far in this process: since the warm-up ended, evaluations left out (what
        ``trainer.max_wall_time_s`` bounds)."""
        since, eval_before = self._rl_clock
        return time.perf_counter() - since - (self.eval_time_s - eval_before)

    def _train_loop(self, bar: Any, evals: list[dict[str, Any]]) -> str:
        """Training steps from the iterator's position until the data, the steps or the time run out;
        returns why it stopped."""
        if self.cfg.trainer.mode == "async":
            from skyrl_train.loop.async_training import run_async_loop

            return run_async_loop(self, bar, evals)
        self._batches = iter(self.iterator)  # dynamic sampling draws further batches from the same pass
        # the step limit is checked before a batch is drawn: a checkpoint's data position is then the next
        # batch to train on, none skipped on resume
        while self.step < self.total_steps:
            rows = next(self._batches, None)
            if rows is None:
                break
            metrics = self.train_step(rows)
            if self.end_step(metrics, bar, evals, epoch=float(self.iterator.state_dict().get("epoch", 0))):
                return "max_wall_time_s"
        return "data"

    def end_step(
        self, metrics: dict[str, float], bar: Any, evals: list[dict[str, Any]], *, epoch: float
    ) -> bool:
        """The tail of every RL step, synchronous or asynchronous (:mod:`skyrl_train.loop.async_training`):
        count the step, evaluate when one is due (into ``metrics`` and ``evals``), log ``metrics`` with the
        step's ``epoch``, advance the progress ``bar``, checkpoint when one is due; whether RL's time budget is
        spent (evaluations are outside it: the trainer counts their time apart)."""
        self.step += 1
        metrics["train/epoch"] = epoch
        if self.loop.evaluates_after(self.step):
            metrics.update(self._evaluate_stage("during_rl", None, evals))
        self.tracker.log(metrics, step=self.log_offset + self.step)
        bar.update(1, reward=metrics.get("generate/reward_mean", float("nan")))
        if self.loop.checkpoints_after(self.step):
            self.save()
        return self.loop.out_of_time(self.rl_elapsed_s())

    def save(self) -> Path:
        """Checkpoint the workers and the trainer state at the current step.

        The data position saved is the iterator's own in the synchronous mode (a step may read more than one
        batch there: the dynamic-sampling filter). In the asynchronous mode the producer reads up to K steps
        ahead of training, one batch per step, so the position saved is that of the step's batch: a resumed
        run generates again the groups that were in flight, and step s still trains on batch s.
        """
        data_state = (
            self.iterator.state_after(self.step)
            if self.cfg.trainer.mode == "async"
            else self.iterator.state_dict()
        )
        return ckpt.save_checkpoint(
            self.run_dir,
            self.step,
            self._workers(),
            data_state=data_state,
            extra={"policy_version": self._engine_version()},
            config=self.cfg,
            keep_last=self.loop.keep_checkpoints,
        )

    def _summary(
        self, evals: list[dict[str, Any]], wall_s: float, stop_reason: str, *, rl_wall_s: float
    ) -> dict[str, Any]:
        from skyrl_train.plots import plot_learning_curves

        summary: dict[str, Any] = {
            "steps": self.step,
            "wall_time_s": round(wall_s, 1),
            "rl_wall_time_s": round(rl_wall_s, 1),
            "stopped_by": stop_reason,
            "train_prompts": len(self.train_set),
            "train_prompts_filtered": getattr(self.train_set, "num_filtered", 0),
            "eval_prompts": len(self.val_rows),
            "peak_rss_gb": _peak_rss_gb(),
            "cost": self.costs.summary(),
            "evaluations": evals,
            "eval_time_s": round(self.eval_time_s, 1),
        }
        if self.evaluator:
            summary.update(self.evaluator.summary())
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
        if self.evaluator:
            from skyrl_train.report import write_report

            write_report(self.run_dir, summary, warmup_steps=self.log_offset)
        return summary

    def close(self) -> None:
        """Stop worker processes and close the engine and the tracker (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._teardown_parts()
        finally:
            self.tracker.close()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
