"""skyrl_gym.bundled: environments find the bundled datasets by name; the datasets layer builds them."""

from __future__ import annotations

import pytest

from skyrl_gym.bundled import BUNDLED, Bundle, bundle, bundled_dir


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_each_name_leads_to_its_builders_bundle(name, monkeypatch, tmp_path):
    monkeypatch.setenv("SKYRL_GYM_CACHE", str(tmp_path))
    found = bundle(name)
    assert isinstance(found, Bundle)
    assert found.prefix and found.done and callable(found.build)
    version = found.version()
    assert bundled_dir(name, 3) == tmp_path / name / f"{found.prefix}-v{version}-seed3"


def test_an_unknown_name_says_which_are_bundled():
    with pytest.raises(KeyError, match="no bundled dataset 'nope'; the bundled ones are search, sql"):
        bundle("nope")
