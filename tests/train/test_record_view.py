"""The rollout record of a real run (tiny random model, the real text2sql environment) and its page, opened in
a real headless browser (Debian's chromium, which ``make test`` installs)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from skyrl_train.record import RecordSettings, RolloutRecorder, _chosen, read_rollouts
from skyrl_train.trainer import Trainer
from skyrl_train.viewer import build_view
from tests.train.test_trainer import _config, sql_files  # noqa: F401  (the module's data fixture)

QUIET = [
    "trainer.sft_warmup.steps=0",
    "trainer.eval_before_train=false",
    "data.val_data=[]",
    "data.eval_sets={}",
]


@pytest.fixture(scope="module")
def run_dir(tiny_model, sql_files, tmp_path_factory):  # noqa: F811
    run_dir = tmp_path_factory.mktemp("recorded") / "run"
    with Trainer(_config(tiny_model, sql_files, run_dir, "trainer.max_steps=2", *QUIET)) as trainer:
        trainer.fit()
    return run_dir


def test_every_trained_trajectory_is_recorded_token_by_token(run_dir):
    rows = read_rollouts(run_dir)
    assert [(r["step"], r["index"]) for r in rows] == [(s, i) for s in (1, 2) for i in range(4)]  # 2 x 2 x 2
    for row in rows:
        n = len(row["response_ids"])
        assert n > 0 and row["prompt_ids"]
        for key in ("loss_mask", "sampler_logprobs", "trainer_logprobs", "advantages", "policy_versions"):
            assert len(row[key]) == n, key
        trained = [k for k in range(n) if row["loss_mask"][k]]
        assert trained and row["turn_spans"] and len(row["turn_rewards"]) == len(row["turn_spans"])
        # the engine samples from the policy the trainer holds: both give each token the same log-prob
        gaps = [abs(row["sampler_logprobs"][k] - row["trainer_logprobs"][k]) for k in trained]
        assert max(gaps) < 1e-3, max(gaps)
        # an outcome advantage: one value on every trained token, none on the observations
        assert len({round(row["advantages"][k], 6) for k in trained}) == 1
        assert all(row["advantages"][k] == 0.0 for k in range(n) if not row["loss_mask"][k])
        assert row["env_class"] == "text2sql" and row["task"]["reward_spec"]["ground_truth"]
        assert row["messages"][0]["role"] in ("system", "user") and row["end"] in ("terminated", "truncated")
    metrics = [line for line in (run_dir / "metrics.jsonl").read_text().splitlines() if "record/" in line]
    assert len(metrics) == 2 and '"record/trajectories": 4.0' in metrics[0]


def test_sampling_is_stable_and_the_budget_stops_recording(tmp_path):
    chosen = [i for i in range(1000) if _chosen(7, 3, i, 0.25)]
    assert chosen == [i for i in range(1000) if _chosen(7, 3, i, 0.25)] and 150 < len(chosen) < 350
    assert all(_chosen(7, 3, i, 1.0) for i in range(10))
    recorder = RolloutRecorder(tmp_path, RecordSettings(True, 1.0, 1e-9, True, 0))
    recorder.bytes = 1  # past a budget of a billionth of a MiB
    assert recorder.record(1, [], None, {}) == {"record/over_budget": 1.0, "record/trajectories": 0.0}
    assert not recorder.wants_trainer_log_probs and not (tmp_path / "rollouts").exists()


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "needs chromium (Debian package chromium; make test installs it)"
    return exe


def _browser(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000", *args],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def test_the_page_shows_the_run_in_a_real_browser(run_dir, tmp_path):
    from skyrl_train.cli import main

    assert main(["view", str(run_dir), "--out", str(tmp_path / "view.html")]) == 0
    page = (tmp_path / "view.html").read_text()
    assert "<script src" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    rows = read_rollouts(run_dir)
    dom = _browser("--dump-dom", f"file://{tmp_path / 'view.html'}#traj=5").stdout
    assert dom.count('class="pick"') == len(rows) == 8
    assert f"{len(rows)} of {len(rows)}" in dom
    assert ">Trajectory 5<" in dom
    assert len(re.findall(r'class="tok"', dom)) == len(rows[5]["response_ids"])
    assert 'data-key="generate/reward_mean"' in dom and 'data-key="policy/loss"' in dom
    shot = tmp_path / "view.png"
    _browser(f"--screenshot={shot}", "--window-size=1280,1600", f"file://{tmp_path / 'view.html'}#traj=5")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_without_a_record_still_has_a_page(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "generate/reward_mean": 0.5}\n')
    page = build_view(tmp_path)
    assert '"trajectories": []' in page and "generate/reward_mean" in page
