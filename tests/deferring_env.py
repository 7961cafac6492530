"""A small environment that can defer its verification, for the tests of ``evaluate()`` and the runner."""

from __future__ import annotations

from typing import Any

from envs_for_tests import CountdownEnv

from skyrl_gym.envs.base_text_env import BaseTextEnvStepOutput


class DeferredCountdownEnv(CountdownEnv):
    """``CountdownEnv`` whose answer is checked by a "slow grader": in the answering step, or in ``evaluate()``
    after ``defer_verification()``. ``grader_runs`` counts the verifications."""

    supports_deferred_verification = True

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.deferred = getattr(self, "deferred", False)
        self.pending_guess: str | None = None
        self.grader_runs = 0

    def defer_verification(self) -> None:
        self.deferred = True

    def _grade(self, guess: str | None) -> float:
        self.grader_runs += 1
        return 1.0 if guess == self.secret else 0.0

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        start, end = action.rfind("<answer>"), action.rfind("</answer>")
        guess = action[start + len("<answer>") : end].strip() if 0 <= start < end else None
        if guess is None:
            done = self.turns >= self.max_turns
            metadata: dict[str, Any] = {"end": "truncated", "truncated_by": "max_turns"} if done else {}
            observations = [{"role": "user", "content": "Answer in <answer>digit</answer>."}]
            return BaseTextEnvStepOutput(observations=observations, reward=0.0, done=done, metadata=metadata)
        if self.deferred:
            self.pending_guess = guess
            return BaseTextEnvStepOutput(
                observations=[], reward=0.0, done=True, metadata={"verification": "deferred"}
            )
        return BaseTextEnvStepOutput(observations=[], reward=self._grade(guess), done=True, metadata={})

    def evaluate(self) -> dict[str, Any] | None:
        if self.pending_guess is None:
            return None
        guess, self.pending_guess = self.pending_guess, None
        return {"reward": self._grade(guess), "graded": guess}
