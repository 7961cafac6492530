"""A question as a dataset row in SkyRL's format, with the prompt of Search-R1's protocol (think, search,
read the information, answer)."""

from __future__ import annotations

from typing import Any

from skyrl_gym.datasets.search.questions import Candidate

ENV_CLASS = "search"
MAX_TURNS = 4

INSTRUCTION = (
    "Answer the question below. Reason step by step inside <think> and </think> whenever you need to. "
    "You do not know everything: to look something up, write a search query as <search> query </search> "
    "and the top results will come back between <information> and </information>. Search as often as you "
    "need; one question may take several searches, each building on what the last one found. When you are "
    "sure, give only the final answer, a few words at most and without explanation, between <answer> and "
    "</answer>, for example <answer> Ada Lovelace </answer>."
)
"""The instruction of every prompt (Search-R1's protocol: think, search, read the information, answer)."""


def make_prompt(question: str) -> list[dict[str, str]]:
    """The chat prompt for ``question``: one user message with :data:`INSTRUCTION` and the question."""
    return [{"role": "user", "content": f"{INSTRUCTION}\n\nQuestion: {question.strip()}"}]


def make_row(candidate: Candidate, split: str, index: int, *, held_out: bool = False) -> dict[str, Any]:
    """The SkyRL dataset row of a question."""
    return {
        "data_source": candidate.data_source,
        "prompt": make_prompt(candidate.question),
        "env_class": ENV_CLASS,
        "reward_spec": {"method": "rule", "ground_truth": {"target": list(candidate.target)}},
        "extra_info": {
            "split": split,
            "index": index,
            "hops": len(candidate.supporting_ids),
            "kind": candidate.kind,
            "question": candidate.question,
            "supporting_ids": list(candidate.supporting_ids),
            "held_out": held_out,
        },
        "question": candidate.question,
        "max_turns": MAX_TURNS,
    }
