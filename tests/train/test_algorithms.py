"""Advantage estimators, policy losses, KL, entropy, value loss and reductions against numbers worked out by
hand in each test, plus properties (masked positions are zero, GRPO advantages average to 0 per group)."""

from __future__ import annotations

import math
import re

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from skyrl_train.config import BUILTIN_ADVANTAGE_ESTIMATORS, BUILTIN_POLICY_LOSSES, AlgorithmConfig  # noqa: E402
from skyrl_train.training import algorithms as alg  # noqa: E402
from skyrl_train.training.algorithms import registry  # noqa: E402


def t(rows):
    return torch.tensor(rows, dtype=torch.float32)


def outcome(rewards, width=3, lengths=None):
    """Token rewards with each row's reward on its last response token, and the response mask."""
    lengths = lengths or [width] * len(rewards)
    token_rewards = torch.zeros(len(rewards), width)
    mask = torch.zeros(len(rewards), width)
    for i, (r, n) in enumerate(zip(rewards, lengths, strict=True)):
        mask[i, :n] = 1
        token_rewards[i, n - 1] = r
    return token_rewards, mask


def assert_close(actual, expected, tol=1e-5):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=tol, rtol=0)


# ------------------------------------------------------------------------------------------ advantages


def test_grpo_one_group_by_hand():
    # rewards [1, 0, 1, 0]: mean 0.5, deviations +-0.5, unbiased std sqrt(4 * 0.25 / 3) = sqrt(1/3).
    rewards, mask = outcome([1.0, 0.0, 1.0, 0.0], lengths=[3, 2, 1, 3])
    adv, ret = alg.grpo(rewards, mask, torch.zeros(4, dtype=torch.long))
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)  # 0.866...
    assert_close(adv, [[a, a, a], [-a, -a, 0], [a, 0, 0], [-a, -a, -a]])
    assert_close(ret, adv)


def test_grpo_groups_invalid_rows_and_constant_groups():
    # group 0: valid rewards [1, 0] (mean 0.5, std sqrt(0.5)); row 2 errored (reward 5 must not count).
    # group 1: [2, 2] all equal -> 0.
    rewards, mask = outcome([1.0, 0.0, 5.0, 2.0, 2.0], width=2)
    groups = torch.tensor([0, 0, 0, 1, 1])
    valid = torch.tensor([True, True, False, True, True])
    adv, _ = alg.grpo(rewards, mask, groups, valid=valid)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert_close(adv, [[a, a], [-a, -a], [0, 0], [0, 0], [0, 0]])


def test_raft_keeps_only_the_best_positive_samples_of_groups_with_variance():
    # group 0 [1, 0, 1, -1]: both 1s; group 1 [0, -1]: best not positive; group 2 [1, 1]: no variance;
    # group 3 [0.5, 3 (errored), 0.2]: the errored row neither counts nor gets an advantage
    rewards, mask = outcome([1.0, 0.0, 1.0, -1.0, 0.0, -1.0, 1.0, 1.0, 0.5, 3.0, 0.2], width=2)
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 3])
    valid = torch.tensor([True] * 9 + [False, True])
    adv, ret = alg.raft(rewards, mask, groups, valid=valid)
    best = [1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0]
    assert_close(adv, [[b, b] for b in best])
    assert_close(ret, adv)


def test_grpo_single_valid_sample_gets_zero():
    rewards, mask = outcome([1.0, 0.0], width=1)
    adv, _ = alg.grpo(rewards, mask, torch.tensor([0, 0]), valid=torch.tensor([True, False]))
    assert_close(adv, [[0.0], [0.0]])


def test_dr_grpo_and_grpo_without_std_subtract_the_mean_only():
    rewards, mask = outcome([1.0, 0.0, 1.0, 0.0], width=1)
    groups = torch.zeros(4, dtype=torch.long)
    expected = [[0.5], [-0.5], [0.5], [-0.5]]
    assert_close(alg.dr_grpo(rewards, mask, groups)[0], expected)
    assert_close(alg.grpo(rewards, mask, groups, norm_by_std=False)[0], expected)
    # dr_grpo ignores the config's grpo_norm_by_std (compute_batch_advantages always passes it).
    assert_close(alg.dr_grpo(rewards, mask, groups, norm_by_std=True)[0], expected)


def test_rloo_leave_one_out_baseline():
    # [3, 1, 2]: 3 - (1+2)/2 = 1.5; 1 - (3+2)/2 = -1.5; 2 - (3+1)/2 = 0. Row 3 (error) is left out.
    rewards, mask = outcome([3.0, 1.0, 2.0, 100.0], width=2)
    adv, _ = alg.rloo(rewards, mask, torch.zeros(4, dtype=torch.long), valid=torch.tensor([1, 1, 1, 0]))
    assert_close(adv, [[1.5, 1.5], [-1.5, -1.5], [0, 0], [0, 0]])


def test_reinforce_plus_plus_discounts_then_whitens_over_the_batch():
    rewards = t([[0, 0, 1], [0, 2, 0]])
    mask = t([[1, 1, 1], [1, 1, 0]])
    adv, ret = alg.reinforce_plus_plus(rewards, mask, torch.tensor([0, 1]), gamma=0.5)
    # returns: row 0: [0.25, 0.5, 1]; row 1: [0 + 0.5 * 2, 2, -] = [1, 2, 0].
    assert_close(ret, [[0.25, 0.5, 1.0], [1.0, 2.0, 0.0]])
    # five masked returns: mean 0.95, squared deviations sum 1.8, unbiased var 0.45.
    std = math.sqrt(0.45)
    expected = [[(0.25 - 0.95) / std, (0.5 - 0.95) / std, 0.05 / std], [0.05 / std, 1.05 / std, 0.0]]
    assert_close(adv, expected, tol=1e-4)


def test_reinforce_plus_plus_steps_over_observation_tokens():
    # Model token, observation token, model token: the observation is not a step of the discount.
    adv, ret = alg.reinforce_plus_plus(t([[0, 0, 1]]), t([[1, 0, 1]]), torch.tensor([0]), gamma=0.5)
    assert_close(ret, [[0.5, 0.0, 1.0]])
    assert adv[0, 1] == 0


def test_gae_by_hand():
    # gamma 0.9, lambda 0.8; t=1: delta = 1 + 0 - 0.2 = 0.8 = A1;
    # t=0: delta = 0 + 0.9 * 0.2 - 0.5 = -0.32, A0 = -0.32 + 0.9 * 0.8 * 0.8 = 0.256.
    rewards, values, mask = t([[0, 1, 0]]), t([[0.5, 0.2, 9.0]]), t([[1, 1, 0]])
    adv, ret = alg.gae(rewards, mask, torch.tensor([0]), values, gamma=0.9, lambd=0.8, whiten=False)
    assert_close(adv, [[0.256, 0.8, 0.0]])
    assert_close(ret, [[0.756, 1.0, 0.0]])  # returns = advantages + values
    # Whitened: two values 0.256 and 0.8 -> -1/sqrt(2) and +1/sqrt(2) (unbiased std).
    adv_w, ret_w = alg.gae(rewards, mask, torch.tensor([0]), values, gamma=0.9, lambd=0.8)
    assert_close(adv_w, [[-1 / math.sqrt(2), 1 / math.sqrt(2), 0.0]], tol=1e-4)
    assert_close(ret_w, ret)


def test_gae_skips_observation_tokens_and_needs_values():
    # The same trajectory with an observation token (value 7, ignored) between the two model tokens.
    adv, ret = alg.gae(
        t([[0, 0, 1]]), t([[1, 0, 1]]), torch.tensor([0]), t([[0.5, 7.0, 0.2]]), 0.9, 0.8, whiten=False
    )
    assert_close(adv, [[0.256, 0.0, 0.8]])
    assert_close(ret, [[0.756, 0.0, 1.0]])
    with pytest.raises(ValueError, match="critic"):
        alg.gae(t([[1.0]]), t([[1.0]]), torch.tensor([0]))


@settings(max_examples=30)
@given(
    data=st.lists(
        st.tuples(
            st.integers(0, 2),  # group
            st.floats(-3, 3, allow_nan=False, width=32),  # reward
            st.integers(1, 4),  # response length
            st.booleans(),  # valid
        ),
        min_size=1,
        max_size=8,
    ),
    name=st.sampled_from(BUILTIN_ADVANTAGE_ESTIMATORS),
)
def test_estimator_properties(data, name):
    groups = torch.tensor([d[0] for d in data])
    rewards, mask = outcome([d[1] for d in data], width=4, lengths=[d[2] for d in data])
    valid = torch.tensor([d[3] for d in data])
    values = torch.randn(len(data), 4) if name == "gae" else None
    adv, ret = registry.get_advantage_estimator(name)(rewards, mask, groups, values, 0.9, 0.95, valid=valid)
    keep = mask.bool() & valid[:, None]
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    assert (adv[~keep] == 0).all() and (ret[~keep] == 0).all()  # padding and error rows are zero
    if name in ("grpo", "dr_grpo", "rloo"):
        row_adv = adv[:, 0]
        for g in groups.unique():
            rows = (groups == g) & valid
            assert abs(float(row_adv[rows].sum())) < 1e-3  # centred within each group


# ------------------------------------------------------------------------------------------ policy losses


def ppo_inputs():
    # A 2x3 matrix of ratios (old log-probs 0, so log_probs = log ratio); row 0 has A=+1, row 1 A=-1.
    ratio = t([[0.5, 1.0, 1.5], [0.7, 1.2, 1.4]])
    return ratio.log(), torch.zeros(2, 3), t([[1, 1, 1], [-1, -1, -1]])


def test_ppo_clip_higher_by_hand():
    cfg = AlgorithmConfig(eps_clip_low=0.2, eps_clip_high=0.28)
    logp, old, adv = ppo_inputs()
    # A=+1: max(-r, -clip(r, 0.8, 1.28)): 0.5 -> -0.5, 1.0 -> -1.0, 1.5 -> -1.28 (clipped).
    # A=-1: max(r, clip(r)): 0.7 -> 0.8 (clipped), 1.2 -> 1.2, 1.4 -> 1.4.
    losses = t([[-0.5, -1.0, -1.28], [0.8, 1.2, 1.4]])
    loss, metrics = alg.ppo_loss(logp, old, adv, torch.ones(2, 3), cfg)
    assert_close(loss, losses.mean())  # token_mean = 0.62 / 6
    assert metrics["clip_frac"] == pytest.approx(2 / 6)
    assert metrics["ppo_kl"] == pytest.approx(float(-logp.mean()), abs=1e-6)

    mask = t([[1, 1, 1], [1, 1, 0]])
    logp_nan = logp.clone()
    logp_nan[1, 2] = float("nan")  # padding may hold anything
    expected = {
        "token_mean": (-2.78 + 2.0) / 5,
        "seq_mean_token_sum": (-2.78 + 2.0) / 2,
        "seq_mean_token_mean": (-2.78 / 3 + 2.0 / 2) / 2,
    }
    for mode, value in expected.items():
        loss, _ = alg.ppo_loss(
            logp_nan, old, adv, mask, AlgorithmConfig(eps_clip_high=0.28, loss_reduction=mode)
        )
        assert float(loss) == pytest.approx(value, abs=1e-5), mode
    cfg = AlgorithmConfig(eps_clip_high=0.28, loss_reduction="seq_mean_token_sum_norm", max_seq_len=4)
    loss, _ = alg.ppo_loss(logp_nan, old, adv, mask, cfg)
    assert float(loss) == pytest.approx((-2.78 / 4 + 2.0 / 4) / 2, abs=1e-5)


def test_ppo_gradient_vanishes_where_clipped():
    cfg = AlgorithmConfig(eps_clip_low=0.2, eps_clip_high=0.28)
    logp, old, adv = ppo_inputs()
    logp.requires_grad_(True)
    loss, _ = alg.ppo_loss(logp, old, adv, torch.ones(2, 3), cfg)
    loss.backward()
    # d/dlogp of -A * r = -A * r / 6 where unclipped; 0 where the clipped term was taken.
    assert_close(logp.grad, [[-0.5 / 6, -1.0 / 6, 0.0], [0.0, 1.2 / 6, 1.4 / 6]])


def test_dual_clip_caps_negative_advantages():
    cfg = AlgorithmConfig(eps_clip_low=0.2, eps_clip_high=0.28, clip_ratio_c=3.0)
    logp = t([[5.0, 2.0, 5.0]]).log()
    adv = t([[-1.0, -1.0, 1.0]])
    # A=-1, r=5: PPO gives max(5, 1.28) = 5, capped at c * |A| = 3. r=2: 2 < 3 stays.
    # A=+1, r=5: max(-5, -1.28) = -1.28 (the cap only applies to negative advantages).
    loss, metrics = alg.dual_clip_loss(logp, torch.zeros(1, 3), adv, torch.ones(1, 3), cfg)
    assert float(loss) == pytest.approx((3.0 + 2.0 - 1.28) / 3, abs=1e-5)
    assert metrics["dual_clip_frac"] == pytest.approx(1 / 3)
    plain, _ = alg.ppo_loss(logp, torch.zeros(1, 3), adv, torch.ones(1, 3), cfg)
    assert float(plain) == pytest.approx((5.0 + 2.0 - 1.28) / 3, abs=1e-5)


def test_gspo_sequence_ratio_by_hand():
    cfg = AlgorithmConfig(eps_clip_low=0.2, eps_clip_high=0.28, loss_reduction="seq_mean_token_mean")
    # Row 0: token log ratios 0.1 and 0.3 -> s = exp(0.2) = 1.2214 (inside [0.8, 1.28]); row 1 is padding.
    logp = t([[0.1, 0.3], [5.0, 5.0]]).requires_grad_(True)
    old = torch.zeros(2, 2)
    mask = t([[1, 1], [0, 0]])
    loss, metrics = alg.gspo_loss(logp, old, t([[1, 1], [1, 1]]), mask, cfg)
    s = math.exp(0.2)
    assert float(loss.detach()) == pytest.approx(-s, abs=1e-5)
    loss.backward()
    assert_close(logp.grad, [[-s / 2, -s / 2], [0, 0]])  # d(-A * s)/dlogp_t = -A * s / |y|
    assert metrics["clip_frac"] == 0.0
    # With eps_clip_high 0.1, s is clipped to 1.1 for the whole sequence: constant loss, no gradient.
    logp.grad = None
    clipped = AlgorithmConfig(eps_clip_low=0.2, eps_clip_high=0.1, loss_reduction="seq_mean_token_mean")
    loss, metrics = alg.gspo_loss(logp, old, t([[1, 1], [1, 1]]), mask, clipped)
    assert float(loss.detach()) == pytest.approx(-1.1, abs=1e-5)
    assert metrics["clip_frac"] == 1.0
    loss.backward()
    assert_close(logp.grad, [[0.0, 0.0], [0.0, 0.0]])


def test_policy_objective_adds_kl_and_entropy_terms():
    cfg = AlgorithmConfig(use_kl_loss=True, kl_loss_coef=0.5, kl_estimator_type="k1", use_entropy_loss=True)
    cfg.entropy_loss_coef = 0.1
    logp = t([[-1.0, -2.0]])
    mask = torch.ones(1, 2)
    adv = t([[1.0, 1.0]])
    # on-policy: ratio 1, pg loss -1; k1 KL = mean(-1 - (-1.5), -2 - (-1.5)) = 0; entropy mean 2.
    loss, metrics = alg.policy_objective(
        logp, logp.detach(), adv, mask, cfg, ref_log_probs=t([[-1.5, -1.5]]), entropy=t([[1.0, 3.0]])
    )
    assert float(loss) == pytest.approx(-1.0 + 0.5 * 0.0 - 0.1 * 2.0)
    assert metrics["policy_loss"] == pytest.approx(-1.0)
    assert metrics["entropy"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="ref_log_probs"):
        alg.policy_objective(logp, logp, adv, mask, cfg, entropy=t([[1.0, 3.0]]))


def test_regular_is_ppo():
    assert registry.get_policy_loss("regular") is registry.get_policy_loss("ppo") is alg.ppo_loss


# ------------------------------------------------------------------------------------------ KL, entropy


def test_kl_estimators_by_hand():
    logp, ref = t([[-1.0, -3.0]]), t([[-1.5, -3.0]])  # log ratio 0.5 and 0
    assert_close(alg.kl_penalty(logp, ref, "k1"), [[0.5, 0.0]])
    assert_close(alg.kl_penalty(logp, ref, "k2"), [[0.125, 0.0]])
    assert_close(alg.kl_penalty(logp, ref, "k3"), [[math.exp(-0.5) - 1 + 0.5, 0.0]])  # 0.10653
    assert_close(alg.kl_penalty(-ref, -logp, "abs"), [[0.5, 0.0]])
    with pytest.raises(ValueError, match="k3"):
        alg.kl_penalty(logp, ref, "k4")


def test_kl_in_reward_only_touches_response_tokens():
    rewards = t([[0.0, 1.0, 7.0]])
    logp, ref = t([[-1.0, -1.0, -1.0]]), t([[-1.5, -0.5, -9.0]])  # k1: 0.5, -0.5, (8 on padding)
    mask = t([[1, 1, 0]])
    new, kl = alg.apply_kl_in_reward(rewards, logp, ref, 0.1, "k1", mask)
    assert_close(new, [[-0.05, 1.05, 7.0]])
    assert kl == pytest.approx(0.0)


def test_kl_loss_is_masked():
    logp, ref = t([[-1.0, -1.0]]), t([[-1.5, 50.0]])
    assert float(alg.kl_loss(logp, ref, t([[1, 0]]), "k3")) == pytest.approx(math.exp(-0.5) - 0.5, abs=1e-6)


def test_entropy_from_logits_by_hand():
    logits = torch.stack([torch.zeros(4), torch.tensor([0.0, math.log(3.0), -1e4, -1e4])])[None]
    # uniform over 4: ln 4; probabilities [1/4, 3/4]: -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.5623.
    expected = [[math.log(4), -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))]]
    assert_close(alg.entropy_from_logits(logits), expected)
    assert_close(alg.entropy_from_logits(t([[[1000.0, 1000.0]]])), [[math.log(2)]])  # stable


def test_log_probs_from_logits_matches_log_softmax():
    logits = t([[[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]])
    labels = torch.tensor([[2, 0]])
    expected = [[3.0 - math.log(math.e + math.e**2 + math.e**3), -math.log(3)]]
    assert_close(alg.log_probs_from_logits(logits, labels), expected)
    hot = alg.log_probs_from_logits(logits, labels, temperature=2.0)
    assert_close(hot, torch.log_softmax(logits / 2, -1).gather(-1, labels[..., None])[..., 0])


# ------------------------------------------------------------------------------------------ value loss


def test_clipped_value_loss_by_hand():
    # token 0: (1-2)^2 = 1 vs clipped V = 0.5 + 0.2 = 0.7: (0.7-2)^2 = 1.69 -> 1.69
    # token 1: (0-0)^2 = 0 vs clipped V = 0.5 - 0.2 = 0.3: 0.09 -> 0.09; token 2 is padding.
    values, old, returns = t([[1.0, 0.0, 50.0]]), t([[0.5, 0.5, 0.0]]), t([[2.0, 0.0, 0.0]])
    loss, metrics = alg.value_loss(values, old, returns, t([[1, 1, 0]]), value_clip=0.2)
    assert float(loss) == pytest.approx(0.5 * (1.69 + 0.09) / 2)
    assert metrics["vf_clip_frac"] == pytest.approx(1.0)
    plain, _ = alg.value_loss(values, old, returns, t([[1, 1, 0]]), value_clip=None)
    assert float(plain) == pytest.approx(0.5 * (1.0 + 0.0) / 2)


# ------------------------------------------------------------------------------------------ reductions


def test_reductions_ignore_masked_garbage_and_accumulate_exactly():
    losses = t([[1.0, 2.0, float("inf")], [3.0, float("nan"), 0.0], [4.0, 4.0, 4.0]])
    mask = t([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # row 2: an error trajectory, no tokens
    assert float(alg.reduce_loss(losses, mask, "token_mean")) == pytest.approx(2.0)
    assert float(alg.reduce_loss(losses, mask, "seq_mean_token_sum")) == pytest.approx(3.0)
    assert float(alg.reduce_loss(losses, mask, "seq_mean_token_mean")) == pytest.approx(2.25)
    # Micro-batches with the whole batch's denominators add up to the whole batch's loss.
    for mode, kw in (("token_mean", {"num_tokens": 3}), ("seq_mean_token_mean", {"num_sequences": 2})):
        parts = sum(float(alg.reduce_loss(losses[i : i + 1], mask[i : i + 1], mode, **kw)) for i in range(3))
        assert parts == pytest.approx(float(alg.reduce_loss(losses, mask, mode)))
    with pytest.raises(ValueError, match="token_mean"):
        alg.reduce_loss(losses, mask, "token_avg")
    assert float(alg.reduce_loss(losses, torch.zeros(3, 3), "token_mean")) == 0.0


def test_masked_whiten_by_hand():
    x, mask = t([[1.0, 3.0, 100.0]]), t([[1, 1, 0]])
    assert_close(alg.masked_whiten(x, mask), [[-1 / math.sqrt(2), 1 / math.sqrt(2), 0.0]], tol=1e-6)


# ------------------------------------------------------------------------------------------ registries


def test_builtins_match_the_config_lists():
    assert set(registry.ADVANTAGE_ESTIMATORS.names()) >= set(BUILTIN_ADVANTAGE_ESTIMATORS)
    assert set(registry.POLICY_LOSSES.names()) >= set(BUILTIN_POLICY_LOSSES)


def test_unknown_names_suggest_close_ones():
    with pytest.raises(
        registry.UnknownAlgorithmError, match=r"unknown advantage estimator 'grop'.*did you mean 'grpo'"
    ):
        registry.get_advantage_estimator("grop")
    with pytest.raises(LookupError, match=r"did you mean 'dual_clip'.*Registered: .*gspo"):
        registry.get_policy_loss("dualclip")


def test_custom_estimator_and_loss_register_and_run(monkeypatch):
    monkeypatch.setattr(
        registry.ADVANTAGE_ESTIMATORS, "_entries", dict(registry.ADVANTAGE_ESTIMATORS._entries)
    )
    monkeypatch.setattr(registry.POLICY_LOSSES, "_entries", dict(registry.POLICY_LOSSES._entries))

    @alg.register_advantage_estimator("reward_as_advantage")
    def reward_as_advantage(
        token_level_rewards, response_mask, group_ids, values=None, gamma=1.0, lambd=1.0, **kw
    ):
        return token_level_rewards * response_mask, token_level_rewards * response_mask

    @alg.register_policy_loss("neg_logp")
    def neg_logp(log_probs, old_log_probs, advantages, response_mask, cfg):
        return alg.reduce_loss(-log_probs * advantages, response_mask, cfg.loss_reduction), {}

    with pytest.raises(ValueError, match="already registered"):
        alg.register_advantage_estimator("grpo")(reward_as_advantage)

    from skyrl_train.config import load_config

    cfg = load_config(
        None,
        [
            "trainer.algorithm.advantage_estimator=reward_as_advantage",
            "trainer.algorithm.policy_loss_type=neg_logp",
        ],
    )
    batch = type("B", (), {})()
    batch.token_level_rewards, batch.response_mask = t([[0.0, 2.0]]), t([[1, 1]])
    batch.group_ids, batch.valid, batch.values = torch.tensor([0]), torch.tensor([True]), None
    metrics = alg.compute_batch_advantages(batch, cfg.trainer.algorithm)
    assert_close(batch.advantages, [[0.0, 2.0]])
    assert metrics["advantage_mean"] == pytest.approx(1.0)
    loss, _ = alg.policy_objective(
        t([[-1.0, -1.0]]), t([[-1.0, -1.0]]), batch.advantages, batch.response_mask, cfg.trainer.algorithm
    )
    assert float(loss) == pytest.approx(1.0)


def test_compute_batch_advantages_with_kl_in_reward():
    cfg = AlgorithmConfig(use_kl_in_reward=True, init_kl_coef=1.0, kl_estimator_type="k1")
    batch = type("B", (), {})()
    batch.token_level_rewards, batch.response_mask = t([[0.0, 1.0], [0.0, 0.0]]), t([[1, 1], [1, 1]])
    batch.group_ids, batch.valid, batch.values = torch.tensor([0, 0]), torch.tensor([True, True]), None
    batch.old_log_probs, batch.rollout_log_probs = t([[-1.0, -1.0], [-1.0, -1.0]]), None
    batch.ref_log_probs = t([[-1.0, -1.5], [-1.0, -1.0]])  # row 0 pays k1 = 0.5 on its second token
    metrics = alg.compute_batch_advantages(batch, cfg)
    assert_close(batch.token_level_rewards, [[0.0, 0.5], [0.0, 0.0]])
    assert metrics["kl_in_reward"] == pytest.approx(0.125)
    a = 0.25 / (math.sqrt(0.125) + 1e-6)  # scores 0.5 and 0: +-0.25 / unbiased std sqrt(0.125)
    assert_close(batch.advantages, [[a, a], [-a, -a]])


def test_every_shipped_algorithm_is_named_once_for_the_config_and_the_registries():
    """The config's rules and the registries read one list: every estimator and loss the algorithms package
    registers is in it, so a rule cannot miss one (a critic set for raft is refused like for grpo)."""
    from skyrl_train import names
    from skyrl_train.config import ConfigError, load_config
    from skyrl_train.training.algorithms.registry import ADVANTAGE_ESTIMATORS, POLICY_LOSSES

    assert ADVANTAGE_ESTIMATORS is names.ADVANTAGE_ESTIMATORS and POLICY_LOSSES is names.POLICY_LOSSES
    assert (
        set(ADVANTAGE_ESTIMATORS)
        == set(names.BUILTIN_ADVANTAGE_ESTIMATORS)
        == set(BUILTIN_ADVANTAGE_ESTIMATORS)
    )
    assert set(POLICY_LOSSES) == set(names.BUILTIN_POLICY_LOSSES) == set(BUILTIN_POLICY_LOSSES)
    for name in names.BUILTIN_ADVANTAGE_ESTIMATORS:
        if name != "gae":
            with pytest.raises(
                ConfigError, match=re.escape(f"advantage_estimator={name!r} does not use values")
            ):
                load_config(
                    "sql_cpu",
                    [f"trainer.algorithm.advantage_estimator={name}", "trainer.critic.model.path=x"],
                )
