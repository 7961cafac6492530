"""The packages' structure: no module imports (directly or through others) a module that imports it back.

Imports are read with ``ast``, lazy ones inside functions included (a cycle through a lazy import still ties
the two modules together), ``if TYPE_CHECKING:`` blocks left out (they never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("skyrl_gym", "skyrl_train")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports: ``from pkg import sub`` counts as ``pkg.sub`` when that is one."""
    targets: set[str] = set()
    stack: list[ast.AST] = [ast.parse(path.read_text())]
    while stack:
        node = stack.pop()
        if _is_type_checking(node):
            continue
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")
                keep = len(parts) - node.level + (1 if path.name == "__init__.py" else 0)
                base = ".".join([*parts[:keep], *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in modules else base)
        stack.extend(ast.iter_child_nodes(node))
    resolved = set()
    for target in targets:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            resolved.add(target)
    return resolved


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles():
    modules = _modules()
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


CONFIG_MAY_IMPORT = (
    "skyrl_train.config",
    "skyrl_train.names",
    "skyrl_gym.registries",
    "skyrl_gym.errors",
)
"""What the config layer reads: itself, the names of the swappable parts and the registries that hold them. A
part it configures (dispatchers, weight syncs, agents, tools, algorithms) is reached only by its name, and its
settings only through the class the part declares beside itself."""


def _reachable(start: str, graph: dict[str, set[str]]) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def _within(name: str, allowed: tuple[str, ...]) -> bool:
    return any(name == a or name.startswith(f"{a}.") for a in allowed)


def test_the_config_imports_no_part_it_configures():
    modules = _modules()
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    config = [name for name in modules if _within(name, ("skyrl_train.config",))]
    assert config
    outside = {
        (name, target)
        for name in config
        for target in _reachable(name, graph)
        if not _within(target, CONFIG_MAY_IMPORT)
    }
    assert outside == set()


NEVER_REACHES: dict[str, tuple[str, ...]] = {
    "skyrl_train.rollout": ("skyrl_train.training", "skyrl_train.loop", "skyrl_train.evaluation"),
    "skyrl_train.evaluation": ("skyrl_train.training", "skyrl_train.loop"),
    "skyrl_train.training": ("skyrl_train.rollout", "skyrl_train.loop", "skyrl_train.evaluation"),
    "skyrl_train.inference": (
        "skyrl_train.rollout",
        "skyrl_train.training",
        "skyrl_train.loop",
        "skyrl_train.evaluation",
    ),
    "skyrl_gym.runtime": ("skyrl_gym.envs", "skyrl_gym.tools", "skyrl_gym.datasets", "skyrl_train"),
    "skyrl_gym.tools": ("skyrl_gym.envs", "skyrl_gym.datasets", "skyrl_train"),
    "skyrl_gym.envs": ("skyrl_gym.datasets", "skyrl_train"),
}
"""Each package's rule: what it never imports, directly or through others. Rollouts and evaluations run
through an engine and never train; training is tensors in and out; engines serve whoever calls them; only
the loop (``skyrl_train.loop``) joins them all. In ``skyrl_gym``, the sandboxes and services that run
untrusted work (``runtime``, the SQL query service included) know no environment, tool or dataset, the
tools know no environment, and the environments only read their data: a bundled dataset is built by the
datasets layer, which they name (``skyrl_gym.bundled``) and never import."""


@pytest.mark.parametrize("package", sorted(NEVER_REACHES))
def test_each_package_keeps_its_rule(package):
    modules = _modules()
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    members = [name for name in modules if _within(name, (package,))]
    assert len(members) > 3
    banned = NEVER_REACHES[package]
    reached = {(name, t) for name in members for t in _reachable(name, graph) if _within(t, banned)}
    assert reached == set()


def test_nothing_but_the_loop_and_the_command_line_imports_the_loop():
    modules = _modules()
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    importers = {
        name for name, targets in graph.items() if any(_within(t, ("skyrl_train.loop",)) for t in targets)
    }
    allowed = ("skyrl_train.loop", "skyrl_train.cli", "skyrl_train.replay", "skyrl_train.tinker")
    assert {name for name in importers if not _within(name, allowed)} == set()


def test_every_old_name_is_the_very_module_of_its_new_home():
    """The modules that moved answer under their old names for one release (``skyrl_train.compat``): the
    same module object, so a patch through either name reaches the code that runs."""
    import importlib

    from skyrl_train.compat import MOVED, new_name

    for old, new in MOVED.items():
        module = importlib.import_module(old)
        assert module is importlib.import_module(new), old
        # the module keeps its own name and spec: importing it by the old name renames nothing
        assert module.__name__ == new and module.__spec__.name == new, old
    # a submodule of a moved package, under its old dotted name
    pairs = {
        "skyrl_train.agent.tools.sql": "skyrl_gym.tools.agent.sql",
        "skyrl_train.rollout.tools.bash": "skyrl_gym.tools.agent.bash",
        "skyrl_train.dispatch.fixed_pool": "skyrl_train.rollout.dispatch.fixed_pool",
        "skyrl_train.workers.policy": "skyrl_train.training.workers.policy",
        "skyrl_train.algorithms.advantages": "skyrl_train.training.algorithms.advantages",
        "skyrl_train.weight_sync.gate": "skyrl_train.inference.weight_sync.gate",
    }
    for old, new in pairs.items():
        assert new_name(old) == new and importlib.import_module(old) is importlib.import_module(new), old
    from skyrl_train.rollout import MultiTurnGenerator

    old_generator = importlib.import_module("skyrl_train.generator.multi_turn")
    assert old_generator.MultiTurnGenerator is MultiTurnGenerator
    assert importlib.import_module("skyrl_train.trainer").Trainer.__module__ == "skyrl_train.loop.trainer"
    policy_worker = importlib.import_module("skyrl_train.workers").PolicyWorker
    assert policy_worker.__module__ == "skyrl_train.training.workers.policy"
    assert new_name("skyrl_train.data") is None and new_name("skyrl_train.agentx") is None
    # the ReAct loop left the react agent's module for skyrl_gym.tools.react; its names stay there too
    from skyrl_gym.tools import react

    old_react = importlib.import_module("skyrl_train.rollout.react")
    for name in (
        "ReActConfig",
        "ReActEnv",
        "render_tool_call",
        "template_renders_tools",
        "tools_system_prompt",
    ):
        assert getattr(old_react, name) is getattr(react, name), name
    # every new home is a module of the project's own files
    modules = _modules()
    assert all(new in modules for new in MOVED.values())
    assert not any(old in modules for old in MOVED)


def test_every_old_skyrl_gym_name_is_the_very_module_of_its_new_home():
    """skyrl_gym's moved modules (the SQL query service, now ``skyrl_gym.runtime.sql``; the rows reader and
    writer, now ``skyrl_gym.rows``; each environment's task set, now its ``tasks`` module) answer under their
    old names for one release (``skyrl_gym.compat``), through the same finder as skyrl_train's; SkyRL's module
    paths whose code lives under this project's names answer for good."""
    import importlib

    from skyrl_gym.compat import MOVED, SKYRL, new_name

    modules = _modules()
    assert len(MOVED) == 19 and len(SKYRL) == 4
    for old, new in {**SKYRL, **MOVED}.items():
        assert new in modules and old not in modules, old
        module = importlib.import_module(old)
        assert module is importlib.import_module(new), old
        assert module.__name__ == new and module.__spec__.name == new, old
    # what callers imported from the old homes is the same object
    from skyrl_gym.envs.gsm8k.scoring import compute_score
    from skyrl_gym.envs.sql.tasks import load_split
    from skyrl_gym.errors import Error
    from skyrl_gym.rows import read_rows
    from skyrl_gym.runtime.sql.database import open_database
    from skyrl_gym.runtime.sql.guard import check_read_only

    assert importlib.import_module("skyrl_gym.envs.sql.database").open_database is open_database
    assert importlib.import_module("skyrl_gym.envs.sql.safety").check_read_only is check_read_only
    assert importlib.import_module("skyrl_gym.datasets.rows").read_rows is read_rows
    assert importlib.import_module("skyrl_gym.envs.sql.data").load_split is load_split
    assert importlib.import_module("skyrl_gym.error").Error is Error
    assert importlib.import_module("skyrl_gym.envs.gsm8k.utils").compute_score is compute_score
    assert new_name("skyrl_gym.envs.sql.env") is None and new_name("skyrl_gym.envs.sql.db_poolx") is None


def test_every_environment_names_its_parts_alike():
    """An environment's package names its parts the same way: ``env`` (the class), ``tasks`` (its task set,
    where it has one), ``scoring`` (its reward rules, where they are a module of their own) and ``prompts``;
    the old names of those parts are gone from every package (they answer through ``skyrl_gym.compat``)."""
    envs = REPO / "skyrl_gym" / "envs"
    packages = [p for p in envs.iterdir() if (p / "__init__.py").is_file()]
    assert len(packages) >= 12
    for package in packages:
        files = {p.stem for p in package.glob("*.py")}
        assert "env" in files, package.name
        assert not files & {
            "data",
            "task",
            "problems",
            "instance",
            "instances",
            "judge",
            "reward",
            "rewards",
        }, package.name


def test_a_trajectory_reaches_no_runner_and_no_dispatcher():
    """A trajectory takes what it reads from its context; the runner and the dispatchers schedule it and
    are never called back from it."""
    modules = _modules()
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    reached = _reachable("skyrl_train.rollout.trajectory", graph)
    assert "skyrl_train.rollout.runner" not in reached and "skyrl_train.rollout" not in reached
    assert not any(_within(name, ("skyrl_train.rollout.dispatch",)) for name in reached)


def test_one_tool_type_and_one_decorator():
    """Every tool is a :class:`skyrl_gym.tools.core.Tool` made by its one decorator, ``tool``: the built-in
    workspace tools and every tool group's methods alike. The old agent-tool names live only in the module that
    keeps them for one release, and nothing in the packages uses them."""
    from skyrl_gym.tools import PythonCodeExecutorToolGroup, SearchToolGroup, SQLCodeExecutorToolGroup
    from skyrl_gym.tools.agent import TOOLS
    from skyrl_gym.tools.core import Tool

    for name in TOOLS.names():
        made = TOOLS.get(name)
        assert isinstance(made, Tool) and made.takes_workspace, name
    for group in (PythonCodeExecutorToolGroup, SQLCodeExecutorToolGroup, SearchToolGroup):
        tools = [getattr(group, attribute) for attribute in group._tool_attributes.values()]
        assert tools and all(isinstance(t, Tool) and not t.takes_workspace for t in tools), group.__name__
    keeper = REPO / "skyrl_gym" / "tools" / "agent" / "core.py"
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            if path == keeper:
                continue
            names = {
                alias.name
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.ImportFrom)
                for alias in node.names
            }
            assert not names & {"AgentTool", "ToolOutput", "agent_tool"}, path
