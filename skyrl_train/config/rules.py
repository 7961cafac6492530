"""The cross-field rules of a configuration: settings that are each valid but cannot run together. Each
message names every field involved and how to fix it; all of them are reported at once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skyrl_train import names

if TYPE_CHECKING:
    from skyrl_train.config.schema import Config, TrainerConfig

__all__ = [
    "BUILTIN_ADVANTAGE_ESTIMATORS",
    "BUILTIN_POLICY_LOSSES",
    "VLLM_MAX_TEMPERATURE",
    "check_rules",
    "weight_sync_name",
]

BUILTIN_ADVANTAGE_ESTIMATORS = tuple(names.BUILTIN_ADVANTAGE_ESTIMATORS)
"""Advantage estimators that ship with :mod:`skyrl_train.training.algorithms` (more can be registered)."""

BUILTIN_POLICY_LOSSES = tuple(names.BUILTIN_POLICY_LOSSES)
"""Policy losses that ship with :mod:`skyrl_train.training.algorithms`; ``regular`` is SkyRL's name for ``ppo``."""

VLLM_MAX_TEMPERATURE = 2.0
"""The highest sampling temperature vLLM accepts (its ``SamplingParams`` raises "temperature must be in
[0, 2]" above it)."""

# Estimators that compare the samples of one prompt with each other: they need several samples per prompt.
_GROUP_ESTIMATORS = ("grpo", "dr_grpo", "rloo")


def check_rules(cfg: Config) -> list[str]:
    """Cross-field rules; each message names every field involved and how to fix it."""
    errors: list[str] = []
    t, g, a, p = cfg.trainer, cfg.generator, cfg.trainer.algorithm, cfg.trainer.placement

    # 1. The advantage estimator and the policy loss exist (built in or registered; the dispatcher and the agent
    #    are checked with their own settings, when the config is validated).
    errors += _check_registered(a.advantage_estimator, names.ADVANTAGE_ESTIMATORS)
    errors += _check_registered(a.policy_loss_type, names.POLICY_LOSSES)
    # every environment's settings, as it would read them when made: a typo fails here, before anything loads
    errors += [
        f"environment.skyrl_gym.{p}" for p in names.check_environment_settings(cfg.environment.skyrl_gym)
    ]

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
    if g.backend == "vllm" and p.device != "cuda":
        # vLLM's CPU build (make vllm-env): one engine process, weights as bytes through its worker RPC
        if g.inference_engine_tensor_parallel_size > 1:
            errors.append(
                "generator.inference_engine_tensor_parallel_size > 1 with generator.backend=vllm needs GPUs "
                "(vLLM's CPU build runs one worker here): set trainer.placement.backend=cuda, or use 1"
            )
        if g.weight_sync_backend not in (None, "in_process"):
            errors.append(
                f"generator.weight_sync_backend={g.weight_sync_backend!r} with vLLM on the CPU: its CPU build "
                "takes weights through its worker RPC only: use in_process (or leave it null)"
            )
    if t.bf16 and p.device != "cuda":
        errors.append("trainer.bf16=true needs trainer.placement.backend=cuda (train in float32 on cpu)")
    if g.inference_engine_tensor_parallel_size > 1 and g.backend != "vllm":
        errors.append(
            f"generator.inference_engine_tensor_parallel_size={g.inference_engine_tensor_parallel_size} needs "
            f"generator.backend=vllm (the {g.backend} engine does not shard a model over GPUs)"
        )
    engine_gpus = g.num_inference_engines * g.inference_engine_tensor_parallel_size
    if g.backend == "vllm" and p.device == "cuda" and p.colocate_all and engine_gpus > cfg.policy_world_size:
        errors.append(
            f"trainer.placement.colocate_all=true: generator.num_inference_engines * "
            f"generator.inference_engine_tensor_parallel_size ({engine_gpus}) must be at most "
            f"trainer.placement.policy_num_nodes * trainer.placement.policy_num_gpus_per_node "
            f"({cfg.policy_world_size}): the engine runs on the policy's GPUs"
        )

    if g.backend == "vllm":
        for key in ("sampling_params", "eval_sampling_params"):
            temperature = getattr(g, key).temperature
            if temperature > VLLM_MAX_TEMPERATURE:
                errors.append(
                    f"generator.{key}.temperature={temperature:g} is above {VLLM_MAX_TEMPERATURE:g}: vLLM's "
                    f"SamplingParams accepts temperatures in [0, {VLLM_MAX_TEMPERATURE:g}] and would refuse "
                    "every request; lower it, or use generator.backend=hf"
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
        if fsdp.cpu_offload and (p.device != "cuda" or world < 2):
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

    # 11b. The weight-sync strategy fits where the engine runs.
    errors += _check_weight_sync(cfg)

    # 12. Resuming from a path needs the path.
    if t.resume_mode == "from_path" and not t.resume_path:
        errors.append("trainer.resume_mode='from_path' needs trainer.resume_path")

    # 13. What only Ray places: several machines, separate placement groups, environment actors.
    errors += _check_ray_placement(cfg)

    # 14. Asynchronous training and the off-policy correction.
    errors += _check_async(cfg)

    # 15. data.val_data is the evaluation set named val: a named set of that name would hide it.
    if cfg.data.val_data and "val" in cfg.data.eval_sets:
        errors.append(
            "data.eval_sets.val: val is the name of data.val_data's evaluation set; name the set otherwise"
        )
    return errors


def _check_async(cfg: Config) -> list[str]:
    """``trainer.mode=async`` runs where weights can be pushed in flight (the hf engine, in process or in its
    own process, and vLLM); its section is set only in that mode; the correction compares log-probs the engine and the
    trainer compute alike."""
    t, g = cfg.trainer, cfg.generator
    correction = t.algorithm.off_policy_correction
    errors: list[str] = []
    if t.mode == "async":
        if g.backend not in ("hf", "vllm"):
            errors.append(
                f"trainer.mode=async pushes weights in flight (pause, update, resume at a token boundary), "
                f"which generator.backend={g.backend!r} does not do here: use generator.backend=hf or vllm"
            )
        if not t.sync_weights:
            errors.append(
                "trainer.mode=async needs trainer.sync_weights=true (it pushes weights after each step)"
            )
        if t.placement.backend == "ray":
            errors.append(
                "trainer.mode=async runs the engine in this process or its own process, not as a Ray actor: "
                "set trainer.placement.backend=cpu (or cuda), optionally generator.engine_process=true"
            )
        if t.algorithm.dynamic_sampling.type is not None:
            errors.append(
                f"trainer.algorithm.dynamic_sampling.type={t.algorithm.dynamic_sampling.type!r} draws further "
                "batches within a step, which trainer.mode=async (one group at a time) does not do: leave it "
                "null in the asynchronous mode"
            )
    else:
        changed = _changed_keys(t.fully_async)
        if changed:
            errors.append(
                f"trainer.fully_async.{changed[0]} is set but trainer.mode={t.mode!r}: set trainer.mode=async "
                "or leave trainer.fully_async out"
            )
    if correction.method != "none" and g.sampling_params.temperature != 1.0:
        errors.append(
            f"trainer.algorithm.off_policy_correction.method={correction.method!r} compares the engine's "
            "log-probs (temperature 1) with the trainer's (divided by the sampling temperature): it needs "
            f"generator.sampling_params.temperature=1.0, got {g.sampling_params.temperature}"
        )
    sampling = t.algorithm.dynamic_sampling
    if sampling.type != "replace" and "min_replace_ratio" in _changed_keys(sampling):
        errors.append(
            "trainer.algorithm.dynamic_sampling.min_replace_ratio is set but dynamic_sampling.type="
            f"{sampling.type!r}: it is read only by type=replace"
        )
    if sampling.type is None and "max_sample_batches" in _changed_keys(sampling):
        errors.append(
            "trainer.algorithm.dynamic_sampling.max_sample_batches is set but dynamic_sampling.type is null: "
            "set type=filter or replace"
        )
    if correction.method == "none" and "token_tis_ratio_clip_high" in _changed_keys(correction):
        errors.append(
            "trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high is set but "
            "trainer.algorithm.off_policy_correction.method='none': set method=tis or decoupled_ppo"
        )
    return errors


def _check_ray_placement(cfg: Config) -> list[str]:
    p, g = cfg.trainer.placement, cfg.generator
    if p.backend == "ray":
        if not p.colocate_policy_ref and p.colocate_all:
            return [
                "trainer.placement.colocate_policy_ref=false acts only with trainer.placement.colocate_all=false "
                "(colocate_all puts every role in one placement group)"
            ]
        return []
    errors = [
        f"trainer.placement.{key}={getattr(p, key)!r} needs trainer.placement.backend=ray "
        f"(the {p.backend} backend runs everything on this machine)"
        for key in ("ray_device", "ray_address", "ray_num_cpus_per_worker", "ray_start_timeout_s")
        + ("ray_call_timeout_s",)
        if getattr(p, key) != type(p).model_fields[key].default
    ]
    if not p.colocate_all or not p.colocate_policy_ref:
        errors.append(
            "trainer.placement.colocate_all=false / colocate_policy_ref=false give the engine and the roles "
            "placement groups of their own: set trainer.placement.backend=ray"
        )
    for role in ("policy", "ref", "critic"):
        if getattr(p, f"{role}_num_nodes") > 1:
            errors.append(
                f"trainer.placement.{role}_num_nodes={getattr(p, f'{role}_num_nodes')} spans machines: set "
                f"trainer.placement.backend=ray (or raise trainer.placement.{role}_num_gpus_per_node)"
            )
    if g.env_workers or g.env_worker_num_cpus != type(g).model_fields["env_worker_num_cpus"].default:
        errors.append(
            "generator.env_workers / generator.env_worker_num_cpus run environments in Ray actors: set "
            "trainer.placement.backend=ray (or leave them out)"
        )
    return errors


def weight_sync_name(config: Config) -> str:
    """The weight-sync strategy a run uses: ``generator.weight_sync_backend``, or when it is null,
    ``in_process`` for an engine in the trainer's process and ``shared_memory`` for an engine process."""
    gen = config.generator
    if gen.weight_sync_backend is not None:
        return gen.weight_sync_backend
    return "shared_memory" if gen.engine_process else "in_process"


def _check_weight_sync(cfg: Config) -> list[str]:
    syncs = names.WEIGHT_SYNCS
    g, p = cfg.generator, cfg.trainer.placement
    errors: list[str] = []
    if g.engine_process and g.backend != "hf":
        errors.append(
            f"generator.engine_process=true runs the hf engine in a process of its own; generator.backend="
            f"{g.backend!r} runs where it runs already: set generator.engine_process=false"
        )
    name = weight_sync_name(cfg)
    if name not in syncs:
        return [*errors, syncs.unknown_message(name)]
    if g.weight_sync_backend is not None and (not cfg.trainer.sync_weights or g.backend == "remote"):
        errors.append(
            f"generator.weight_sync_backend={name!r} is set but no weights are synced (trainer.sync_weights=false "
            "or generator.backend=remote): leave it out"
        )
        return errors
    strategy = syncs.get(name)
    device = getattr(p, "device", p.backend)
    if getattr(strategy, "needs_cuda", False) and device != "cuda":
        errors.append(
            f"generator.weight_sync_backend={name!r} needs GPUs: set trainer.placement.backend=cuda"
        )
    if g.backend == "hf":
        in_process = getattr(strategy, "engine_in_process", False)
        if g.engine_process and in_process:
            errors.append(
                f"generator.weight_sync_backend={name!r} needs the engine in the trainer's process, but "
                "generator.engine_process=true: use shared_memory or gloo (or nccl / cuda_ipc on GPUs)"
            )
        if not g.engine_process and not in_process:
            errors.append(
                f"generator.weight_sync_backend={name!r} sends weights to an engine in its own process: set "
                "generator.engine_process=true, or use in_process"
            )
    if name == "nccl":
        errors += _check_nccl_layout(cfg)
    if g.backend == "vllm" and name in ("shared_memory", "gloo"):
        errors.append(
            f"generator.weight_sync_backend={name!r} serves an hf engine process; the vllm engine takes "
            "in_process (its own update path), nccl or cuda_ipc"
        )
    return errors


def _check_nccl_layout(cfg: Config) -> list[str]:
    """NCCL refuses two ranks of one group on one GPU: the process that broadcasts the weights must not sit
    on a GPU of the engine. In every layout the trainer builds it does: the trainer's process broadcasts
    from its current GPU, cuda:0, which is the engine's first GPU on one machine (vllm in the trainer's
    process, or the hf engine process on "cuda"); under Ray the broadcast starts in the engine actor, on
    the engine's own first GPU."""
    p = cfg.trainer.placement
    if p.device != "cuda":
        return []  # refused already: the strategy needs GPUs
    fix = "use generator.weight_sync_backend=cuda_ipc (the engine maps the trainer's GPU memory)" + (
        " or in_process (vLLM's own update path)" if cfg.generator.backend == "vllm" else ""
    )
    if p.backend == "cuda":
        where = (
            "with trainer.placement.backend=cuda the engine runs on this machine's first GPUs, and the trainer "
            "broadcasts from cuda:0, the engine's first GPU"
        )
    elif p.colocate_all:
        where = (
            "with trainer.placement.colocate_all=true the engine shares bundle 0's GPU with the policy's "
            "rank 0, and the broadcast starts in the engine actor, on the engine's own first GPU"
        )
    else:
        where = (
            "under trainer.placement.backend=ray the broadcast starts in the engine actor, on the engine's "
            "own first GPU"
        )
    return [
        f"generator.weight_sync_backend='nccl' would put two ranks of one NCCL group on one GPU, which NCCL "
        f"refuses: {where}; {fix}"
    ]


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


def _check_registered(name: str, registry: Any) -> list[str]:
    """A configured name is a built-in or one that user code registered (a did-you-mean otherwise)."""
    return [] if name in registry else [registry.unknown_message(name)]


def _changed_keys(section: Any) -> list[str]:
    default = type(section)().model_dump()
    return [key for key, value in section.model_dump().items() if value != default[key]]
