"""GRPO itself raises a reward: a tiny random model, a reward that only sampling and the update can teach
(the reply starts with a vowel), and the whole trainer (generation, advantages, the PPO loss, the optimizer).
The share of rewarded samples is counted per step; nothing is timed."""

from __future__ import annotations

import json

import pytest

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.registration import deregister, register
from skyrl_train.config import load_config
from skyrl_train.loop.trainer import Trainer

from .tiny_models import save_tiny_llama


class StartsWithVowel(BaseTextEnv):
    """One turn; reward 1.0 when the reply's first letter is a vowel."""

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        letters = [c for c in action.lower() if c.isalpha()]
        reward = float(bool(letters) and letters[0] in "aeiou")
        return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata={})


@pytest.fixture(scope="module")
def peaked_model(tmp_path_factory, tokenizer) -> str:
    """A 2-layer random Llama whose weights are large enough that each context favours a few tokens (the
    shared tiny model is nearly uniform over the 49k tokens: a sampled reward then has too many tokens to
    move to show progress in a few steps)."""
    return save_tiny_llama(tmp_path_factory.mktemp("peaked_model"), tokenizer, initializer_range=1.0)


def test_grpo_raises_the_share_of_rewarded_replies(peaked_model, tmp_path):
    data = tmp_path / "train.jsonl"
    with data.open("w") as handle:
        for i in range(16):
            row = {
                "prompt": [{"role": "user", "content": f"Say a word ({i})."}],
                "env_class": "test_starts_with_vowel",
            }
            handle.write(json.dumps(row) + "\n")
    run_dir = tmp_path / "run"
    config = load_config(
        "sql_cpu",
        [
            f"trainer.policy.model.path={peaked_model}",
            f"data.train_data=[{data}]",
            "data.val_data=[]",
            "data.eval_sets={}",
            f"trainer.run_dir={run_dir}",
            "trainer.sft_warmup.steps=0",
            "trainer.eval_before_train=false",
            "trainer.max_wall_time_s=null",
            "trainer.max_steps=12",
            "trainer.epochs=6",
            "trainer.ckpt_interval=100",
            "trainer.logger=[jsonl]",
            "trainer.train_batch_size=8",
            "trainer.policy_mini_batch_size=8",
            "trainer.policy.optimizer_config.lr=3e-3",
            "environment.env_class=test_starts_with_vowel",
            "generator.n_samples_per_prompt=8",
            "generator.max_turns=1",
            "generator.sampling_params.max_generate_length=3",
            "generator.max_tokens_per_trajectory=3",
            "generator.sampling_params.stop=null",
        ],
    )
    register("test_starts_with_vowel", entry_point=StartsWithVowel)
    try:
        with Trainer(config) as trainer:
            trainer.fit()
    finally:
        deregister("test_starts_with_vowel")
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rewards = [line["generate/reward_mean"] for line in lines if "generate/reward_mean" in line]
    assert len(rewards) == 12
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    # measured here: 0.21 over the first three steps, 0.89 over the last three
    assert last >= first + 0.4, rewards
