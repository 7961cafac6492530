"""The warm-up's logged loss is its negative log-likelihood, not the policy worker's surrogate loss (which is
-1 at ratio 1 whatever the model), and it falls over a few steps on the same rows."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from skyrl_gym.envs.sql.tasks import load_split  # noqa: E402
from skyrl_train.config import AlgorithmConfig, OptimizerConfig  # noqa: E402
from skyrl_train.inference.scripted import SamplingParams  # noqa: E402
from skyrl_train.loop.warmup import supervised_step  # noqa: E402
from skyrl_train.models import load_model  # noqa: E402
from skyrl_train.rollout import MultiTurnGenerator  # noqa: E402
from skyrl_train.training.workers import PolicyWorker  # noqa: E402


def warmup_step(policy, tokenizer, rows, **kwargs) -> dict[str, float]:
    """One warm-up step on ``rows`` through the two-turn SQL generator, scripted at temperature 0."""
    params = SamplingParams(temperature=0.0, max_tokens=4096)
    generator = lambda e: MultiTurnGenerator(e, max_turns=2)  # noqa: E731
    return supervised_step(policy, generator, tokenizer, rows, params, seed=0, **kwargs)


def test_the_warmup_loss_is_the_nll_and_falls(tokenizer, tiny_model):
    rows = [r for r in load_split("train") if r["extra_info"]["level"] == "easy"][:4]
    policy = PolicyWorker(
        lambda: load_model(tiny_model), OptimizerConfig(lr=1e-3), AlgorithmConfig(), micro_batch_size=4
    )
    losses = []
    for _ in range(3):
        metrics = warmup_step(policy, tokenizer, rows, episode_fraction=0.0)
        assert metrics["warmup/loss"] == metrics["warmup/nll"] > 0
        assert "warmup/pg_loss" not in metrics
        losses.append(metrics["warmup/loss"])
    assert losses[-1] < losses[0], losses


def test_the_warmup_reduces_its_loss_its_own_way_and_gives_the_policy_its_own_back(tokenizer, tiny_model):
    """``loss_reduction`` (``trainer.sft_warmup.loss_reduction``) makes the warm-up's step exactly the step of
    a policy whose own reduction it is, and differ from the step under the policy's own; the policy reduces
    RL's losses its own way again afterwards."""
    rows = [r for r in load_split("train") if r["extra_info"]["level"] == "easy"][:6]

    def step(own: str, warmup: str | None) -> tuple[PolicyWorker, dict[str, float]]:
        policy = PolicyWorker(
            lambda: load_model(tiny_model),
            OptimizerConfig(lr=1e-3),
            AlgorithmConfig(loss_reduction=own),
            micro_batch_size=2,
        )
        # half the rows query first: episodes of different lengths, which the reductions weigh apart
        metrics = warmup_step(policy, tokenizer, rows, episode_fraction=0.5, loss_reduction=warmup)
        return policy, metrics

    split, split_metrics = step("token_mean", "seq_mean_token_mean")
    per_episode, per_episode_metrics = step("seq_mean_token_mean", None)
    per_token, per_token_metrics = step("token_mean", None)

    assert split_metrics["warmup/trajectories"] == per_token_metrics["warmup/trajectories"] == 6
    for key in ("warmup/nll", "warmup/grad_norm"):
        assert split_metrics[key] == pytest.approx(per_episode_metrics[key], rel=1e-5), key
        # a random model gives every token about the same loss: the reductions differ in the fifth digit
        assert split_metrics[key] != pytest.approx(per_token_metrics[key], rel=1e-5), key
    # and the weights after the step agree: to rounding only, since Adam moves a weight whose gradient is below
    # its eps (1e-8) by lr * g / eps, so the float rounding of such a gradient along the two reductions' paths
    # (about 1e-11) moves it by up to some 1e-6 (the equal loss and gradient norm above are the step's proof)
    for (name, a), (_, b) in zip(
        split.model.named_parameters(), per_episode.model.named_parameters(), strict=True
    ):
        assert torch.allclose(a, b, atol=1e-4), name
    assert split.loss_reduction == split.algorithm_cfg.loss_reduction == "token_mean"
    assert per_token.loss_reduction == "token_mean"
