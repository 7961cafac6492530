"""``WordleEnv``: guess a secret five-letter word in six tries, with feedback on every letter.

The model writes its guess inside ``<guess>...</guess>`` (reasoning around it is fine; the last guess tag
counts). The environment answers with a user message that marks each letter of the guess:

- ``correct``: the right letter in the right spot;
- ``present``: the letter is in the word, in another spot;
- ``absent``: the letter is not in the word (or not as many times as the guess has it).

Guessing the word ends the episode with reward 1.0. A malformed guess costs a turn and gets a message
saying what was wrong. After ``max_turns`` guesses (6 unless the dataset row says otherwise) the episode
ends as truncated, with reward 0.0.
"""

from __future__ import annotations

import functools
import random
from importlib import resources
from typing import Any

from skyrl_gym.core import Task
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType

__all__ = ["WordleEnv", "load_words", "score_guess", "parse_guess", "MAX_GUESSES", "WORD_LENGTH"]

WORD_LENGTH = 5
MAX_GUESSES = 6
CORRECT, PRESENT, ABSENT = "correct", "present", "absent"
_OPEN, _CLOSE = "<guess>", "</guess>"

SYSTEM_PROMPT = (
    "You are playing Wordle. Find the secret five-letter English word. Think if you like, then write "
    "exactly one guess as <guess>word</guess>. After each guess you get feedback on every letter: "
    "'correct' (right letter, right spot), 'present' (in the word, another spot) or 'absent' (not in the "
    "word, or not that many times)."
)


@functools.cache
def load_words() -> tuple[str, ...]:
    """The bundled word list (package data ``words.txt``), in file order."""
    text = resources.files("skyrl_wordle").joinpath("words.txt").read_text(encoding="utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


def score_guess(guess: str, target: str) -> list[str]:
    """The mark of each letter of ``guess`` against ``target`` (both lowercase, the same length).

    Exact matches are marked first; the remaining letters are ``present`` only while the target still has
    unmatched copies of them, so ``score_guess("eerie", "speed")`` marks the third ``e`` absent.
    """
    marks = [ABSENT] * len(guess)
    unmatched: dict[str, int] = {}
    for i, (g, t) in enumerate(zip(guess, target, strict=True)):
        if g == t:
            marks[i] = CORRECT
        else:
            unmatched[t] = unmatched.get(t, 0) + 1
    for i, g in enumerate(guess):
        if marks[i] != CORRECT and unmatched.get(g, 0) > 0:
            marks[i] = PRESENT
            unmatched[g] -= 1
    return marks


def parse_guess(action: str) -> str | None:
    """The text inside the last ``<guess>...</guess>`` (tags in any case), or ``None`` without one.

    The last opening tag counts, up to the closing tag after it; if it is never closed, the last closed
    pair before it counts. Only ``find``/``rfind`` are used, so any input (a megabyte of unbalanced tags)
    takes linear time.
    """
    lowered = action.lower()  # the guess is compared in lowercase anyway
    start = lowered.rfind(_OPEN)
    end = lowered.find(_CLOSE, start) if start >= 0 else -1
    if end < 0:  # the last tag was left open: fall back to the last closed pair
        end = lowered.rfind(_CLOSE)
        start = lowered.rfind(_OPEN, 0, end) if end >= 0 else -1
        if start < 0:
            return None
    return lowered[start + len(_OPEN) : end].strip()


def _config_value(env_config: Any, key: str, default: Any) -> Any:
    if env_config is None:
        return default
    value = env_config.get(key) if hasattr(env_config, "get") else getattr(env_config, key, None)
    return default if value is None else value


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}es" if word.endswith("s") else f"{n} {word}s"


class WordleEnv(BaseTextEnv):
    """Wordle as a multi-turn text environment.

    Args:
        env_config: ``dictionary_only`` (default ``False``): accept only guesses from the bundled word list.
        extras: the dataset row: ``reward_spec.ground_truth`` is the secret word, ``max_turns`` the number
            of guesses (default 6).
    """

    protocol_tags = ("guess",)
    """The tags the model writes; the test kit builds its adversarial actions from them."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        reward_spec = self.extras.get("reward_spec") or {}
        target = reward_spec.get("ground_truth")
        if target is not None:
            word = str(target).strip().lower()
            if len(word) != WORD_LENGTH or not (word.isascii() and word.isalpha()):
                raise ValueError(f"the secret word must be {WORD_LENGTH} letters a-z, got {target!r}")
            target = word
        self.target: str | None = target
        self.max_turns = int(self.extras.get("max_turns", MAX_GUESSES))
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {self.max_turns}")
        self.dictionary_only = bool(_config_value(env_config, "dictionary_only", False))
        self.guesses: list[str] = []
        self.invalid_guesses = 0
        self.solved = False

    # -- tasks --------------------------------------------------------------------------------------
    def sample_task(self, seed: int | None = None) -> Task:
        """A secret word from the bundled list, the same one for the same seed."""
        rng = random.Random(f"skyrl_wordle/{seed}") if seed is not None else random.Random()
        word = rng.choice(load_words())
        prompt = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Guess the secret word. You have {MAX_GUESSES} guesses."},
        ]
        extras = {
            "data_source": "skyrl_wordle",
            "reward_spec": {"method": "rule", "ground_truth": word},
            "max_turns": MAX_GUESSES,
        }
        return Task(prompt=prompt, extras=extras)

    def reference_action(self) -> str | None:
        """Guessing the secret word, which wins at once."""
        return None if self.target is None else f"<guess>{self.target}</guess>"

    # -- the episode ----------------------------------------------------------------------------------
    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        if self.target is None:
            raise ValueError(
                "WordleEnv needs a secret word: make it with "
                "extras={'reward_spec': {'method': 'rule', 'ground_truth': 'crane'}} or start it with reset(seed=...)"
            )
        return prompt, {}

    def _problem_with(self, guess: str | None) -> str | None:
        """Why ``guess`` cannot be scored, or ``None`` if it can."""
        if guess is None:
            return "I found no <guess>...</guess> in your reply."
        if len(guess) != WORD_LENGTH or not (guess.isascii() and guess.isalpha()):
            if guess.isascii() and guess.isprintable() and len(guess) <= 20:
                return f"'{guess}' is not a {WORD_LENGTH}-letter word."
            return f"Your guess is not a {WORD_LENGTH}-letter word."
        if self.dictionary_only and guess not in load_words():
            return f"'{guess}' is not in the word list."
        return None

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        guess = parse_guess(action) if isinstance(action, str) else None
        left = self.max_turns - self.turns
        problem = self._problem_with(guess)
        metadata: dict[str, Any] = {"guess": guess if problem is None else None, "valid": problem is None}

        if problem is None:
            self.guesses.append(guess)
            marks = score_guess(guess, self.target)
            metadata["marks"] = marks
            if guess == self.target:
                self.solved = True
                return BaseTextEnvStepOutput(observations=[], reward=1.0, done=True, metadata=metadata)
            feedback = " ".join(f"{letter.upper()}={mark}" for letter, mark in zip(guess, marks, strict=True))
            message = f"{guess.upper()}: {feedback}."
        else:
            self.invalid_guesses += 1
            message = f"{problem} Write one {WORD_LENGTH}-letter word as <guess>word</guess>."

        if left <= 0:
            metadata.update(end="truncated", truncated_by="max_turns", secret=self.target)
            return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, metadata=metadata)
        message += f" {_plural(self.turns_left(), 'guess')} left."
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": message}], reward=0.0, done=False, metadata=metadata
        )

    def get_metrics(self) -> dict[str, Any]:
        """``solved``, ``turns`` and ``invalid_guesses`` of the episode."""
        return {"solved": self.solved, "turns": self.turns, "invalid_guesses": self.invalid_guesses}
