"""A custom text environment: write it, register it, make it, play one episode, check it with the kit.

    python examples/custom_env.py

The game: the prompt asks for the reverse of a word; the model answers inside <answer>...</answer>.
"""

from __future__ import annotations

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, task_ground_truth
from skyrl_gym.testing import check_env
from skyrl_gym.tools import extract_tag


class ReverseEnv(BaseTextEnv):
    protocol_tags = ("answer",)  # the checker builds its adversarial actions from these tags

    def __init__(self, env_config=None, extras=None):
        super().__init__(env_config, extras)  # sets self.extras, self.turns = 0, self.max_turns = 1
        self.word = task_ground_truth(extras, "reverse")  # extras["reward_spec"]["ground_truth"]
        self.max_turns = 2

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        answer = extract_tag(action, "answer") if isinstance(action, str) else None
        if answer is not None:  # an answer ends the episode: reward 1.0 when it is right
            reward = 1.0 if answer.strip() == self.word[::-1] else 0.0
            return BaseTextEnvStepOutput(
                observations=[], reward=reward, done=True, metadata={"answer": answer}
            )
        if self.turns >= self.max_turns:  # out of turns: truncated, no reward
            metadata = {"end": "truncated", "truncated_by": "max_turns"}
            return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, metadata=metadata)
        hint = "Write your answer as <answer>...</answer>."  # bad input gets a message, never an exception
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": hint}], reward=0.0, done=False, metadata={}
        )

    def reference_action(self):  # a known-correct action: the checker's oracle must earn full reward
        return None if self.word is None else f"<answer>{self.word[::-1]}</answer>"


def task(word: str) -> dict:
    """One task in the dataset-row shape: the chat prompt and the row's extras."""
    prompt = [{"role": "user", "content": f"Reverse the word '{word}'. Answer as <answer>...</answer>."}]
    return {"prompt": prompt, "extras": {"reward_spec": {"method": "rule", "ground_truth": word}}}


# Register under an id (a callable entry point here; a package would use "my_pkg.env:ReverseEnv").
skyrl_gym.register("reverse", entry_point=ReverseEnv, description="reverse a word (<answer>...</answer>)")

# One episode, as a trainer plays it: make from a row, init with its prompt, step with the model's text.
row = task("skyrl")
env = skyrl_gym.make("reverse", extras=row["extras"])
observations, info = env.init(row["prompt"])
print("prompt:", observations[-1]["content"])
output = env.step("Reading it backwards: <answer>lryks</answer>")  # the scripted "model" action
print("reward:", output["reward"], "done:", output["done"], "end:", output["metadata"]["end"])
env.close()

# The conformance checker plays real episodes on these tasks (the environment has no task set of its own).
report = check_env(
    lambda: skyrl_gym.make("reverse"),
    tasks=[task("skyrl"), task("gym")],
    raise_on_failure=False,  # report broken rules instead of raising ConformanceError
)
print(report.summary())
print("verdict:", "PASS" if report.ok else "FAIL")
