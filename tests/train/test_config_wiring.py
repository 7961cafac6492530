"""Every key of the configuration has a reader.

For each leaf key of the schema, the parts of a run are built from a config with the key at its base value
and from one with the key changed to another valid value, the way the trainer builds them (its own
``plan_workers``, ``build_worker``, ``engine_class(...).from_config``, ``MultiTurnGenerator.from_config``,
``Datasets.from_config``, ``LoopPlan.from_config``, ``Tracker.from_config``, ``resume_path``,
``rollout_sampling``), and what each part was given or holds is compared: a key whose change reaches no part
has no reader and fails. Workers are real (a tiny random Llama, two real optimizer steps on a fixed batch);
the vllm engine, which needs a GPU, is checked through the arguments it would pass to vLLM; a key that needs
GPUs or several processes to act is checked through the arguments its worker would be built with.

Keys marked :class:`~skyrl_train.config.NotImplementedYet` are proved the other way: another value is
refused at load time, saying it is not implemented.
"""

from __future__ import annotations

import dataclasses
import json
import types
from typing import Any, Literal, get_args, get_origin

import pytest

torch = pytest.importorskip("torch")

from pydantic import BaseModel  # noqa: E402

from skyrl_train.config import Config, ConfigError, NotImplementedYet, iter_keys, iter_part_keys, load_config  # noqa: E402
from skyrl_train.data import Datasets  # noqa: E402
from skyrl_train.evaluation.stages import StageEvaluator  # noqa: E402
from skyrl_train.inference.base import engine_class  # noqa: E402
from skyrl_train.inference.scripted import ScriptedEngine  # noqa: E402
from skyrl_train.loop.async_training import AsyncPlan  # noqa: E402
from skyrl_train.loop.dynamic_sampling import DynamicSampler  # noqa: E402
from skyrl_train.loop.trainer import (  # noqa: E402
    LoopPlan,
    build_worker,
    engine_shares_policy,
    eval_sampling,
    plan_workers,
    resume_path,
    rollout_sampling,
)
from skyrl_train.rollout import AGENTS, MultiTurnGenerator, Trajectory  # noqa: E402
from skyrl_train.rollout.dispatch import DISPATCHERS, AsyncBatchDispatcher  # noqa: E402
from skyrl_train.tracking import Tracker  # noqa: E402

from .tiny_models import tiny_llama  # noqa: E402

# Settings a key needs around it to act at all (clip_ratio_c acts in the dual-clip loss only...).
GAE = [
    "trainer.algorithm.advantage_estimator=gae",
    "trainer.critic.model.path={other}",
    "trainer.critic.optimizer_config.lr=1e-3",
]
KL = ["trainer.algorithm.use_kl_loss=true"]
CUDA2 = ["trainer.placement.backend=cuda", "trainer.placement.policy_num_gpus_per_node=2"]
VLLM = ["generator.backend=vllm", *CUDA2]
CONTEXT: dict[str, list[str]] = {
    "trainer.placement.ref_num_gpus_per_node": KL,
    "trainer.placement.critic_num_gpus_per_node": GAE,
    "trainer.policy.fsdp_config.cpu_offload": CUDA2,
    "trainer.policy.fsdp_config.reshard_after_forward": ["trainer.placement.policy_num_gpus_per_node=2"],
    "trainer.ref.model.path": KL,
    "trainer.ref.fsdp_config.cpu_offload": [
        *KL,
        "trainer.placement.backend=cuda",
        "trainer.placement.ref_num_gpus_per_node=2",
    ],
    "trainer.ref.fsdp_config.reshard_after_forward": [*KL, "trainer.placement.ref_num_gpus_per_node=2"],
    "trainer.critic.model.path": GAE,
    "trainer.critic.fsdp_config.cpu_offload": [
        *GAE,
        "trainer.placement.backend=cuda",
        "trainer.placement.critic_num_gpus_per_node=2",
    ],
    "trainer.critic.fsdp_config.reshard_after_forward": [
        *GAE,
        "trainer.placement.critic_num_gpus_per_node=2",
    ],
    "trainer.algorithm.clip_ratio_c": ["trainer.algorithm.policy_loss_type=dual_clip"],
    "trainer.algorithm.max_seq_len": ["trainer.algorithm.loss_reduction=seq_mean_token_sum_norm"],
    "trainer.algorithm.gamma": [
        "trainer.algorithm.advantage_estimator=reinforce++",
        "generator.n_samples_per_prompt=1",
    ],
    "trainer.algorithm.lambd": GAE,
    "trainer.algorithm.value_clip": GAE,
    "trainer.algorithm.kl_loss_coef": KL,
    "trainer.algorithm.init_kl_coef": ["trainer.algorithm.use_kl_in_reward=true"],
    "trainer.algorithm.entropy_loss_coef": ["trainer.algorithm.use_entropy_loss=true"],
    "trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high": [
        "trainer.algorithm.off_policy_correction.method=tis"
    ],
    "trainer.algorithm.dynamic_sampling.max_sample_batches": [
        "trainer.algorithm.dynamic_sampling.type=filter"
    ],
    "trainer.algorithm.dynamic_sampling.min_replace_ratio": [
        "trainer.algorithm.dynamic_sampling.type=replace"
    ],
    "trainer.fully_async.max_staleness_steps": ["trainer.mode=async"],
    "trainer.fully_async.num_parallel_generation_workers": ["trainer.mode=async"],
    "trainer.fully_async.ordered": ["trainer.mode=async"],
    "trainer.bf16": ["trainer.placement.backend=cuda"],
    "trainer.resume_path": ["trainer.resume_mode=from_path", "trainer.resume_path=/checkpoints/a"],
    "generator.backend": [
        "generator.remote_inference_engine_urls=[127.0.0.1:9]",
        "trainer.sync_weights=false",
    ],
    "generator.remote_inference_engine_urls": [
        "generator.backend=remote",
        "generator.remote_inference_engine_urls=[127.0.0.1:9]",
        "trainer.sync_weights=false",
    ],
    "generator.inference_engine_tensor_parallel_size": VLLM,
    "generator.gpu_memory_utilization": VLLM,
    "generator.enforce_eager": VLLM,
    "generator.eval_n_samples_per_prompt": ["generator.eval_sampling_params.temperature=0.7"],
    # an engine process (its strategy is null: shared_memory, or gloo when changed)
    "generator.weight_sync_backend": ["generator.engine_process=true"],
}
for _key in ("lr", "adam_betas", "weight_decay", "max_grad_norm", "num_warmup_steps", "scheduler"):
    CONTEXT[f"trainer.critic.optimizer_config.{_key}"] = GAE
# The Ray layout's keys act with backend ray (refused otherwise); they reach its plan (ray_plan).
RAY = ["trainer.placement.backend=ray"]
for _key in (
    "ray_device",
    "ray_address",
    "ray_num_cpus_per_worker",
    "ray_start_timeout_s",
    "ray_call_timeout_s",
    "colocate_all",
    "policy_num_nodes",
):
    CONTEXT[f"trainer.placement.{_key}"] = RAY
CONTEXT["trainer.placement.colocate_policy_ref"] = [*RAY, *KL, "trainer.placement.colocate_all=false"]
CONTEXT["trainer.placement.ref_num_nodes"] = [*RAY, *KL]
CONTEXT["trainer.placement.critic_num_nodes"] = [*RAY, *GAE]
CONTEXT["generator.env_workers"] = RAY
CONTEXT["generator.env_worker_num_cpus"] = [*RAY, "generator.env_workers=1"]
# The policy's LoRA settings act when it has adapters.
for _key in ("alpha", "train_attn", "train_mlp", "train_unembed", "full_warmup"):
    CONTEXT[f"trainer.policy.lora.{_key}"] = ["trainer.policy.lora.rank=2"]
# A part's own settings (iter_part_keys) act when that part is chosen: each is set with its part's type.
_REACT_KEYS = (
    "tools",
    "max_turns",
    "max_repeats",
    "max_tool_timeouts",
    "tool_timeout_s",
    "max_context",
    "max_calls_per_turn",
    "max_tool_output_chars",
)

# Where the dispatcher's and the agent's keys must arrive: the dispatcher built from the config, and the
# settings of a trajectory of the agent built from it.
REACHES: dict[str, str] = {
    **{
        f"generator.stage_timeouts.{stage}": f"generator.dispatcher.timeouts.{stage}"
        for stage in ("initialize", "generate", "evaluate", "release")
    },  # fmt: skip
    "generator.dispatcher.num_workers": "generator.dispatcher.max_concurrency",
    "generator.dispatcher.reuse_envs": "generator.settings.reuse_envs",
    "generator.dispatcher.initialize_concurrency": "generator.dispatcher.initialize_concurrency",
    "generator.dispatcher.evaluate_concurrency": "generator.dispatcher.evaluate_concurrency",
    "generator.dispatcher.max_ahead": "generator.dispatcher.max_ahead",
    "generator.dispatcher.max_behind": "generator.dispatcher._max_behind",
    "generator.dispatcher.headroom": "generator.dispatcher.headroom",
    **{f"generator.agent.{key}": f"generator.react_trajectory.{key}" for key in _REACT_KEYS},
}

# Changed values where "the next valid value" is not obvious from the type.
CHANGED: dict[str, Any] = {
    "generator.weight_sync_check_tolerance": 0.01,
    "trainer.algorithm.dynamic_sampling.type": "filter",
    "data.train_data": ["{data}/train_b.jsonl"],
    "data.val_data": ["{data}/val_b.jsonl"],
    "data.build_command": "make other-data",
    "data.eval_sets": {"heldout": {"paths": ["{data}/val_b.jsonl"], "stages": ["before", "after_rl"]}},
    "trainer.placement.policy_num_gpus_per_node": 2,
    "trainer.placement.ray_address": "auto",
    "trainer.placement.policy_num_nodes": 2,
    "trainer.placement.ref_num_nodes": 2,
    "trainer.placement.critic_num_nodes": 2,
    "trainer.placement.ref_num_gpus_per_node": 2,
    "trainer.placement.critic_num_gpus_per_node": 2,
    "trainer.policy.model.path": "{other}",
    "trainer.policy.optimizer_config.lr": 5e-4,
    "trainer.critic.optimizer_config.lr": 5e-4,
    "trainer.ref.model.path": "{other}",
    "trainer.critic.model.path": "{tiny}",
    "trainer.policy.optimizer_config.adam_betas": [0.5, 0.9],
    "trainer.critic.optimizer_config.adam_betas": [0.5, 0.9],
    "trainer.policy.optimizer_config.max_grad_norm": 1e-4,  # below the tiny model's gradient norm: clips
    "trainer.critic.optimizer_config.max_grad_norm": 1e-4,
    "trainer.policy.optimizer_config.num_warmup_steps": 3,
    "trainer.critic.optimizer_config.num_warmup_steps": 3,
    "trainer.algorithm.advantage_estimator": "rloo",
    "trainer.algorithm.policy_loss_type": "dual_clip",
    "trainer.algorithm.eps_clip_low": 0.6,
    "trainer.algorithm.eps_clip_high": 0.9,
    "trainer.algorithm.clip_ratio_c": 6.0,
    "trainer.algorithm.max_seq_len": 64,
    "trainer.algorithm.gamma": 0.5,
    "trainer.algorithm.lambd": 0.5,
    "trainer.algorithm.value_clip": 0.9,
    "trainer.algorithm.kl_loss_coef": 0.5,
    "trainer.algorithm.init_kl_coef": 0.5,
    "trainer.algorithm.entropy_loss_coef": 0.5,
    "trainer.fully_async.num_parallel_generation_workers": 3,
    "trainer.sft_warmup.episode_fraction": 0.9,
    "trainer.sft_warmup.loss_reduction": "seq_mean_token_mean",
    "trainer.eval_breakdown_column": "extra_info.split",
    "trainer.train_batch_size": 4,
    "trainer.policy_mini_batch_size": 1,
    "trainer.critic_mini_batch_size": 1,
    "trainer.max_prompt_length": 40,  # filters the long row out
    "trainer.max_steps": 2,
    "trainer.max_wall_time_s": 5.0,
    "trainer.eval_interval": 2,
    "trainer.ckpt_interval": 3,
    "trainer.max_ckpts_to_keep": 2,
    "trainer.resume_mode": "none",
    "trainer.resume_path": "/checkpoints/b",
    "trainer.run_dir": "{data}/other_run",
    "trainer.logger": ["console"],
    "generator.backend": "remote",
    "generator.remote_inference_engine_urls": ["127.0.0.1:9", "127.0.0.1:10"],
    "generator.model_dtype": "bfloat16",
    "generator.weight_sync_backend": "gloo",
    "generator.inference_engine_tensor_parallel_size": 2,
    "generator.n_samples_per_prompt": 2,
    "generator.eval_n_samples_per_prompt": 2,
    "generator.max_tokens_per_trajectory": 2048,
    "generator.sampling_params.temperature": 0.5,
    "generator.sampling_params.top_k": 20,
    "generator.sampling_params.min_p": 0.1,
    "generator.sampling_params.stop": ["</x>"],
    "generator.sampling_params.stop_token_ids": [7],
    "generator.sampling_params.seed": 7,
    "generator.eval_sampling_params.temperature": 0.5,
    "generator.eval_sampling_params.top_k": 20,
    "generator.eval_sampling_params.min_p": 0.1,
    "generator.eval_sampling_params.stop": ["</x>"],
    "generator.eval_sampling_params.stop_token_ids": [7],
    "generator.eval_sampling_params.seed": 7,
    "generator.dispatcher.type": "wiring_test_dispatcher",
    "generator.stage_timeouts.initialize": 50.0,
    "generator.stage_timeouts.generate": 50.0,
    "generator.stage_timeouts.evaluate": 50.0,
    "generator.stage_timeouts.release": 60.0,
    "generator.dispatcher.num_workers": 3,
    "generator.dispatcher.initialize_concurrency": 3,
    "generator.dispatcher.evaluate_concurrency": 3,
    "generator.dispatcher.max_ahead": 5,
    "generator.dispatcher.max_behind": 2,
    "generator.agent.tools": ["bash", "finish"],
    "generator.agent.max_turns": 5,
    "generator.agent.type": "wiring_test_agent",
    "trainer.strategy": "megatron",
    "trainer.run_name": "other_run",
    "trainer.project_name": "other_project",
    "environment.env_class": "other_env",
    "environment.skyrl_gym": {"text2sql": {"db_path": "/dbs"}},
}


def _changed_value(key: str, field: Any, current: Any) -> Any:
    if key in CHANGED:
        return CHANGED[key]
    annotation = field.annotation
    if annotation is bool:
        return not current
    if get_origin(annotation) is Literal:
        return next(option for option in get_args(annotation) if option != current)
    if annotation is int:
        return current + 1
    if annotation is float:
        return current / 2
    raise AssertionError(f"{key}: say in CHANGED which other value to try (type {annotation})")


@pytest.fixture(scope="module")
def world(tmp_path_factory, tokenizer):
    """Two tiny random Llamas (saved with the embedded tokenizer), data files, a run folder with a
    checkpoint."""
    root = tmp_path_factory.mktemp("wiring")
    paths = {}
    for name, seed in (("tiny", 0), ("other", 1)):
        path = root / name
        tokenizer.save_pretrained(path)
        torch.manual_seed(seed)
        tiny_llama(
            # nothing is generated (batches use ids below 100): one layer of width 16 is enough
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=4096,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        ).save_pretrained(path)
        paths[name] = str(path)
    data = root / "data"
    data.mkdir()
    for name, count in (("train", 8), ("train_b", 6), ("val", 3), ("val_b", 2)):
        with (data / f"{name}.jsonl").open("w") as handle:
            for i in range(count):
                text = f"{name} question {i}" + (" with many more words" * 10 if i == 0 else "")
                handle.write(
                    json.dumps({"prompt": [{"role": "user", "content": text}], "env_class": "x"}) + "\n"
                )
    run = root / "run"
    (run / "checkpoints" / "step_3").mkdir(parents=True)
    (run / "checkpoints" / "step_3" / "trainer_state.pt").write_bytes(b"")
    return {"tokenizer": tokenizer, "data": str(data), "run": str(run), **paths}


@pytest.fixture(scope="module")
def custom_dispatcher():
    """A second dispatcher, so that generator.dispatcher has another valid value."""

    class WiringTestDispatcher(AsyncBatchDispatcher):
        """The async batch dispatcher under another name."""

    DISPATCHERS.register("wiring_test_dispatcher", WiringTestDispatcher)

    class WiringTestAgent(Trajectory):
        """The multi-turn agent under another name."""

    AGENTS.register("wiring_test_agent", WiringTestAgent)
    yield
    DISPATCHERS.unregister("wiring_test_dispatcher")
    AGENTS.unregister("wiring_test_agent")


def _fill(text: Any, world: dict[str, Any]) -> Any:
    if isinstance(text, str):
        return text.format(**{k: v for k, v in world.items() if isinstance(v, str)})
    if isinstance(text, list):
        return [_fill(t, world) for t in text]
    if isinstance(text, dict):
        return {k: _fill(v, world) for k, v in text.items()}
    return text


def _base(world: dict[str, Any]) -> list[str]:
    return [
        f"trainer.policy.model.path={world['tiny']}",
        f"data.train_data=[{world['data']}/train.jsonl]",
        f"data.val_data=[{world['data']}/val.jsonl]",
        f"trainer.run_dir={world['run']}",
        "trainer.train_batch_size=2",
        "trainer.policy_mini_batch_size=2",
        "trainer.critic_mini_batch_size=2",
        "trainer.policy.optimizer_config.lr=1e-3",  # steps large enough to show every optimizer setting
    ]


def _plain(value: Any) -> Any:
    """A comparable, printable form of what a part holds (tensors as rounded lists)."""
    if isinstance(value, torch.Tensor):
        return [float(v) for v in value.detach().double().flatten()]
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# ------------------------------------------------------------------------------------------ the parts


def _policy_batch(worker: Any, role: str) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, 100, (4, 7), generator=generator)
    response_mask = torch.ones(4, 4, dtype=torch.long)
    response_mask[3, 2:] = 0  # rows of different lengths: the reductions differ
    batch = {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "response_mask": response_mask,
    }
    current = torch.zeros(4, 4) if role == "critic" else worker.compute_log_probs(batch)
    # ratios of e^1.5, e^0.5, e^-0.5 and 1: outside both clip bounds and the dual clip's cap
    offsets = torch.tensor([[-1.5, -0.5, 0.5, 0.0]]).expand(4, 4)
    batch["old_log_probs"] = (current + offsets) * response_mask
    batch["ref_log_probs"] = (current + 0.3) * response_mask
    # the engine's log-probs: pi_old / mu of e^0.5, e^-0.5, e^1 and 1 (past both correction caps tried)
    behaviour_offsets = torch.tensor([[0.5, -0.5, 1.0, 0.0]]).expand(4, 4)
    batch["rollout_log_probs"] = (batch["old_log_probs"] - behaviour_offsets) * response_mask
    batch["advantages"] = torch.tensor([[1.0], [-1.0], [1.0], [-1.0]]).expand(4, 4) * response_mask
    return batch


def _observe_worker(role: str, worker: Any) -> dict[str, Any]:
    batch = _policy_batch(worker, role)
    seen: dict[str, Any] = {}
    if role == "policy":
        seen["steps"] = [worker.train_step(batch) for _ in range(2)]
    elif role == "critic":
        # the fresh head's values are near 0: the last two rows' old values lie across 0 from their returns,
        # so the clipped error is the larger one and depends on the clip
        returns = torch.tensor([[1.0], [-1.0], [-1.0], [1.0]]).expand(4, 4)
        old_values = torch.tensor([[0.0], [0.0], [1.0], [-1.0]]).expand(4, 4)
        batch = {**batch, "values": old_values, "returns": returns}
        seen["steps"] = [worker.train_step(batch) for _ in range(2)]
    else:
        seen["log_probs"] = worker.compute_log_probs(batch)
    # a weighted sum: a change of any parameter shows (a plain sum could cancel out)
    seen["weights"] = sum(
        float((p.detach().double().flatten() * torch.linspace(1, 2, p.numel(), dtype=torch.float64)).sum())
        for p in worker.model.parameters()
    )
    return seen


def _advantages(config: Config) -> Any:
    from skyrl_train.training.algorithms import compute_batch_advantages

    batch = types.SimpleNamespace(
        token_level_rewards=torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.5, 0.5], [0.0, 2.0]]),
        response_mask=torch.ones(4, 2, dtype=torch.long),
        group_ids=torch.tensor([0, 0, 1, 1]),
        valid=torch.ones(4, dtype=torch.bool),
        values=torch.tensor([[0.1, 0.2], [0.3, 0.1], [0.0, 0.5], [0.2, 0.2]]),
        old_log_probs=torch.full((4, 2), -1.0),
        rollout_log_probs=None,
        ref_log_probs=torch.tensor([[-1.5, -1.0], [-0.5, -1.0], [-1.0, -2.0], [-1.0, -1.0]]),
    )
    metrics = compute_batch_advantages(batch, config.trainer.algorithm)
    return {
        "advantages": batch.advantages,
        "returns": batch.returns,
        "rewards": batch.token_level_rewards,
        **metrics,
    }


def observe(config: Config, world: dict[str, Any]) -> dict[str, Any]:
    """What every part of a run receives or holds when the trainer builds it from ``config``."""
    tokenizer = world["tokenizer"]
    seen: dict[str, Any] = {}

    data = Datasets.from_config(config.data, config.trainer, tokenizer)
    seen["data"] = {
        "train": [row["prompt"][0]["content"] for row in data.train],
        "val": [row["prompt"][0]["content"] for row in data.val_rows],
        "batches": [[row["prompt"][0]["content"] for row in batch] for batch in data.iterator],
    }
    from skyrl_train.data import check_data_files

    try:  # what a missing file's error tells the user (data.build_command)
        check_data_files(config.data.model_copy(update={"train_data": ["/nonexistent/rows.jsonl"]}))
    except FileNotFoundError as exc:
        seen["data"]["missing_file_error"] = str(exc)
    evaluator = StageEvaluator.from_config(config, val_rows=data.val_rows)  # every evaluation of the run
    seen["evaluations"] = {
        "sets": {
            s.name: {"stages": list(s.stages), "rows": [row["prompt"][0]["content"] for row in s.rows]}
            for s in evaluator.sets
        },
        "n_samples": evaluator.n_samples,
        "batch_size": evaluator.batch_size,
        "breakdown_column": evaluator.breakdown_column,
    }
    loop = LoopPlan.from_config(config, data.iterator.total_batches)
    seen["loop"] = {
        **dataclasses.asdict(loop),
        "evaluates": [loop.evaluates_after(step) for step in range(1, 13)],
        "checkpoints": [loop.checkpoints_after(step) for step in range(1, 13)],
        "out_of_time": [loop.out_of_time(s) for s in (1.0, 10.0, 1e9)],
    }
    seen["resume"] = str(resume_path(config))
    seen["sampling"] = [rollout_sampling(config, 0), rollout_sampling(config, 1), eval_sampling(config)]
    seen["advantages"] = _advantages(config)
    seen["async"] = dataclasses.asdict(AsyncPlan.from_config(config))  # what the async loop is sized by
    from skyrl_train.inference.weight_sync.gate import GateSettings

    seen["weight_sync_gate"] = dataclasses.asdict(GateSettings.from_config(config))  # after every push
    from skyrl_train.record import RecordSettings

    seen["record"] = dataclasses.asdict(RecordSettings.from_config(config))  # what each step records
    sampler = DynamicSampler.from_config(config)  # what the trainer's step filters its groups with
    seen["dynamic_sampling"] = dataclasses.asdict(sampler) if sampler is not None else None
    if config.trainer.placement.backend == "ray":
        from skyrl_train.ray_layout import ray_plan

        seen["ray"] = ray_plan(config).as_dict()  # what the Ray layout is built from (no cluster needed)

    policy_model = None
    for role, plan in plan_workers(config).items():
        plain_kwargs = {k: v for k, v in plan.kwargs.items() if not isinstance(v, BaseModel)}
        seen[role] = {
            "class": plan.cls.__name__,
            "world": plan.world_size,
            "model": plan.model_path,
            **plain_kwargs,
        }
        if plan.kwargs["device"] != "cpu":
            continue  # needs GPUs: what it would be built with is all there is to see here
        one = dataclasses.replace(plan, world_size=1)  # several workers need processes: build one in here
        worker = build_worker(one, total_steps=4) if role != "ref" else build_worker(one)
        if role == "policy":
            policy_model = worker.model
        seen[role]["built"] = _observe_worker(role, worker)

    gen = config.generator
    shares = engine_shares_policy(config)
    seen["engine"] = {"backend": gen.backend, "shares_policy": shares}
    if gen.backend == "vllm":
        from skyrl_train.inference.vllm import VLLMEngine

        seen["engine"]["args"] = VLLMEngine.engine_args(gen, seed=config.trainer.seed)
    else:
        engine = engine_class(gen.backend).from_config(
            gen,
            model_path=config.trainer.policy.model.path,
            tokenizer=tokenizer,
            model=policy_model if shares else None,
            seed=config.trainer.seed,
        )
        try:
            seen["engine"]["held"] = {
                k: v for k, v in vars(engine).items() if isinstance(v, (int, float, str, list, type(None)))
            }
            if gen.backend == "hf" and hasattr(engine, "info"):  # in its own process: what it reported
                seen["engine"]["dtype"] = engine.info["dtype"]
                seen["engine"]["options"] = {
                    k: v for k, v in engine.options.items() if isinstance(v, (int, float, str, type(None)))
                }
            elif gen.backend == "hf":
                seen["engine"]["dtype"] = str(next(engine.model.parameters()).dtype)
                seen["engine"]["prefix_cache_tokens"] = engine._prefix.max_tokens
                seen["engine"]["seed"] = engine._rng.initial_seed()
        finally:
            engine.close()

    generator = MultiTurnGenerator.from_config(ScriptedEngine(tokenizer, lambda text: ""), config)
    seen["generator"] = {
        "settings": {
            k: v for k, v in vars(generator).items() if isinstance(v, (int, float, str, dict, type(None)))
        },
        "dispatcher": _dispatcher_settings(generator.dispatcher),
        "agent": generator.trajectory_class.__name__,
    }
    job = generator.trajectory({"prompt": "q", "env_class": "x"}, config.generator.sampling_params)
    if hasattr(job, "react_config"):
        seen["generator"]["react_trajectory"] = dataclasses.asdict(job.react_config)

    tracker = Tracker.from_config(config)
    try:
        seen["tracker"] = {
            "backends": tracker.backends,
            "run_dir": str(tracker.run_dir),
            "project": tracker.project_name,
            "run": tracker.run_name,
        }
    finally:
        tracker.close()
    return _plain(seen)


def _dispatcher_settings(dispatcher: Any) -> dict[str, Any]:
    """The class of the dispatcher, its sizes and caps, and its per-stage deadlines."""
    settings: dict[str, Any] = {
        k: v for k, v in vars(dispatcher).items() if isinstance(v, (int, float, str, type(None)))
    }
    settings["class"] = type(dispatcher).__name__
    settings["timeouts"] = dataclasses.asdict(dispatcher.timeouts)
    return settings


def _difference(a: Any, b: Any, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            out += _difference(a.get(key), b.get(key), f"{where}.{key}" if where else str(key))
        return out
    return [] if a == b else [where]


# ------------------------------------------------------------------------------------------ the test


def _load(overrides: list[str]) -> Config:
    return load_config(None, overrides)


def _as_override(key: str, value: Any) -> str:
    return f"{key}={json.dumps(value)}"


def test_every_key_of_the_schema_has_a_reader(world, custom_dispatcher):
    cache: dict[str, dict[str, Any]] = {}

    def seen(config: Config) -> dict[str, Any]:
        text = json.dumps(config.to_dict(), sort_keys=True)
        if text not in cache:
            cache[text] = observe(config, world)
        return cache[text]

    base = _base(world)
    proved: dict[str, str] = {}
    unread: list[str] = []
    keys = [(key, field, []) for key, field in iter_keys()]
    keys += [(key, field, [f"{key.rpartition('.')[0]}.type={part}"]) for key, field, part in iter_part_keys()]
    for key, field, part in keys:
        context = _fill([*CONTEXT.get(key, []), *part], world)
        before = _load([*base, *context])
        current = before
        for part in key.split("."):
            current = getattr(current, part)
        value = _fill(_changed_value(key, field, current), world)
        marker = next((m for m in field.metadata if isinstance(m, NotImplementedYet)), None)
        if marker is not None:
            assert value not in marker.allowed, key
            with pytest.raises(ConfigError, match=rf"{key}=.* is not implemented yet"):
                _load([*base, *context, _as_override(key, value)])
            proved[key] = "refused: not implemented yet"
            continue
        after = _load([*base, *context, _as_override(key, value)])
        changed_value = after
        for part in key.split("."):
            changed_value = getattr(changed_value, part)
        assert changed_value != current, f"{key}: the override did not change the config"
        differences = _difference(seen(before), seen(after))
        if key in REACHES:
            assert REACHES[key] in differences, f"{key} did not reach {REACHES[key]} (changed: {differences})"
        if differences:
            proved[key] = ", ".join(differences[:3])
        else:
            unread.append(key)
    assert not unread, f"keys whose change reaches no part (no reader): {unread}"
    assert len(proved) == len(keys) == len({key for key, _, _ in keys})


def test_the_observation_is_deterministic(world):
    config = _load(_base(world))
    assert observe(config, world) == observe(config, world)
