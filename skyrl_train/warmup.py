"""Supervised warm-up on gold trajectories before RL.

A small model that never writes the protocol's tags gets no signal from GRPO (every reward of a group is the
same). The warm-up teaches the protocol first: it plays a gold answer for each training row through the real
environment with a :class:`~skyrl_train.inference.scripted.ScriptedEngine` and trains on the resulting
trajectories, so the tokens, the observations and the loss mask are exactly those of a model's own rollout.

The update is the policy worker's own clipped policy-gradient step with every advantage set to 1 and the old
log-probs taken just before the step: at ratio 1 its gradient is exactly that of the token-mean negative
log-likelihood of the model's tokens (observation tokens stay masked out).

Gold answers come from the rows' ``reward_spec.ground_truth``. For text2sql, a share of the rows
(``check_fraction``) first runs the gold query in ``<sql>`` and answers after reading the observation, so the
multi-turn shape is demonstrated too.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Callable, Sequence
from typing import Any

from skyrl_train.inference.base import SamplingParams

__all__ = ["gold_answer_script", "sql_hint", "supervised_step"]

_QUESTION = re.compile(r"Question:\s*(.+)")


def sql_hint(gold_sql: str) -> str:
    """A one-line plan for a gold query, from its tables (e.g. "Use the tables orders and customers.")."""
    try:
        import sqlglot
        from sqlglot import exp

        tables = list(dict.fromkeys(t.name for t in sqlglot.parse_one(gold_sql).find_all(exp.Table)))
    except Exception:
        tables = []
    if not tables:
        return "Write the query."
    names = tables[0] if len(tables) == 1 else ", ".join(tables[:-1]) + f" and {tables[-1]}"
    return f"Use the table{'s' if len(tables) > 1 else ''} {names}."


def _question_of(row: dict[str, Any]) -> str:
    info = row.get("extra_info") or {}
    if info.get("question"):
        return str(info["question"]).strip()
    found = _QUESTION.findall(str(row["prompt"][-1]["content"]))
    if not found:
        raise ValueError("a warm-up row needs extra_info.question or a 'Question: ...' line in its prompt")
    return found[-1].strip()


def gold_answer_script(
    rows: Sequence[dict[str, Any]], check_fraction: float, seed: int
) -> Callable[[str], str]:
    """A script for :class:`ScriptedEngine` answering each row's question with its gold query.

    The conversation is matched to its row by the last ``Question:`` line of the prompt. Rows drawn into
    ``check_fraction`` first run the query in ``<sql>``, then answer once an observation came back.
    """
    rng = random.Random(seed)
    answers: dict[str, tuple[str, bool]] = {}
    for row in rows:
        gold = str(row["reward_spec"]["ground_truth"]).strip()
        answers[_question_of(row)] = (gold, rng.random() < check_fraction)

    def script(conversation: str) -> str:
        asked_at = conversation.rfind("Question:")
        # the question is followed by the template's end-of-turn token, so match it as a prefix
        tail = conversation[asked_at + len("Question:") :].lstrip()
        matches = [q for q in answers if tail.startswith(q)]
        if asked_at < 0 or not matches:
            raise KeyError("the warm-up script got a conversation it has no gold answer for")
        gold, check = answers[max(matches, key=len)]
        observed = "<observation>" in tail
        if check and not observed:
            return f"<think>{sql_hint(gold)} Let me run it first.</think>\n<sql>{gold}</sql>"
        if observed:
            return f"<think>The result answers the question.</think>\n<solution>{gold}</solution>"
        return f"<think>{sql_hint(gold)}</think>\n<solution>{gold}</solution>"

    return script


def supervised_step(
    policy: Any,
    generator_factory: Callable[[Any], Any],
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    params: SamplingParams,
    *,
    check_fraction: float,
    seed: int,
) -> dict[str, float]:
    """One warm-up step: play the gold answers of ``rows`` and take one policy step on them.

    ``generator_factory(engine)`` builds the multi-turn generator over a given engine (the trainer's
    generator settings). Trajectories whose gold answer did not earn the full reward (a gold query that
    fails, a cut-off answer) are left out.
    """
    import torch

    from skyrl_train.batch import TrainingBatch
    from skyrl_train.inference.scripted import ScriptedEngine

    engine = ScriptedEngine(tokenizer, gold_answer_script(rows, check_fraction, seed), logprob=None)
    generator = generator_factory(engine)
    out = asyncio.run(generator.generate(list(rows), 1, params))
    kept = [t for t in out.trajectories if not t.is_error and t.reward >= generator.pass_threshold]
    if not kept:
        raise RuntimeError("no gold trajectory earned the full reward: check the rows' ground truth")
    batch = TrainingBatch.from_trajectories(kept, tokenizer.pad_token_id)
    batch.old_log_probs = policy.compute_log_probs(batch)
    batch.advantages = batch.response_mask.to(torch.float32).clone()
    batch.returns = batch.advantages.clone()
    metrics = policy.train_batch(batch, batch.batch_size, 1)
    nll = -(batch.old_log_probs * batch.response_mask).sum() / batch.response_mask.sum().clamp(min=1)
    return {
        "warmup/nll": float(nll),
        "warmup/trajectories": float(len(kept)),
        "warmup/dropped": float(len(out.trajectories) - len(kept)),
        **{f"warmup/{k.split('/', 1)[-1]}": v for k, v in metrics.items() if k.startswith("policy/")},
    }
