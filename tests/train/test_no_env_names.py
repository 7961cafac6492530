"""The trainer knows no environment: no ``skyrl_train`` module names an environment id, a protocol tag or an
environment package in its code.

What is specific to a task (a reference answer, stop strings, how to score) comes from the environment
through the contract; recipes (YAML) may name environments, and so may docstrings and comments. The scan reads
each module's syntax tree: string constants that are not documentation (a bare string statement is one),
imports, and nothing else. A workspace capability asked for by name (``workspace.supports("python")``, a
tool's ``requires=("search",)``) is not an environment: tools need capabilities, whichever environment lends
them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import skyrl_gym
import skyrl_train
from skyrl_gym.tools.workspace import CAPABILITIES

PACKAGE = Path(skyrl_train.__file__).parent

ENGLISH_IDS = {"code", "math", "python", "search", "terminal"}
"""Ids that are also ordinary words: only a string that is exactly the id counts (``"search"``), not one that
uses the word (``"the search never lands..."``)."""

OBSERVATION_TAGS = {"observation", "information", "reminder"}
"""Tags the built-in environments write around their observations, besides the ones their classes declare."""

GENERIC_TAGS = {"tool_call", "tool_response"}
"""The OpenAI-style tool-call format of ``skyrl_gym.tools`` belongs to no environment."""

ALLOWED = {
    (
        "training/checkpoint.py",
        "python",
    ): "the key of Python's random-module state in a checkpoint, not the python env",
}
"""``(module path under skyrl_train/, string)`` pairs that look like an environment name but are not one."""


def _environments() -> tuple[set[str], set[str], set[str]]:
    """Registered ids, the protocol tags and the stop strings their classes declare."""
    ids = set(skyrl_gym.registry)
    tags = set(OBSERVATION_TAGS)
    stops: set[str] = set()
    for env_id in ids:
        creator = skyrl_gym.spec(env_id).load_creator()
        tags |= set(getattr(creator, "protocol_tags", ()) or ())
        stops |= set(getattr(creator, "stop_strings", ()) or ())
    return ids, tags - GENERIC_TAGS, {s for s in stops if not any(g in s for g in GENERIC_TAGS)}


def _documentation(tree: ast.AST) -> set[int]:
    """ids of the string constants that are bare statements: docstrings and attribute docstrings."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def _capability_names(tree: ast.AST) -> set[int]:
    """ids of the string constants that name a workspace capability where a capability is asked for: the
    arguments of ``supports(...)`` and the ``requires=`` of a tool. A tool needs a capability of the workspace
    it runs in (``"python"``, ``"search"``), which any environment may lend: it decides nothing by
    environment. The same word anywhere else (``env_class == "python"``) still counts."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        asked: list[ast.AST] = []
        if (isinstance(func, ast.Attribute) and func.attr == "supports") or (
            isinstance(func, ast.Name) and func.id == "supports"
        ):
            asked += node.args
        asked += [keyword.value for keyword in node.keywords if keyword.arg == "requires"]
        for value in asked:
            for leaf in ast.walk(value):
                if isinstance(leaf, ast.Constant) and leaf.value in CAPABILITIES:
                    found.add(id(leaf))
    return found


def _hits(relative: str, tree: ast.AST, ids: set[str], tags: set[str], stops: set[str]) -> list[str]:
    docs = _documentation(tree) | _capability_names(tree)
    distinctive = [re.compile(rf"(?<![\w.]){re.escape(i)}(?![\w])") for i in sorted(ids - ENGLISH_IDS)]
    tag_marks = sorted(
        {f"<{t}>" for t in tags} | {f"</{t}>" for t in tags} | {f"<{t}/>" for t in tags} | stops
    )
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[:2] == ["skyrl_gym", "envs"] and len(parts) > 2 and parts[2] in ids | {"sql"}:
                    found.append(f"{relative}:{node.lineno}: imports the environment package {name}")
            continue
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docs:
            continue
        text = node.value
        if (relative, text.strip()) in ALLOWED:
            continue
        if text.strip() in ids:
            found.append(f"{relative}:{node.lineno}: the environment id {text.strip()!r}")
        for pattern in distinctive:
            if pattern.search(text) and text.strip() not in ids:
                found.append(f"{relative}:{node.lineno}: {text[:60]!r} names {pattern.pattern}")
        for mark in tag_marks:
            if mark in text:
                found.append(f"{relative}:{node.lineno}: {text[:60]!r} holds the protocol tag {mark!r}")
    return found


def scan(package: Path = PACKAGE) -> list[str]:
    """Every place in ``package``'s modules that names an environment, as ``path:line: what``."""
    ids, tags, stops = _environments()
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        hits = _hits(relative, ast.parse(path.read_text(), filename=str(path)), ids, tags, stops)
        found += sorted(hits, key=lambda hit: int(hit.split(":")[1]))
    return found


def test_no_trainer_module_names_an_environment():
    hits = scan()
    assert not hits, "skyrl_train names environments (move it into the environment):\n" + "\n".join(hits)


def test_the_scan_finds_names_in_code_and_skips_documentation(tmp_path):
    (tmp_path / "bad.py").write_text(
        '"""Docstrings may say text2sql and <sql>."""\n'
        "from skyrl_gym.envs.sql.env import Text2SQLEnv  # comments too: <solution>\n"
        "STOPS = {'text2sql': ('</sql>', '</solution>')}\n"
        "KIND = 'search'\n"
        "MESSAGE = f'no {KIND} result'  # the word alone is fine\n"
        "def f():\n"
        "    '''text2sql here is documentation.'''\n"
        "    return '<think>' + 'gsm8k_multi_turn rows'\n"
    )
    (tmp_path / "good.py").write_text(
        '"""Nothing here: the search never lands on text2sql."""\nX = "level"\n'
    )
    (tmp_path / "tool.py").write_text(
        "@tool(requires=('python', 'run'))\n"
        "def run_code(workspace, code):\n"
        "    return workspace.python(code) if workspace.supports('python') else workspace.run(code)\n"
    )
    (tmp_path / "decides.py").write_text(
        "def pick(workspace, env_class):\n"
        "    if env_class == 'python' and workspace.supports('search'):\n"
        "        return supports_for('search')\n"
    )
    hits = scan(tmp_path)
    assert {h.split(":")[0] for h in hits} == {"bad.py", "decides.py"}, hits
    # a capability asked for is not an environment; the same word deciding by environment still is
    assert sorted(h for h in hits if h.startswith("decides.py")) == [
        "decides.py:2: the environment id 'python'",
        "decides.py:3: the environment id 'search'",
    ], hits
    hits = [h for h in hits if h.startswith("bad.py")]
    assert sorted({int(h.split(":")[1]) for h in hits}) == [2, 3, 4, 8], hits
    assert sum(h.startswith("bad.py:3:") for h in hits) == 3, hits  # the id and both tags
