"""TrainingBatch: padding, alignment of logits with response tokens, reward placement, splitting."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")

from skyrl_train.training.batch import TrainingBatch  # noqa: E402


def traj(
    prompt,
    response,
    mask,
    *,
    logprobs=None,
    spans=None,
    turn_rewards=(),
    reward=0.0,
    end="terminated",
    group=0,
):
    return types.SimpleNamespace(
        prompt_ids=list(prompt),
        response_ids=list(response),
        loss_mask=list(mask),
        logprobs=list(logprobs) if logprobs is not None else [0.0] * len(response),
        turn_spans=list(spans or []),
        turn_rewards=list(turn_rewards),
        reward=reward,
        end=end,
        group_id=group,
    )


def hand_made() -> list:
    # A: two model turns (21 22) and (23) with an observation token 31 between them.
    a = traj(
        [11, 12],
        [21, 22, 31, 23],
        [1, 1, 0, 1],
        logprobs=[-0.1, -0.2, 0.0, -0.3],
        spans=[(0, 2), (3, 4)],
        turn_rewards=[0.5, 1.0],
        reward=1.5,
    )
    b = traj([13], [24], [1], logprobs=[-0.4], turn_rewards=[1.0], reward=1.0)
    c = traj([14, 15, 16], [25, 26], [1, 1], logprobs=[-0.5, -0.6], reward=0.0, end="error", group=1)
    return [a, b, c]


def test_padding_layout_by_hand():
    batch = TrainingBatch.from_trajectories(hand_made(), pad_id=0)
    assert batch.prompt_width == 3 and batch.response_width == 4
    # prompts left-padded to 3 columns, responses right-padded to 4.
    assert batch.input_ids.tolist() == [
        [0, 11, 12, 21, 22, 31, 23],
        [0, 0, 13, 24, 0, 0, 0],
        [14, 15, 16, 25, 26, 0, 0],
    ]
    assert batch.attention_mask.tolist() == [
        [0, 1, 1, 1, 1, 1, 1],
        [0, 0, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 1, 0, 0],
    ]
    assert batch.position_ids.tolist() == [
        [0, 0, 1, 2, 3, 4, 5],
        [0, 0, 0, 1, 0, 0, 0],
        [0, 1, 2, 3, 4, 0, 0],
    ]
    # The error trajectory keeps its place but has no loss tokens.
    assert batch.response_mask.tolist() == [[1, 1, 0, 1], [1, 0, 0, 0], [0, 0, 0, 0]]
    assert batch.valid.tolist() == [True, True, False]
    assert batch.group_ids.tolist() == [0, 0, 1]
    # Each turn's reward on the last token the model generated in that turn.
    assert batch.token_level_rewards.tolist() == [[0.0, 0.5, 0.0, 1.0], [1.0, 0, 0, 0], [0, 0, 0, 0]]
    torch.testing.assert_close(
        batch.rollout_log_probs, torch.tensor([[-0.1, -0.2, 0.0, -0.3], [-0.4, 0, 0, 0], [0, 0, 0, 0]])
    )
    assert batch.response_ids.tolist() == [[21, 22, 31, 23], [24, 0, 0, 0], [25, 26, 0, 0]]
    assert batch.num_tokens == 4 and batch.num_sequences == 2
    assert batch.old_log_probs is None and batch.advantages is None


def test_response_logits_predict_the_next_token():
    """With logits[p] = one-hot(input_ids[p]) (a model that echoes its input), the slice that scores
    response token j must echo the token just before it: the last prompt token for j = 0."""
    batch = TrainingBatch.from_trajectories(hand_made(), pad_id=0)
    echo = torch.nn.functional.one_hot(batch.input_ids, num_classes=40).float()
    previous = batch.response_logits(echo).argmax(-1)
    assert previous.tolist() == [[12, 21, 22, 31], [13, 24, 0, 0], [16, 25, 26, 0]]
    assert batch.response_logits(echo).shape == (3, 4, 40)


def test_reward_placement_without_turn_spans():
    # Spans derived from the runs of 1s in the loss mask; the trajectory's reward when there are no turn
    # rewards; a mismatch between turns and rewards puts the sum on the last model token.
    runs = traj([1], [5, 6, 7, 8], [1, 0, 1, 0], turn_rewards=[2.0, 3.0])
    total = traj([1], [5, 6, 7], [1, 1, 0], reward=4.0)
    mismatch = traj([1], [5, 6, 7], [1, 0, 1], turn_rewards=[1.0, 1.0, 1.0])
    batch = TrainingBatch.from_trajectories([runs, total, mismatch], pad_id=0)
    assert batch.token_level_rewards.tolist() == [[2.0, 0, 3.0, 0], [0, 4.0, 0, 0], [0, 0, 3.0, 0]]


def test_split_select_and_to():
    batch = TrainingBatch.from_trajectories(hand_made(), pad_id=0)
    batch.advantages = torch.arange(12.0).reshape(3, 4)
    parts = batch.split(2)
    assert [len(p) for p in parts] == [2, 1]
    assert parts[1].input_ids.tolist() == [[14, 15, 16, 25, 26, 0, 0]]
    assert parts[1].advantages.tolist() == [[8.0, 9.0, 10.0, 11.0]]
    assert parts[0].prompt_width == 3 and parts[0].ref_log_probs is None
    assert torch.equal(torch.cat([p.response_mask for p in parts]), batch.response_mask)
    picked = batch.select([2, 0])
    assert picked.group_ids.tolist() == [1, 0]
    moved = batch.to("cpu")
    assert moved.input_ids.device.type == "cpu" and moved.advantages is not None
    with pytest.raises(ValueError, match="micro_batch_size"):
        batch.split(0)


def test_bad_trajectories_are_named():
    with pytest.raises(ValueError, match="trajectory 1: 1 loss_mask entries for 2 response tokens"):
        TrainingBatch.from_trajectories([traj([1], [2], [1]), traj([1], [2, 3], [1])], pad_id=0)
    with pytest.raises(ValueError, match="empty prompt"):
        TrainingBatch.from_trajectories([traj([], [2], [1])], pad_id=0)
    missing = traj([1], [2], [1])
    missing.logprobs = None
    assert TrainingBatch.from_trajectories([missing], pad_id=0).rollout_log_probs is None


def test_with_the_generators_trajectory_and_the_algorithms():
    base = pytest.importorskip("skyrl_train.rollout.records")
    from skyrl_train.config import AlgorithmConfig
    from skyrl_train.training.algorithms import compute_batch_advantages

    trajectories = [
        base.TrajectoryResult(
            prompt_ids=[1, 2],
            response_ids=[3, 4],
            loss_mask=[1, 1],
            logprobs=[-0.5, -0.5],
            turn_spans=[(0, 2)],
            turn_rewards=[r],
            reward=r,
            end="terminated",
            group_id=0,
            sample_index=i,
        )
        for i, r in enumerate([1.0, 0.0])
    ]
    batch = TrainingBatch.from_trajectories(trajectories, pad_id=0)
    compute_batch_advantages(batch, AlgorithmConfig(grpo_norm_by_std=False))
    assert batch.advantages.tolist() == [[0.5, 0.5], [-0.5, -0.5]]
