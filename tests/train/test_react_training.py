"""One GRPO step of the trainer with the ReAct agent (``generator.agent: react``) over the real text2sql
environment and its DuckDB databases, on the shared tiny random model.

A random model never writes a tool call, so every reward of a group would be equal and GRPO would have nothing
to learn from. The rollouts come from a :class:`ScriptedEngine` instead (the policy being trained is still the
tiny model: the trainer recomputes the log-probs of the scripted tokens): in every group one sample queries the
database with the ``sql`` tool and then calls ``finish`` with the gold query (reward 1), one writes no tool call
(reward 0) and one fails in the engine (an error trajectory), so the step checks that an error trajectory is
masked alone while the rest of its group trains.
"""

from __future__ import annotations

import json

import pytest
import torch

from skyrl_gym.envs.sql.prompts import build_compact_prompt
from skyrl_gym.envs.sql.tasks import load_split
from skyrl_gym.runtime.sql.database import open_database
from skyrl_gym.tools.react import render_tool_call
from skyrl_train.config import load_config
from skyrl_train.inference.scripted import ScriptedEngine
from skyrl_train.loop.trainer import Trainer

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def sql_rows(tmp_path_factory):
    """Two easy text2sql training rows (compact prompts), as a JSONL file, and the rows themselves."""
    rows = [r for r in load_split("train") if r["extra_info"]["level"] == "easy"][:2]
    for row in rows:
        with open_database(row["db_path"]) as db:
            row["prompt"] = build_compact_prompt(db, row["extra_info"]["question"])
    path = tmp_path_factory.mktemp("react_sql") / "train.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path, rows


class GroupScript:
    """Per group (one prompt's samples, told apart by the order of their first turns): sample 0 runs the gold
    query with ``sql`` and then finishes with it, sample 1 never calls a tool, sample 2 makes the engine fail."""

    UNSURE = "I am not sure which table to use."

    def __init__(self, rows):
        self.gold = {row["extra_info"]["question"]: row["reward_spec"]["ground_truth"] for row in rows}
        self.first_turns: dict[str, int] = {}
        self.junk: set[str] = set()

    def __call__(self, conversation: str) -> str:
        question = next(q for q in self.gold if q in conversation)
        gold = self.gold[question]
        if "<|im_start|>tool\n" in conversation:  # the sql tool answered: hand in the gold query
            return render_tool_call("finish", {"answer": gold})
        if self.UNSURE in conversation:  # a later turn of the sample that calls no tool
            return self.UNSURE
        sample = self.first_turns.get(question, 0)
        self.first_turns[question] = sample + 1
        if sample == 0:
            return "Let me look at the data first.\n" + render_tool_call("sql", {"query": gold})
        if sample == 1:
            return self.UNSURE
        raise RuntimeError("the engine lost its connection")


def test_one_grpo_step_with_the_react_agent_trains_and_masks_error_trajectories_alone(
    tiny_model, sql_rows, tmp_path
):
    path, rows = sql_rows
    config = load_config(
        "sql_cpu",
        [
            f"trainer.policy.model.path={tiny_model}",
            f"data.train_data=[{path}]",
            "data.val_data=[]",
            "data.shuffle=false",
            f"trainer.run_dir={tmp_path / 'run'}",
            "trainer.train_batch_size=2",
            "trainer.policy_mini_batch_size=2",
            "trainer.micro_train_batch_size_per_gpu=6",
            "trainer.sft_warmup.steps=0",
            "trainer.eval_before_train=false",
            "trainer.max_wall_time_s=null",
            "trainer.max_steps=1",
            "trainer.ckpt_interval=0",
            "trainer.logger=[jsonl]",
            "trainer.policy.optimizer_config.lr=1e-3",
            "generator.agent=react",
            "generator.agent.tools=[sql]",
            "generator.n_samples_per_prompt=3",
            "generator.max_turns=3",
            "generator.max_tokens_per_trajectory=512",
            "generator.sampling_params.max_generate_length=128",
            "generator.sampling_params.stop=[</tool_call>]",
        ],
    )
    with Trainer(config) as trainer:
        script = GroupScript(rows)
        trainer.generator.engine = ScriptedEngine(trainer.tokenizer, script, logprob=None)
        batches = []
        train_batch = trainer.policy.train_batch

        def recording_train_batch(batch, *args, **kwargs):
            batches.append(batch)
            return train_batch(batch, *args, **kwargs)

        trainer.policy.train_batch = recording_train_batch
        before = {k: v.clone() for k, v in trainer.policy.full_state_dict().items()}
        summary = trainer.fit()
        after = trainer.policy.full_state_dict()
    assert summary["steps"] == 1

    # what the run logged for its one step
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    (metrics,) = [entry for entry in logged if "policy/loss" in entry]

    # the step trained
    assert torch.isfinite(torch.tensor(metrics["policy/loss"])) and metrics["policy/num_updates"] == 1.0
    assert any(not torch.equal(before[k], after[k]) for k in before), "the step did not move the weights"

    # per group: one solved through sql + finish, one unsolved, one error (not scored)
    assert metrics["generate/num_trajectories"] == 6.0
    assert metrics["generate/error_count"] == 2.0 and metrics["generate/end/error"] == 2.0
    assert metrics["generate/reward_mean"] == 0.5 and metrics["generate/pass_rate"] == 0.5
    assert metrics["generate/pass_at_n"] == 1.0

    # the ReAct loop's own metrics reach the log, averaged over the scored trajectories
    react = "environment/text2sql/react_"
    assert metrics[react + "finished"] == 0.5
    assert metrics[react + "tool_calls"] == 1.0  # the solved sample calls sql and finish, the other none
    assert metrics[react + "format_errors"] == pytest.approx(3 / 2)  # the unsolved sample: 3 turns, no call
    assert metrics[react + "turns"] == pytest.approx((2 + 3) / 2)

    # the batch the policy trained on: error rows masked one by one, the rest of their group kept
    (batch,) = batches
    errors = ~batch.valid
    assert int(errors.sum()) == 2 and not bool(batch.response_mask[errors].any())
    for group in batch.group_ids.unique():
        members = (batch.group_ids == group) & batch.valid
        assert int(members.sum()) == 2
        per_row = (batch.advantages * batch.response_mask).sum(-1)[members]
        assert bool((per_row > 0).any()) and bool((per_row < 0).any())


def test_the_warm_up_plays_each_rows_reference_through_the_react_loop(sql_rows, tokenizer):
    """The warm-up asks the environment as the agent plays it (``AgentRunner.make_env``: inside ``ReActEnv``)
    for its reference, so the references are tool calls and they earn the full reward through the loop."""
    from skyrl_train.config import SamplingParams
    from skyrl_train.loop.warmup import play_references, reference_episodes
    from skyrl_train.rollout.runner import AgentRunner

    _, rows = sql_rows
    config = load_config("sql_cpu", ["generator.agent=react", "generator.agent.tools=[sql]"])

    def runner_for(engine):
        return AgentRunner.from_config(config, engine, tokenizer)

    episodes = reference_episodes(rows, runner_for(None), episode_fraction=1.0, seed=0)
    assert all(episode and all("<tool_call>" in action for action in episode) for episode in episodes)
    results = play_references(
        rows, runner_for, tokenizer, SamplingParams(max_generate_length=256), episode_fraction=1.0, seed=0
    )
    assert [r.end for r in results] == ["terminated"] * len(rows)
    assert [r.reward for r in results] == [1.0] * len(rows)


def test_a_reference_of_several_calls_in_one_action_is_played_as_the_stop_string_cuts_it(sql_rows, tokenizer):
    """With ``stop=["</tool_call>"]`` a model's turn ends at its first call, so the warm-up plays a reference
    action that holds the sql call and finish (``episode_fraction`` 0) as two turns, not one the engine would
    cut short, after which the environment would wait for a turn the script does not have."""
    from skyrl_train.config import SamplingParams
    from skyrl_train.loop.warmup import play_references
    from skyrl_train.rollout.runner import AgentRunner

    _, rows = sql_rows
    config = load_config("sql_cpu", ["generator.agent=react", "generator.agent.tools=[sql]"])

    def runner_for(engine):
        return AgentRunner.from_config(config, engine, tokenizer)

    params = SamplingParams(max_generate_length=256, stop=["</tool_call>"])
    results = play_references(rows, runner_for, tokenizer, params, episode_fraction=0.0, seed=0)
    assert [(r.end, r.reward, r.num_turns) for r in results] == [("terminated", 1.0, 2)] * len(rows)
