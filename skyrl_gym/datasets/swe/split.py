"""The train / test split by function: a test instance's mutated function is mutated by no train instance.

Within each repository the mutated functions are put in an order fixed by the seed (a hash of the seed and
the function's name), and whole functions go to the test split in that order until it holds at least
``test_fraction`` of the repository's instances. So a model trained on the train split never saw a bug in
a function it is tested on, and every repository has test instances.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, MutableMapping

__all__ = ["assign_splits", "function_keys", "shared_functions"]


def function_keys(instance: MutableMapping) -> list[str]:
    """The functions an instance mutates, as ``repo:path::qualname`` (``function`` may list several, ``;``)."""
    return [
        f"{instance['repo']}:{name.strip()}" for name in str(instance["function"]).split(";") if name.strip()
    ]


def assign_splits(instances: list[MutableMapping], test_fraction: float = 0.2, seed: int = 0) -> None:
    """Set each instance's ``split`` to ``"train"`` or ``"test"``, function by function, repository by repository."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be between 0 and 1, got {test_fraction}")
    by_repo: dict[str, list[MutableMapping]] = defaultdict(list)
    for instance in instances:
        by_repo[instance["repo"]].append(instance)
    for repo in sorted(by_repo):
        group = by_repo[repo]
        # instances that share a function must share a split: group functions that co-occur (union-find)
        parent: dict[str, str] = {}

        def find(key: str, parent: dict[str, str] = parent) -> str:
            while parent.setdefault(key, key) != key:
                key = parent[key]
            return key

        for instance in group:
            keys = function_keys(instance)
            for key in keys[1:]:
                parent[find(key)] = find(keys[0])
            find(keys[0])
        sizes: dict[str, int] = defaultdict(int)
        for instance in group:
            sizes[find(function_keys(instance)[0])] += 1
        order = sorted(sizes, key=lambda k: hashlib.sha256(f"{seed}:{k}".encode()).hexdigest())
        want = max(1, round(test_fraction * len(group)))
        test_roots, taken = set(), 0
        for root in order:
            if taken >= want:
                break
            test_roots.add(root)
            taken += sizes[root]
        for instance in group:
            instance["split"] = "test" if find(function_keys(instance)[0]) in test_roots else "train"


def shared_functions(instances: Iterable[MutableMapping]) -> set[str]:
    """The functions mutated by both a train and a test instance (empty for a proper split)."""
    seen: dict[str, set[str]] = defaultdict(set)
    for instance in instances:
        for key in function_keys(instance):
            seen[key].add(instance["split"])
    return {key for key, splits in seen.items() if len(splits) > 1}
