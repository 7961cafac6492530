"""The registry: register, make, spec, deregister, pprint, env_config forms, plugins."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from envs_for_tests import CountdownEnv
from omegaconf import DictConfig, OmegaConf

import skyrl_gym
import skyrl_gym.envs
import skyrl_gym.envs.registration as registration
from skyrl_gym import Budget, EpisodeGuard, RegistrationError, UnknownEnvironmentError
from skyrl_gym.guard import guard_of


@pytest.fixture
def countdown_id():
    env_id = "countdown_test"
    skyrl_gym.register(id=env_id, entry_point="envs_for_tests:CountdownEnv", budget={"max_turns": 3})
    yield env_id
    skyrl_gym.deregister(env_id)


def test_the_functions_are_the_same_from_every_import_path():
    for name in ("register", "make", "spec", "deregister", "registry", "pprint_registry"):
        assert getattr(skyrl_gym, name) is getattr(skyrl_gym.envs, name) is getattr(registration, name)


def test_make_returns_the_env_itself_with_a_guard_and_the_spec(countdown_id):
    env = skyrl_gym.make(countdown_id, extras={"reward_spec": {"ground_truth": "4"}})
    assert type(env) is CountdownEnv and env.unwrapped is env
    assert env.spec is skyrl_gym.spec(countdown_id)
    assert env.secret == "4"
    assert guard_of(env).budget == Budget(max_turns=3)
    assert not isinstance(env, EpisodeGuard)


def test_skyrl_style_environment_works_unchanged():
    """An environment written as SkyRL documents it: __init__(env_config, extras), make(id, env_config, extras)."""
    skyrl_gym.register(id="skyrl_style", entry_point="envs_for_tests:CountdownEnv")
    try:
        env = skyrl_gym.make(
            "skyrl_style",
            env_config=OmegaConf.create({"db_path": "/data"}),
            extras={"reward_spec": {"method": "rule", "ground_truth": "5"}, "max_turns": 2},
        )
        prompt = [{"role": "user", "content": "guess"}]
        observations, info = env.init(prompt)
        assert observations == prompt and info == {}
        out = env.step("<answer>3</answer>")
        assert out == {
            "observations": [{"role": "user", "content": "3 is wrong."}],
            "reward": 0.0,
            "done": False,
            "metadata": {"guess": "3"},
        }
        out = env.step("<answer>5</answer>")
        assert (out["reward"], out["done"], out["metadata"]["end"]) == (1.0, True, "terminated")
        assert env.unwrapped.env_config.db_path == "/data"
        env.close()
    finally:
        skyrl_gym.deregister("skyrl_style")


def test_callable_entry_point_and_default_kwargs():
    made = []

    def creator(env_config=None, extras=None, difficulty=1):
        made.append(difficulty)
        return CountdownEnv(env_config, extras)

    skyrl_gym.register(id="callable_env", entry_point=creator, kwargs={"difficulty": 3})
    try:
        skyrl_gym.make("callable_env")
        skyrl_gym.make("callable_env", difficulty=5)
        assert made == [3, 5]
    finally:
        skyrl_gym.deregister("callable_env")


@dataclasses.dataclass
class _Config:
    db_path: str = "/x"
    timeout_s: float = 5.0


@pytest.mark.parametrize(
    "given",
    [{"db_path": "/x", "timeout_s": 5.0}, OmegaConf.create({"db_path": "/x", "timeout_s": 5.0}), _Config()],
    ids=["dict", "DictConfig", "dataclass"],
)
def test_env_config_as_dict_dictconfig_or_dataclass(countdown_id, given):
    env = skyrl_gym.make(countdown_id, env_config=given)
    config = env.unwrapped.env_config
    assert isinstance(config, DictConfig)
    assert (config.db_path, config.get("timeout_s")) == ("/x", 5.0)


def test_spec_env_config_defaults_merge_with_given():
    skyrl_gym.register(id="cfg_env", entry_point=CountdownEnv, kwargs={"env_config": {"a": 1, "b": {"c": 2}}})
    try:
        config = skyrl_gym.make("cfg_env", env_config={"b": {"d": 3}}).unwrapped.env_config
        assert OmegaConf.to_container(config) == {"a": 1, "b": {"c": 2, "d": 3}}
    finally:
        skyrl_gym.deregister("cfg_env")


def test_bad_env_config_type_is_a_clear_error(countdown_id):
    with pytest.raises(TypeError, match="env_config must be a dict, an OmegaConf DictConfig or a dataclass"):
        skyrl_gym.make(countdown_id, env_config=["not", "a", "config"])


def test_duplicate_id_is_rejected(countdown_id):
    with pytest.raises(RegistrationError, match="'countdown_test' is already registered"):
        skyrl_gym.register(id=countdown_id, entry_point="envs_for_tests:SleepyEnv")


def test_identical_re_registration_is_a_no_op(countdown_id):
    spec = skyrl_gym.spec(countdown_id)
    again = skyrl_gym.register(
        id=countdown_id, entry_point="envs_for_tests:CountdownEnv", budget={"max_turns": 3}
    )
    assert again is spec


def test_unknown_id_suggests_the_closest_names():
    with pytest.raises(UnknownEnvironmentError) as info:
        skyrl_gym.make("mat")
    message = str(info.value)
    assert "unknown environment 'mat'; did you mean 'math'" in message
    assert "Registered: " in message and "math_multi_turn" in message


@pytest.mark.parametrize(
    "entry_point, message",
    [
        ("no_colon_here", "malformed entry point"),
        ("a:b:c", "malformed entry point"),
        (42, "must be a 'module:Class'"),
    ],
)
def test_malformed_entry_points_are_rejected(entry_point, message):
    with pytest.raises(RegistrationError, match=message):
        skyrl_gym.register(id="bad_entry", entry_point=entry_point)
    assert "bad_entry" not in skyrl_gym.registry


def test_entry_point_missing_attribute_names_it():
    skyrl_gym.register(id="missing_attr", entry_point="envs_for_tests:NoSuchEnv")
    try:
        with pytest.raises(RegistrationError, match="module 'envs_for_tests' has no attribute 'NoSuchEnv'"):
            skyrl_gym.make("missing_attr")
    finally:
        skyrl_gym.deregister("missing_attr")


def test_entry_point_must_make_an_env():
    skyrl_gym.register(id="not_env", entry_point=lambda **kwargs: object())
    try:
        with pytest.raises(TypeError, match="which is not a skyrl_gym.Env"):
            skyrl_gym.make("not_env")
    finally:
        skyrl_gym.deregister("not_env")


def test_deregister_unknown_and_spec_unknown():
    with pytest.raises(UnknownEnvironmentError, match="unknown environment 'nothing_here'"):
        skyrl_gym.deregister("nothing_here")
    with pytest.raises(UnknownEnvironmentError):
        skyrl_gym.spec("nothing_here")


def test_pprint_registry(countdown_id):
    text = skyrl_gym.pprint_registry(disable_print=True, num_cols=2)
    assert "countdown_test" in text and "math" in text
    assert skyrl_gym.pprint_registry({}, disable_print=True) == "No environments registered."


def test_spec_json_round_trip(countdown_id):
    spec = skyrl_gym.spec(countdown_id)
    assert registration.EnvSpec.from_json(spec.to_json()) == spec


def test_budget_validation():
    with pytest.raises(ValueError, match="max_turns must be a positive finite number"):
        Budget(max_turns=0)
    with pytest.raises(TypeError, match="unknown budget field"):
        Budget.coerce({"max_turn": 3})
    assert Budget(max_turns=3).merged({"step_timeout_s": 1.0}) == Budget(max_turns=3, step_timeout_s=1.0)


def test_plugin_from_an_installed_package_is_found_without_importing_it():
    """The example package registers 'wordle' through the skyrl_gym.envs entry point group."""
    code = (
        "import skyrl_gym, gymnasium;"
        "env = skyrl_gym.make('wordle'); print(type(env.unwrapped).__module__);"
        "print('skyrl_gym/wordle' in gymnasium.registry)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["skyrl_wordle.env", "True"]


def test_broken_plugin_is_a_warning_not_a_crash(monkeypatch):
    class _BrokenEntry:
        name, value = "broken", "broken_pkg:register"

        def load(self):
            raise ImportError("no module named broken_pkg")

    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: [_BrokenEntry()])
    with pytest.warns(RuntimeWarning, match="could not load environment plugin 'broken'"):
        assert registration.load_plugins(force=True) == []


# -- settings checked before any environment is made ------------------------------------------------------
@dataclasses.dataclass
class _CountdownSettings:
    """A settings class as the built-ins declare theirs: ``from_env_config`` reads and validates."""

    start: int = 3
    step: int = 1

    @classmethod
    def from_env_config(cls, env_config):
        values = dict(env_config or {})
        unknown = sorted(set(values) - {"start", "step"})
        if unknown:
            raise ValueError(f"unknown countdown env_config key(s) {unknown}")
        settings = cls(**values)
        if settings.start < 1:
            raise ValueError(f"env_config.start must be at least 1, got {settings.start}")
        return settings


def test_a_spec_checks_its_settings_over_its_defaults_without_making_the_environment():
    made = []
    env_id = "countdown_settings_test"
    skyrl_gym.register(
        id=env_id,
        entry_point=lambda **kwargs: made.append(kwargs),
        kwargs={"env_config": {"start": 5}},
        config=_CountdownSettings,
    )
    try:
        env_spec = skyrl_gym.spec(env_id)
        assert env_spec.check_config(None) == _CountdownSettings(start=5, step=1)
        assert env_spec.check_config({"step": 2}) == _CountdownSettings(start=5, step=2)
        with pytest.raises(ValueError, match="start must be at least 1"):
            env_spec.check_config({"start": 0})
        assert skyrl_gym.envs.check_env_configs({env_id: {"strat": 4}, "text2sq": {}}) == [
            f"{env_id}: unknown countdown env_config key(s) ['strat']",
            f"text2sq: {registration._unknown_message('text2sq')}",
        ]
        assert made == []  # checking made nothing
    finally:
        skyrl_gym.deregister(env_id)


def test_every_built_in_that_reads_settings_declares_them_and_refuses_a_misspelt_key():
    """The built-ins' settings are checked as the environments read them: a default config is accepted, a
    misspelt key is refused with the closest valid one. Those without a settings class read none of theirs
    through one (math's multi-turn variant reads only ``max_turns``)."""
    without = sorted(env_id for env_id in skyrl_gym.registry if skyrl_gym.spec(env_id).config is None)
    assert set(without) <= {"math", "math_multi_turn", "aime", "wordle"}, without
    for env_id in sorted(skyrl_gym.registry):
        env_spec = skyrl_gym.spec(env_id)
        if env_spec.config is None:
            continue
        settings = env_spec.check_config(None)
        assert dataclasses.is_dataclass(settings), env_id
        first = dataclasses.fields(settings)[0].name
        problems = skyrl_gym.envs.check_env_configs({env_id: {f"{first}x": 1}})
        assert len(problems) == 1 and f"did you mean {first!r}" in problems[0], problems


def test_a_malformed_settings_class_path_is_refused_at_registration():
    with pytest.raises(RegistrationError, match="malformed settings class"):
        skyrl_gym.register(
            id="bad_settings_test", entry_point="envs_for_tests:CountdownEnv", config="nocolon"
        )
    assert "bad_settings_test" not in skyrl_gym.registry
