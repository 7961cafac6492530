"""The README cannot drift from the code: every shell block parses as pasted into bash, every command names a
make target, a CLI subcommand with options it takes, a recipe whose overrides validate, or a script that
exists; every Python block runs, and where a line says what it evaluates to (``expr  # value``), it does."""

from __future__ import annotations

import ast
import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PLACEHOLDERS = {"my_script.py"}
"""Names in the README that stand for the reader's own files."""


def _blocks(language: str) -> list[tuple[int, str]]:
    """The fenced blocks of ``language``: (line number, text)."""
    found = []
    for match in re.finditer(rf"^```{language}\n(.*?)^```", README, re.M | re.S):
        found.append((README.count("\n", 0, match.start()) + 1, match.group(1)))
    return found


def _commands(block: str) -> list[list[str]]:
    """The commands of a shell block as words (continuation lines joined, comments dropped)."""
    joined = re.sub(r"\\\n", " ", block)
    return [words for line in joined.splitlines() if (words := shlex.split(line, comments=True))]


SHELL = _blocks("bash")
PYTHON = _blocks("python")


def test_the_readme_has_the_blocks_this_test_reads():
    assert len(SHELL) >= 5 and len(PYTHON) >= 3
    assert _commands(SHELL[0][1])[0][:2] == ["make", "main"]  # the main job comes first


@pytest.mark.parametrize(("line", "block"), SHELL, ids=[f"line{n}" for n, _ in SHELL])
def test_shell_block_parses_as_pasted(line, block):
    proc = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True)
    assert proc.returncode == 0, f"README.md line {line}: bash cannot parse the block: {proc.stderr}"


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return {m.group(1) for m in re.finditer(r"^([A-Za-z0-9_./$()-]+):", text, re.M)}


def _check_skyrl_train(words: list[str]) -> None:
    from skyrl_train.cli import _parser

    args = _parser().parse_args(words)
    if args.command in ("train", "config") or (args.command == "eval" and args.recipe):
        from skyrl_train.config import load_config

        load_config(args.recipe, args.overrides)  # a key the config does not know, or a bad value, raises


def _check_skyrl_gym(words: list[str]) -> None:
    from skyrl_gym.cli import _parser

    if words[0] == "sql-eval":
        from skyrl_gym.envs.sql import evaluate

        assert "--predictions" in Path(evaluate.__file__).read_text()
        return
    _parser().parse_args(words)


def _check_python(words: list[str]) -> None:
    if words[0] == "-m":
        assert importlib.util.find_spec(words[1]) is not None, f"no module {words[1]}"
    elif words[0] not in PLACEHOLDERS:
        assert (ROOT / words[0]).is_file(), f"no script {words[0]}"


@pytest.mark.parametrize(("line", "block"), SHELL, ids=[f"line{n}" for n, _ in SHELL])
def test_every_command_names_what_exists(line, block):
    targets = _make_targets()
    for words in _commands(block):
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):  # VAR=value before the command
            words = words[1:]
        program, rest = words[0], words[1:]
        where = f"README.md line {line}: {shlex.join(words)}"
        if re.fullmatch(r"\.venv(-vllm)?/bin/skyrl-(train|gym)", program):
            assert f"{program.split('/')[0]}/" in (ROOT / ".gitignore").read_text(), (
                f"{where}: not a venv made here"
            )
            program = program.rsplit("/", 1)[1]  # the command of an environment the Makefile builds
        if program == "make":
            assert set(rest) <= targets, f"{where}: no such make target"
        elif program == "skyrl-train":
            try:
                _check_skyrl_train(rest)
            except SystemExit as exc:
                pytest.fail(f"{where}: the command line is refused ({exc})")
        elif program == "skyrl-gym":
            _check_skyrl_gym(rest)
        elif program == "python":
            _check_python(rest)
        elif program == "ray":
            assert (Path(sys.executable).parent / "ray").exists(), f"{where}: ray is not installed"
        else:
            pytest.fail(f"{where}: this test does not know the program {program!r}; teach it")


def _checked(source: str) -> str:
    """The block with each ``expr  # literal`` line turned into an assertion that ``expr == literal``."""
    lines = []
    for text in source.splitlines():
        code, sep, comment = text.partition("  # ")
        stripped = code.strip()
        try:
            statement = ast.parse(stripped).body if sep and stripped else []
            expected = ast.literal_eval(comment.strip()) if statement else None
        except (SyntaxError, ValueError):
            statement = []
        if len(statement) == 1 and isinstance(statement[0], ast.Expr):
            indent = code[: len(code) - len(code.lstrip())]
            lines.append(f"{indent}assert ({stripped}) == {expected!r}, ({stripped!r}, {stripped})")
        else:
            lines.append(text)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("line", "block"), PYTHON, ids=[f"line{n}" for n, _ in PYTHON])
def test_python_block_runs_and_evaluates_to_what_it_says(line, block, tmp_path):
    script = tmp_path / "snippet.py"
    script.write_text(_checked(block))
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"README.md line {line}: the block failed:\n{proc.stderr[-3000:]}"
