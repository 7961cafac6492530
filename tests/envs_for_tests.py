"""Small environments used by the core tests, written the way SkyRL documents environments."""

from __future__ import annotations

import time
from typing import Any

from omegaconf import DictConfig

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput


class CountdownEnv(BaseTextEnv):
    """Say the secret number (extras["reward_spec"]["ground_truth"]) within max_turns; feedback each turn."""

    protocol_tags = ("answer",)

    def __init__(self, env_config: DictConfig | None = None, extras: dict[str, Any] | None = None):
        super().__init__()
        extras = extras or {}
        self.env_config = env_config
        self.secret = str(extras.get("reward_spec", {}).get("ground_truth", "7"))
        self.max_turns = int(extras.get("max_turns", 3))
        self.history: list[str] = []

    def sample_task(self, seed: int | None = None) -> dict[str, Any]:
        secret = str((seed or 0) % 10)
        return {
            "prompt": [{"role": "user", "content": "Guess a digit in <answer></answer>."}],
            "extras": {"reward_spec": {"method": "rule", "ground_truth": secret}, "max_turns": 3},
        }

    def reference_action(self) -> str:
        return f"<answer>{self.secret}</answer>"

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        self.history.append(action)
        start, end = action.rfind("<answer>"), action.rfind("</answer>")
        guess = action[start + len("<answer>") : end].strip() if 0 <= start < end else None
        if guess == self.secret:
            return BaseTextEnvStepOutput(observations=[], reward=1.0, done=True, metadata={"guess": guess})
        done = self.turns >= self.max_turns
        metadata: dict[str, Any] = {"guess": guess}
        if done:
            metadata.update(end="truncated", truncated_by="max_turns")
        hint = "Wrong format: use <answer>digit</answer>." if guess is None else f"{guess} is wrong."
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": hint}], reward=0.0, done=done, metadata=metadata
        )


class SleepyEnv(BaseTextEnv):
    """Sleeps for the number of seconds given as the action."""

    def __init__(self, env_config=None, extras=None):
        super().__init__()
        self.max_turns = 10

    def step(self, action: str) -> BaseTextEnvStepOutput:
        time.sleep(float(action))
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": "z"}], reward=0.0, done=False, metadata={}
        )


class CrashyEnv(BaseTextEnv):
    """Raises on the action 'boom'."""

    def __init__(self, env_config=None, extras=None):
        super().__init__()
        self.max_turns = 5

    def step(self, action: str) -> BaseTextEnvStepOutput:
        if action == "boom":
            raise RuntimeError("the database went away")
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": "ok"}], reward=0.0, done=False, metadata={}
        )
