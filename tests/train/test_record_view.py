"""The rollout record of a real run (tiny random model, the real text2sql environment), its page opened in a
real headless browser (Debian's chromium, which ``make test`` installs), and its replays: the update rerun
from a checkpoint, and the episodes played again against the environment."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import torch

from skyrl_train.loop.trainer import Trainer
from skyrl_train.record import (
    FOLDER,
    PLAN_FILE,
    RecordSettings,
    RolloutRecorder,
    _chosen,
    read_plan,
    read_rollouts,
)
from skyrl_train.replay import RecordedEnv, replay_episodes, replay_training
from skyrl_train.viewer import build_view
from tests.train.test_trainer import _config, sql_files  # noqa: F401  (the module's data fixture)

QUIET = [
    # an entropy bonus: the random model earns no reward, and the bonus still gives each update a gradient
    "trainer.algorithm.use_entropy_loss=true",
    "trainer.algorithm.entropy_loss_coef=0.1",
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


def test_each_step_reports_what_it_cost(run_dir):
    rows = read_rollouts(run_dir)
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in steps if "cost/cpu_s" in m]
    assert len(steps) == 2
    for step, metrics in enumerate(steps, start=1):
        recorded = [r for r in rows if r["step"] == step]
        assert metrics["cost/tokens"] == sum(len(r["prompt_ids"]) + len(r["response_ids"]) for r in recorded)
        assert metrics["cost/model_tokens"] == sum(sum(r["loss_mask"]) for r in recorded)
        assert metrics["cost/solved"] == sum(r["reward"] >= 1.0 for r in recorded)
        assert metrics["cost/cpu_s"] > 0 and metrics["cost/env_s"] > 0 and metrics["cost/gpu_s"] == 0.0
        assert ("cost/cpu_s_per_solved" in metrics) == (metrics["cost/solved"] > 0)
    total = json.loads((run_dir / "summary.json").read_text())["cost"]
    assert total["cpu_s"] == round(sum(m["cost/cpu_s"] for m in steps), 2)
    assert total["solved"] == sum(m["cost/solved"] for m in steps)


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
    assert 'data-key="cost/cpu_s"' in dom and "cost cpu_s: " in dom
    shot = tmp_path / "view.png"
    _browser(f"--screenshot={shot}", "--window-size=1280,1600", f"file://{tmp_path / 'view.html'}#traj=5")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_without_a_record_still_has_a_page(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "generate/reward_mean": 0.5}\n')
    page = build_view(tmp_path)
    assert '"trajectories": []' in page and "generate/reward_mean" in page


# ------------------------------------------------------------------------------------------------ replays
def _tampered(run_dir, tmp_path, step: int, index: int, change) -> object:
    """A copy of the run whose recorded trajectory ``index`` of ``step`` went through ``change(row)``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    copy = tmp_path / "tampered"
    shutil.copytree(run_dir, copy)
    path = copy / FOLDER / f"step_{step:06d}.parquet"
    rows = pq.read_table(path).to_pylist()
    change(rows[index])
    pq.write_table(pa.Table.from_pylist(rows), path)
    return copy


def test_replay_reruns_the_recorded_update_bit_for_bit(run_dir, capsys):
    from skyrl_train.cli import main

    result = replay_training(run_dir)
    assert result.checkpoint_step == 1 and [s.step for s in result.steps] == [2]
    (step,) = result.steps
    assert {"policy/loss", "policy/grad_norm", "policy/entropy", "advantage/advantage_mean"} <= set(
        step.metrics
    )
    assert step.advantages_equal and all(a == b for a, b in step.metrics.values()), step.metrics
    assert step.largest_relative == 0.0
    assert step.metrics["policy/loss"][0] != 0.0  # a real update was replayed
    assert result.weights.verdict == "equal" and result.equal
    assert read_plan(run_dir)["torch_threads"] == torch.get_num_threads()  # the replay's threads
    assert main(["replay", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "step 2: policy/loss recorded" in out and "bitwise equal" in out and "after step 2: equal" in out


def test_replay_notices_a_changed_token(run_dir, tmp_path, capsys):
    from skyrl_train.cli import main

    def change(row):
        k = row["loss_mask"].index(1)
        row["response_ids"][k] = (row["response_ids"][k] + 1) % 100

    tampered = _tampered(run_dir, tmp_path, 2, 0, change)
    result = replay_training(tampered)
    (step,) = result.steps
    differing = {k for k, (a, b) in step.metrics.items() if a != b}
    assert (
        not result.equal
        and {"policy/nll", "policy/grad_norm"} <= differing
        and result.weights.verdict == "differ"
    )
    # one changed token moves the weights by a share of the step's own change far above rounding's
    assert 0 < result.weights.tensors <= result.weights.of and result.weights.relative > 0.01, result.weights
    # and the metrics by far more than a sum's last bits (float32: about 1e-7 of the value)
    assert step.largest_relative > 1e-4, step.metrics
    assert main(["replay", str(tampered)]) == 1
    out = capsys.readouterr().out
    found = re.search(r"step 2: .* metrics differs \((.*); by at most (\S+) relative\)", out)
    assert (
        found
        and "policy/nll" in found.group(1)
        and float(found.group(2)) == pytest.approx(step.largest_relative, rel=1e-2)
    ), out


def test_replay_sizes_a_last_bit_difference_far_below_a_wrong_update(run_dir, monkeypatch):
    """Sums added in another order differ in their last bits: give every gradient element such a difference
    before the replayed step, and the weights differ by a share of the step's change far under 0.01 (the
    README test's bound), where one changed token gives more (the test above)."""
    clip = torch.nn.utils.clip_grad_norm_

    def last_bits_apart(params, *args, **kwargs):
        params = list(params)
        generator = torch.Generator().manual_seed(0)
        for p in params:
            if p.grad is not None:
                sign = torch.randint(-1, 2, p.grad.shape, generator=generator).to(p.grad.dtype)
                p.grad.add_(sign * p.grad.abs() * 2**-23)
        return clip(params, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", last_bits_apart)
    result = replay_training(run_dir)
    assert result.weights.verdict == "differ" and result.weights.relative < 1e-3, result.weights


def test_replay_runs_the_update_with_the_runs_thread_count_and_restores_the_callers(
    run_dir, tmp_path, monkeypatch
):
    """The plan's torch_threads is the count the update runs with (a count other than the caller's here);
    the caller's count is back afterwards."""
    import skyrl_train.loop.trainer as trainer_module

    copy = tmp_path / "other_threads"
    shutil.copytree(run_dir, copy)
    plan = read_plan(copy)
    callers = torch.get_num_threads()
    plan["torch_threads"] = 1 if callers != 1 else 2
    (copy / FOLDER / PLAN_FILE).write_text(json.dumps(plan))
    during = []
    update = trainer_module.update_on_batch

    def counting(*args, **kwargs):
        during.append(torch.get_num_threads())
        return update(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "update_on_batch", counting)
    replay_training(copy)
    assert during == [plan["torch_threads"]]
    assert torch.get_num_threads() == callers


def test_replay_refuses_a_run_it_cannot_rerun(run_dir, tmp_path):
    with pytest.raises(ValueError, match="no checkpoint after step 7"):
        replay_training(run_dir, from_step=7)
    partial = _tampered(run_dir, tmp_path, 2, 0, lambda row: None)
    (partial / FOLDER / "step_000002.parquet").unlink()
    with pytest.raises(ValueError, match="no checkpoint of .* is followed by a recorded step"):
        replay_training(partial)


def test_the_episodes_replay_the_same_against_the_environment(run_dir, tmp_path, capsys):
    from skyrl_train.cli import main

    replays = replay_episodes(run_dir)
    assert len(replays) == 8 and all(r.status == "same" for r in replays), replays
    assert main(["replay", str(run_dir), "--episodes"]) == 0
    assert "8 episodes: 8 same, 0 diverged, 0 skipped" in capsys.readouterr().out

    def change(row):
        rewards = row["turn_rewards"]
        rewards[-1] += 0.5

    rows = read_rollouts(run_dir)
    changed = _tampered(run_dir, tmp_path, 1, 3, change)
    replays = replay_episodes(changed)
    diverged = [r for r in replays if r.status != "same"]
    assert [(r.step, r.index, r.turn) for r in diverged] == [(1, 3, rows[3]["num_turns"] - 1)]
    assert "the reward" in diverged[0].detail
    assert main(["replay", str(changed), "--episodes"]) == 1


def test_a_recorded_episode_answers_while_the_actions_match(run_dir):
    row = read_rollouts(run_dir)[0]
    env = RecordedEnv(row)
    prompt, _ = env.init()
    assert prompt == row["messages"][: len(prompt)] and prompt[-1]["role"] != "assistant"
    rewards, seen = [], list(prompt)
    for action in row["actions"]:
        out = env.step(action)
        rewards.append(out["reward"])
        seen += [{"role": "assistant"}, *out["observations"]]
    assert rewards == row["turn_rewards"] and env.diverged_at is None
    assert out["done"] == (row["end"] == "terminated" or row["truncated_by"] not in ("generator.max_turns",))
    assert len(seen) == len(row["messages"]) + len(row["final_observations"])

    env.init()
    out = env.step(row["actions"][0] + " -- something else")
    assert out["done"] and out["reward"] == 0.0 and env.diverged_at == 0
    assert out["metadata"]["truncated_by"] == "replay.diverged"
    json.dumps(out)  # a plain step output
