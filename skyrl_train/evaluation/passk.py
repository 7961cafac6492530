"""Standalone evaluation: an environment's tasks through the agent runner, scored as pass@k per task family.

``skyrl-train eval --env text2sql --n 4`` plays the environment's default task set (what ``reset(seed=...)``
draws: its test split) or ``--data rows.jsonl`` against a local model (``--model``, the hf engine) or any
OpenAI-compatible server (``--base-url``, the remote engine), and prints pass@k, the unbiased estimator of
Chen et al. (2021), for each family (``--family-column``) and overall.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from skyrl_train.data import row_value

if TYPE_CHECKING:
    from skyrl_train.config import SamplingParams

__all__ = [
    "env_rows",
    "evaluate_rows",
    "format_episodes",
    "format_table",
    "pass_at_k",
    "pass_at_k_table",
    "play_rows",
    "read_rows",
    "run_eval",
    "score_trajectories",
]


def pass_at_k(n: int, c: int, k: int) -> float:
    """The probability that at least one of ``k`` samples drawn from ``n`` (``c`` of them correct) passes:
    ``1 - C(n - c, k) / C(n, k)``."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def play_rows(
    generator: Any, rows: Sequence[dict], params: SamplingParams, n_samples: int, batch: int
) -> list:
    """Roll out ``rows`` ``n_samples`` times each, ``batch`` rows at a time; the trajectories (a trajectory's
    ``group_id`` is its row's index in ``rows``)."""
    trajectories = []
    for start in range(0, len(rows), batch):
        chunk = list(rows[start : start + batch])
        out = asyncio.run(generator.generate(chunk, n_samples, params, group_offset=start))
        trajectories += out.trajectories
    return trajectories


def score_trajectories(
    trajectories: Sequence[Any],
    rows: Sequence[dict],
    n_samples: int,
    threshold: float = 1.0,
    breakdown_column: str | None = None,
    prefix: str = "eval",
) -> dict[str, float]:
    """Accuracy, valid-format rate, mean reward and length, and pass@k of :func:`play_rows`' trajectories.

    A trajectory counts as correct when its reward reaches ``threshold`` (the generator's pass threshold:
    full reward); its format is valid when the environment says so (``format_valid`` metric) or, for
    environments that do not report it, when its reward is not negative. Error trajectories are counted
    apart, never as wrong. With ``breakdown_column`` (``trainer.eval_breakdown_column``),
    ``<prefix>/accuracy/<value>`` is the accuracy of the rows with each value of that column (rows without
    one are left out of the breakdown).
    """
    scored = [t for t in trajectories if not t.is_error]
    correct = [t.reward >= threshold for t in scored]

    def format_ok(t: Any) -> bool:
        value = (t.env_metrics or {}).get("format_valid")
        return bool(value) if value is not None else t.reward >= 0

    by_group: dict[int, list[bool]] = {}
    for t, ok in zip(scored, correct, strict=True):
        by_group.setdefault(t.group_id, []).append(ok)
    metrics = {
        f"{prefix}/num_prompts": float(len(rows)),
        f"{prefix}/num_trajectories": float(len(trajectories)),
        f"{prefix}/num_errors": float(len(trajectories) - len(scored)),
        f"{prefix}/accuracy": sum(correct) / max(len(scored), 1),
        f"{prefix}/valid_format_rate": sum(format_ok(t) for t in scored) / max(len(scored), 1),
        f"{prefix}/reward_mean": sum(t.reward for t in scored) / max(len(scored), 1),
        f"{prefix}/response_length_mean": sum(t.num_model_tokens for t in scored) / max(len(scored), 1),
    }
    for k in sorted({1, n_samples}):
        if by_group and all(len(v) >= k for v in by_group.values()):
            metrics[f"{prefix}/pass@{k}"] = sum(
                pass_at_k(len(v), sum(v), k) for v in by_group.values()
            ) / len(by_group)
    if breakdown_column:
        per_value: dict[str, list[bool]] = {}
        for t, ok in zip(scored, correct, strict=True):
            value = row_value(rows[t.group_id], breakdown_column)
            if value is not None and value != "":
                per_value.setdefault(str(value), []).append(ok)
        for value, oks in sorted(per_value.items()):
            metrics[f"{prefix}/accuracy/{value}"] = sum(oks) / len(oks)
    return metrics


def evaluate_rows(
    generator: Any,
    rows: Sequence[dict],
    params: SamplingParams,
    n_samples: int,
    batch: int,
    breakdown_column: str | None = None,
) -> dict:
    """Roll out ``rows`` ``n_samples`` times each and report accuracy, valid-format rate and pass@k
    (:func:`play_rows`, then :func:`score_trajectories` under ``eval/``)."""
    trajectories = play_rows(generator, rows, params, n_samples, batch)
    threshold = getattr(generator, "pass_threshold", 1.0)
    return score_trajectories(trajectories, rows, n_samples, threshold, breakdown_column)


def read_rows(path: str) -> list[dict[str, Any]]:
    """Dataset rows from a JSONL (one JSON object a line) or parquet file."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def env_rows(env_id: str, limit: int, env_config: Any = None) -> list[dict[str, Any]]:
    """Up to ``limit`` distinct rows of an environment's default task set (``reset(seed=s)`` for s = 0, 1, ...)."""
    import skyrl_gym

    env = skyrl_gym.make(env_id, env_config=env_config)
    try:
        rows: list[dict[str, Any]] = []
        seen: set[str] = set()
        for seed in range(limit * 4):
            task = env.sample_task(seed)
            if task is None:
                raise ValueError(f"{env_id} has no default task set: pass --data with rows")
            key = json.dumps(task, sort_keys=True, default=str)
            if key in seen:
                continue
            seen.add(key)
            rows.append({"prompt": task["prompt"], "env_class": env_id, **dict(task.get("extras") or {})})
            if len(rows) == limit:
                break
        return rows
    finally:
        env.close()


def _family(row: Mapping[str, Any], column: str) -> str:
    value: Any = row
    for part in column.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return "all" if value is None else str(value)


def pass_at_k_table(
    rows: Sequence[Mapping[str, Any]],
    rewards: Sequence[Sequence[float]],
    ks: Sequence[int],
    *,
    family_column: str = "data_source",
    pass_threshold: float = 1.0,
) -> dict[str, dict[str, float]]:
    """``{family: {"tasks": n, "pass@k": ...}}`` and ``"overall"``, each the mean over its tasks of pass@k.

    ``rewards[i]`` are the scored samples of ``rows[i]`` (error samples left out); a task whose samples all
    errored is counted in ``errors`` and left out of the means.
    """
    by_family: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        by_family.setdefault(_family(row, family_column), []).append(i)
    table: dict[str, dict[str, float]] = {}
    for name, members in [*sorted(by_family.items()), ("overall", list(range(len(rows))))]:
        entry: dict[str, float] = {"tasks": float(len(members)), "errors": 0.0}
        scored = [i for i in members if rewards[i]]
        entry["errors"] = float(len(members) - len(scored))
        for k in ks:
            values = [
                pass_at_k(
                    len(rewards[i]), sum(r >= pass_threshold for r in rewards[i]), min(k, len(rewards[i]))
                )
                for i in scored
            ]
            entry[f"pass@{k}"] = sum(values) / len(values) if values else 0.0
        table[name] = entry
    return table


def run_eval(
    rows: Sequence[Mapping[str, Any]],
    engine: Any,
    *,
    n: int = 1,
    agent: str = "multi_turn",
    max_turns: int | None = None,
    max_tokens: int = 512,
    temperature: float | None = None,
    seed: int | None = 0,
    family_column: str = "data_source",
    env_configs: Mapping[str, Any] | None = None,
    max_concurrency: int = 16,
    progress: bool | None = False,
) -> tuple[dict[str, dict[str, float]], Any]:
    """Play ``n`` samples of every row through an :class:`~skyrl_train.rollout.AgentRunner`; the pass@k table
    (k = 1 and powers of two up to ``n``) and the runner's output.

    ``progress`` shows episodes done, the pass rate so far, elapsed time and ETA on stderr as each episode
    finishes (``None``: when stderr is a terminal; see :class:`skyrl_gym.progress.EpisodeProgress`).
    """
    from skyrl_gym.progress import EpisodeProgress
    from skyrl_train.inference.base import SamplingParams
    from skyrl_train.rollout import AgentRunner

    if temperature is None:
        temperature = 0.0 if n == 1 else 0.7
    runner = AgentRunner(
        engine,
        agent=agent,
        env_configs=env_configs,
        max_turns=max_turns,
        max_concurrent_trajectories=max_concurrency,
    )
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed)
    threshold = runner.pass_threshold
    with EpisodeProgress(len(rows) * n, desc="eval", enabled=progress) as bar:

        def finished(trajectory: Any) -> None:
            bar.update(None if trajectory.is_error else trajectory.reward >= threshold)

        output = asyncio.run(runner.run(list(rows), n, params, on_result=finished))
    rewards: list[list[float]] = [[] for _ in rows]
    for trajectory in output.trajectories:
        if not trajectory.is_error:
            rewards[trajectory.group_id].append(trajectory.reward)
    ks = sorted({1, n, *(2**p for p in range(1, n.bit_length()) if 2**p <= n)})
    table = pass_at_k_table(
        rows, rewards, ks, family_column=family_column, pass_threshold=runner.pass_threshold
    )
    return table, output


def format_table(table: Mapping[str, Mapping[str, float]]) -> str:
    """The pass@k table as aligned text, one family per line, ``overall`` last."""
    columns = [c for c in next(iter(table.values())) if c.startswith("pass@")]
    width = max(12, *(len(name) for name in table))
    lines = [f"{'family':{width}} {'tasks':>6} {'errors':>6} " + " ".join(f"{c:>8}" for c in columns)]
    for name, entry in table.items():
        values = " ".join(f"{entry[c]:8.3f}" for c in columns)
        lines.append(f"{name:{width}} {int(entry['tasks']):6d} {int(entry['errors']):6d} {values}")
    return "\n".join(lines)


def _clip(text: str, limit: int) -> str:
    """``text``, or its head and tail with a note of what was left out when it is longer than ``limit``."""
    if limit <= 0 or len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    left_out = len(text) - head - tail
    return f"{text[:head]}\n[... {left_out:,} characters left out ...]\n{text[len(text) - tail :]}"


def _content(message: Any) -> str:
    if not isinstance(message, Mapping):
        return str(message)
    content = message.get("content")
    if isinstance(content, list):  # content parts
        content = "\n".join(
            str(part.get("text", part)) if isinstance(part, Mapping) else str(part) for part in content
        )
    return "" if content is None else str(content)


def _block(title: str, messages: Sequence[Any], limit: int) -> list[str]:
    """A titled block of messages, each ``[role]`` then its text indented."""
    lines = [title]
    if not messages:
        lines.append("    (none)")
    for message in messages:
        role = message.get("role", "?") if isinstance(message, Mapping) else "?"
        text = _clip(_content(message), limit)
        body = text.splitlines() or [""]
        lines.append(f"    [{role}] {body[0]}")
        lines.extend(f"    {line}" for line in body[1:])
    return lines


def format_episodes(
    rows: Sequence[Mapping[str, Any]],
    trajectories: Sequence[Any],
    count: int,
    *,
    pass_threshold: float = 1.0,
    max_chars: int = 2000,
) -> str:
    """Up to ``count`` episodes as the model played them, for a terminal: the task, each action (the model's
    text) and observation (the environment's reply), then the reward and how the episode ended.

    The first sample of each task comes first (then the second samples...), so that ``count`` episodes show
    as many tasks as they can. A text longer than ``max_chars`` keeps its head and tail, with a note of how
    much was left out.
    """
    chosen = sorted(trajectories, key=lambda t: (t.sample_index, t.group_id))[: max(count, 0)]
    out: list[str] = []
    for number, t in enumerate(chosen, 1):
        row = rows[t.group_id] if 0 <= t.group_id < len(rows) else {}
        family = row.get("data_source")
        where = f"task {t.group_id + 1}/{len(rows)}" + (f" ({family})" if family else "")
        samples = sum(1 for other in trajectories if other.group_id == t.group_id)
        head = f"episode {number}/{len(chosen)}: {where}, sample {t.sample_index + 1}/{samples}"
        if t.env_class:
            head += f", {t.env_class}"
        out += ["", "=" * 100, head, "=" * 100]
        messages = list(t.messages or [])
        first_action = next(
            (i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages)
        )
        prompt = messages[:first_action]
        if not prompt:
            raw = row.get("prompt")
            prompt = [{"role": "user", "content": raw}] if isinstance(raw, str) else list(raw or [])
        out += _block("task:", prompt, max_chars)
        turn, pending = 0, list(messages[first_action:])
        while pending:
            action = pending.pop(0)
            turn += 1
            out += _block(f"action {turn} (model):", [action], max_chars)
            observations = []
            while pending and pending[0].get("role") != "assistant":
                observations.append(pending.pop(0))
            last = not pending
            if observations or not last:
                out += _block(f"observation {turn} (environment):", observations, max_chars)
        if t.final_observations:
            out += _block(f"observation {turn} (environment, final):", t.final_observations, max_chars)
        if t.is_error:
            verdict = "error"
        else:
            verdict = "passed" if t.reward >= pass_threshold else "failed"
        end = t.end + (f" by {t.truncated_by}" if t.truncated_by else "")
        plural = "s" if t.num_turns != 1 else ""
        out.append(f"result: reward {t.reward:.3f} ({verdict}), end {end}, {t.num_turns} turn{plural}")
        if t.error:
            out.append(f"error: {_clip(t.error, max_chars)}")
        if t.verification:
            out.append(f"verification: {_clip(json.dumps(t.verification, default=str), max_chars)}")
    return "\n".join(out[1:] if out else out)
