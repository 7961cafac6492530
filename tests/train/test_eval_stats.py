"""The evaluation statistics against numbers worked out by hand, and the behaviour measures on hand-made
episodes (what an environment reports of an episode and how it ended)."""

from __future__ import annotations

import math

import pytest

from skyrl_train.evaluation.stats import behaviour_shares, episode_behaviour, mean_se, paired_change


def test_mean_and_standard_error_by_hand():
    # mean 3/4; squared deviations 3 x 1/16 + 9/16 = 3/4; sample variance 3/4 / 3 = 1/4; se = sqrt(1/4 / 4)
    assert mean_se([1, 0, 1, 1]) == {"n": 4, "mean": 0.75, "se": 0.25}
    # for 0/1 outcomes it is sqrt(p (1 - p) / (n - 1)): p = 0.3, n = 10
    result = mean_se([1.0] * 3 + [0.0] * 7)
    assert result["se"] == pytest.approx(math.sqrt(0.3 * 0.7 / 9))
    assert mean_se([0.5]) == {"n": 1, "mean": 0.5, "se": None}
    assert mean_se([]) == {"n": 0, "mean": None, "se": None}


def test_paired_change_by_hand():
    before = {0: 1.0, 1: 0.0, 2: 0.0, 3: 1.0, 4: 0.0, "only before": 1.0}
    after = {0: 1.0, 1: 1.0, 2: 0.0, 3: 1.0, 4: 1.0, "only after": 0.0}
    change = paired_change(before, after)
    # differences 0 1 0 0 1: mean 0.4; deviations 3 x 0.16 + 2 x 0.36 = 1.2; variance 1.2 / 4 = 0.3
    assert change["n"] == 5 and change["mean"] == pytest.approx(0.4)
    assert change["se"] == pytest.approx(math.sqrt(0.3 / 5))
    # a question that flips both ways cancels; the unpaired errors combined are larger than the paired one
    unpaired = math.hypot(mean_se(list(before.values())[:5])["se"], mean_se(list(after.values())[:5])["se"])
    assert change["se"] < unpaired


def _metrics(queries=0, errors=0, empty=0):
    return {"turns": queries + 1, "queries": queries, "query_errors": errors, "empty_results": empty}


@pytest.mark.parametrize(
    ("metrics", "end", "expected"),
    [
        (_metrics(), "terminated", (True, False, False)),  # answered at once
        (_metrics(queries=1), "terminated", (True, True, False)),  # checked a query, then answered
        (_metrics(queries=2, errors=1), "terminated", (True, True, True)),  # a query failed first
        (_metrics(queries=1, empty=1), "terminated", (True, True, True)),  # a query returned nothing
        # cut by the turn budget: no answer, so neither counts, even after a failed query
        (_metrics(queries=2, errors=1), "truncated", (False, False, False)),
        (None, "terminated", (True, False, False)),  # an environment that reports nothing
    ],
)
def test_episode_behaviour_on_hand_made_episodes(metrics, end, expected):
    flags = episode_behaviour(metrics, end)
    assert (flags["answered"], flags["queried_first"], flags["surprised"]) == expected


def test_behaviour_shares_count_self_correction_among_correct_answers():
    direct = (_metrics(), "terminated")
    checked = (_metrics(queries=1), "terminated")
    corrected = (_metrics(queries=2, errors=1), "terminated")
    episodes = [(*direct, True), (*checked, True), (*corrected, True), (*corrected, False)]
    shares = behaviour_shares(episodes)
    assert shares["episodes"] == 4 and shares["correct"] == 3
    assert shares["queried_first"] == pytest.approx(3 / 4)
    assert shares["self_corrected"] == pytest.approx(1 / 3) and shares["self_corrected_count"] == 1
    assert shares["self_corrected_se"] == pytest.approx(mean_se([0, 0, 1])["se"])
    assert behaviour_shares([])["queried_first"] is None
