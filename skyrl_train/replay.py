"""Replays of a run's record (``run_dir/rollouts``, :mod:`skyrl_train.record`): its updates, and its episodes.

- :func:`replay_training` (``skyrl-train replay RUN``) reruns RL steps' updates on the recorded trajectories,
  with no inference engine and no environment: it loads the checkpoint written after step k, rebuilds each
  later recorded step's batch from its tokens, loss masks, rewards and sampler log-probs, runs the trainer's
  own update (:func:`skyrl_train.loop.trainer.update_on_batch`), and compares the advantages with the recorded
  ones, the update's metrics with ``metrics.jsonl`` and, when the checkpoint of the last replayed step is
  kept, the weights with it. It runs with the run's thread count (recorded in the plan), so in one CPU process
  the update is a pure function of the weights and the batch and all of them come out bitwise equal; where the
  BLAS library sums in an order that depends on more than that (see :class:`WeightsVerdict`), it says by how
  much the weights differ, measured against the step's own change. Needs every trajectory of those steps
  recorded (``trainer.record.sample: 1``, under ``max_mb``) and a checkpoint before them
  (``trainer.ckpt_interval``, ``trainer.max_ckpts_to_keep``).
- :func:`replay_episodes` (``skyrl-train replay RUN --episodes``) steps the environments as they are now with
  each recorded episode's actions and says, per episode, whether every observation, reward and end is the
  recorded one, or at which turn and in what it diverged: a regression test of an environment change against
  recorded episodes.
- :class:`RecordedEnv` answers a model with a recorded episode's observations and rewards for as long as its
  actions are the recorded ones, and ends the episode where they diverge (``diverged_at``): a model or agent
  change tested against recorded episodes, with no environment running.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv

__all__ = [
    "EpisodeReplay",
    "RecordedEnv",
    "RecordedTurn",
    "StepReplay",
    "TrainingReplay",
    "WeightsVerdict",
    "recorded_turns",
    "replay_episodes",
    "replay_training",
]

GENERATOR_LIMITS = ("generator.max_turns", "max_tokens_per_trajectory", "max_input_length")
"""``truncated_by`` values of episodes the runner ended, not the environment (its last step was not done)."""

COMPARED_PREFIXES = ("policy/", "critic/", "advantage/")
"""The update's metrics a replay compares with ``metrics.jsonl``."""


# ----------------------------------------------------------------------------------------------- training
@dataclasses.dataclass
class StepReplay:
    """One replayed step: each compared metric as ``(recorded, replayed)``, and the advantages' agreement."""

    step: int
    metrics: dict[str, tuple[float, float]]
    advantages_equal: bool

    @property
    def equal(self) -> bool:
        return self.advantages_equal and all(a == b for a, b in self.metrics.values())

    @property
    def largest_relative(self) -> float:
        """The largest difference of a compared metric over its recorded size (0.0 when all are equal): a
        sum added in another order differs in its last bits, about 1e-7 of a float32 value."""
        return max(
            (abs(a - b) / max(abs(a), abs(b)) for a, b in self.metrics.values() if a != b),
            default=0.0,
        )


@dataclasses.dataclass
class TrainingReplay:
    """What :func:`replay_training` found."""

    checkpoint_step: int
    """The replay started from the checkpoint written after this step."""
    steps: list[StepReplay]
    weights: WeightsVerdict
    """The weights after the last replayed step against its checkpoint (``weights.verdict``: ``"equal"``,
    ``"differ"``, or why they were not compared)."""

    @property
    def equal(self) -> bool:
        return bool(self.steps) and all(s.equal for s in self.steps) and self.weights.verdict != "differ"


def _by_step(rows: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    steps: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        steps.setdefault(int(row["step"]), []).append(row)
    return steps


def _complete(rows: list[dict[str, Any]]) -> bool:
    """Whether a step's recorded rows are the whole batch, in order."""
    size = rows[0].get("batch_size")
    return size is not None and [r["index"] for r in rows] == list(range(int(size)))


def _trajectory(row: Mapping[str, Any]) -> SimpleNamespace:
    """What :meth:`TrainingBatch.from_trajectories` reads, from a recorded row."""
    logprobs = row["sampler_logprobs"]
    if logprobs is None and not row["response_ids"]:
        logprobs = []  # an empty list is recorded as None: no tokens, nothing the engine left out
    return SimpleNamespace(
        prompt_ids=list(row["prompt_ids"]),
        response_ids=list(row["response_ids"]),
        loss_mask=list(row["loss_mask"]),
        logprobs=None if logprobs is None else list(logprobs),
        turn_spans=[tuple(s) for s in row["turn_spans"]],
        turn_rewards=list(row["turn_rewards"]),
        reward=row["reward"],
        end=row["end"],
        group_id=row["group_id"],
    )


def _logged_metrics(run_dir: Path) -> dict[int, dict[str, Any]]:
    """``metrics.jsonl`` by tracker step (entries of one step merged)."""
    from skyrl_train.tracking import read_metrics

    logged: dict[int, dict[str, Any]] = {}
    path = run_dir / "metrics.jsonl"
    for entry in read_metrics(path) if path.is_file() else []:
        logged.setdefault(int(entry["step"]), {}).update(entry)
    return logged


def _saved_weights(like: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """The model weights saved in checkpoint worker folder ``folder``, shaped as ``like``."""
    import torch
    import torch.distributed.checkpoint as dcp

    from skyrl_train.training.workers.base import _single_process_dcp_quiet

    saved = {k: torch.empty_like(v) for k, v in like.items()}
    with _single_process_dcp_quiet(False):
        dcp.load({"model": saved}, checkpoint_id=str(folder / "dcp"), no_dist=True)
    return saved


@dataclasses.dataclass(frozen=True)
class WeightsVerdict:
    """The replayed weights against the run's checkpoint of the same step.

    ``verdict``: ``"equal"`` (bitwise), ``"differ"``, or why they were not compared. When they differ,
    ``tensors`` of ``of`` tensors differ, by at most ``largest`` (absolute), and ``relative`` is the size of the
    difference (the L2 norm over every weight) over the size of the change the recorded steps made since the
    checkpoint the replay started from. Sums added in another order (a BLAS library that splits them by the
    threads it finds free) leave last-bit differences, which Adam turns into full-size ones only for weights whose
    gradient was rounding noise to begin with: a small share of the change. A wrong update (another optimizer
    state, learning rate or batch) is a share of the change near 1."""

    verdict: str
    tensors: int = 0
    of: int = 0
    largest: float = 0.0
    relative: float = 0.0

    def __str__(self) -> str:
        if self.verdict != "differ":
            return self.verdict
        return (
            f"differ in {self.tensors} of {self.of} tensors, by at most {self.largest:.3g}: "
            f"{self.relative:.3g} of the change the recorded steps made (L2)"
        )


def _weights_versus(worker: Any, folder: Path, before: Path) -> WeightsVerdict:
    """``worker``'s weights against those saved in checkpoint worker folder ``folder``; ``before``: the worker
    folder of the checkpoint the replay started from (read only when they differ, to size the difference)."""
    import torch
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    if not hasattr(worker, "model"):
        return WeightsVerdict("not compared: the policy runs in other processes")
    current = get_model_state_dict(worker.model)
    saved = _saved_weights(current, folder)
    differing = [k for k in current if not torch.equal(current[k], saved[k])]
    if not differing:
        return WeightsVerdict("equal")
    largest = max(float((current[k] - saved[k]).abs().max()) for k in differing)
    apart = sum(float((current[k].double() - saved[k].double()).square().sum()) for k in differing)
    start = _saved_weights(current, before)
    moved = sum(float((saved[k].double() - start[k].double()).square().sum()) for k in current)
    relative = (apart / moved) ** 0.5 if moved else float("inf")
    return WeightsVerdict("differ", len(differing), len(current), largest, relative)


def _run_config(run_dir: Path, checkpoint: Path | None) -> Any:
    """The config the run trained with: the one a checkpoint saved, else the run folder's ``config.yaml``."""
    from skyrl_train.config import Config, load_config
    from skyrl_train.training.checkpoint import CONFIG_FILE

    if checkpoint is not None and (checkpoint / CONFIG_FILE).is_file():
        return Config.from_dict(json.loads((checkpoint / CONFIG_FILE).read_text()))
    return load_config(run_dir / "config.yaml")


def replay_training(run_dir: str | Path, *, from_step: int | None = None) -> TrainingReplay:
    """Rerun the recorded steps after a checkpoint; see the module docstring.

    ``from_step``: the checkpoint to start from (default: the newest one followed by a recorded step).
    Raises ``ValueError`` when the run has no such checkpoint or its steps were not recorded whole."""
    import torch

    from skyrl_train.loop.trainer import LoopPlan, update_on_batch
    from skyrl_train.models import load_tokenizer
    from skyrl_train.record import read_plan, read_rollouts
    from skyrl_train.training import checkpoint as ckpt
    from skyrl_train.training.batch import TrainingBatch
    from skyrl_train.training.workers.plan import build_worker, plan_workers

    run_dir = Path(run_dir)
    plan = read_plan(run_dir)
    recorded = _by_step(read_rollouts(run_dir))
    if not plan or not recorded:
        raise ValueError(f"'{run_dir}' has no record of its rollouts (trainer.record.enabled)")
    checkpoints = dict(ckpt.list_checkpoints(run_dir))
    if from_step is None:
        usable = [k for k in checkpoints if k + 1 in recorded]
        if not usable:
            raise ValueError(
                f"no checkpoint of '{run_dir}' is followed by a recorded step (checkpoints after steps "
                f"{sorted(checkpoints)}, steps recorded {sorted(recorded)}): keep one with trainer.ckpt_interval "
                "and trainer.max_ckpts_to_keep"
            )
        from_step = max(usable)
    if from_step not in checkpoints:
        raise ValueError(
            f"'{run_dir}' has no checkpoint after step {from_step}; it has {sorted(checkpoints)}"
        )
    steps = []
    while from_step + len(steps) + 1 in recorded:
        steps.append(from_step + len(steps) + 1)
    incomplete = [s for s in steps if not _complete(recorded[s])]
    if not steps or incomplete:
        raise ValueError(
            f"steps {incomplete or [from_step + 1]} of '{run_dir}' were not recorded whole "
            "(trainer.record.sample below 1, or past trainer.record.max_mb)"
        )

    cfg = _run_config(run_dir, checkpoints[from_step])
    tokenizer = load_tokenizer(cfg.trainer.policy.model.path)
    plans = plan_workers(cfg)
    updates = int(plan["policy_updates"])
    parts = SimpleNamespace(
        cfg=cfg,
        loop=LoopPlan.from_config(cfg, updates),  # its mini-batch sizes and epochs (not its length)
        on_policy=bool(plan["on_policy"]),
        policy=build_worker(plans["policy"], total_steps=updates),
        ref=build_worker(plans["ref"]) if "ref" in plans else None,
        critic=build_worker(plans["critic"], total_steps=updates) if "critic" in plans else None,
    )
    workers = {"policy": parts.policy, **({"critic": parts.critic} if parts.critic is not None else {})}
    ckpt.load_checkpoint(checkpoints[from_step], workers, restore_rng=False)
    logged = _logged_metrics(run_dir)
    results = []
    threads = torch.get_num_threads()
    try:
        if plan.get("torch_threads"):  # the run's own: a sum split over other threads adds in another order
            torch.set_num_threads(int(plan["torch_threads"]))
        for step in steps:
            rows = recorded[step]
            batch = TrainingBatch.from_trajectories([_trajectory(r) for r in rows], tokenizer.pad_token_id)
            replayed = update_on_batch(parts, batch, len({r["group_id"] for r in rows}))
            advantages = batch.advantages.tolist()
            advantages_equal = all(
                advantages[i][: len(r["response_ids"])] == r["advantages"] for i, r in enumerate(rows)
            )
            recorded_metrics = logged.get(int(plan["log_offset"]) + step, {})
            compared = {
                k: (float(recorded_metrics[k]), float(v))
                for k, v in replayed.items()
                if k.startswith(COMPARED_PREFIXES) and k in recorded_metrics
            }
            results.append(StepReplay(step, compared, advantages_equal))
        last = checkpoints.get(steps[-1])
        weights = (
            _weights_versus(parts.policy, last / "policy", checkpoints[from_step] / "policy")
            if last is not None
            else WeightsVerdict(f"not compared: no checkpoint after step {steps[-1]} is kept")
        )
    finally:
        torch.set_num_threads(threads)
        for worker in (parts.policy, parts.ref, parts.critic):
            if worker is not None:
                worker.shutdown()
    return TrainingReplay(from_step, results, weights)


# ----------------------------------------------------------------------------------------------- episodes
@dataclasses.dataclass(frozen=True)
class RecordedTurn:
    """One recorded model turn: the action, and what the environment (and its verification) answered."""

    action: str
    observations: list[dict[str, Any]]
    reward: float
    done: bool


def recorded_turns(row: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[RecordedTurn]]:
    """A recorded episode as its prompt (what ``init`` returned) and its turns.

    The model's turns are the last ``len(actions)`` assistant messages (observations are never assistant
    messages). A turn's observations are the messages between its assistant message and the next one, or the final
    observations for the last turn; the last turn is done unless the runner ended the episode (a budget of
    the generator); its reward includes the deferred verification's."""
    messages, actions = list(row["messages"]), list(row.get("actions") or [])
    # the model's turns are the last assistant messages (a prompt may hold some: worked examples)
    assistant = [k for k, m in enumerate(messages) if m.get("role") == "assistant"]
    if len(assistant) < len(actions):
        raise ValueError(f"{len(assistant)} assistant messages for {len(actions)} recorded actions")
    assistant = assistant[len(assistant) - len(actions) :]
    prompt = messages[: assistant[0]] if assistant else messages
    ends = [*assistant[1:], len(messages)]
    turns = []
    for i, (k, action) in enumerate(zip(assistant, actions, strict=True)):
        last = i == len(actions) - 1
        observations = list(row["final_observations"]) if last else messages[k + 1 : ends[i]]
        done = last and not (row["end"] == "truncated" and row["truncated_by"] in GENERATOR_LIMITS)
        done = done and row["end"] != "context_exhausted"
        turns.append(RecordedTurn(action, observations, float(row["turn_rewards"][i]), done))
    return prompt, turns


@dataclasses.dataclass
class EpisodeReplay:
    """One recorded episode played again: ``status`` is ``same``, ``diverged`` (at ``turn``: ``detail``
    says what) or ``skipped`` (``detail`` says why)."""

    step: int
    index: int
    env_class: str
    status: str
    turn: int | None = None
    detail: str = ""


def _differs(what: str, recorded: Any, now: Any) -> str | None:
    if recorded == now:
        return None
    return f"{what}: recorded {json.dumps(recorded, default=str)[:300]}, now {json.dumps(now, default=str)[:300]}"


async def _play_again(runner: Any, row: Mapping[str, Any], timeout_s: float | None) -> tuple[int | None, str]:
    """Step the environment of a recorded episode with its actions: the first divergence, or (None, "")."""
    import skyrl_gym
    from skyrl_gym.vector import acall, ainit, astep
    from skyrl_train.rollout.trajectory import split_row

    prompt, turns = recorded_turns(row)
    task = dict(row["task"])
    env_class, prompt_row, extras = split_row(task, runner.default_env_class)
    task_env = skyrl_gym.make(env_class, env_config=runner.env_configs.get(env_class), extras=extras)
    try:
        deferred = getattr(task_env, "supports_deferred_verification", False) is True
        if deferred:
            task_env.defer_verification()
        env = runner.trajectory(task, None).wrap_env(task_env)
        start = await ainit(env, prompt_row, timeout_s=timeout_s)
        if not start.ok:
            return 0, f"init failed: {start.error}"
        first = start.observations
        prompt_now = (
            [{"role": "user", "content": first}] if isinstance(first, str) else [dict(m) for m in first]
        )
        if problem := _differs("the prompt", prompt, prompt_now):
            return 0, problem
        for i, turn in enumerate(turns):
            step = await astep(env, turn.action, timeout_s=timeout_s)
            reward = float(step.get("reward", 0.0))
            if deferred and i == len(turns) - 1:
                verdict = await acall(task_env.evaluate, timeout_s)
                if isinstance(verdict, Mapping):
                    reward += float(verdict.get("reward", 0.0))
            observations = [dict(m) for m in step.get("observations") or []]
            for problem in (
                _differs("the observations", turn.observations, observations),
                _differs("the reward", turn.reward, reward),
                _differs("done", turn.done, bool(step.get("done"))),
            ):
                if problem:
                    return i, problem
        return None, ""
    finally:
        task_env.close()


def replay_episodes(
    run_dir: str | Path, *, limit: int | None = None, timeout_s: float | None = 300.0
) -> list[EpisodeReplay]:
    """Play each recorded episode's actions against its environment as it is now (the run's config gives
    the environments' settings and the agent); see the module docstring. ``limit`` caps the episodes."""
    from skyrl_train.models import load_tokenizer
    from skyrl_train.record import read_rollouts
    from skyrl_train.rollout.runner import AgentRunner
    from skyrl_train.training import checkpoint as ckpt

    run_dir = Path(run_dir)
    cfg = _run_config(run_dir, ckpt.find_latest(run_dir))
    runner = AgentRunner.from_config(cfg, None, load_tokenizer(cfg.trainer.policy.model.path))
    out = []
    for row in read_rollouts(run_dir)[:limit]:
        replay = EpisodeReplay(int(row["step"]), int(row["index"]), row["env_class"], "same")
        if row["end"] == "error":
            replay.status, replay.detail = "skipped", "the episode ended in error"
        elif not row.get("actions") and row["num_turns"]:
            replay.status, replay.detail = (
                "skipped",
                "no actions recorded (an agent that does not record them)",
            )
        else:
            turn, detail = asyncio.run(_play_again(runner, row, timeout_s))
            if turn is not None:
                replay.status, replay.turn, replay.detail = "diverged", turn, detail
        out.append(replay)
    return out


# ----------------------------------------------------------------------------------------- the recorded env
class RecordedEnv(BaseTextEnv):
    """A recorded episode as an environment: ``init`` gives its prompt, and each ``step`` whose action is the
    recorded one gives the recorded observations, reward and end. The first other action ends the episode
    (``metadata.end`` truncated, ``truncated_by`` ``replay.diverged``, reward 0) and sets ``diverged_at``
    to its turn."""

    def __init__(self, row: Mapping[str, Any]):
        super().__init__(extras={"step": row["step"], "index": row["index"]})
        self.prompt, self.recorded = recorded_turns(row)
        self.end = {
            "end": row["end"],
            **({"truncated_by": row["truncated_by"]} if row["truncated_by"] else {}),
        }
        self.max_turns = max(len(self.recorded), 1)
        self.diverged_at: int | None = None

    def init(self, prompt: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        self.turns, self.diverged_at = 0, None
        return [dict(m) for m in self.prompt], {}

    def step(self, action: str) -> dict[str, Any]:
        turn = self.turns
        self.turns += 1
        if turn >= len(self.recorded) or action != self.recorded[turn].action:
            self.diverged_at = turn
            metadata = {"end": "truncated", "truncated_by": "replay.diverged", "diverged_at": turn}
            return {"observations": [], "reward": 0.0, "done": True, "metadata": metadata}
        recorded = self.recorded[turn]
        metadata = dict(self.end) if recorded.done else {}
        return {
            "observations": [dict(m) for m in recorded.observations],
            "reward": recorded.reward,
            "done": recorded.done,
            "metadata": metadata,
        }
