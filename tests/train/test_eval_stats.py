"""The evaluation statistics against numbers worked out by hand, and the behaviour measures on hand-made
episodes written in both observation styles of text2sql."""

from __future__ import annotations

import math

import pytest

from skyrl_gym.tools.sql import wrap_observation
from skyrl_train.eval_stats import behaviour_shares, episode_behaviour, mean_se, paired_change


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


def _turns(*texts: str) -> list[dict[str, str]]:
    roles = ["assistant", "user"]
    return [{"role": roles[i % 2], "content": text} for i, text in enumerate(texts)]


SKYRL_ERROR = wrap_observation("Error executing SQL: no such column nope, db file: x.duckdb", 1, "skyrl")
SKYRL_EMPTY = wrap_observation("Empty DataFrame\nColumns: []\nIndex: []", 1, "skyrl")
SKYRL_ROWS = wrap_observation("   0\n0  42", 1, "skyrl")
TABLE_EMPTY = wrap_observation("count\n(no rows)", 1, "table")


@pytest.mark.parametrize(
    ("turns", "expected"),
    [
        (_turns("<solution>SELECT 1</solution>"), (True, False, False)),
        (_turns("<sql>SELECT 42</sql>", SKYRL_ROWS, "<solution>SELECT 42</solution>"), (True, True, False)),
        (_turns("<sql>SELECT nope</sql>", SKYRL_ERROR, "<solution>SELECT 1</solution>"), (True, True, True)),
        (_turns("<sql>SELECT 1 WHERE 0</sql>", SKYRL_EMPTY, "<solution>x</solution>"), (True, True, True)),
        (_turns("<sql>SELECT 1 WHERE 0</sql>", TABLE_EMPTY, "<solution>x</solution>"), (True, True, True)),
        # no answer: nothing counts, even after a query
        (_turns("<sql>SELECT nope</sql>", SKYRL_ERROR, "<sql>SELECT 2</sql>"), (False, False, False)),
        # an observation that did not come from a query (a turn without any tag) is not a query run
        (
            _turns("I think so", wrap_observation("No query found.", 1, "skyrl"), "<solution>x</solution>"),
            (True, False, False),
        ),
    ],
)
def test_episode_behaviour_on_hand_made_episodes(turns, expected):
    flags = episode_behaviour(turns)
    assert (flags["answered"], flags["queried_first"], flags["surprised"]) == expected


def test_behaviour_shares_count_self_correction_among_correct_answers():
    direct = _turns("<solution>SELECT 1</solution>")
    checked = _turns("<sql>SELECT 42</sql>", SKYRL_ROWS, "<solution>SELECT 42</solution>")
    corrected = _turns("<sql>SELECT nope</sql>", SKYRL_ERROR, "<solution>SELECT 1</solution>")
    episodes = [(direct, True), (checked, True), (corrected, True), (corrected, False)]
    shares = behaviour_shares(episodes)
    assert shares["episodes"] == 4 and shares["correct"] == 3
    assert shares["queried_first"] == pytest.approx(3 / 4)
    assert shares["self_corrected"] == pytest.approx(1 / 3) and shares["self_corrected_count"] == 1
    assert shares["self_corrected_se"] == pytest.approx(mean_se([0, 0, 1])["se"])
    assert behaviour_shares([])["queried_first"] is None
