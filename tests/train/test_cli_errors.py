"""``skyrl-train`` on a fresh clone: the default recipe is named, a missing data file says how to build it,
and a user's error is one line on stderr with status 2 (``--debug`` keeps the traceback)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from skyrl_train.cli import main
from skyrl_train.config import load_config
from skyrl_train.data import Datasets

BUILD = "build it with: make data"


@pytest.fixture
def fresh_clone(tmp_path, monkeypatch):
    """A working folder without data/ (recipes are found in the package)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_help_names_the_default_recipe():
    run = subprocess.run(
        [sys.executable, "-m", "skyrl_train", "train", "--help"], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0
    assert "default: sql_cpu" in " ".join(run.stdout.split())


@pytest.mark.parametrize("command", ["train", "eval"])
def test_without_data_names_the_recipe_then_the_build_command(command, fresh_clone):
    run = subprocess.run(
        [sys.executable, "-m", "skyrl_train", command], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert lines[0].startswith(f"skyrl-train {command}: recipe sql_cpu (the default")
    assert f"skyrl-train {command} RECIPE" in lines[0] and "skyrl-train recipes" in lines[0]
    assert len(lines) == 2 and "Traceback" not in run.stderr
    assert lines[1].startswith("error: data.train_data file data/text2sql/train.parquet does not exist")
    assert lines[1].endswith(BUILD)  # the recipe's data.build_command
    assert not (fresh_clone / "runs").exists()  # refused before the run started


def test_a_named_recipe_is_announced_too(capsys, fresh_clone):
    assert main(["eval", "sql_cpu", "trainer.epochs=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("skyrl-train eval: recipe sql_cpu (`skyrl-train eval RECIPE")
    assert "error: data.train_data file" in err


def test_the_trainer_data_loader_names_the_build_command(fresh_clone):
    cfg = load_config("sql_cpu")
    with pytest.raises(FileNotFoundError, match="build it with: make data$"):
        Datasets.from_config(cfg.data, cfg.trainer, tokenizer=None)


def test_a_config_error_is_one_line_and_debug_keeps_the_traceback(capsys):
    assert main(["config", "sql_cpu", "trainer.epoch=2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "error: invalid config: unknown key 'trainer.epoch'; did you mean 'trainer.epochs'?"
    )
    assert "Traceback" not in err
    for argv in (
        ["--debug", "config", "sql_cpu", "trainer.epoch=2"],
        ["config", "sql_cpu", "trainer.epoch=2", "--debug"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "Traceback" in err and "ConfigError" in err
        assert err.strip().splitlines()[-1].startswith("error: invalid config: unknown key")


def test_unknown_recipe_and_missing_rows_are_user_errors(capsys, fresh_clone):
    assert main(["train", "no_such_recipe"]) == 2
    assert capsys.readouterr().err.startswith("error: invalid config: unknown recipe 'no_such_recipe'")
    assert main(["eval", "--data", "absent.jsonl"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "absent.jsonl" in err
    assert main(["eval", "--env", "no_such_env"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown environment 'no_such_env'")


def test_eval_of_a_recipe_without_val_data_says_what_to_name(capsys, fresh_clone):
    (fresh_clone / "data/text2sql").mkdir(parents=True)
    (fresh_clone / "data/text2sql/train.parquet").touch()  # sql_cpu evaluates eval_sets in training only
    assert main(["eval", "sql_cpu"]) == 2
    err = capsys.readouterr().err
    assert "error: nothing to evaluate: recipe sql_cpu has no data.val_data" in err
    assert "'data.val_data=[data/text2sql/heldout.parquet]'" in err
    assert not (fresh_clone / "runs").exists()  # refused before the run started


@pytest.mark.parametrize("given", [None, "TRUE"])
def test_the_command_fixes_mkl_threads_before_torch_loads_unless_the_user_chose(given):
    """MKL reads MKL_DYNAMIC when torch loads it: the command sets it first (FALSE: MKL uses the threads it
    is given rather than a count picked per call, Intel's condition for sums that do not depend on the
    machine's load); a value the user set is kept."""
    script = (
        "import os, sys\n"
        "from skyrl_train.cli import main\n"
        "loaded_before = 'torch' in sys.modules\n"
        "main(['recipes'])\n"
        "import torch\n"
        "print(loaded_before, os.environ.get('MKL_DYNAMIC'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "MKL_DYNAMIC"}
    if given is not None:
        env["MKL_DYNAMIC"] = given
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == f"False {given or 'FALSE'}"
