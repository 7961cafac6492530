"""Config: recipes, dotted overrides, type checks, unknown keys, cross-field rules, saving and reloading."""

from __future__ import annotations

import dataclasses
import importlib.resources
import subprocess
import sys

import pytest
import yaml

from skyrl_train.config import (
    Config,
    ConfigError,
    _field_docs,
    _hints,
    describe_config,
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
    assert cfg == Config.from_dict({})
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
        ],
    )
    assert cfg.trainer.epochs == 2 and cfg.generator.n_samples_per_prompt == 8
    assert cfg.trainer.policy.optimizer_config.lr == 1e-5
    assert cfg.trainer.run_name == "2024"
    assert cfg.trainer.logger == ["wandb"]
    assert cfg.generator.sampling_params.stop == ["</answer>"]
    assert cfg.trainer.max_steps is None
    assert cfg.environment.skyrl_gym["text2sql"]["db_path"] == "/data/dbs"


def test_unknown_keys_get_a_did_you_mean_with_the_full_key():
    assert "unknown key 'trainer.epoch'; did you mean 'trainer.epochs'" in problems("trainer.epoch=2")
    # A key from the wrong section points to where it lives.
    assert "did you mean 'trainer.max_prompt_length'" in problems("data.max_prompt_length=100")
    text = problems("generator.sampling_params.temprature=0.5")
    assert "did you mean 'generator.sampling_params.temperature'" in text
    assert "must look like dotted.key=value" in problems("trainer.epochs")
    with pytest.raises(ConfigError, match=r"unknown key 'trainer.algorithm.kl_coeff'"):
        Config.from_dict({"trainer": {"algorithm": {"kl_coeff": 1}}})


@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer.epochs=two", "trainer.epochs must be int, got 'two' (str)"),
        ("trainer.epochs=1.5", "trainer.epochs must be int, got 1.5 (float)"),
        ("trainer.bf16=1", "trainer.bf16 must be bool, got 1 (int)"),
        (
            "trainer.resume_mode=always",
            "trainer.resume_mode must be 'none' | 'latest' | 'from_path', got 'always'",
        ),
        (
            "trainer.logger=[console, slack]",
            "trainer.logger must be list['console' | 'jsonl' | 'tensorboard' | 'wandb']",
        ),
        ("trainer.policy.optimizer_config.lr=fast", "trainer.policy.optimizer_config.lr must be float"),
        ("trainer.placement=gpu", "trainer.placement must be a mapping"),
        ("environment.skyrl_gym=3", "environment.skyrl_gym must be mapping"),
    ],
)
def test_wrong_types_name_the_field(override, message):
    assert message in problems(override)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["trainer.epochs=x", "trainer.bf16=2", "trainer.nope=1"])
    assert len(info.value.errors) == 3


# ------------------------------------------------------------------------------------------ rules


@pytest.mark.parametrize(
    "overrides, message",
    [
        # 1. registered algorithms and dispatchers
        (["trainer.algorithm.advantage_estimator=grop"], "did you mean 'grpo'"),
        (["trainer.algorithm.policy_loss_type=gspo2"], "unknown policy loss 'gspo2'"),
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
        # 4. groups need samples, samples need temperature
        (["generator.n_samples_per_prompt=1"], "generator.n_samples_per_prompt must be >= 2"),
        (["generator.sampling_params.temperature=0"], "generator.sampling_params.temperature=0 (greedy)"),
        (["generator.eval_n_samples_per_prompt=4"], "pass@k equal pass@1"),
        # 5. clip bounds
        (["trainer.algorithm.eps_clip_low=1.5"], "trainer.algorithm.eps_clip_low must be in (0, 1)"),
        (["trainer.algorithm.eps_clip_high=0"], "trainer.algorithm.eps_clip_high must be > 0"),
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
            ["generator.backend=vllm"],
            "generator.backend='vllm' needs GPUs: set trainer.placement.backend=cuda",
        ),
        (["trainer.bf16=true"], "trainer.bf16=true needs trainer.placement.backend=cuda"),
        (
            ["generator.backend=vllm", "trainer.placement.backend=cuda", "generator.num_inference_engines=2"],
            "generator.inference_engine_tensor_parallel_size (2) must equal",
        ),
        (["generator.backend=remote"], "needs generator.remote_inference_engine_urls"),
        # 9. length budgets
        (
            ["trainer.max_prompt_length=4096"],
            "generator.max_input_length (2048) must be >= trainer.max_prompt_length",
        ),
        (
            ["generator.max_tokens_per_trajectory=10"],
            "must be >= generator.sampling_params.max_generate_length",
        ),
        # 10. resume
        (["trainer.resume_mode=from_path"], "trainer.resume_mode='from_path' needs trainer.resume_path"),
        # ranges
        (["trainer.policy.optimizer_config.lr=0"], "trainer.policy.optimizer_config.lr must be > 0"),
        (["generator.sampling_params.top_p=0"], "generator.sampling_params.top_p must be in (0, 1]"),
        (["trainer.algorithm.gamma=1.5"], "trainer.algorithm.gamma must be in [0, 1]"),
        (["trainer.epochs=0"], "trainer.epochs must be >= 1"),
        (["trainer.policy.optimizer_config.adam_betas=[0.9]"], "adam_betas must be two numbers"),
        (["generator.dispatcher=async_bach"], "unknown dispatcher 'async_bach'"),
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
    load_config(None, ["generator.backend=remote", "generator.remote_inference_engine_urls=[127.0.0.1:8001]"])


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
    assert "cannot resolve" in problems("generator.max_input_length=${trainer.nope}")


def test_every_field_has_a_docstring_and_describe_lists_them():
    def walk(cls):
        docs = _field_docs(cls)
        for name, tp in _hints(cls).items():
            assert docs.get(name), f"{cls.__name__}.{name} has no docstring"
            if dataclasses.is_dataclass(tp):
                walk(tp)

    walk(Config)
    lines = describe_config()
    assert any(line.startswith("trainer.critic.optimizer_config.lr (float, default 5e-06)") for line in lines)
    assert any(line.startswith("generator.n_samples_per_prompt (int, default 4): ") for line in lines)


def test_loading_a_recipe_imports_no_torch():
    code = "import sys, skyrl_train.config as c; c.load_config('sql_cpu'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
