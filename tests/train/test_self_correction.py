"""Self-correction warm-up steps: the model's own sampled episodes, its first queries played through the real
text2sql database, read and answered by the environment's continuation (``reference_continuation``).

The "model" here is a :class:`ScriptedEngine` that answers each of four questions in its own way, so that every
kind of sample is there: a right answer given at once, a wrong one, a wrong first query and a right one."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")

from skyrl_gym.core import Misstep  # noqa: E402
from skyrl_gym.envs.sql.tasks import load_split  # noqa: E402
from skyrl_train.config import AlgorithmConfig, OptimizerConfig  # noqa: E402
from skyrl_train.inference.scripted import SamplingParams, ScriptedEngine  # noqa: E402
from skyrl_train.loop.warmup import continued_episodes, own_episodes, scripted_turns, self_correction_step  # noqa: E402
from skyrl_train.models import load_model  # noqa: E402
from skyrl_train.rollout import MultiTurnGenerator  # noqa: E402
from skyrl_train.training.workers import PolicyWorker  # noqa: E402

PARAMS = SamplingParams(temperature=0.0, max_tokens=4096)
WRONG_QUERY = "SELECT 1 FROM no_such_table"


@pytest.fixture(scope="module")
def sql_rows():
    return [r for r in load_split("train") if r["extra_info"]["level"] == "easy"][:4]


def factory(engine):
    return MultiTurnGenerator(engine, max_turns=2)


def gold(row) -> str:
    return row["reward_spec"]["ground_truth"]


def model_script(rows):
    """Row 0: the gold answer at once; row 1: a wrong answer at once; row 2: a query on a table that does not
    exist, then a wrong answer; row 3: the gold query, then the gold answer."""

    def script(conversation: str) -> str:
        index = next(i for i, r in enumerate(rows) if r["extra_info"]["question"] in conversation)
        answered = conversation.count("<|im_start|>assistant") > 1  # an earlier turn of its own: a query ran
        if index == 0 or (index == 3 and answered):
            return f"<think>Known.</think>\n<solution>{gold(rows[index])}</solution>"
        if index == 1 or answered:
            return "<think>Guess.</think>\n<solution>SELECT 42</solution>"
        query = WRONG_QUERY if index == 2 else gold(rows[index])
        return f"<think>Check first.</think>\n<sql>{query}</sql>"

    return script


def sample(tokenizer, rows, samples=1):
    generator = factory(ScriptedEngine(tokenizer, model_script(rows)))
    return asyncio.run(generator.generate(rows, samples, PARAMS)).trajectories


def test_the_continuation_follows_the_models_own_first_turn(tokenizer, sql_rows):
    generator = factory(ScriptedEngine(tokenizer, scripted_turns([])))
    wrong = f"<think>Check first.</think>\n<sql>{WRONG_QUERY}</sql>"
    right = f"<think>Check first.</think>\n<sql>{gold(sql_rows[3])}</sql>"
    answer = f"<think>Known.</think>\n<solution>{gold(sql_rows[0])}</solution>"
    episodes = continued_episodes([sql_rows[2], sql_rows[3], sql_rows[0]], [wrong, right, answer], generator)
    (misstep, fix), (kept, confirm), ended = episodes
    assert isinstance(misstep, Misstep) and misstep == wrong and misstep.keep.endswith("<sql>")
    assert fix.startswith("<think>The query failed.") and fix.endswith(
        f"<solution>{gold(sql_rows[2])}</solution>"
    )
    assert kept == right and not isinstance(kept, Misstep)
    assert confirm.startswith("<think>The result answers the question.</think>")
    assert ended is None  # an answer ends the episode: nothing continues it


@pytest.fixture(scope="module")
def two_samples(tokenizer, sql_rows):
    """Two samples of each row: right answers (row 0), wrong answers (row 1), wrong queries (row 2) and right
    queries (row 3)."""
    sampled = sample(tokenizer, sql_rows, samples=2)
    assert [t.reward for t in sampled] == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    return sampled


def own(tokenizer, sql_rows, sampled, fraction, seed=0):
    return own_episodes(
        sql_rows, sampled, factory, tokenizer, PARAMS, 1.0, episode_fraction=fraction, seed=seed
    )


def test_own_episodes_correct_the_models_queries_and_keep_its_right_answers(tokenizer, sql_rows, two_samples):
    # half of the eight query first, as episode_fraction asks: every sample stays the model's own, but for
    # the wrong answers given at once, which become the reference answer
    trajectories, counts = own(tokenizer, sql_rows, two_samples, 0.5)
    assert counts == {
        "warmup/own_sampled": 8.0,
        "warmup/own_acted_first": 4.0,
        "warmup/own_first_turn_right": 2.0,
        "warmup/own_direct_solved": 2.0,
        "warmup/trained_own_query": 4.0,
        "warmup/trained_own_answer": 2.0,
        "warmup/trained_reference_answer": 2.0,
        "warmup/trained_reference_episode": 0.0,
    }
    # every episode earns the full reward through the database
    assert len(trajectories) == 8 and all(t.reward == 1.0 and not t.is_error for t in trajectories)
    assert sorted(t.num_turns for t in trajectories) == [1, 1, 1, 1, 2, 2, 2, 2]
    for trajectory in trajectories:
        if trajectory.num_turns == 1:
            assert set(trajectory.loss_mask[slice(*trajectory.turn_spans[0])]) == {1}
            assert "SELECT 42" not in tokenizer.decode(trajectory.response_ids)  # no wrong answer is taught
            continue
        (first_start, first_end), (second_start, second_end) = trajectory.turn_spans
        first_mask = trajectory.loss_mask[first_start:first_end]
        observation = trajectory.messages[-2]["content"]
        if "no_such_table" in tokenizer.decode(trajectory.response_ids[first_start:first_end]):
            # the model's own wrong query: its decision to query stays in the loss, the query does not
            assert "Error" in observation and 0 in first_mask and first_mask[0] == 1
        else:
            assert set(first_mask) == {1}  # a right query is the model's own good turn
        assert set(trajectory.loss_mask[second_start:second_end]) == {1}


def test_a_model_that_queries_more_than_the_share_keeps_its_corrections(tokenizer, sql_rows, two_samples):
    # a quarter may query first: two of the four query-first samples give way, the right queries (row 3),
    # which only confirm, before the corrections of the wrong ones (row 2)
    for seed in range(4):
        trajectories, counts = own(tokenizer, sql_rows, two_samples, 0.25, seed)
        assert counts["warmup/trained_own_query"] == 2.0
        assert counts["warmup/trained_reference_answer"] == 4.0  # row 3's two and row 1's two
        assert (
            counts["warmup/trained_own_answer"] == 2.0 and counts["warmup/trained_reference_episode"] == 0.0
        )
        multi = [t for t in trajectories if t.num_turns > 1]
        assert len(multi) == 2 and all(t.group_id in (0, 1) for t in multi)  # played first: row 2's
        assert all("no_such_table" in tokenizer.decode(t.response_ids) for t in multi)
        assert all(t.reward == 1.0 for t in trajectories) and len(trajectories) == 8
    # none may query first: every query-first sample becomes the row's answer
    _, counts = own(tokenizer, sql_rows, two_samples, 0.0)
    assert counts["warmup/trained_own_query"] == 0.0 and counts["warmup/trained_reference_answer"] == 6.0


def test_a_model_that_queries_less_than_the_share_gets_reference_episodes(tokenizer, sql_rows, two_samples):
    # three quarters: two of the answers given at once become reference episodes, the wrong ones (row 1) first
    trajectories, counts = own(tokenizer, sql_rows, two_samples, 0.75)
    assert counts["warmup/trained_own_query"] == 4.0 and counts["warmup/trained_reference_episode"] == 2.0
    assert counts["warmup/trained_own_answer"] == 2.0 and counts["warmup/trained_reference_answer"] == 0.0
    assert sum(t.num_turns > 1 for t in trajectories) == 6 and all(t.reward == 1.0 for t in trajectories)
    # played in sample order, the queries first: row 1's answers are the last two
    assert [t.num_turns > 1 for t in sorted(trajectories, key=lambda t: t.group_id)][-4:] == [
        False,
        False,
        True,
        True,
    ]
    # all of them: the right answers given at once give way too
    _, counts = own(tokenizer, sql_rows, two_samples, 1.0)
    assert counts["warmup/trained_reference_episode"] == 4.0 and counts["warmup/trained_own_answer"] == 0.0


def test_a_self_correction_step_trains_on_the_corrected_episodes(tokenizer, tiny_model, sql_rows):
    policy = PolicyWorker(
        lambda: load_model(tiny_model), OptimizerConfig(lr=1e-3), AlgorithmConfig(), micro_batch_size=4
    )
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    sampled = sample(tokenizer, sql_rows)
    metrics = self_correction_step(
        policy, factory, tokenizer, sql_rows, sampled, PARAMS, episode_fraction=0.5, seed=0
    )
    # the two queries (one corrected), the right answer, and the wrong answer's reference
    assert metrics["warmup/trajectories"] == 4.0 and metrics["warmup/dropped"] == 0.0
    assert metrics["warmup/corrections"] == 1.0 and metrics["warmup/own_acted_first"] == 2.0
    assert metrics["warmup/trained_reference_answer"] == 1.0
    assert torch.isfinite(torch.tensor(metrics["warmup/nll"])) and metrics["warmup/nll"] > 0
    after = policy.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before), "the step did not move the weights"
