"""Training workers in process on a tiny random Llama: log-probs, a real step, accumulation, critic, ref."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from skyrl_train.config import AlgorithmConfig, OptimizerConfig  # noqa: E402
from skyrl_train.training.workers import (  # noqa: E402
    CriticWorker,
    PolicyWorker,
    RefWorker,
    build_lr_scheduler,
    make_workers,
)

from .tiny_models import VOCAB, tiny_llama  # noqa: E402


def make_batch(seed: int = 0, rows: int = 4, prompt_len: int = 6, response_len: int = 7) -> dict:
    """Left-padded prompts and right-padded responses of different lengths, random advantages."""
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, VOCAB, (rows, prompt_len + response_len), generator=gen)
    attention_mask = torch.ones_like(input_ids)
    for row in range(rows):
        pad_left = row % 3
        pad_right = (2 * row) % (response_len - 1)
        attention_mask[row, :pad_left] = 0
        attention_mask[row, prompt_len + response_len - pad_right :] = 0
    input_ids = input_ids * attention_mask
    response_mask = attention_mask[:, prompt_len:].clone()
    advantages = torch.randn(rows, response_len, generator=gen) * response_mask
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "response_mask": response_mask,
        "advantages": advantages,
    }


def policy(micro_batch_size: int = 2, lr: float = 1e-2, **algorithm) -> PolicyWorker:
    optimizer = OptimizerConfig(lr=lr, weight_decay=0.01, max_grad_norm=1.0)
    return PolicyWorker(
        tiny_llama, optimizer, AlgorithmConfig(**algorithm), micro_batch_size=micro_batch_size, seed=0
    )


def with_old_log_probs(worker, batch: dict) -> dict:
    return {**batch, "old_log_probs": worker.compute_log_probs(batch)}


def test_log_probs_match_an_unpadded_forward_row_by_row():
    worker = policy()
    batch = make_batch()
    log_probs = worker.compute_log_probs(batch)
    assert log_probs.shape == batch["response_mask"].shape
    assert log_probs.dtype == torch.float32
    assert torch.all(log_probs[batch["response_mask"] == 0] == 0)
    prompt_len = batch["input_ids"].shape[1] - batch["response_mask"].shape[1]
    with torch.no_grad():
        for row in range(batch["input_ids"].shape[0]):
            keep = batch["attention_mask"][row].bool()
            ids = batch["input_ids"][row][keep][None]
            logits = worker.model(input_ids=ids).logits[0].float()
            expected = torch.log_softmax(logits[:-1], -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
            n_prompt = int(batch["attention_mask"][row, :prompt_len].sum())
            n_response = int(batch["response_mask"][row].sum())
            got = log_probs[row, :n_response]
            torch.testing.assert_close(
                got, expected[n_prompt - 1 : n_prompt - 1 + n_response], atol=1e-5, rtol=0
            )


def test_train_step_gives_finite_loss_and_moves_weights():
    worker = policy(use_kl_loss=True, kl_loss_coef=0.1)
    batch = with_old_log_probs(worker, make_batch())
    batch["ref_log_probs"] = batch["old_log_probs"] - 0.05 * batch["response_mask"]
    before = worker.full_state_dict()
    metrics = worker.train_step(batch)
    after = worker.full_state_dict()
    for key in ("loss", "pg_loss", "kl", "kl_loss", "entropy", "clip_frac", "ppo_kl", "grad_norm", "lr"):
        assert math.isfinite(metrics[f"policy/{key}"]), key
    assert metrics["policy/lr"] == pytest.approx(1e-2)
    assert metrics["policy/skipped_step"] == 0.0
    assert metrics["policy/clip_frac"] == 0.0  # first step on its own samples: ratio 1
    assert metrics["policy/kl"] > 0
    assert 0 < metrics["policy/entropy"] <= math.log(VOCAB) + 1e-4
    assert worker.global_step == 1
    moved = [name for name in before if not torch.equal(before[name], after[name])]
    assert len(moved) == len(before), f"unchanged: {set(before) - set(moved)}"
    # The ratio is no longer 1 after the update.
    assert not torch.allclose(worker.compute_log_probs(batch), batch["old_log_probs"])


@pytest.mark.parametrize("reduction", ["token_mean", "seq_mean_token_mean"])
def test_two_micro_batches_of_two_equal_one_batch_of_four(reduction):
    batch = make_batch(seed=3)
    results = []
    for micro in (4, 2):
        worker = policy(micro_batch_size=micro, loss_reduction=reduction)
        metrics = worker.train_step(with_old_log_probs(worker, batch))
        results.append((metrics, worker.full_state_dict()))
    (m_full, w_full), (m_acc, w_acc) = results
    assert m_acc["policy/loss"] == pytest.approx(m_full["policy/loss"], abs=1e-6)
    assert m_acc["policy/grad_norm"] == pytest.approx(m_full["policy/grad_norm"], rel=1e-4)
    for name in w_full:
        # Adam's first step is ~lr * sign(grad): 1e-2 per weight; differences stay 1000x below that.
        torch.testing.assert_close(w_acc[name], w_full[name], atol=1e-5, rtol=0)


def test_non_finite_gradient_skips_the_step():
    worker = policy()
    batch = with_old_log_probs(worker, make_batch())
    batch["advantages"] = batch["advantages"] * float("nan")
    before = worker.full_state_dict()
    metrics = worker.train_step(batch)
    assert metrics["policy/skipped_step"] == 1.0
    assert worker.global_step == 0
    after = worker.full_state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before)


def test_train_batch_runs_one_step_per_mini_batch():
    worker = policy(lr=1e-3)
    batch = with_old_log_probs(worker, make_batch(rows=4))
    metrics = worker.train_batch(batch, mini_batch_size=2, update_epochs=2)
    assert metrics["policy/num_updates"] == 4.0
    assert worker.global_step == 4
    with pytest.raises(ValueError, match="mini-batches of 3"):
        worker.train_batch(batch, mini_batch_size=3)


def test_ref_worker_is_frozen_and_matches_the_initial_policy():
    ref = RefWorker(tiny_llama, micro_batch_size=4, seed=0)
    worker = policy()
    batch = make_batch()
    assert all(not p.requires_grad for p in ref.model.parameters())
    assert ref.optimizer is None
    torch.testing.assert_close(ref.compute_log_probs(batch), worker.compute_log_probs(batch))


def test_temperature_divides_the_logits():
    batch = make_batch()
    hot = PolicyWorker(tiny_llama, {"lr": 1e-3}, {"loss_reduction": "token_mean"}, temperature=2.0, seed=0)
    cold = policy()
    assert not torch.allclose(hot.compute_log_probs(batch), cold.compute_log_probs(batch))
    assert hot.algorithm_cfg == AlgorithmConfig()  # a dict of fields becomes the typed config


def test_critic_values_and_clipped_value_step():
    critic = CriticWorker(tiny_llama, {"lr": 1e-2}, AlgorithmConfig(value_clip=0.2), micro_batch_size=2)
    batch = make_batch()
    values = critic.compute_values(batch)
    assert values.shape == batch["response_mask"].shape
    assert torch.all(values[batch["response_mask"] == 0] == 0)
    batch = {**batch, "values": values, "returns": torch.ones_like(values) * batch["response_mask"]}
    before = critic.full_state_dict()
    metrics = critic.train_step(batch)
    assert math.isfinite(metrics["critic/loss"]) and metrics["critic/loss"] > 0
    assert math.isfinite(metrics["critic/grad_norm"])
    assert metrics["critic/vf_clip_frac"] == 0.0  # the first step starts at the old values
    after = critic.full_state_dict()
    assert "value_head.weight" in after
    assert not torch.equal(before["value_head.weight"], after["value_head.weight"])
    # Values move toward the returns.
    new_values = critic.compute_values(batch)
    mask = batch["response_mask"].bool()
    assert (new_values - 1)[mask].abs().mean() < (values - 1)[mask].abs().mean()
    with pytest.raises(TypeError, match="compute_values"):
        critic.compute_log_probs(batch)


def test_lr_schedules_warm_up_then_hold_or_decay():
    def lrs(kind: str, steps: int = 6, total: int | None = 6) -> list[float]:
        opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        sched = build_lr_scheduler(opt, warmup_steps=2, kind=kind, total_steps=total)
        out = []
        for _ in range(steps):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        return out

    # transformers' schedules (SkyRL's): the warm-up rises from 0, the decay reaches 0 at total_steps
    assert lrs("constant_with_warmup", total=None) == [0.0, 0.5, 1.0, 1.0, 1.0, 1.0]
    cosine = lrs("cosine")
    assert cosine[:3] == [0.0, 0.5, 1.0] and cosine[3] == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert cosine[-1] < cosine[-2] < cosine[-3]
    assert lrs("linear")[2:] == pytest.approx([1.0, 0.75, 0.5, 0.25])
    assert lrs("linear", steps=7)[-1] == 0.0
    with pytest.raises(ValueError, match="total_steps"):
        lrs("cosine", total=None)
    with pytest.raises(ValueError, match="unknown lr scheduler"):
        lrs("exponential")


def test_make_workers_with_one_process_runs_in_process():
    worker = make_workers(RefWorker, 1, model_factory=tiny_llama)
    assert isinstance(worker, RefWorker)
    worker.shutdown()


def test_accepts_a_training_batch_with_observation_tokens():
    from types import SimpleNamespace

    from skyrl_train.training.batch import TrainingBatch

    trajectories = [
        # model tokens, then an observation (loss mask 0), then model tokens again
        SimpleNamespace(
            prompt_ids=[5, 6, 7],
            response_ids=[8, 9, 10, 11, 12],
            loss_mask=[1, 1, 0, 0, 1],
            group_id=0,
            reward=1.0,
        ),
        SimpleNamespace(prompt_ids=[5, 6], response_ids=[13, 14], loss_mask=[1, 1], group_id=0, reward=0.0),
    ]
    batch = TrainingBatch.from_trajectories(trajectories, pad_id=0)
    worker = policy()
    log_probs = worker.compute_log_probs(batch)
    assert log_probs.shape == (2, 5)
    assert torch.all(log_probs[0, 2:4] == 0) and torch.all(log_probs[0, [0, 1, 4]] < 0)
    assert torch.all(log_probs[1, 2:] == 0)
    batch.old_log_probs = log_probs
    batch.advantages = torch.tensor([[1.0] * 5, [-1.0] * 5]) * batch.response_mask
    metrics = worker.train_step(batch)
    assert math.isfinite(metrics["policy/loss"])


def test_gradient_checkpointing_gives_the_same_step():
    batch = make_batch(seed=5)
    weights = []
    for checkpointing in (False, True):
        worker = PolicyWorker(
            tiny_llama, OptimizerConfig(lr=1e-2), AlgorithmConfig(), gradient_checkpointing=checkpointing
        )
        worker.train_step(with_old_log_probs(worker, batch))
        weights.append(worker.full_state_dict())
    for name in weights[0]:
        torch.testing.assert_close(weights[1][name], weights[0][name], atol=1e-6, rtol=0)


def test_a_batch_without_signal_makes_no_update():
    """All advantages 0 and no other loss term: the gradient is exactly 0, and no update is made (Adam would
    otherwise move every weight by its momentum from the step before)."""
    worker = policy()
    batch = with_old_log_probs(worker, make_batch())
    worker.train_step(batch)  # a real step first, so that Adam has momentum to spend
    assert worker.global_step == 1
    silent = dict(batch)
    silent["advantages"] = torch.zeros_like(batch["advantages"])
    before = worker.full_state_dict()
    metrics = worker.train_step(with_old_log_probs(worker, silent))
    assert metrics["policy/grad_norm"] == 0.0
    assert metrics["policy/no_gradient_step"] == 1.0 and metrics["policy/skipped_step"] == 0.0
    assert worker.global_step == 1
    after = worker.full_state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before)
    assert worker.train_step(with_old_log_probs(worker, batch))["policy/no_gradient_step"] == 0.0
    assert worker.global_step == 2
