"""Dynamic sampling (trainer.algorithm.dynamic_sampling): DAPO's filter and POLARIS's replace on rollout groups,
and the trainer drawing further batches of prompts for them."""

from __future__ import annotations

import json

import pytest
import torch

from skyrl_train.config import load_config
from skyrl_train.config.base import ConfigError
from skyrl_train.loop.dynamic_sampling import DynamicSampler, has_reward_variance, mini_batch_groups
from skyrl_train.loop.trainer import Trainer
from skyrl_train.rollout.records import GeneratorOutput, TrajectoryResult
from tests.train.test_trainer import _config, sql_files  # noqa: F401  (the module's data fixture)


def _batch(
    rewards_per_group: list[list[float]], first_id: int = 0, errors: frozenset = frozenset()
) -> GeneratorOutput:
    """A batch whose group ``i`` (id ``first_id + i``) has one trajectory per reward; ``errors`` holds
    ``(group, sample)`` pairs that ended in error."""
    trajectories = [
        TrajectoryResult(
            prompt_ids=[1, 2],
            reward=reward,
            end="error" if (g, k) in errors else "terminated",
            group_id=first_id + g,
            sample_index=k,
        )
        for g, rewards in enumerate(rewards_per_group)
        for k, reward in enumerate(rewards)
    ]
    return GeneratorOutput(trajectories, {"generate/reward_mean": 0.5})


def _supply(*batches: GeneratorOutput):
    calls = []
    queue = list(batches)

    def more():
        calls.append(1)
        return queue.pop(0) if queue else None

    return more, calls


def test_variance_counts_scored_samples_only():
    assert has_reward_variance(_batch([[0.0, 1.0]]).trajectories)
    assert not has_reward_variance(_batch([[1.0, 1.0]]).trajectories)
    # the one differing sample ended in error: the scored ones agree
    assert not has_reward_variance(_batch([[0.0, 0.0, 1.0]], errors=frozenset({(0, 2)})).trajectories)


def test_filter_drops_uniform_groups_and_samples_until_the_batch_is_full():
    sampler = DynamicSampler("filter", batch_size=3, max_sample_batches=5)
    first = _batch([[0.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    more, calls = _supply(
        _batch([[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]], 10), _batch([[0.0, 1.0], [1.0, 0.0], [0, 1]], 20)
    )
    out, metrics = sampler.collect(first, more)
    assert len(calls) == 2
    assert sorted(out.groups()) == [1, 20, 21]  # the first three groups with variance, in sampling order
    assert metrics["dynamic_sampling/batches"] == 3.0 and metrics["dynamic_sampling/groups_sampled"] == 9.0
    assert metrics["dynamic_sampling/groups_kept"] == 3.0 and metrics["dynamic_sampling/full_batch"] == 1.0
    assert out.metrics == first.metrics  # the policy's own rewards: the first batch's


def test_filter_stops_at_max_sample_batches_and_when_the_data_runs_out():
    sampler = DynamicSampler("filter", batch_size=2, max_sample_batches=2)
    more, calls = _supply(_batch([[0.0, 0.0], [1.0, 1.0]], 10), _batch([[0.0, 1.0]], 20))
    out, metrics = sampler.collect(_batch([[0.0, 1.0], [1.0, 1.0]]), more)
    assert len(calls) == 1 and sorted(out.groups()) == [0]
    assert metrics["dynamic_sampling/full_batch"] == 0.0
    unlimited = DynamicSampler("filter", batch_size=4, max_sample_batches=0)
    more, calls = _supply(_batch([[0.0, 1.0]], 10))
    out, _ = unlimited.collect(_batch([[1.0, 1.0]]), more)
    assert len(calls) == 2 and sorted(out.groups()) == [10]  # the second call found no data left


def test_replace_copies_groups_with_variance_under_new_ids():
    sampler = DynamicSampler("replace", batch_size=4, max_sample_batches=3, min_replace_ratio=0.5)
    first = _batch([[0.0, 1.0], [1.0, 1.0], [0.0, 0.5], [0.0, 0.0]])
    more, calls = _supply()
    out, metrics = sampler.collect(first, more, seed=7)
    assert not calls and metrics["dynamic_sampling/groups_replaced"] == 2.0
    groups = out.groups()
    assert sorted(groups)[:2] == [0, 2] and len(groups) == 4 and min(sorted(groups)[2:]) > 3
    for gid in sorted(groups)[2:]:
        rewards = [t.reward for t in groups[gid]]
        assert rewards in ([0.0, 1.0], [0.0, 0.5])
    again, _ = sampler.collect(first, _supply()[0], seed=7)
    assert [t.reward for t in again.trajectories] == [t.reward for t in out.trajectories]  # seeded

    # below min_replace_ratio it samples further batches, as filter does
    more, calls = _supply(_batch([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]], 10))
    out, metrics = sampler.collect(_batch([[0.0, 1.0], [1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]), more)
    assert len(calls) == 1 and metrics["dynamic_sampling/groups_replaced"] == 0.0 and len(out.groups()) == 4


def test_config_rules_name_the_keys():
    with pytest.raises(ConfigError, match="min_replace_ratio is set but dynamic_sampling.type='filter'"):
        load_config(
            "sql_cpu",
            [
                "trainer.algorithm.dynamic_sampling.type=filter",
                "trainer.algorithm.dynamic_sampling.min_replace_ratio=0.5",
            ],
        )
    with pytest.raises(ConfigError, match="max_sample_batches is set but dynamic_sampling.type is null"):
        load_config("sql_cpu", ["trainer.algorithm.dynamic_sampling.max_sample_batches=3"])
    with pytest.raises(ConfigError, match="dynamic_sampling.type='filter' draws further batches"):
        load_config("sql_cpu", ["trainer.mode=async", "trainer.algorithm.dynamic_sampling.type=filter"])


def test_trainer_draws_further_batches_and_skips_an_update_without_signal(tiny_model, sql_files, tmp_path):  # noqa: F811
    """A random tiny model never writes the answer protocol: every group's rewards agree, so a step samples
    max_sample_batches batches of prompts, trains on nothing and leaves the weights as they were."""
    config = _config(
        tiny_model,
        sql_files,
        tmp_path / "run",
        "trainer.max_steps=1",
        "trainer.sft_warmup.steps=0",
        "trainer.eval_before_train=false",
        "data.val_data=[]",
        "data.eval_sets={}",
        "trainer.algorithm.dynamic_sampling.type=filter",
        "trainer.algorithm.dynamic_sampling.max_sample_batches=3",
    )
    with Trainer(config) as trainer:
        calls = []
        generate = trainer.generator.generate

        async def counting(rows, n, params, group_offset=0):
            calls.append(group_offset)
            return await generate(rows, n, params, group_offset=group_offset)

        trainer.generator.generate = counting
        before = {k: v.clone() for k, v in trainer.policy.model.state_dict().items()}
        summary = trainer.fit()
        after = trainer.policy.model.state_dict()
        assert summary["steps"] == 1
        assert len(calls) == 3 and len(set(calls)) == 3  # three batches, distinct group ids
        assert trainer.iterator.batches_done == 3
        assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize(
    ("kept", "mini", "planned", "expected"),
    [(2, 4, 1, 2), (6, 4, 2, 3), (8, 4, 2, 4), (5, 2, 2, 5), (7, 4, 4, 7), (1, 1, 3, 1), (9, 2, 5, 3)],
)
def test_a_partial_batch_splits_into_equal_mini_batches_within_the_planned_updates(
    kept, mini, planned, expected
):
    groups = mini_batch_groups(kept, mini, planned)
    assert groups == expected and kept % groups == 0 and kept // groups <= max(planned, 1)


def test_trainer_trains_on_a_partial_batch_of_groups_with_variance(tiny_model, sql_files, tmp_path):  # noqa: F811
    """One group of the first batch is given differing rewards (the model's own are all equal): the step
    keeps that group alone after max_sample_batches, updates on it in one mini-batch, and logs the counts."""
    config = _config(
        tiny_model,
        sql_files,
        tmp_path / "run",
        "trainer.max_steps=1",
        "trainer.sft_warmup.steps=0",
        "trainer.eval_before_train=false",
        "data.val_data=[]",
        "data.eval_sets={}",
        "trainer.algorithm.dynamic_sampling.type=filter",
        "trainer.algorithm.dynamic_sampling.max_sample_batches=2",
    )
    with Trainer(config) as trainer:
        generate = trainer.generator.generate

        async def first_group_differs(rows, n, params, group_offset=0):
            out = await generate(rows, n, params, group_offset=group_offset)
            if group_offset == 0:
                for t in out.trajectories:
                    if t.group_id == 0 and t.turn_rewards:  # the advantages read the turns' rewards
                        t.turn_rewards[-1] += float(t.sample_index)
                        t.reward = sum(t.turn_rewards)
            return out

        trainer.generator.generate = first_group_differs
        before = {k: v.clone() for k, v in trainer.policy.model.state_dict().items()}
        trainer.fit()
        after = trainer.policy.model.state_dict()
        assert any(not torch.equal(before[k], after[k]) for k in before)
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = next(line for line in lines if "dynamic_sampling/groups_kept" in line)
    assert step["dynamic_sampling/groups_kept"] == 1.0 and step["dynamic_sampling/batches"] == 2.0
    assert step["dynamic_sampling/groups_sampled"] == 4.0 and step["policy/num_updates"] == 1.0
