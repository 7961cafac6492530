"""Supervised warm-up on reference trajectories before RL.

A small model that never writes the protocol's tags gets no signal from GRPO (every reward of a group is the
same). The warm-up teaches the protocol first: for each training row it asks the row's own environment for a
known-good episode and plays it through the real environment with a
:class:`~skyrl_train.inference.scripted.ScriptedEngine`, then trains on the resulting trajectories, so the
tokens, the observations and the loss mask are exactly those of a model's own rollout.

What to play comes from the environment contract alone: :meth:`skyrl_gym.Env.reference_action` (one turn
that earns the full reward) or, for a share of the rows (``trainer.sft_warmup.episode_fraction``),
:meth:`skyrl_gym.Env.reference_episode` (several turns, e.g. a tool call, then the answer once its
observation came back), so that the multi-turn shape of the protocol is shown too. An episode's
:class:`~skyrl_gym.core.Misstep` actions (a deliberate mistake the next turns recover from) are played but kept
out of the loss, all but their ``keep`` prefix: the model learns to read the observation and recover, not to
make the mistake; and a text-to-SQL correction episode still teaches the decision to run a query first, since
its ``<think>`` plan and ``<sql>`` tag are that prefix.

The update is the policy worker's own clipped policy-gradient step with every advantage set to 1 and the old
log-probs taken just before the step: at ratio 1 its gradient is exactly that of the negative log-likelihood of
the model's tokens (observation tokens stay masked out), reduced as ``trainer.sft_warmup.loss_reduction`` says
(by default RL's ``trainer.algorithm.loss_reduction``): with ``token_mean`` a reference episode weighs in
proportion to its tokens, with ``seq_mean_token_mean`` every episode weighs the same.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from typing import Any

from skyrl_train.inference.base import SamplingParams

__all__ = [
    "continued_episodes",
    "mask_missteps",
    "own_episodes",
    "play_episodes",
    "play_references",
    "reference_episodes",
    "scripted_turns",
    "self_correction_step",
    "supervised_step",
    "train_on",
    "turns_under_stops",
]


def reference_episodes(
    rows: Sequence[dict[str, Any]], generator: Any, episode_fraction: float, seed: int
) -> list[list[str] | None]:
    """The actions to play for each row: its environment's ``reference_episode()`` for the rows drawn into
    ``episode_fraction``, its ``[reference_action()]`` for the others (a ``reference_action()`` that is a
    list of steps is played as it is); ``None`` for a row whose environment knows no reference (or whose
    actions are not text).

    The draw (seeded by ``seed``) takes ``episode_fraction`` of the rows as exactly as a whole number allows:
    ``floor(f * n)`` rows, one more with the probability of the remainder. Each warm-up batch then shows the
    two kinds in the same proportion, so that a decision between them (run a query first, or answer at once)
    ends the warm-up near that proportion, not wherever the last batches' coin flips left it.

    Each environment is made from the row as a rollout makes it (``generator.make_env``), started with the
    row's prompt, asked, and closed.
    """
    rng = random.Random(seed)
    drawn = set(rng.sample(range(len(rows)), _drawn_count(episode_fraction * len(rows), rng)))
    return [_reference(row, generator, index in drawn) for index, row in enumerate(rows)]


def _drawn_count(share: float, rng: random.Random) -> int:
    """``share`` as a whole number: its floor, one more with the probability of its fraction."""
    return int(share) + (rng.random() < share - int(share))


def _reference(row: dict[str, Any], generator: Any, whole_episode: bool) -> list[str] | None:
    """The reference of ``row``'s environment: its ``reference_episode()`` when ``whole_episode``, else its
    ``[reference_action()]`` (a list played as it is); ``None`` when it knows none (or it is not text)."""
    env, prompt = generator.make_env(row)
    try:
        env.init(prompt)
        if whole_episode:
            actions = env.reference_episode()
        else:
            action = env.reference_action()
            # a list is a reference played over several steps (the terminal's commands, then submit)
            actions = (
                None if action is None else list(action) if isinstance(action, list | tuple) else [action]
            )
    finally:
        env.close()
    if not actions or not all(isinstance(a, str) for a in actions):
        return None
    return list(actions)


def scripted_turns(actions: Sequence[str]) -> Callable[[str], str]:
    """A :class:`ScriptedEngine` script that answers its n-th call with ``actions[n]`` (one trajectory's
    turns, in order, whatever the conversation says)."""
    turns = iter(actions)

    def script(conversation: str) -> str:
        try:
            return next(turns)
        except StopIteration:
            raise RuntimeError(
                f"the environment asked for turn {len(actions) + 1} of a reference episode of {len(actions)}"
            ) from None

    return script


def mask_missteps(trajectory: Any, actions: Sequence[str], tokenizer: Any = None) -> int:
    """Zero the loss mask over the model turns of ``trajectory`` that played a
    :class:`~skyrl_gym.core.Misstep` of ``actions`` (turn *k* played ``actions[k]``); the number masked.

    The leading tokens of such a turn that spell (part of) the misstep's ``keep`` prefix stay in the loss; that
    needs ``tokenizer`` (without it, a misstep's whole turn is masked).
    """
    from skyrl_gym.core import Misstep

    masked = 0
    for (start, end), action in zip(trajectory.turn_spans, actions, strict=False):
        if isinstance(action, Misstep):
            kept = _kept_tokens(trajectory.response_ids[start:end], action.keep, tokenizer)
            trajectory.loss_mask[start + kept : end] = [0] * (end - start - kept)
            masked += 1
    return masked


def _kept_tokens(token_ids: Sequence[int], keep: str, tokenizer: Any) -> int:
    """How many leading tokens of ``token_ids`` decode to a prefix of ``keep`` (a token that would run past
    it, or that a tokenizer merged across its end, is not kept)."""
    if not keep or tokenizer is None:
        return 0
    kept = 0
    for n in range(1, len(token_ids) + 1):
        text = tokenizer.decode(list(token_ids[:n]), skip_special_tokens=False)
        if len(text) > len(keep) or not keep.startswith(text):
            break
        kept = n
    return kept


def play_references(
    rows: Sequence[dict[str, Any]],
    generator_factory: Callable[[Any], Any],
    tokenizer: Any,
    params: SamplingParams,
    *,
    episode_fraction: float,
    seed: int,
) -> list[Any]:
    """Play each row's reference (see :func:`reference_episodes`) through its real environment; the
    trajectories of the rows that have one, in row order (``group_id`` is the row's index), with their
    missteps' turns masked out of the loss (:func:`mask_missteps`).

    ``generator_factory(engine)`` builds the multi-turn generator over a given engine (the trainer's
    generator settings); each row gets its own :class:`ScriptedEngine`, whose script is that row's episode.
    """

    def generator_for(actions: Sequence[str]) -> Any:
        return _scripted_generator(generator_factory, tokenizer, actions)

    episodes = reference_episodes(rows, generator_for([]), episode_fraction, seed)
    return play_episodes(rows, episodes, generator_factory, tokenizer, params)


def _scripted_generator(
    generator_factory: Callable[[Any], Any], tokenizer: Any, actions: Sequence[str]
) -> Any:
    from skyrl_train.inference.scripted import ScriptedEngine

    return generator_factory(ScriptedEngine(tokenizer, scripted_turns(actions), logprob=None))


def play_episodes(
    rows: Sequence[dict[str, Any]],
    episodes: Sequence[Sequence[str] | None],
    generator_factory: Callable[[Any], Any],
    tokenizer: Any,
    params: SamplingParams,
) -> list[Any]:
    """Play ``episodes[i]`` (``None``: nothing) through the real environment of ``rows[i]``, one
    :class:`ScriptedEngine` per row; the trajectories in row order (``group_id`` is the row's index), their
    :class:`~skyrl_gym.core.Misstep` turns masked out of the loss (:func:`mask_missteps`)."""

    episodes = [None if actions is None else turns_under_stops(actions, params.stop) for actions in episodes]

    async def play() -> list[Any]:
        jobs = [
            _scripted_generator(generator_factory, tokenizer, actions).rollout(row, params, group_id=i)
            for i, (row, actions) in enumerate(zip(rows, episodes, strict=True))
            if actions is not None
        ]
        return list(await asyncio.gather(*jobs))

    trajectories = asyncio.run(play())
    for trajectory in trajectories:
        mask_missteps(trajectory, episodes[trajectory.group_id] or [], tokenizer)
    return trajectories


def turns_under_stops(actions: Sequence[str], stops: Sequence[str] | None) -> list[str]:
    """``actions`` as the turns a model plays them when its sampling stops at ``stops``: an action with a stop
    string before its end (a ReAct reference's several tool calls in one action, with ``stop=["</tool_call>"]``)
    becomes one turn per piece, each ending at its stop string, as the engine would cut it. A
    :class:`~skyrl_gym.core.Misstep` is kept whole (its ``keep`` prefix is of the whole action)."""
    from skyrl_gym.core import Misstep

    turns: list[str] = []
    for action in actions:
        rest = action
        while not isinstance(action, Misstep):
            found = [(rest.find(stop), stop) for stop in stops or () if stop]
            cut = min((at + len(stop) for at, stop in found if at >= 0), default=len(rest))
            if cut >= len(rest.rstrip()):  # the first stop ends the action: nothing is cut off
                break
            turns.append(rest[:cut])
            rest = rest[cut:].lstrip()
        turns.append(rest)
    return turns


def first_turn(trajectory: Any, tokenizer: Any) -> str:
    """The text the model wrote in its first turn of ``trajectory`` (special tokens left out)."""
    start, end = trajectory.turn_spans[0]
    return tokenizer.decode(list(trajectory.response_ids[start:end]), skip_special_tokens=True)


def continued_episodes(
    rows: Sequence[dict[str, Any]], first_turns: Sequence[str], generator: Any
) -> list[list[str] | None]:
    """For each row, its environment after ``first_turns[i]`` was played in it: the whole episode of
    :meth:`skyrl_gym.Env.reference_continuation` (the first turn, marked a misstep when it was wrong, then
    the rest); ``None`` where that turn ended the episode or the environment knows no continuation."""
    out: list[list[str] | None] = []
    for row, first in zip(rows, first_turns, strict=True):
        env, prompt = generator.make_env(row)
        try:
            env.init(prompt)
            step = env.step(first)
            continuation = None if step["done"] else env.reference_continuation()
        finally:
            env.close()
        episode = None if continuation is None else continuation.episode
        out.append(episode if episode and all(isinstance(a, str) for a in episode) else None)
    return out


def own_episodes(
    rows: Sequence[dict[str, Any]],
    sampled: Sequence[Any],
    generator_factory: Callable[[Any], Any],
    tokenizer: Any,
    params: SamplingParams,
    pass_threshold: float,
    *,
    episode_fraction: float,
    seed: int,
) -> tuple[list[Any], dict[str, float]]:
    """The trajectories a self-correction step trains on, one per usable sample of the model's own
    ``sampled`` rollouts of ``rows`` (``group_id`` is the row's index), each played through its environment
    with a :class:`ScriptedEngine`; and the counts (``warmup/own_*``: what the model did, ``warmup/trained_*``:
    what each sample became).

    - A sample whose first turn did not end the episode (a query, a tool call) becomes that first turn, then
      its environment's continuation (:func:`continued_episodes`): the model's own query, read and corrected
      (``trained_own_query``).
    - A sample answered at once stays as it is when it earned the full reward (``trained_own_answer``), and
      becomes the row's reference answer, ``reference_action()``, when it did not (``trained_reference_answer``).

    Query-first episodes then make up ``episode_fraction`` of them, as in the reference steps (the share drawn
    as :func:`reference_episodes` draws it, seeded by ``seed``), so that the model's own habit does not take
    over: the surplus of a model that queries first more often becomes the rows' reference answers (first
    those whose first query was right: a query that only confirms teaches least; then by the seeded draw);
    a model that queries less has some of its answers given at once (wrong ones first) turned into the rows'
    ``reference_episode()`` (``trained_reference_episode``). Samples that ended in an error, episodes with no
    continuation and rows whose environment knows no reference are left out.
    """
    from skyrl_gym.core import Misstep

    rng = random.Random(seed)
    ok = [t for t in sampled if not t.is_error]
    acted = [t for t in ok if len(t.turn_spans) > 1]
    at_once = [t for t in ok if len(t.turn_spans) == 1]
    continued = continued_episodes(
        [rows[t.group_id] for t in acted],
        [first_turn(t, tokenizer) for t in acted],
        _scripted_generator(generator_factory, tokenizer, []),
    )
    queries = [(t.group_id, e) for t, e in zip(acted, continued, strict=True) if e is not None]
    right = [t.reward >= pass_threshold for t in at_once]
    target = _drawn_count(episode_fraction * (len(queries) + len(at_once)), rng)
    # the order in which samples give way: confirming queries before corrections, wrong answers before right
    # ones, each kind in a seeded draw
    query_order = sorted(
        range(len(queries)), key=lambda k: (isinstance(queries[k][1][0], Misstep), rng.random())
    )
    answer_order = sorted(range(len(at_once)), key=lambda k: (right[k], rng.random()))
    surplus = set(query_order[: max(len(queries) - target, 0)])
    swapped = set(answer_order[: max(target - len(queries), 0)])
    plan: list[tuple[int, str, list[str] | None]] = []  # (row, kind, the episode; None: the row's reference)
    for k, (index, episode) in enumerate(queries):
        plan.append((index, "reference_answer", None) if k in surplus else (index, "own_query", episode))
    for k, t in enumerate(at_once):
        if k in swapped:
            plan.append((t.group_id, "reference_episode", None))
        elif right[k]:
            plan.append((t.group_id, "own_answer", [first_turn(t, tokenizer)]))
        else:
            plan.append((t.group_id, "reference_answer", None))
    reference = _scripted_generator(generator_factory, tokenizer, [])
    played = [
        (index, kind, episode or _reference(rows[index], reference, kind == "reference_episode"))
        for index, kind, episode in plan
    ]
    played = [(index, kind, episode) for index, kind, episode in played if episode is not None]
    trajectories = play_episodes(
        [rows[index] for index, _, _ in played],
        [e for _, _, e in played],
        generator_factory,
        tokenizer,
        params,
    )
    counts = {
        "warmup/own_sampled": float(len(sampled)),
        "warmup/own_acted_first": float(len(acted)),
        "warmup/own_first_turn_right": float(sum(1 for _, e in queries if not isinstance(e[0], Misstep))),
        "warmup/own_direct_solved": float(sum(right)),
    }
    for kind in ("own_query", "own_answer", "reference_answer", "reference_episode"):
        counts[f"warmup/trained_{kind}"] = float(sum(1 for _, k, _ in played if k == kind))
    return trajectories, counts


def supervised_step(
    policy: Any,
    generator_factory: Callable[[Any], Any],
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    params: SamplingParams,
    *,
    episode_fraction: float,
    seed: int,
    loss_reduction: str | None = None,
) -> dict[str, float]:
    """One warm-up step: play the references of ``rows`` (:func:`play_references`) and take one policy step
    on them, its loss reduced with ``loss_reduction`` (``None``: the policy's own, RL's; otherwise the policy
    takes it for this step and gets its own back after).

    Rows whose environment gives no reference, trajectories that did not earn the full reward (a gold
    answer that fails, a cut-off turn), and the last few when a group of training processes could not split
    them evenly, are left out (``warmup/dropped``).
    """
    trajectories = play_references(
        rows, generator_factory, tokenizer, params, episode_fraction=episode_fraction, seed=seed
    )
    threshold = _scripted_generator(generator_factory, tokenizer, []).pass_threshold
    return train_on(policy, trajectories, tokenizer, len(rows), threshold, loss_reduction)


def self_correction_step(
    policy: Any,
    generator_factory: Callable[[Any], Any],
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    sampled: Sequence[Any],
    params: SamplingParams,
    *,
    episode_fraction: float,
    seed: int,
    loss_reduction: str | None = None,
) -> dict[str, float]:
    """One warm-up step on the model's own rollouts ``sampled`` of ``rows`` (:func:`own_episodes`): its own
    first queries, read and corrected by the environment's continuation, and its own answers given at once
    (the wrong ones as the reference answer), query-first in the proportion ``episode_fraction``. The step is
    :func:`supervised_step`'s (:func:`train_on`); with nothing to train on it makes no update."""
    threshold = _scripted_generator(generator_factory, tokenizer, []).pass_threshold
    trajectories, counts = own_episodes(
        rows,
        sampled,
        generator_factory,
        tokenizer,
        params,
        threshold,
        episode_fraction=episode_fraction,
        seed=seed,
    )
    if not any(not t.is_error and t.reward >= threshold for t in trajectories):
        # no sample gave an episode that earns the reward (every one an error, no reference): no update
        return {**counts, "warmup/trajectories": 0.0, "warmup/dropped": float(len(sampled))}
    return {**train_on(policy, trajectories, tokenizer, len(sampled), threshold, loss_reduction), **counts}


def train_on(
    policy: Any,
    trajectories: Sequence[Any],
    tokenizer: Any,
    offered: int,
    pass_threshold: float,
    loss_reduction: str | None,
) -> dict[str, float]:
    """One policy step of negative log-likelihood on the ``trajectories`` that earned the full reward (of
    ``offered`` episodes: the others count as ``warmup/dropped``), reduced with ``loss_reduction``."""
    import torch

    from skyrl_train.training.batch import TrainingBatch

    kept = [t for t in trajectories if not t.is_error and t.reward >= pass_threshold]
    # a group of training processes splits the batch evenly: leave out the remainder
    kept = kept[: len(kept) - len(kept) % max(int(getattr(policy, "world_size", 1)), 1)]
    if not kept:
        raise RuntimeError(
            "no reference trajectory earned the full reward: check the rows' ground truth and the "
            "environment's reference_action()/reference_episode()"
        )
    batch = TrainingBatch.from_trajectories(list(kept), tokenizer.pad_token_id)
    # one mini-batch, one epoch: the worker takes the old log-probs from its own forward (ratio 1), so no
    # separate scoring pass is needed
    batch.advantages = batch.response_mask.to(torch.float32).clone()
    batch.returns = batch.advantages.clone()
    previous = None if loss_reduction is None else policy.set_loss_reduction(loss_reduction)
    try:
        metrics = policy.train_batch(batch, batch.batch_size, 1)
    finally:
        if previous is not None:
            policy.set_loss_reduction(previous)
    # The worker's own loss is the clipped surrogate, -1 at ratio 1 whatever the model: the warm-up's loss is
    # its negative log-likelihood (before the step), so that the curve shows it falling.
    nll = metrics["policy/nll"]
    forwarded = {
        f"warmup/{k.split('/', 1)[-1]}": v
        for k, v in metrics.items()
        if k.startswith("policy/") and k not in ("policy/loss", "policy/pg_loss", "policy/nll")
    }
    return {
        **forwarded,
        "warmup/loss": float(nll),
        "warmup/nll": float(nll),
        "warmup/trajectories": float(len(kept)),
        # episodes that recovered from a misstep (a model turn played but masked out)
        "warmup/corrections": float(sum(any(0 in t.loss_mask[a:b] for a, b in t.turn_spans) for t in kept)),
        "warmup/dropped": float(offered - len(kept)),
    }
