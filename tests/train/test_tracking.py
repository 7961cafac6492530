"""Metrics logging (console, JSONL, TensorBoard, wandb errors), learning-curve PNGs and the progress bar."""

from __future__ import annotations

import importlib.util
import json

import pytest

from skyrl_train.plots import default_keys, plot_learning_curves
from skyrl_train.progress import ProgressBar, format_duration
from skyrl_train.tracking import Tracker, format_console_line, read_metrics


def test_jsonl_tensorboard_and_console(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("tensorboard")
    torch = pytest.importorskip("torch")
    config = {"trainer": {"lr": 1e-6}}
    with Tracker(["console", "jsonl", "tensorboard"], tmp_path, config) as tracker:
        for step in (1, 2, 3):
            tracker.log(
                {
                    "reward/mean": 0.1 * step,
                    "policy/loss": torch.tensor(-0.5),
                    "policy/kl": float("nan"),
                    "note": "text",
                },
                step=step,
            )
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3
    first = json.loads(lines[0])
    assert first["step"] == 1
    assert first["reward/mean"] == pytest.approx(0.1)
    assert first["policy/loss"] == -0.5
    assert first["policy/kl"] is None  # NaN is not JSON
    assert first["note"] == "text"
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    out = capsys.readouterr().out
    assert "step 3 | reward/mean 0.3 | policy/loss -0.5" in out


def test_resume_drops_metrics_after_the_checkpoint(tmp_path):
    with Tracker(["jsonl"], tmp_path) as tracker:
        for step in range(1, 6):
            tracker.log({"reward/mean": step}, step=step)
    with (tmp_path / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 6, "rew')  # a line cut short by a kill
    with Tracker(["jsonl"], tmp_path, resume_step=3) as tracker:
        tracker.log({"reward/mean": 40}, step=4)
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]
    assert read_metrics(tmp_path / "metrics.jsonl")[-1]["reward/mean"] == 40


def test_bad_backends_are_refused_with_the_fix(tmp_path):
    with pytest.raises(ValueError, match="unknown logger backend"):
        Tracker(["jsonl", "mlflow"], tmp_path)
    with pytest.raises(ValueError, match="need a run_dir"):
        Tracker(["jsonl"], None)
    if importlib.util.find_spec("wandb") is None:
        with pytest.raises(ImportError, match="pip install wandb"):
            Tracker(["wandb"], tmp_path)


def test_console_line_picks_the_headline_metrics():
    line = format_console_line({"time/step": 2.0, "reward/mean": 0.25, "zzz": 1, "policy/loss": 0.5}, step=7)
    assert line == "step 7 | reward/mean 0.25 | policy/loss 0.5 | time/step 2"
    assert format_console_line({"a": 1, "b": 2}, step=1, keys=["b"]) == "step 1 | b 2"


def test_learning_curve_png(tmp_path):
    pytest.importorskip("matplotlib")
    with Tracker(["jsonl"], tmp_path) as tracker:
        for step in range(1, 9):
            metrics = {"reward/mean": step / 10, "reward/pass_rate": step / 20, "policy/loss": 1.0}
            if step % 4 == 0:
                metrics["eval/accuracy"] = step / 8
            tracker.log(metrics, step=step)
    assert default_keys(["policy/loss", "eval/accuracy", "reward/pass_rate", "reward/mean", "step"]) == [
        "reward/mean",
        "reward/pass_rate",
        "eval/accuracy",
    ]
    png = plot_learning_curves(tmp_path / "metrics.jsonl", tmp_path / "plots" / "curves.png", title="run")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no metric to plot"):
        plot_learning_curves(tmp_path / "metrics.jsonl", tmp_path / "x.png", keys=["missing"])


def test_progress_bar_eta_counts_steps_since_the_restart(monkeypatch):
    pytest.importorskip("tqdm")
    bar = ProgressBar(total=10, initial=4, disable=True)
    assert bar.eta_s() is None
    monkeypatch.setattr(bar, "elapsed_s", lambda: 6.0)
    bar.update(2, **{"reward/mean": 0.5})
    assert bar.eta_s() == pytest.approx(12.0)  # 3 s per step, 4 steps left
    bar.max_wall_time_s = 10.0
    assert bar.eta_s() == pytest.approx(4.0)  # the time budget ends first
    bar.close()
    assert format_duration(3723) == "1h02m03s"
    assert format_duration(65) == "1m05s"
    assert format_duration(None) == "?"
