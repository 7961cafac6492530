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


CONFIG_MAY_IMPORT = ("skyrl_train.config", "skyrl_train.names", "skyrl_gym.registries", "skyrl_gym.errors")
"""What the config layer reads: itself, the names of the swappable parts and the registries that hold them.
A part it configures (dispatchers, weight syncs, agents, tools, algorithms) is reached only by its name."""


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


TRAINING_SIDE = (
    "skyrl_train.trainer",
    "skyrl_train.async_training",
    "skyrl_train.workers",
    "skyrl_train.algorithms",
    "skyrl_train.weight_sync",
    "skyrl_train.checkpoint",
    "skyrl_train.warmup",
)
"""What trains: the loop, the workers, the losses, weight sync and checkpoints."""


@pytest.mark.parametrize("package", ["skyrl_train.rollout", "skyrl_train.evaluation"])
def test_rollout_and_evaluation_never_reach_the_training_side(package):
    """Rollouts and evaluations run through an engine: a standalone ``skyrl-train eval`` loads none of the
    training machinery, and the trainer calls them, never the other way round."""
    modules = _modules()
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    members = [name for name in modules if _within(name, (package,))]
    assert len(members) > 3
    reached = {(name, t) for name in members for t in _reachable(name, graph) if _within(t, TRAINING_SIDE)}
    assert reached == set()


def test_the_old_evaluation_paths_re_export_the_same_objects():
    import skyrl_train.eval_stats as old_stats
    import skyrl_train.stage_eval as old_stages
    from skyrl_train.evaluation import stages, stats

    for old, new in ((old_stages, stages), (old_stats, stats)):
        assert old.__all__ and all(getattr(old, name) is getattr(new, name) for name in old.__all__)
    assert set(old_stages.__all__) == set(stages.__all__) and set(old_stats.__all__) == set(stats.__all__)


def test_the_old_rollout_names_are_the_new_modules():
    """``skyrl_train.agent``, ``skyrl_train.dispatch`` and ``skyrl_train.generator`` alias the modules that
    moved into ``skyrl_train.rollout``: one module object under both names, so a patch through either
    reaches the code that runs."""
    import importlib

    pairs = {
        "skyrl_train.agent.runner": "skyrl_train.rollout.runner",
        "skyrl_train.agent.trajectory": "skyrl_train.rollout.trajectory",
        "skyrl_train.agent.react": "skyrl_train.rollout.react",
        "skyrl_train.agent.registry": "skyrl_train.rollout.agents",
        "skyrl_train.agent.tools": "skyrl_train.rollout.tools",
        "skyrl_train.agent.tools.sql": "skyrl_train.rollout.tools.sql",
        "skyrl_train.dispatch.base": "skyrl_train.rollout.dispatch.base",
        "skyrl_train.dispatch.fixed_pool": "skyrl_train.rollout.dispatch.fixed_pool",
        "skyrl_train.generator.base": "skyrl_train.rollout.records",
    }
    for old, new in pairs.items():
        assert importlib.import_module(old) is importlib.import_module(new), old
    from skyrl_train import agent, dispatch, generator, rollout
    from skyrl_train.generator.multi_turn import MultiTurnGenerator

    assert agent.AgentRunner is rollout.AgentRunner and generator.MultiTurnGenerator is MultiTurnGenerator
    assert dispatch.make_dispatcher is rollout.dispatch.make_dispatcher
    assert generator.TrajectoryResult is rollout.TrajectoryResult


def test_a_trajectory_reaches_no_runner_and_no_dispatcher():
    """A trajectory takes what it reads from its context; the runner and the dispatchers schedule it and
    are never called back from it."""
    modules = _modules()
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    reached = _reachable("skyrl_train.rollout.trajectory", graph)
    assert "skyrl_train.rollout.runner" not in reached and "skyrl_train.rollout" not in reached
    assert not any(_within(name, ("skyrl_train.rollout.dispatch",)) for name in reached)
