"""The run's report: ``report.md`` next to the learning curves, telling what the run did and how sure it is.

:func:`write_report` reads the run's summary (the stage table of :mod:`skyrl_train.evaluation.stages`) and its
``metrics.jsonl`` and writes:

- ``curves.png``: training reward, pass rate, the evaluation sets' accuracy and the warm-up's NLL against
  the step and against wall time, the warm-up shaded;
- ``report.md``: the curves, one table per evaluation set (n, accuracy +- standard error per level at each
  stage, the paired changes with their standard errors, the behaviour shares) and a few example episodes
  before and after.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from skyrl_train.tracking import METRICS_FILE, read_metrics

__all__ = ["CURVE_KEYS", "plot_run_curves", "stage_tables", "write_report"]

CURVE_KEYS = (r"^generate/reward_mean$", r"^generate/pass_rate$", r"^eval/[^/]+/accuracy$", r"^warmup/nll$")
"""Patterns of the metrics drawn in ``curves.png``, one row each (the evaluation sets share a row)."""


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _acc(entry: Mapping[str, Any]) -> str:
    """``45.8 ± 3.2`` (percent) for an ``{n, mean|accuracy, se}`` entry."""
    mean = entry.get("accuracy", entry.get("mean"))
    if mean is None:
        return "-"
    se = entry.get("se")
    return f"{100 * mean:.1f} ± {100 * se:.1f}" if se is not None else f"{100 * mean:.1f}"


def _change(entry: Mapping[str, Any]) -> str:
    if entry.get("mean") is None:
        return "-"
    se = entry.get("se")
    text = f"{100 * entry['mean']:+.1f}"
    return f"{text} ± {100 * se:.1f}" if se is not None else text


def stage_tables(summary: Mapping[str, Any]) -> str:
    """The Markdown tables of every evaluation set of ``summary["eval_sets"]``."""
    out: list[str] = []
    for name, table in (summary.get("eval_sets") or {}).items():
        stages = table["stages"]
        levels = sorted({level for s in stages for level in s["levels"]})
        out.append(f"### {name} ({table['questions']} questions)\n")
        header = ["stage", "step", "n", "accuracy %"] + [f"{lv} % (n)" for lv in levels]
        header += ["queried first %", "self-corrected % of correct", "errors"]
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "---|" * len(header))
        for s in stages:
            b = s["behaviour"]
            cells = [s["stage"], str(s["step"]), str(s["n"]), _acc(s)]
            cells += [
                f"{_acc(s['levels'][lv])} ({s['levels'][lv]['n']})" if lv in s["levels"] else "-"
                for lv in levels
            ]
            corrected = _pct(b.get("self_corrected"))
            if b.get("self_corrected") is not None:
                corrected += f" ({b['self_corrected_count']}/{b['correct']})"
            cells += [_pct(b.get("queried_first")), corrected, str(s["errors"])]
            out.append("| " + " | ".join(cells) + " |")
        if table["changes"]:
            out.append("\nPaired change on the same questions (percentage points ± standard error):\n")
            header = ["from", "to", "n", "change"] + levels
            out.append("| " + " | ".join(header) + " |")
            out.append("|" + "---|" * len(header))
            for c in table["changes"]:
                cells = [c["from"], c["to"], str(c["n"]), _change(c)]
                cells += [_change(c["levels"][lv]) if lv in c["levels"] else "-" for lv in levels]
                out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def _examples(examples: Sequence[Mapping[str, Any]]) -> str:
    out: list[str] = []
    for k, ex in enumerate(examples, 1):
        out.append(f"### Example {k}: {ex['question']} ({ex['db_id']}, {ex['level']})\n")
        out.append(f"Gold: `{ex['gold']}`\n")
        for episode in ex["episodes"]:
            verdict = "correct" if episode["correct"] >= 1 else "wrong"
            out.append(f"**{episode['stage']}** ({verdict}):\n")
            out.append("```text")
            for turn in episode["turns"]:
                who = "model" if turn["role"] == "assistant" else "environment"
                out.append(f"[{who}] {turn['content'].strip()}")
            out.append("```\n")
    return "\n".join(out)


def plot_run_curves(metrics_path: str | Path, out_path: str | Path, warmup_steps: int = 0) -> Path | None:
    """Draw :data:`CURVE_KEYS` against the step (left) and wall time in minutes (right) into ``out_path``,
    the warm-up's steps shaded; None when the file holds none of them."""
    import re

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    records = [r for r in read_metrics(metrics_path) if isinstance(r.get("step"), int | float)]
    if not records:
        return None
    t0 = min(r.get("time", 0.0) for r in records)
    panels: list[list[str]] = []
    for pattern in CURVE_KEYS:
        keys = sorted({k for r in records for k in r if re.search(pattern, k)})
        if keys:
            panels.append(keys)
    if not panels:
        return None
    warm = [r for r in records if any(k.startswith("warmup/") for k in r)]
    figure = Figure(figsize=(11, 2.8 * len(panels)), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(panels), 2, squeeze=False)
    for row, keys in zip(axes, panels, strict=True):
        for ax, axis in zip(row, ("step", "minutes"), strict=True):
            for key in keys:
                points = sorted(
                    (r["step"] if axis == "step" else (r.get("time", t0) - t0) / 60, r[key])
                    for r in records
                    if isinstance(r.get(key), int | float)
                )
                sparse = key.startswith("eval/") or len(points) <= 2
                ax.plot(*zip(*points, strict=True), marker="o" if sparse else None, markersize=4, label=key)
            if warmup_steps and axis == "step":
                ax.axvspan(0.5, warmup_steps + 0.5, color="orange", alpha=0.15, label="warm-up")
            elif warm and axis == "minutes":
                times = [(r["time"] - t0) / 60 for r in warm if "time" in r]
                if times:
                    ax.axvspan(min(times), max(times), color="orange", alpha=0.15, label="warm-up")
            ax.set_xlabel("step (warm-up, then RL)" if axis == "step" else "wall time (min)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out_path, dpi=90)
    return out_path


def write_report(
    run_dir: str | Path, summary: Mapping[str, Any] | None = None, *, warmup_steps: int = 0
) -> Path:
    """Write ``run_dir/report.md`` (and ``curves.png`` when the metrics allow) from ``summary`` (default: the
    run's ``summary.json``); returns the report's path."""
    run_dir = Path(run_dir)
    if summary is None:
        summary = json.loads((run_dir / "summary.json").read_text())
    metrics = run_dir / METRICS_FILE
    curves = plot_run_curves(metrics, run_dir / "curves.png", warmup_steps) if metrics.exists() else None
    lines = [f"# Run report: {run_dir.name}\n"]
    facts = [
        f"RL steps: {summary.get('steps')}",
        f"stopped by: {summary.get('stopped_by')}",
        f"wall time: {summary.get('wall_time_s')} s (evaluations: {summary.get('eval_time_s')} s, "
        f"RL: {summary.get('rl_wall_time_s')} s)",
        f"training prompts: {summary.get('train_prompts')}",
        f"peak memory: {summary.get('peak_rss_gb')} GiB",
    ]
    cost = summary.get("cost") or {}
    if cost:
        per = (
            f"; per solved trajectory {cost['cpu_s_per_solved']} CPU-s, {cost['env_s_per_solved']} env-s, "
            f"{cost['model_tokens_per_solved']:.0f} generated tokens"
            if cost.get("solved")
            else ""
        )
        facts.append(
            f"RL cost: {cost['cpu_s']} CPU-s, {cost['gpu_s']} GPU-s, {cost['env_s']} environment-s, "
            f"{cost['model_tokens']:.0f} generated of {cost['tokens']:.0f} tokens, {cost['solved']:.0f} "
            f"trajectories solved{per}"
        )
    lines += [f"- {fact}" for fact in facts] + [""]
    lines.append(
        "Accuracies are percentages of questions answered correctly, ± one standard error of the mean"
    )
    lines.append("over questions; changes are paired (the same questions at both stages).\n")
    if curves is not None:
        lines.append("## Learning curves\n")
        lines.append(f"![learning curves]({curves.name})\n")
    if (run_dir / "learning_curve.png").exists():
        lines.append("All logged curves: [learning_curve.png](learning_curve.png)\n")
    lines.append("## Evaluation stages\n")
    lines.append(stage_tables(summary) or "No stage evaluation ran.\n")
    for name, paths in (summary.get("eval_sets_skipped") or {}).items():
        lines.append(f"Not evaluated: {name} ({', '.join(paths)} not found).\n")
    if summary.get("examples"):
        lines.append("## Example episodes, before and after\n")
        lines.append(_examples(summary["examples"]))
    path = run_dir / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
