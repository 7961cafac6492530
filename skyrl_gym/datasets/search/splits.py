"""Drawing the train and test questions from the candidates: seeded, balanced over sources and kinds, at most
two questions of one kind per answer, and half the test split about entities that no training question uses."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable

from skyrl_gym.datasets.search.questions import Candidate
from skyrl_gym.envs.search.scoring import normalize_answer

HOLDOUT_SHARE = 0.5
"""The share of the test split asked about entities (countries, synsets) that no training question uses."""


_MAX_PER_ANSWER = 2
"""At most this many questions of one kind share an answer ("Sub-Saharan Africa", "person"...)."""


def select_splits(
    candidates: Iterable[Candidate], *, seed: int, n_train: int, n_test: int
) -> dict[str, list[tuple[Candidate, bool]]]:
    """Draw the train and test questions: ``{split: [(candidate, held_out), ...]}``.

    Half of the test split (:data:`HOLDOUT_SHARE`) is about held-out entities only: a random eighth of the
    countries and a random tenth of the synsets are set aside, and no training question touches them. Each
    split takes its questions in turn from each data source and, within a source, from each kind, so that
    kinds are balanced as far as their candidates allow.
    """
    rng = random.Random(f"skyrl_search/splits/{seed}")
    shuffled = list(candidates)
    rng.shuffle(shuffled)
    per_answer: Counter[tuple[str, str]] = Counter()
    capped = []
    for c in shuffled:
        answer = (c.kind, normalize_answer(c.target[0]))
        if per_answer[answer] < _MAX_PER_ANSWER:
            per_answer[answer] += 1
            capped.append(c)
    entities = sorted({e for c in capped for e in c.entities})
    held = {e for e in entities if rng.random() < (0.125 if e.startswith("country-") else 0.1)}
    held_pool = [c for c in capped if c.entities <= held]
    open_pool = [c for c in capped if not c.entities <= held]
    n_held = min(round(n_test * HOLDOUT_SHARE), len(held_pool))
    test = [(c, True) for c in _balanced(held_pool, n_held)]
    test += [(c, False) for c in _balanced(open_pool, n_test - n_held)]
    chosen = {id(c) for c, _ in test}
    train_pool = [c for c in open_pool if id(c) not in chosen and not c.entities & held]
    train = [(c, False) for c in _balanced(train_pool, n_train)]
    if len(train) < n_train or len(test) < n_test:
        raise ValueError(
            f"asked for {n_train} train and {n_test} test questions, but only {len(train)} and {len(test)} "
            f"could be drawn from {len(capped)} candidates: ask for fewer"
        )
    return {"train": train, "test": test}


def _balanced(pool: list[Candidate], n: int) -> list[Candidate]:
    """``n`` candidates of ``pool`` (already shuffled), taken in turn from each source, then each kind."""
    by_source: dict[str, dict[str, list[Candidate]]] = defaultdict(lambda: defaultdict(list))
    for c in pool:
        by_source[c.data_source][c.kind].append(c)
    queues = {source: _round_robin(kinds) for source, kinds in sorted(by_source.items())}
    picked: list[Candidate] = []
    while len(picked) < n and queues:
        for source in list(queues):
            if len(picked) >= n:
                break
            try:
                picked.append(next(queues[source]))
            except StopIteration:
                del queues[source]
    return picked


def _round_robin(kinds: dict[str, list[Candidate]]):
    lists = [list(kinds[k]) for k in sorted(kinds)]
    position = 0
    while lists:
        lists = [items for items in lists if len(items) > position]
        for items in lists:
            yield items[position]
        position += 1
