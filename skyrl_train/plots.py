"""Learning curves from a run's ``metrics.jsonl`` to a PNG (matplotlib, Agg canvas, no display needed).

By default one panel per metric that looks like a training reward mean, a pass rate or an evaluation
accuracy; pass ``keys`` to choose. Evaluation metrics, logged every N steps, are drawn with markers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from skyrl_train.tracking import read_metrics

# Metric names plotted when no keys are given, matched in this order.
DEFAULT_PATTERNS = (
    r"reward.*mean|mean.*reward",
    r"pass_rate|pass@",
    r"^eval.*(acc|accuracy|pass|reward)",
    r"^eval/valid_format_rate$",
    r"^warmup/nll$",
)


def default_keys(names: Iterable[str], patterns: Sequence[str] = DEFAULT_PATTERNS) -> list[str]:
    """The metric names worth a learning curve: those matching :data:`DEFAULT_PATTERNS`, in that order."""
    names = sorted(set(names) - {"step", "time"})
    chosen: list[str] = []
    for pattern in patterns:
        chosen += [name for name in names if re.search(pattern, name) and name not in chosen]
    return chosen


def plot_learning_curves(
    metrics_path: str | Path,
    out_path: str | Path,
    keys: Sequence[str] | None = None,
    *,
    title: str | None = None,
) -> Path:
    """Draw the chosen metrics against the step into ``out_path`` (PNG) and return its path.

    Raises ValueError when none of the metrics is in the file.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    records = read_metrics(metrics_path)
    present = {name for record in records for name, value in record.items() if isinstance(value, int | float)}
    keys = [key for key in keys if key in present] if keys is not None else default_keys(present)
    if not keys:
        raise ValueError(
            f"no metric to plot in '{metrics_path}'; it has {sorted(present - {'step', 'time'})}"
        )
    columns = min(2, len(keys))
    rows = math.ceil(len(keys) / columns)
    figure = Figure(figsize=(5.5 * columns, 3.2 * rows), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for ax, key in zip(axes, keys, strict=False):
        points = [(r["step"], r[key]) for r in records if isinstance(r.get(key), int | float) and "step" in r]
        points.sort()
        steps = [p[0] for p in points]
        values = [p[1] for p in points]
        sparse = len(points) <= 1 or key.startswith("eval")
        ax.plot(steps, values, marker="o" if sparse else None, markersize=4, linewidth=1.5)
        ax.set_title(key, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in axes[len(keys) :]:
        ax.set_visible(False)
    if title:
        figure.suptitle(title)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out_path, dpi=100)
    return out_path
