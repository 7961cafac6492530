"""The supervised warm-up plays what each environment says is a known-good episode, through the real
environment: text2sql rows (a real DuckDB database) run their query in ``<sql>`` first for the share drawn
into ``episode_fraction`` and answer at once otherwise; a math environment's own reference works the same
way; an environment without one is left out."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import skyrl_gym  # noqa: E402
from skyrl_gym.core import Misstep  # noqa: E402
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput  # noqa: E402
from skyrl_gym.envs.math.tasks import build_rows  # noqa: E402
from skyrl_gym.envs.sql.tasks import load_split  # noqa: E402
from skyrl_train.config import AlgorithmConfig, OptimizerConfig  # noqa: E402
from skyrl_train.inference.scripted import SamplingParams, ScriptedEngine  # noqa: E402
from skyrl_train.loop.warmup import play_references, reference_episodes, scripted_turns, supervised_step  # noqa: E402
from skyrl_train.models import load_model  # noqa: E402
from skyrl_train.rollout import MultiTurnGenerator  # noqa: E402
from skyrl_train.training.workers import PolicyWorker  # noqa: E402

PARAMS = SamplingParams(temperature=0.0, max_tokens=4096)


@pytest.fixture(scope="module")
def sql_rows():
    return [r for r in load_split("train") if r["extra_info"]["level"] == "easy"][:4]


def factory(engine):
    return MultiTurnGenerator(engine, max_turns=2)


def test_reference_episodes_come_from_each_rows_environment(tokenizer, sql_rows):
    generator = factory(ScriptedEngine(tokenizer, scripted_turns([])))
    episodes = reference_episodes(sql_rows, generator, 1.0, seed=0)
    for row, (check, answer) in zip(sql_rows, episodes, strict=True):
        gold = row["reward_spec"]["ground_truth"]
        assert check.startswith("<think>") and check.endswith(f"<sql>{gold}</sql>")
        assert answer.startswith("<think>") and answer.endswith(f"<solution>{gold}</solution>")
    singles = reference_episodes(sql_rows, generator, 0.0, seed=0)
    assert [len(e) for e in singles] == [1] * len(sql_rows)
    assert all(
        e[0].endswith(f"<solution>{r['reward_spec']['ground_truth']}</solution>")
        for e, r in zip(singles, sql_rows, strict=True)
    )
    # the share is drawn as exactly as a whole number allows, reproducibly for a seed, different rows for
    # different seeds
    drawn = [len(e) for e in reference_episodes(sql_rows * 4, generator, 0.5, seed=3)]
    assert drawn == [len(e) for e in reference_episodes(sql_rows * 4, generator, 0.5, seed=3)]
    assert drawn.count(2) == 8 and drawn.count(1) == 8
    counts = {
        tuple(len(e) for e in reference_episodes(sql_rows * 2, generator, 0.3, seed=s)) for s in range(12)
    }
    assert {c.count(2) for c in counts} == {2, 3} and len(counts) > 2  # 0.3 of 8 rows: 2 or 3 of them


def test_the_episodes_are_played_through_the_real_database(tokenizer, sql_rows):
    trajectories = play_references(sql_rows, factory, tokenizer, PARAMS, episode_fraction=1.0, seed=0)
    assert [t.group_id for t in trajectories] == list(range(len(sql_rows)))
    for trajectory in trajectories:
        assert trajectory.end == "terminated" and trajectory.reward == 1.0, trajectory.error
        assert trajectory.num_turns == 2
        observation = trajectory.messages[-2]
        assert observation["role"] == "user" and "<observation>" in observation["content"]
        # the observation's tokens are not trained on, the model's are
        assert 0 in trajectory.loss_mask and 1 in trajectory.loss_mask


def test_a_misstep_is_played_through_the_database_and_kept_out_of_the_loss(tokenizer, sql_rows):
    def corrections(engine):
        return MultiTurnGenerator(
            engine, max_turns=2, env_configs={"text2sql": {"reference_corrections": 1.0}}
        )

    episodes = reference_episodes(
        sql_rows, corrections(ScriptedEngine(tokenizer, scripted_turns([]))), 1.0, seed=0
    )
    assert all(isinstance(e[0], Misstep) for e in episodes)
    trajectories = play_references(sql_rows, corrections, tokenizer, PARAMS, episode_fraction=1.0, seed=0)
    for trajectory, (misstep, _) in zip(trajectories, episodes, strict=True):
        assert trajectory.reward == 1.0 and trajectory.num_turns == 2, trajectory.error
        (first_start, first_end), (second_start, second_end) = trajectory.turn_spans
        first_mask = trajectory.loss_mask[first_start:first_end]
        # the plan and the <sql> tag (the decision to query first) are trained on, the near-miss query is not
        kept = first_mask.index(0)
        assert set(first_mask[:kept]) == {1} and set(first_mask[kept:]) == {0}
        trained = tokenizer.decode(trajectory.response_ids[first_start : first_start + kept])
        assert misstep.keep.endswith("<sql>") and misstep.startswith(misstep.keep)
        assert misstep.keep.startswith(trained) and len(misstep.keep) - len(trained) <= len("<sql>")
        assert trajectory.reward == 1.0 and set(trajectory.loss_mask[second_start:second_end]) == {1}
    # the database's answer to the misstep is what the recovery turn saw
    observations = [t.messages[-2]["content"] for t in trajectories]
    assert any("Error" in o for o in observations) or any("Empty" in o for o in observations)
    # with the setting off, the first turn runs the gold query and is trained on
    plain = play_references(sql_rows, factory, tokenizer, PARAMS, episode_fraction=1.0, seed=0)
    assert all(set(t.loss_mask[slice(*t.turn_spans[0])]) == {1} for t in plain)


def test_a_missteps_kept_prefix_stays_in_the_loss_token_for_token(tokenizer):
    """``keep`` is matched against the turn's own tokens: the tokens that spell it stay trained on, a token
    that runs past its end does not, and without a tokenizer the whole turn is masked."""
    from types import SimpleNamespace

    from skyrl_train.loop.warmup import mask_missteps

    action = Misstep("<think>Plan.</think>\n<sql>SELECT nme FROM t</sql>", keep="<think>Plan.</think>\n<sql>")
    ids = list(tokenizer.encode(action, add_special_tokens=False))
    prefix = len(tokenizer.encode(action.keep, add_special_tokens=False))

    def turn():
        return SimpleNamespace(
            response_ids=[7, *ids], loss_mask=[0] + [1] * len(ids), turn_spans=[(1, 1 + len(ids))]
        )

    trajectory = turn()
    assert mask_missteps(trajectory, [action], tokenizer) == 1
    assert trajectory.loss_mask == [0] + [1] * prefix + [0] * (len(ids) - prefix)
    assert tokenizer.decode(ids[:prefix]) == action.keep
    whole = turn()
    mask_missteps(whole, [action])
    assert whole.loss_mask == [0] * (1 + len(ids))
    plain = turn()
    assert mask_missteps(plain, [str(action)], tokenizer) == 0 and plain.loss_mask == [0] + [1] * len(ids)
    with pytest.raises(ValueError):
        Misstep("<sql>x</sql>", keep="<solution>")


class NoReferenceEnv(BaseTextEnv):
    """An environment that knows no reference answer (the default reference_action)."""

    def step(self, action: str) -> BaseTextEnvStepOutput:
        return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, metadata={})


@pytest.fixture()
def no_reference_env():
    skyrl_gym.register("warmup_test_no_reference", entry_point=NoReferenceEnv)
    yield "warmup_test_no_reference"
    skyrl_gym.deregister("warmup_test_no_reference")


def test_another_environments_reference_is_played_and_one_without_is_left_out(tokenizer, no_reference_env):
    math_rows = build_rows(2, seed=7, env_class="math_multi_turn", max_turns=2)
    unknown = {"prompt": [{"role": "user", "content": "?"}], "env_class": no_reference_env}
    rows = [*math_rows, unknown]
    generator = factory(ScriptedEngine(tokenizer, scripted_turns([])))
    episodes = reference_episodes(rows, generator, 1.0, seed=0)
    assert episodes[2] is None
    assert [e[0] for e in episodes[:2]] == [f"#### {r['reward_spec']['ground_truth']}" for r in math_rows]
    played = play_references(rows, factory, tokenizer, PARAMS, episode_fraction=1.0, seed=0)
    assert [t.group_id for t in played] == [0, 1] and all(t.reward == 1.0 for t in played)


def test_a_warmup_step_trains_on_the_reference_trajectories(tokenizer, tiny_model, sql_rows):
    policy = PolicyWorker(
        lambda: load_model(tiny_model), OptimizerConfig(lr=1e-3), AlgorithmConfig(), micro_batch_size=4
    )
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    metrics = supervised_step(policy, factory, tokenizer, sql_rows, PARAMS, episode_fraction=0.5, seed=1)
    assert metrics["warmup/trajectories"] == len(sql_rows) and metrics["warmup/dropped"] == 0.0
    assert torch.isfinite(torch.tensor(metrics["warmup/nll"])) and metrics["warmup/nll"] > 0
    after = policy.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before), "the warm-up did not move the weights"

    def corrections(engine):
        return MultiTurnGenerator(
            engine, max_turns=2, env_configs={"text2sql": {"reference_corrections": 1.0}}
        )

    # every row a correction episode: each counted, though its first turn keeps its plan in the loss
    metrics = supervised_step(policy, corrections, tokenizer, sql_rows, PARAMS, episode_fraction=1.0, seed=1)
    assert metrics["warmup/corrections"] == len(sql_rows) == metrics["warmup/trajectories"]


def test_an_action_is_split_into_the_turns_its_stop_strings_cut_it_into():
    from skyrl_train.loop.warmup import turns_under_stops

    calls = "<tool_call>a</tool_call>\n<tool_call>b</tool_call>"
    assert turns_under_stops([calls], ["</tool_call>"]) == [
        "<tool_call>a</tool_call>",
        "<tool_call>b</tool_call>",
    ]
    assert turns_under_stops([calls, "c"], None) == [calls, "c"]
    assert turns_under_stops(["x</s>  "], ["</s>"]) == ["x</s>  "]  # nothing after the stop: one turn
    misstep = Misstep(calls, keep="<tool_call>")
    (kept,) = turns_under_stops([misstep], ["</tool_call>"])  # a misstep's keep is of the whole action
    assert kept is misstep
