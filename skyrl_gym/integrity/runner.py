"""The clean-interpreter pytest runner that verification uses.

``python3 -m pytest`` in a repository reads a lot that an agent may have written there: the current folder is
first on ``sys.path`` before pytest is imported (a ``pytest.py``, ``_pytest/`` or a shadowed standard module
there wins), ``sitecustomize``/``usercustomize`` and user-site ``.pth`` files run at start-up (with ``HOME``
in the workspace), ``*.dist-info`` folders with a ``pytest11`` entry point are loaded as plugins, and
``PYTHONPATH``/``PYTEST_ADDOPTS``/``PYTEST_PLUGINS`` come from the environment.

:func:`clean_pytest_command` turns a pytest command into ``python3 -I <runner> <plugin dir> -- <args>``
with plugin autoload off: ``-I`` puts neither the script's folder, the current folder nor the user site on
``sys.path`` and ignores ``PYTHON*`` variables; the runner (:data:`RUNNER_SOURCE`, kept in a folder the
agent's diff cannot reach) imports the report plugin and pytest first, then adds the repository to
``sys.path`` as ``-m`` would, and runs ``pytest.main`` with the plugin object. Code of the repository itself
still runs in that interpreter; :mod:`skyrl_gym.integrity.diffscreen` screens what it may contain.
"""

from __future__ import annotations

import os
import shlex

__all__ = ["CLEAN_ENV", "RUNNER_MODULE", "RUNNER_SOURCE", "clean_pytest_command"]

RUNNER_MODULE = "skyrl_clean_pytest"
RUNNER_SOURCE = '''\
"""Run pytest in a clean interpreter: python3 -I skyrl_clean_pytest.py PLUGIN_DIR PLUGIN -- PYTEST_ARGS."""
import os
import sys

sys.dont_write_bytecode = True  # -I ignores PYTHONDONTWRITEBYTECODE: no __pycache__ is written or needed
plugin_dir, plugin_name, separator, *args = sys.argv[1:]
assert separator == "--", "usage: skyrl_clean_pytest.py PLUGIN_DIR PLUGIN -- PYTEST_ARGS"
sys.path.insert(0, plugin_dir)
plugin = __import__(plugin_name)
import pytest  # noqa: E402  (from the system's site-packages, before the repository is on the path)

sys.path.remove(plugin_dir)
sys.path.insert(0, os.getcwd())  # the repository importable, as python3 -m pytest makes it
sys.argv = [sys.argv[0], *args]
sys.exit(pytest.main(args, plugins=[plugin]))
'''

CLEAN_ENV = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1"
"""Variables set for every verification run (the runner's ``-I`` ignores ``PYTHON*`` ones itself)."""
_UNSET = "-u PYTHONPATH -u PYTHONSTARTUP -u PYTEST_ADDOPTS -u PYTEST_PLUGINS"


def _pytest_args(command: str) -> tuple[str, list[str]] | None:
    """The interpreter and pytest's arguments of a plain pytest command, ``None`` for anything else."""
    if "$" in command or "`" in command or "\n" in command:
        return None
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return None
    if any(w and set(w) <= set("();<>|&") for w in words):  # a shell operator: not one plain command
        return None
    if not words:
        return None
    first = os.path.basename(words[0])
    if first.startswith("python") and words[1:3] == ["-m", "pytest"]:
        return words[0], words[3:]
    if first in ("pytest", "py.test"):
        return "python3", words[1:]
    return None


def clean_pytest_command(command: str, plugin_dir: str, plugin: str) -> str | None:
    """The shell words that run ``command`` (a ``python3 -m pytest ...`` or ``pytest ...`` line) through the
    runner in ``plugin_dir`` with ``plugin`` loaded, in a clean interpreter; ``None`` when ``command`` is not a
    plain pytest command (shell syntax, another program), which then runs as written."""
    parsed = _pytest_args(command)
    if parsed is None:
        return None
    python, args = parsed
    runner = f"{plugin_dir.rstrip('/')}/{RUNNER_MODULE}.py"
    words = [python, "-I", runner, plugin_dir, plugin, "--", *args]
    return f"env {_UNSET} {CLEAN_ENV} " + " ".join(shlex.quote(w) for w in words)
