"""LoRA for the policy (``trainer.policy.lora``): only the adapters train, the engine gets the merged
weights, checkpoints round-trip and export merged; in process on a tiny random Llama, and through the
trainer (the engine sharing the policy's model, and a policy of two gloo processes syncing merged weights)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from skyrl_train.config import AlgorithmConfig, ConfigError, OptimizerConfig, load_config  # noqa: E402
from skyrl_train.loop.trainer import Trainer  # noqa: E402
from skyrl_train.training import checkpoint  # noqa: E402
from skyrl_train.training.lora import merged_state_dict  # noqa: E402
from skyrl_train.training.workers import PolicyWorker  # noqa: E402
from skyrl_train.training.workers.plan import plan_workers  # noqa: E402

from .test_trainer import _config, sql_files  # noqa: E402, F401
from .test_workers import make_batch, with_old_log_probs  # noqa: E402
from .tiny_models import tiny_llama  # noqa: E402

LORA = {"rank": 4, "alpha": 8.0}
ADAPTED = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def policy(lora=None, model_factory=tiny_llama, **kwargs) -> PolicyWorker:
    optimizer = OptimizerConfig(lr=1e-2, weight_decay=0.0)
    return PolicyWorker(
        model_factory, optimizer, AlgorithmConfig(), micro_batch_size=2, seed=0, lora=lora, **kwargs
    )


def test_fresh_adapters_leave_the_model_as_it_was_and_are_all_that_trains():
    plain, adapted = policy(), policy(LORA)
    batch = make_batch()
    assert torch.equal(adapted.compute_log_probs(batch), plain.compute_log_probs(batch))  # B starts at 0
    trainable = [name for name, p in adapted.model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in name or ".lora_B." in name for name in trainable)
    # an adapter pair on each attention and MLP projection of both layers, none on the head
    assert len(trainable) == 2 * len(ADAPTED) * 2
    assert not any("lm_head" in name for name in trainable)
    # the engine's view: the plain model's names and, before any step, the plain model's values
    merged = adapted.full_state_dict()
    assert merged.keys() == plain.model.state_dict().keys()
    for name, tensor in plain.model.state_dict().items():
        assert torch.equal(merged[name], tensor), name


def test_a_step_moves_the_adapted_weights_only_and_the_merged_weights_score_as_the_policy():
    worker = policy(LORA)
    start_params = {k: v.clone() for k, v in worker.model.state_dict().items()}
    start = worker.full_state_dict()
    batch = make_batch()
    metrics = worker.train_step(with_old_log_probs(worker, batch))
    assert metrics["policy/skipped_step"] == 0.0 and metrics["policy/no_gradient_step"] == 0.0
    # the base layers are frozen: every change is in an adapter
    changed = [k for k, v in worker.model.state_dict().items() if not torch.equal(v, start_params[k])]
    assert changed and all(".lora_B." in k or ".lora_A." in k for k in changed)
    # merged: exactly the adapted projections moved
    after = worker.full_state_dict()
    moved = {k for k in after if not torch.equal(after[k], start[k])}
    assert moved and all(k.split(".")[-2] in ADAPTED for k in moved)
    # Adam's state is the adapters' alone
    adapter_size = sum(p.numel() for p in worker.model.parameters() if p.requires_grad)
    assert _adam_state_size(worker) == 2 * adapter_size
    assert adapter_size < sum(p.numel() for p in worker.model.parameters()) / 5
    # a plain model loaded with the merged weights (an engine's copy) scores as the adapted policy
    plain = policy()
    plain.model.load_state_dict(after)
    torch.testing.assert_close(
        plain.compute_log_probs(batch), worker.compute_log_probs(batch), atol=1e-5, rtol=0
    )


def _adam_state_size(worker: PolicyWorker) -> int:
    return sum(v.numel() for st in worker.optimizer.state.values() for v in st.values() if v.dim() > 0)


def test_a_full_warmup_trains_the_base_with_the_adapters_at_zero_then_rl_trains_the_adapters_alone():
    """``full_warmup``: the warm-up's optimizer holds every base weight and no adapter; the RL optimizer
    that replaces it holds the adapters alone, so the base's Adam state is gone."""
    worker = policy(LORA)
    batch = make_batch()
    worker.reset_optimizer(OptimizerConfig(lr=1e-2, weight_decay=0.0), base=True)
    start = {k: v.clone() for k, v in worker.model.state_dict().items()}
    worker.train_step(with_old_log_probs(worker, batch))
    warmed = {k: v.clone() for k, v in worker.model.state_dict().items()}
    changed = {k for k in warmed if not torch.equal(warmed[k], start[k])}
    assert changed and not any(".lora_" in k for k in changed)
    base_size = sum(p.numel() for n, p in worker.model.named_parameters() if ".lora_" not in n)
    assert _adam_state_size(worker) == 2 * base_size
    # with B still 0, the merged weights are the warmed base weights
    merged = worker.full_state_dict()
    for name, tensor in merged.items():
        base_name = name.replace(".weight", ".base_layer.weight")
        assert torch.equal(tensor, warmed[base_name if base_name in warmed else name]), name

    worker.reset_optimizer(OptimizerConfig(lr=1e-2, weight_decay=0.0))
    assert _adam_state_size(worker) == 0
    worker.train_step(with_old_log_probs(worker, batch))
    after = worker.model.state_dict()
    changed = {k for k in after if not torch.equal(after[k], warmed[k])}
    assert changed and all(".lora_" in k for k in changed)
    adapter_size = sum(p.numel() for n, p in worker.model.named_parameters() if ".lora_" in n)
    assert _adam_state_size(worker) == 2 * adapter_size


def test_without_lora_base_changes_nothing_every_weight_trains():
    worker = policy()
    worker.reset_optimizer(OptimizerConfig(lr=1e-2), base=True)
    assert all(p.requires_grad for p in worker.model.parameters())
    worker.reset_optimizer(OptimizerConfig(lr=1e-2))
    assert all(p.requires_grad for p in worker.model.parameters())


def test_merging_is_w0_plus_b_a_times_alpha_over_rank():
    w0, a, b = torch.randn(6, 5), torch.randn(2, 5), torch.randn(6, 2)
    state = {
        "layer.base_layer.weight": w0,
        "layer.base_layer.bias": torch.ones(6),
        "layer.lora_A.default.weight": a,
        "layer.lora_B.default.weight": b,
        "norm.weight": torch.zeros(5),
    }
    merged = merged_state_dict(state, scaling=4.0)
    assert merged.keys() == {"layer.weight", "layer.bias", "norm.weight"}
    torch.testing.assert_close(merged["layer.weight"], w0 + b @ a * 4.0)
    assert torch.equal(state["layer.base_layer.weight"], w0)  # the model's own tensor is left alone


def test_gradient_checkpointing_gives_the_adapters_the_same_gradients():
    """The base is frozen, so no layer's input requires a gradient: the recomputing backward must still
    reach the adapters (non-reentrant checkpointing)."""
    batch = with_old_log_probs(policy(LORA), make_batch())
    norms, updates = [], []
    for checkpointing in (False, True):
        worker = policy(LORA, gradient_checkpointing=checkpointing)
        norms.append(worker.train_step(batch)["policy/grad_norm"])
        updates.append({k: v.clone() for k, v in worker.model.state_dict().items() if ".lora_" in k})
    assert norms[0] > 0
    assert norms[1] == pytest.approx(norms[0], rel=1e-5)
    for name in updates[0]:
        torch.testing.assert_close(updates[0][name], updates[1][name], atol=1e-6, rtol=1e-5)


def test_a_checkpoint_round_trips_and_exports_the_merged_model(tmp_path, tiny_model):
    from transformers import AutoModelForCausalLM

    def load():
        return AutoModelForCausalLM.from_pretrained(tiny_model)

    def worker():
        return PolicyWorker(load, OptimizerConfig(lr=1e-2), AlgorithmConfig(), micro_batch_size=2, lora=LORA)

    trained = worker()
    ids = torch.randint(1, 100, (4, 13), generator=torch.Generator().manual_seed(0))
    batch = {**make_batch(), "input_ids": ids}
    trained.train_step(with_old_log_probs(trained, batch))
    config = {"trainer": {"policy": {"model": {"path": tiny_model}, "lora": LORA}}}
    checkpoint.save_checkpoint(tmp_path / "run", 1, {"policy": trained}, data_state={}, config=config)

    restored = worker()
    restored.load_checkpoint(tmp_path / "run" / "checkpoints" / "step_1" / "policy")
    saved = {k: v.clone() for k, v in trained.model.state_dict().items()}
    assert all(torch.equal(v, saved[k]) for k, v in restored.model.state_dict().items())
    # the optimizer's moments came back: the next step is the same on both
    second = with_old_log_probs(trained, batch)
    trained.train_step(second)
    restored.train_step(second)
    assert all(torch.equal(v, trained.model.state_dict()[k]) for k, v in restored.model.state_dict().items())

    exported = AutoModelForCausalLM.from_pretrained(
        checkpoint.export_model(tmp_path / "run", tmp_path / "model")
    ).state_dict()
    step_1 = merged_state_dict(saved, scaling=LORA["alpha"] / LORA["rank"])
    started = load().state_dict()
    assert any(not torch.equal(started[k], step_1[k]) for k in step_1)
    for name, tensor in step_1.items():
        torch.testing.assert_close(exported[name], tensor, atol=0, rtol=0)


def test_the_setting_reaches_the_policy_worker_and_bad_values_are_refused():
    config = load_config("sql_cpu", ["trainer.policy.lora.rank=16", "trainer.policy.lora.train_mlp=false"])
    lora = plan_workers(config)["policy"].kwargs["lora"]
    assert (lora.rank, lora.alpha, lora.train_attn, lora.train_mlp) == (16, 32.0, True, False)
    assert load_config("sql_cpu", []).trainer.policy.lora.rank == 0  # off unless asked for
    for bad in (
        "trainer.policy.lora.rank=-1",
        "trainer.policy.lora.alpha=0",
        "trainer.policy.lora.rank=true",
    ):
        with pytest.raises(ConfigError):
            load_config("sql_cpu", [bad])
    with pytest.raises(ValueError, match="select no layer"):
        policy({"rank": 2, "train_attn": False, "train_mlp": False})
    # an adapted head of a model whose head is its input embeddings: no engine could load it apart
    with pytest.raises(ValueError, match="ties its output projection"):
        policy({"rank": 2, "train_unembed": True}, model_factory=lambda: tiny_llama(tie_word_embeddings=True))


def test_an_adapted_head_of_an_untied_model_trains_and_merges():
    worker = policy({"rank": 2, "train_unembed": True})
    assert any("lm_head.lora_" in name for name, p in worker.model.named_parameters() if p.requires_grad)
    start = worker.full_state_dict()
    worker.train_step(with_old_log_probs(worker, make_batch()))
    after = worker.full_state_dict()
    assert not torch.equal(start["lm_head.weight"], after["lm_head.weight"])
    assert torch.equal(start["model.embed_tokens.weight"], after["model.embed_tokens.weight"])


def _lora_trainer_config(tiny_model, sql_files, run_dir, *overrides):  # noqa: F811
    return _config(
        tiny_model,
        sql_files,
        run_dir,
        "trainer.policy.lora.rank=4",
        "trainer.policy.lora.alpha=8",
        "trainer.eval_before_train=false",
        # the tiny model earns no reward: the entropy bonus gives the GRPO step a gradient
        "trainer.algorithm.use_entropy_loss=true",
        *overrides,
    )


def _frozen_and_adapters(state: dict) -> tuple[dict, dict]:
    adapters = {k: v for k, v in state.items() if ".lora_" in k}
    return {k: v for k, v in state.items() if k not in adapters}, adapters


@pytest.mark.slow
def test_the_trainer_warms_up_and_steps_the_adapters_with_the_engine_on_the_policys_model(
    tiny_model,
    sql_files,  # noqa: F811
    tmp_path,
):
    with Trainer(
        _lora_trainer_config(tiny_model, sql_files, tmp_path / "run", "trainer.max_steps=2")
    ) as trainer:
        assert trainer._shares_policy and trainer.engine.model is trainer.policy.model
        frozen, adapters = _frozen_and_adapters(
            {k: v.clone() for k, v in trainer.policy.model.state_dict().items()}
        )
        summary = trainer.fit()
        frozen_after, adapters_after = _frozen_and_adapters(trainer.policy.model.state_dict())
    assert summary["steps"] == 2 and summary["stopped_by"] == "max_steps"
    assert all(torch.equal(frozen[k], frozen_after[k]) for k in frozen)
    assert any(not torch.equal(adapters[k], adapters_after[k]) for k in adapters)
    assert (tmp_path / "run" / "checkpoints" / "step_2" / "policy" / "dcp").is_dir()


@pytest.mark.slow
@pytest.mark.parametrize("processes", [1, 2])
def test_the_trainers_full_warmup_moves_the_base_and_rl_then_moves_the_adapters_alone(
    processes,
    tiny_model,
    sql_files,  # noqa: F811
    tmp_path,
):
    """``trainer.policy.lora.full_warmup=true`` through the trainer, in process (the engine on the policy's
    model) and over two gloo FSDP2 processes (the engine a copy fed merged weights)."""
    config = _lora_trainer_config(
        tiny_model,
        sql_files,
        tmp_path / "run",
        "trainer.policy.lora.full_warmup=true",
        f"trainer.placement.policy_num_gpus_per_node={processes}",
        "trainer.micro_train_batch_size_per_gpu=2",
    )
    with Trainer(config) as trainer:
        start = trainer.policy.full_state_dict()
        trainer.warmup()
        warmed = trainer.policy.full_state_dict()
        metrics = trainer.train_step(next(iter(trainer.iterator)))
        after = trainer.policy.full_state_dict()
        shared = trainer._shares_policy
        assert shared == (processes == 1)
        engine_weights = after if shared else trainer.engine.model.state_dict()
    assert metrics["policy/num_updates"] == 1.0 and metrics["policy/skipped_step"] == 0.0
    # the warm-up moved weights the adapters do not cover (the embeddings, the norms)
    warmup_moved = {k for k in warmed if not torch.equal(start[k], warmed[k])}
    assert any(k.split(".")[-2] not in ADAPTED for k in warmup_moved)
    # RL moved only what the adapters cover, and an engine of its own holds the merged result
    rl_moved = {k for k in after if not torch.equal(warmed[k], after[k])}
    assert rl_moved and all(k.split(".")[-2] in ADAPTED for k in rl_moved)
    assert all(torch.allclose(engine_weights[k], after[k], atol=1e-6, rtol=0) for k in after)


@pytest.mark.slow
def test_two_gloo_workers_train_the_adapters_and_sync_merged_weights_into_the_engine(
    tiny_model,
    sql_files,  # noqa: F811
    tmp_path,
):
    """FSDP2 over two CPU processes with frozen base weights beside trainable adapters; the engine (a copy,
    not the policy's model) receives the merged weights."""
    config = _lora_trainer_config(
        tiny_model,
        sql_files,
        tmp_path / "run",
        "trainer.placement.policy_num_gpus_per_node=2",
        "trainer.micro_train_batch_size_per_gpu=2",
    )
    with Trainer(config) as trainer:
        assert not trainer._shares_policy
        before = trainer.policy.full_state_dict()
        trainer.warmup()
        metrics = trainer.train_step(next(iter(trainer.iterator)))
        after = trainer.policy.full_state_dict()
        assert metrics["policy/num_updates"] == 1.0 and metrics["policy/skipped_step"] == 0.0
        assert after.keys() == before.keys() and not any(".lora_" in k for k in after)
        moved = {k for k in after if not torch.equal(before[k], after[k])}
        assert moved and all(k.split(".")[-2] in ADAPTED for k in moved)
        engine_weights = trainer.engine.model.state_dict()
        assert all(torch.equal(engine_weights[k], after[k]) for k in after)


@pytest.mark.slow
def test_an_engine_process_gets_the_merged_weights_and_passes_the_weight_sync_gate(
    tiny_model,
    sql_files,  # noqa: F811
    tmp_path,
):
    """The engine in a process of its own loads its own copy of the model: the merged weights travel to it,
    and the gate finds its scores of a probe sequence equal to the adapted policy's."""
    config = _lora_trainer_config(tiny_model, sql_files, tmp_path / "run", "generator.engine_process=true")
    with Trainer(config) as trainer:
        assert not trainer._shares_policy
        trainer.warmup()
        metrics = trainer.train_step(next(iter(trainer.iterator)))
        assert metrics["policy/num_updates"] == 1.0 and metrics["policy/skipped_step"] == 0.0
        assert trainer.last_weight_check, "the weight-sync gate did not run"
        assert trainer.last_weight_check["sync/probe_max_diff"] < 1e-3


@pytest.mark.slow
def test_a_lora_run_replays_bit_for_bit_and_the_engine_sampled_from_the_adapted_policy(
    tiny_model,
    sql_files,  # noqa: F811
    tmp_path,
):
    """The record and the replay of a LoRA run: the engine's log-probs equal the adapted policy's, and the
    replay of step 2 from the checkpoint after step 1 gives the same metrics and the same weights (the
    adapters' Adam state came back with the checkpoint)."""
    from skyrl_train.record import read_rollouts
    from skyrl_train.replay import replay_training

    run_dir = tmp_path / "run"
    quiet = ["trainer.sft_warmup.steps=0", "data.val_data=[]", "data.eval_sets={}", "trainer.max_steps=2"]
    with Trainer(_lora_trainer_config(tiny_model, sql_files, run_dir, *quiet)) as trainer:
        trainer.fit()
    for row in read_rollouts(run_dir):
        trained = [k for k, m in enumerate(row["loss_mask"]) if m]
        assert max(abs(row["sampler_logprobs"][k] - row["trainer_logprobs"][k]) for k in trained) < 1e-3
    result = replay_training(run_dir)
    (step,) = result.steps
    assert step.metrics["policy/loss"][0] != 0.0
    assert step.advantages_equal and all(a == b for a, b in step.metrics.values()), step.metrics
    assert result.weights.verdict == "equal"
