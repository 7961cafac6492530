"""``skyrl_gym.registries.Registry``: the one type behind every part chosen by name."""

from __future__ import annotations

import sys

import pytest

from skyrl_gym.registries import Registry, UnknownNameError, did_you_mean


def test_register_get_and_decorate():
    reg: Registry = Registry("widget", "parts.widget")
    reg.register("plain", dict)

    @reg.register("fancy")
    def fancy():
        return "fancy"

    assert reg.get("plain") is dict and reg.get("fancy") is fancy
    assert reg.names() == ["fancy", "plain"] and list(reg) == ["fancy", "plain"] and len(reg) == 2
    assert "fancy" in reg and "other" not in reg
    reg.register("plain", dict)  # the same object again is fine
    with pytest.raises(ValueError, match="already registered"):
        reg.register("plain", list)
    reg.register("plain", list, override=True)
    assert reg.get("plain") is list
    reg.unregister("plain")
    reg.unregister("never there")
    assert reg.names() == ["fancy"]
    with pytest.raises(ValueError, match="non-empty string"):
        reg.register("", dict)


def test_unknown_names_say_what_was_meant_and_what_exists():
    reg: Registry = Registry("sandbox backend", "env_config.sandbox")
    for name in ("bwrap", "process", "docker"):
        reg.register(name, object())
    with pytest.raises(UnknownNameError) as info:
        reg.get("bwarp")
    message = str(info.value)
    assert message.startswith("unknown sandbox backend 'bwarp' (env_config.sandbox); did you mean 'bwrap'?")
    assert message.endswith("Registered: bwrap, docker, process")
    assert isinstance(info.value, LookupError) and isinstance(info.value, ValueError)
    assert did_you_mean("zzz", ["bwrap"]) == ""


def test_builtins_are_imported_only_when_asked_for(tmp_path, monkeypatch):
    (tmp_path / "lazy_parts_for_test.py").write_text(
        "IMPORTED = True\n\ndef maker():\n    return 'made'\n\nclass Other:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reg: Registry = Registry(
        "part", builtins={"maker": "lazy_parts_for_test:maker", "missing": "lazy_parts_for_test:nothing"}
    )
    assert "maker" in reg and reg.names() == ["maker", "missing"]
    assert "lazy_parts_for_test" not in sys.modules
    assert reg.get("maker")() == "made"
    assert "lazy_parts_for_test" in sys.modules
    with pytest.raises(ImportError, match="has no attribute 'nothing'"):
        reg.get("missing")
    with pytest.raises(ValueError, match="must look like"):
        reg.register_lazy("bad", "no_colon")
    with pytest.raises(ValueError, match="already registered"):
        reg.register_lazy("maker", "lazy_parts_for_test:Other")
    sys.modules.pop("lazy_parts_for_test", None)


def test_a_builtin_registering_itself_by_decorator_is_the_same_entry(tmp_path, monkeypatch):
    reg: Registry = Registry("loss", builtins={"mine": "self_registering_for_test:mine"})
    monkeypatch.setitem(sys.modules, "registry_under_test", type(sys)("registry_under_test"))
    sys.modules["registry_under_test"].REG = reg
    (tmp_path / "self_registering_for_test.py").write_text(
        "from registry_under_test import REG\n\n@REG.register('mine')\ndef mine():\n    return 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert reg.get("mine")() == 1
    with pytest.raises(ValueError, match="already registered"):
        reg.register("mine", lambda: 2)
    sys.modules.pop("self_registering_for_test", None)


def test_the_trainer_seams_are_registries():
    from skyrl_train.rollout.dispatch import DISPATCHERS, make_dispatcher
    from skyrl_train.training.algorithms.registry import ADVANTAGE_ESTIMATORS, POLICY_LOSSES

    for reg in (ADVANTAGE_ESTIMATORS, POLICY_LOSSES, DISPATCHERS):
        assert isinstance(reg, Registry)
    assert POLICY_LOSSES.get("regular") is POLICY_LOSSES.get("ppo")
    assert make_dispatcher("async_batch", max_concurrency=2).name == "async_batch"
    with pytest.raises(UnknownNameError, match="did you mean 'async_batch'"):
        make_dispatcher("async_btch")
