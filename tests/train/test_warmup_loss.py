"""The warm-up's logged loss is its negative log-likelihood, not the policy worker's surrogate loss (which is
-1 at ratio 1 whatever the model), and it falls over a few steps on the same rows."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from skyrl_gym.envs.sql.data import load_split  # noqa: E402
from skyrl_train.config import AlgorithmConfig, OptimizerConfig  # noqa: E402
from skyrl_train.inference.scripted import SamplingParams  # noqa: E402
from skyrl_train.loop.warmup import supervised_step  # noqa: E402
from skyrl_train.models import load_model  # noqa: E402
from skyrl_train.rollout import MultiTurnGenerator  # noqa: E402
from skyrl_train.training.workers import PolicyWorker  # noqa: E402


def test_the_warmup_loss_is_the_nll_and_falls(tokenizer, tiny_model):
    rows = [r for r in load_split("train") if r["extra_info"]["level"] == "easy"][:4]
    policy = PolicyWorker(
        lambda: load_model(tiny_model), OptimizerConfig(lr=1e-3), AlgorithmConfig(), micro_batch_size=4
    )
    params = SamplingParams(temperature=0.0, max_tokens=4096)
    losses = []
    for _ in range(3):
        metrics = supervised_step(
            policy,
            lambda e: MultiTurnGenerator(e, max_turns=2),
            tokenizer,
            rows,
            params,
            episode_fraction=0.0,
            seed=0,
        )
        assert metrics["warmup/loss"] == metrics["warmup/nll"] > 0
        assert "warmup/pg_loss" not in metrics
        losses.append(metrics["warmup/loss"])
    assert losses[-1] < losses[0], losses
