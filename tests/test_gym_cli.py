"""``skyrl-gym``: a user's error is one line on stderr (status 2), and an environment without a default task
set is played and checked from a tasks file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from envs_for_tests import CountdownEnv

import skyrl_gym
from skyrl_gym.cli import main
from skyrl_gym.testing import check_env


class NoTasksEnv(CountdownEnv):
    """A plugin-style environment without a default task set."""

    def sample_task(self, seed=None):
        return None


@pytest.fixture
def no_tasks_env():
    skyrl_gym.register(id="no_tasks_cli", entry_point=NoTasksEnv)
    try:
        yield "no_tasks_cli"
    finally:
        skyrl_gym.deregister("no_tasks_cli")


@pytest.fixture
def tasks_file(tmp_path):
    path = tmp_path / "tasks.jsonl"
    rows = [
        {"prompt": "Guess a digit in <answer></answer>.", "extras": {"reward_spec": {"ground_truth": "4"}}},
        {"prompt": [{"role": "user", "content": "Guess."}], "extras": {"reward_spec": {"ground_truth": "9"}}},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_unknown_environment_is_one_line_on_stderr_with_status_2():
    run = subprocess.run(
        [sys.executable, "-m", "skyrl_gym.cli", "play", "nosuch"], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == [run.stderr.strip()]
    assert run.stderr.startswith("error: unknown environment 'nosuch'")


def test_debug_keeps_the_traceback(capsys):
    assert main(["--debug", "check", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "UnknownEnvironmentError" in err
    assert err.strip().splitlines()[-1].startswith("error: unknown environment 'nosuch'")
    assert main(["check", "nosuch", "--debug"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_missing_tasks_file_is_a_user_error(capsys, no_tasks_env, tmp_path):
    assert main(["play", no_tasks_env, "--tasks", str(tmp_path / "absent.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "absent.jsonl" in err and "Traceback" not in err


def test_env_without_tasks_is_told_how_to_give_them(capsys, no_tasks_env):
    assert main(["play", no_tasks_env, "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: '{no_tasks_env}' has no default task set") and "--tasks FILE" in err


def test_play_and_check_take_a_tasks_file(capsys, no_tasks_env, tasks_file):
    assert main(["play", no_tasks_env, "--tasks", str(tasks_file), "--policy", "oracle", "--json"]) == 0
    [result] = json.loads(capsys.readouterr().out)
    assert result["episodes"] == 20 and result["mean_reward"] == 1.0  # the oracle reads each task's secret
    assert main(["check", no_tasks_env, "--tasks", str(tasks_file)]) == 0
    out = capsys.readouterr().out
    assert "0 failed" in out


def test_check_without_tasks_reports_the_missing_tasks_once(capsys, no_tasks_env):
    assert main(["check", no_tasks_env]) == 1
    out = capsys.readouterr().out
    fails = [line for line in out.splitlines() if line.strip().startswith("FAIL")]
    assert len(fails) == 1 and "[has-tasks]" in fails[0]
    assert "tasks=[" in fails[0] and "--tasks FILE" in fails[0]


def test_check_env_without_tasks_fails_one_rule():
    report = check_env(NoTasksEnv, raise_on_failure=False)
    assert [f.rule for f in report.failures] == ["has-tasks"]
    assert "check_env(factory, tasks=[" in report.failures[0].message
    assert report.passed == ["make-returns-env"]
    tasks = [{"prompt": "Guess.", "extras": {"reward_spec": {"ground_truth": "3"}}}]
    assert check_env(NoTasksEnv, tasks=tasks, gymnasium_check=False).ok


def test_play_progress_counts_episodes_and_passes_on_stderr(capsys, no_tasks_env, tasks_file):
    argv = ["play", no_tasks_env, "--tasks", str(tasks_file), "--episodes", "2", "--policy", "oracle"]
    assert main([*argv, "--policy", "noop", "--progress"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("play: ")]
    assert [line.split(",")[0] for line in lines] == [f"play: {i}/4 ep" for i in range(1, 5)]
    assert f"{no_tasks_env}/oracle pass 2/2 (100%)" in lines[1] and "ETA" in lines[1]
    assert f"{no_tasks_env}/noop pass 0/2 (0%)" in lines[3]
    assert main(argv) == 0  # stderr is not a terminal: no progress unless asked
    assert "play: " not in capsys.readouterr().err


def test_progress_is_a_live_bar_on_a_terminal():
    import io

    from skyrl_gym.progress import EpisodeProgress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    with EpisodeProgress(3, desc="eval", file=screen) as progress:
        progress.update(True)
        progress.update(False)
        progress.update(None)
    assert progress.mode == "bar" and "\r" in screen.getvalue()
    assert "3/3" in screen.getvalue() and "pass 1/2 (50%), 1 error" in screen.getvalue()
    assert EpisodeProgress(3, enabled=False, file=screen).mode == "off"
