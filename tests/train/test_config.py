"""Config: recipes, dotted overrides, type checks, unknown keys, keys not implemented yet, cross-field rules,
docstrings, saving and reloading."""

from __future__ import annotations

import importlib.resources
import subprocess
import sys

import pytest
import yaml

from skyrl_train.config import (
    Config,
    ConfigError,
    NotImplementedYet,
    SamplingParams,
    SamplingParamsConfig,
    Section,
    describe_config,
    iter_keys,
    iter_part_keys,
    list_recipes,
    load_config,
)


def problems(*overrides: str, recipe: str | None = None) -> str:
    """The text of the ConfigError that loading with these overrides raises."""
    with pytest.raises(ConfigError) as info:
        load_config(recipe, list(overrides))
    return str(info.value)


# ------------------------------------------------------------------------------------------ recipes


def test_defaults_are_valid_and_derive_ref_and_run_dir():
    cfg = load_config()
    assert cfg == Config.from_dict({}) == Config()
    assert cfg.trainer.ref.model.path == cfg.trainer.policy.model.path == "embedded:smollm2-135m"
    assert cfg.trainer.run_dir == "runs/run"
    cfg = load_config(None, ["trainer.policy.model.path=Qwen/Qwen2.5-0.5B", "trainer.run_name=exp1"])
    assert cfg.trainer.ref.model.path == "Qwen/Qwen2.5-0.5B"
    assert cfg.trainer.run_dir == "runs/exp1"


def test_shipped_recipes_load_and_validate():
    assert {"sql_cpu", "sql_qwen7b_8gpu"} <= set(list_recipes())
    cpu = load_config("sql_cpu")
    assert cpu.generator.backend == "hf" and cpu.trainer.placement.backend == "cpu"
    assert cpu.trainer.algorithm.advantage_estimator == "grpo"
    assert cpu.trainer.policy.model.path == "embedded:smollm2-135m"
    assert cpu.environment.env_class == "text2sql"

    gpu = load_config("sql_qwen7b_8gpu")
    assert gpu.trainer.policy.model.path == "Qwen/Qwen2.5-Coder-7B-Instruct"
    assert gpu.policy_world_size == 8 and gpu.trainer.placement.backend == "cuda"
    assert gpu.generator.backend == "vllm" and gpu.trainer.strategy == "fsdp2"
    assert gpu.generator.inference_engine_tensor_parallel_size == 4
    assert gpu.trainer.algorithm.advantage_estimator == "grpo"
    assert gpu.trainer.policy.optimizer_config.lr == 1e-6
    assert gpu.trainer.train_batch_size == 256 and gpu.generator.n_samples_per_prompt == 5
    assert gpu.generator.max_turns == 6
    sp = gpu.generator.sampling_params
    assert (sp.temperature, sp.top_p, sp.stop) == (0.6, 0.95, ["</sql>", "</solution>"])


def test_recipes_ship_as_package_data():
    files = importlib.resources.files("skyrl_train") / "recipes"
    assert (files / "sql_cpu.yaml").is_file() and (files / "sql_qwen7b_8gpu.yaml").is_file()


def test_recipe_by_path_and_unknown_recipe(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"trainer": {"epochs": 3}}))
    assert load_config(path).trainer.epochs == 3
    assert load_config(str(path)).trainer.epochs == 3
    assert "did you mean 'sql_cpu'" in problems(recipe="sql_cp")
    assert "does not exist" in problems(recipe=str(tmp_path / "nope.yaml"))
    (tmp_path / "list.yaml").write_text("- 1\n")
    assert "must be a mapping" in problems(recipe=str(tmp_path / "list.yaml"))


# ------------------------------------------------------------------------------------------ overrides


def test_overrides_are_typed_from_yaml():
    cfg = load_config(
        "sql_cpu",
        [
            "trainer.epochs=2",
            "generator.n_samples_per_prompt=8",
            "trainer.policy.optimizer_config.lr=1e-5",  # PyYAML reads this as a string: still a float
            "trainer.bf16=false",
            "trainer.run_name=2024",  # a string field keeps the text
            "trainer.logger=wandb",  # one item for a list
            "generator.sampling_params.stop=[</answer>]",
            "trainer.max_steps=null",
            "+environment.skyrl_gym.text2sql.db_path=/data/dbs",  # Hydra's + and a free-form section
            "data.val_data=one.jsonl",
        ],
    )
    assert cfg.trainer.epochs == 2 and cfg.generator.n_samples_per_prompt == 8
    assert cfg.trainer.policy.optimizer_config.lr == 1e-5
    assert cfg.trainer.run_name == "2024"
    assert cfg.trainer.logger == ["wandb"]
    assert cfg.generator.sampling_params.stop == ["</answer>"]
    assert cfg.trainer.max_steps is None
    assert cfg.environment.skyrl_gym["text2sql"]["db_path"] == "/data/dbs"
    assert cfg.data.val_data == ["one.jsonl"]


def test_unknown_keys_get_a_did_you_mean_with_the_full_key():
    assert "unknown key 'trainer.epoch'; did you mean 'trainer.epochs'" in problems("trainer.epoch=2")
    # A key from the wrong section points to where it lives.
    assert "did you mean 'trainer.max_prompt_length'" in problems("data.max_prompt_length=100")
    text = problems("generator.sampling_params.temprature=0.5")
    assert "did you mean 'generator.sampling_params.temperature'" in text
    assert "must look like dotted.key=value" in problems("trainer.epochs")
    # Unknown keys inside a recipe's sections too, not only in overrides.
    with pytest.raises(ConfigError, match=r"unknown key 'trainer.algorithm.kl_coeff'"):
        Config.from_dict({"trainer": {"algorithm": {"kl_coeff": 1}}})
    with pytest.raises(ConfigError, match=r"unknown key 'generator.sampling_params.top_q'; did you mean"):
        Config.from_dict({"generator": {"sampling_params": {"top_q": 1}}})


@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer.epochs=two", "trainer.epochs: Input should be a valid integer, got 'two' (str)"),
        ("trainer.epochs=1.5", "trainer.epochs: Input should be a valid integer, got 1.5 (float)"),
        ("trainer.bf16=1", "trainer.bf16: Input should be a valid boolean, got 1 (int)"),
        (
            "trainer.resume_mode=always",
            "trainer.resume_mode: Input should be 'none', 'latest' or 'from_path', got 'always'",
        ),
        ("trainer.logger=[console, slack]", "trainer.logger.1: Input should be 'console', 'jsonl'"),
        (
            "trainer.policy.optimizer_config.lr=fast",
            "trainer.policy.optimizer_config.lr: Input should be a valid",
        ),
        ("trainer.placement=gpu", "trainer.placement must be a mapping, got 'gpu' (str)"),
        ("environment.skyrl_gym=3", "environment.skyrl_gym: Input should be a valid dictionary"),
        (
            "generator.sampling_params.stop=['']",
            "generator.sampling_params.stop: stop strings must not be empty",
        ),
    ],
)
def test_wrong_types_name_the_field(override, message):
    assert message in problems(override)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["trainer.epochs=x", "trainer.bf16=2", "trainer.nope=1"])
    assert len(info.value.errors) == 3
    with pytest.raises(ConfigError) as info:
        load_config(None, ["generator.backend=remote", "trainer.bf16=true"])
    assert len(info.value.errors) == 3  # two remote rules and bf16 on cpu


# ------------------------------------------------------------------------------------------ not implemented


@pytest.mark.parametrize(
    "override, message",
    [
        # placement groups of their own and several machines are Ray's: refused on the local backends
        ("trainer.placement.colocate_all=false", "set trainer.placement.backend=ray"),
        (
            "trainer.placement.policy_num_nodes=2",
            "policy_num_nodes=2 spans machines: set trainer.placement.backend=ray",
        ),
        (
            "trainer.placement.ref_num_nodes=2",
            "ref_num_nodes=2 spans machines: set trainer.placement.backend=ray",
        ),
        (
            "trainer.placement.critic_num_nodes=2",
            "critic_num_nodes=2 spans machines: set trainer.placement.backend=ray",
        ),
        ("generator.num_inference_engines=2", "generator.num_inference_engines=2 is not implemented yet"),
        ("trainer.strategy=megatron", "trainer.strategy='megatron' is not implemented yet"),
    ],
)
def test_settings_not_implemented_yet_are_refused_saying_so(override, message):
    assert message in problems(override)


def test_keys_not_implemented_are_marked_in_the_schema():
    marked = {
        key for key, field in iter_keys() if any(isinstance(m, NotImplementedYet) for m in field.metadata)
    }
    assert marked == {
        "trainer.strategy",
        "generator.num_inference_engines",
    }
    # Their implemented value loads.
    load_config(None, ["trainer.placement.colocate_all=true", "generator.num_inference_engines=1"])


# ------------------------------------------------------------------------------------------ rules


@pytest.mark.parametrize(
    "overrides, message",
    [
        # 1. registered algorithms and dispatchers
        (["trainer.algorithm.advantage_estimator=grop"], "did you mean 'grpo'"),
        (["trainer.algorithm.policy_loss_type=gspo2"], "unknown policy loss 'gspo2'"),
        (["generator.dispatcher=async_bach"], "unknown dispatcher 'async_bach' (generator.dispatcher)"),
        # 2. gae <-> critic
        (["trainer.algorithm.advantage_estimator=gae"], "needs a value model: set trainer.critic.model.path"),
        (["trainer.critic.model.path=m"], "trainer.critic.model.path is set but"),
        # 3. batch sizes divide
        (["trainer.policy_mini_batch_size=3"], "trainer.train_batch_size (8) must be a multiple of"),
        (
            ["trainer.placement.policy_num_gpus_per_node=3"],
            "must divide evenly over the 3 policy workers",
        ),
        (
            ["trainer.micro_train_batch_size_per_gpu=3"],
            "not a multiple of trainer.micro_train_batch_size_per_gpu",
        ),
        (
            ["trainer.algorithm.use_kl_loss=true", "trainer.placement.ref_num_gpus_per_node=3"],
            "must divide evenly over the 3 reference workers",
        ),
        # 4. groups need samples, samples need temperature
        (["generator.n_samples_per_prompt=1"], "generator.n_samples_per_prompt must be >= 2"),
        (["generator.sampling_params.temperature=0"], "generator.sampling_params.temperature=0 (greedy)"),
        (["generator.eval_n_samples_per_prompt=4"], "pass@k equal pass@1"),
        # 5. clip bounds
        (
            ["trainer.algorithm.eps_clip_low=1.5"],
            "trainer.algorithm.eps_clip_low: Input should be less than 1",
        ),
        (
            ["trainer.algorithm.eps_clip_high=0"],
            "trainer.algorithm.eps_clip_high: Input should be greater than 0",
        ),
        (
            ["trainer.algorithm.policy_loss_type=dual_clip", "trainer.algorithm.clip_ratio_c=1"],
            "needs trainer.algorithm.clip_ratio_c > 1",
        ),
        # 6. reductions the algorithm is defined with
        (
            ["trainer.algorithm.policy_loss_type=gspo"],
            "set trainer.algorithm.loss_reduction=seq_mean_token_mean",
        ),
        (
            [
                "trainer.algorithm.advantage_estimator=dr_grpo",
                "trainer.algorithm.loss_reduction=seq_mean_token_mean",
            ],
            "reintroduces",
        ),
        # 7. KL once
        (["trainer.algorithm.use_kl_loss=true", "trainer.algorithm.use_kl_in_reward=true"], "count twice"),
        # 8. devices
        (
            ["generator.backend=vllm", "generator.inference_engine_tensor_parallel_size=2"],
            "with generator.backend=vllm needs GPUs (vLLM's CPU build runs one worker here)",
        ),
        (
            ["generator.backend=vllm", "generator.weight_sync_backend=nccl"],
            "its CPU build takes weights through its worker RPC only",
        ),
        (["trainer.bf16=true"], "trainer.bf16=true needs trainer.placement.backend=cuda"),
        (
            [
                "generator.backend=vllm",
                "trainer.placement.backend=cuda",
                "generator.inference_engine_tensor_parallel_size=2",
            ],
            "generator.inference_engine_tensor_parallel_size (2) must be at most",
        ),
        (
            ["generator.inference_engine_tensor_parallel_size=2"],
            "needs generator.backend=vllm (the hf engine does not shard a model over GPUs)",
        ),
        # 9. remote
        (
            ["generator.backend=remote", "trainer.sync_weights=false"],
            "needs generator.remote_inference_engine_urls",
        ),
        (
            ["generator.backend=remote", "generator.remote_inference_engine_urls=[127.0.0.1:8001]"],
            "cannot receive the policy's weights",
        ),
        # 10. FSDP settings need a sharded model
        (
            ["trainer.policy.fsdp_config.cpu_offload=true"],
            "needs trainer.placement.backend=cuda and trainer.placement.policy_num_gpus_per_node > 1",
        ),
        (
            ["trainer.critic.fsdp_config.reshard_after_forward=false"],
            "trainer.critic.fsdp_config.reshard_after_forward=false acts on a sharded model",
        ),
        # 11. length budgets
        (
            ["trainer.max_prompt_length=4096"],
            "generator.max_input_length (2048) must be >= trainer.max_prompt_length",
        ),
        (
            ["generator.max_tokens_per_trajectory=10"],
            "must be >= generator.sampling_params.max_generate_length",
        ),
        # 12. resume
        (["trainer.resume_mode=from_path"], "trainer.resume_mode='from_path' needs trainer.resume_path"),
        # ranges
        (
            ["trainer.policy.optimizer_config.lr=0"],
            "trainer.policy.optimizer_config.lr: Input should be greater",
        ),
        (
            ["generator.sampling_params.top_p=0"],
            "generator.sampling_params.top_p: Input should be greater than 0",
        ),
        (["trainer.algorithm.gamma=1.5"], "trainer.algorithm.gamma: Input should be less than or equal to 1"),
        (["trainer.epochs=0"], "trainer.epochs: Input should be greater than or equal to 1"),
        (["trainer.policy.optimizer_config.adam_betas=[0.9]"], "adam_betas: must be two numbers in [0, 1)"),
        (["trainer.max_ckpts_to_keep=0"], "trainer.max_ckpts_to_keep: must be -1 (keep all) or >= 1"),
        (["generator.env_timeout_s=.inf"], "generator.env_timeout_s: Input should be a finite number"),
    ],
)
def test_rules_name_their_fields(overrides, message):
    assert message in problems(*overrides)


def test_valid_combinations_pass():
    load_config(None, ["trainer.algorithm.advantage_estimator=gae", "trainer.critic.model.path=m"])
    load_config(
        None,
        ["trainer.algorithm.policy_loss_type=gspo", "trainer.algorithm.loss_reduction=seq_mean_token_mean"],
    )
    load_config(
        None, ["trainer.algorithm.advantage_estimator=reinforce++", "generator.n_samples_per_prompt=1"]
    )
    # vLLM's CPU build: synchronous and fully asynchronous training on the CPU
    load_config(None, ["generator.backend=vllm"])
    load_config(
        None, ["generator.backend=vllm", "trainer.mode=async", "generator.weight_sync_backend=in_process"]
    )
    # A remote server serves its own weights: evaluation, or rollouts from a policy that is not trained.
    load_config(
        None,
        [
            "generator.backend=remote",
            "generator.remote_inference_engine_urls=[127.0.0.1:8001, 127.0.0.1:8002]",
            "trainer.sync_weights=false",
        ],
    )
    load_config(
        None,
        [
            "trainer.placement.backend=cuda",
            "trainer.placement.policy_num_gpus_per_node=2",
            "trainer.policy.fsdp_config.cpu_offload=true",
            "trainer.policy.fsdp_config.reshard_after_forward=false",
        ],
    )
    # from_dict(validate=False) checks types and ranges, not the cross-field rules.
    cfg = Config.from_dict({"generator": {"backend": "remote"}}, validate=False)
    with pytest.raises(ConfigError, match="remote_inference_engine_urls"):
        cfg.validate_rules()
    with pytest.raises(ConfigError, match="trainer.epochs"):
        Config.from_dict({"trainer": {"epochs": 0}}, validate=False)


# ------------------------------------------------------------------------------------------ sampling


def test_sampling_params_are_one_type_shared_by_config_and_engines():
    from skyrl_train.inference import SamplingParams as EngineSamplingParams
    from skyrl_train.inference.scripted import SamplingParams as ScriptedSamplingParams

    assert EngineSamplingParams is SamplingParams is SamplingParamsConfig is ScriptedSamplingParams
    cfg = load_config("sql_cpu", ["generator.sampling_params.min_p=0.05"])
    sp = cfg.generator.sampling_params
    assert isinstance(sp, EngineSamplingParams)
    assert (sp.max_tokens, sp.max_generate_length, sp.min_p) == (80, 80, 0.05)
    # The engines' spelling of the token budget is the same field.
    assert SamplingParams(max_tokens=7) == SamplingParams(max_generate_length=7)
    assert SamplingParams(stop="</sql>").stop == ["</sql>"]
    assert "max_tokens" not in SamplingParams().model_dump()
    assert (
        load_config(
            None, ["generator.eval_sampling_params.max_tokens=9"]
        ).generator.eval_sampling_params.max_tokens
        == 9
    )


# ------------------------------------------------------------------------------------------ saving


def test_to_yaml_round_trips(tmp_path):
    cfg = load_config("sql_qwen7b_8gpu", ["trainer.epochs=2"])
    text = cfg.to_yaml(tmp_path / "run" / "config.yaml")
    assert (tmp_path / "run" / "config.yaml").read_text() == text
    assert load_config(tmp_path / "run" / "config.yaml") == cfg
    assert Config.from_dict(cfg.to_dict()) == cfg
    assert Config.from_dict(yaml.safe_load(text)).to_dict() == cfg.to_dict()


def test_interpolations_resolve_against_the_whole_config(tmp_path):
    path = tmp_path / "interp.yaml"
    path.write_text(
        "trainer:\n  max_prompt_length: 700\ngenerator:\n  max_input_length: ${trainer.max_prompt_length}\n"
    )
    assert load_config(path).generator.max_input_length == 700
    # A default that the recipe does not set resolves too.
    path.write_text("generator:\n  max_input_length: ${trainer.max_prompt_length}\n")
    assert load_config(path).generator.max_input_length == 512
    assert "cannot resolve" in problems("generator.max_input_length=${trainer.nope}")


# ------------------------------------------------------------------------------------------ help


def test_every_field_has_a_docstring_and_describe_lists_them():
    keys = list(iter_keys())
    assert len(keys) > 100
    for key, field in keys:
        assert field.description, f"{key} has no docstring"

    def sections(model):
        yield model
        for field in model.model_fields.values():
            if isinstance(field.annotation, type) and issubclass(field.annotation, Section):
                yield from sections(field.annotation)

    for model in sections(Config):
        assert model.model_config["extra"] == "forbid" and model.__doc__, model.__name__
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no docstring"
    parts = list(iter_part_keys())  # each built-in dispatcher's and agent's own settings
    assert {key for key, _, _ in parts} >= {"generator.dispatcher.num_workers", "generator.agent.tools"}
    for key, field, part in parts:
        assert field.description, f"{key} of {part} has no docstring"
    lines = describe_config()
    assert len(lines) == len(keys) + len(parts)
    assert any(
        line.startswith(
            "generator.dispatcher.max_ahead [generator.dispatcher.type=async_pipeline] (int | null"
        )
        for line in lines
    )
    assert any(
        line.startswith("trainer.critic.optimizer_config.lr (float, default 5e-06): ") for line in lines
    )
    assert any(
        line.startswith("generator.n_samples_per_prompt (int, default 4): Trajectories") for line in lines
    )
    # With a config, a value that differs from the default is shown.
    shown = describe_config(load_config("sql_cpu"))
    assert any(line.startswith("generator.eval_n_samples_per_prompt (int, default 1)") for line in shown)
    assert any(line.startswith("generator.n_samples_per_prompt = 8 (int, default 4): ") for line in shown)
    assert any(line.startswith("generator.max_turns = 2 (int, default 1): ") for line in shown)


def test_cli_prints_and_describes_recipes(capsys):
    from skyrl_train.cli import main

    assert main(["config", "sql_qwen7b_8gpu"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == load_config("sql_qwen7b_8gpu").to_dict()
    assert main(["config", "sql_cpu", "--describe"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(list(iter_keys())) + len(list(iter_part_keys()))
    assert any(
        line.startswith("trainer.sft_warmup.steps = 12 (int, default 0): Warm-up steps") for line in out
    )
    assert main(["config", "sql_cpu", "trainer.epoch=2"]) == 2
    assert "unknown key 'trainer.epoch'" in capsys.readouterr().err


def test_loading_a_recipe_imports_no_torch():
    code = "import sys, skyrl_train.config as c; c.load_config('sql_cpu'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
