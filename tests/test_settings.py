"""Environment settings are typed dataclasses validated by pydantic (:mod:`skyrl_gym.settings`): every
registered environment's settings class refuses the values a YAML file could hold by mistake, reports every
wrong value at once in ``env_config.<field>`` words, and reads OmegaConf configs."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from omegaconf import OmegaConf

import skyrl_gym
from skyrl_gym.envs.registration import load_env_creator
from skyrl_gym.settings import Count, Flag, PositiveNumber, SettingsError, read_settings, settings

SETTINGS = {
    env_id: load_env_creator(spec.config)
    for env_id, spec in sorted(skyrl_gym.envs.registry.items())
    if isinstance(spec.config, str) and spec.config.startswith("skyrl_gym.")
}


def test_every_builtin_environment_declares_typed_settings():
    assert len(SETTINGS) >= 10 and len(TYPED) >= 9
    for env_id, cls in SETTINGS.items():
        assert hasattr(cls, "__pydantic_validator__"), f"{env_id}: {cls.__name__} is not made with settings()"
        assert cls.from_env_config(None) == cls()


def _field_of(cls, kinds):
    """The first field of ``cls`` whose declared type is one of ``kinds`` (None if it has none)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return next((f.name for f in dataclasses.fields(cls) if hints[f.name] in kinds), None)


TYPED = [env_id for env_id, cls in SETTINGS.items() if _field_of(cls, (Count, Flag, PositiveNumber))]
"""The environments with a count, flag or number setting (gsm8k has two choices only)."""


@pytest.mark.parametrize("env_id", TYPED)
def test_wrong_types_are_refused_by_name(env_id):
    cls = SETTINGS[env_id]
    wrong = {}
    count, flag, seconds = (
        _field_of(cls, (Count,)),
        _field_of(cls, (Flag,)),
        _field_of(cls, (PositiveNumber,)),
    )
    if count:
        wrong[count] = True  # a bool is not a count
    if flag:
        wrong[flag] = "yes"  # nor a string a flag
    if seconds:
        wrong[seconds] = float("inf")
    with pytest.raises(SettingsError) as caught:
        cls.from_env_config(wrong)
    # every wrong value is named in one error, the field first
    assert len(caught.value.problems) == len(wrong), caught.value.problems
    for name in wrong:
        assert any(p.startswith(f"env_config.{name} must be") for p in caught.value.problems), (
            caught.value.problems
        )
    # still a ValueError and a TypeError, as the hand-written checks were
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, TypeError)


def test_the_words_of_each_kind_of_mistake():
    @settings(frozen=True)
    class Demo:
        turns: Count = 3
        timeout_s: PositiveNumber = 1.0
        strict: Flag = True
        weights: tuple[PositiveNumber, PositiveNumber] = (1.0, 1.0)

    with pytest.raises(SettingsError) as caught:
        Demo(turns=0, timeout_s="3", strict=1, weights=(1.0, -2))
    assert caught.value.problems == [
        "env_config.turns must be a positive integer, got 0",
        "env_config.timeout_s must be a number, got '3'",
        "env_config.strict must be true or false, got 1",
        "env_config.weights.1 must be a positive number, got -2",
    ]
    with pytest.raises(ValueError, match=r"'turn' \(did you mean 'turns'\?\)"):
        read_settings(Demo, {"turn": 3}, "demo")
    # an OmegaConf config (its lists too) reads as a dict would; an int is a number of seconds
    read = read_settings(Demo, OmegaConf.create({"timeout_s": 2, "weights": [1, 3.5]}), "demo")
    assert read == Demo(timeout_s=2.0, weights=(1.0, 3.5))
    assert read_settings(Demo, read, "demo") is read


def test_no_settings_class_checks_types_by_hand():
    """The field types say what a value may be: no ``__post_init__`` of a builtin environment's settings
    repeats an ``isinstance`` check of its own fields."""
    import inspect

    for env_id, cls in SETTINGS.items():
        post_init = cls.__dict__.get("__post_init__")
        if post_init is not None:
            source = inspect.getsource(post_init)
            assert "isinstance(" not in source, f"{env_id}: {cls.__name__}.__post_init__ checks types by hand"
