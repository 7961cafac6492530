"""SkyRL drop-in: the core behaviours and public names that code written for SkyRL's ``skyrl_gym`` relies on.

The environment protocols (text2sql, search, gsm8k, ...) are pinned in their own test files; this one pins
``make``, the guard as SkyRL code sees it, and the modules SkyRL code imports.
"""

from __future__ import annotations

import re
import sys
import textwrap

import pytest
from omegaconf import DictConfig

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.guard import guard_of

# A user's environment, written the way SkyRL's tutorial writes one: mutable defaults, asserts on the row,
# its own max_turns, no init().
MULTIPLY_ENV = textwrap.dedent(
    """
    import re
    from typing import Any, Dict

    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput


    class ProductEnv(BaseTextEnv):
        def __init__(self, env_config: Dict[str, Any] = {}, extras: Dict[str, Any] = {}):
            super().__init__()
            assert "reward_spec" in extras, "reward_spec field is required"
            assert "ground_truth" in extras["reward_spec"], "ground_truth is required in reward_spec field"
            self.ground_truth = extras["reward_spec"]["ground_truth"]
            self.max_turns = extras.get("max_turns", 5)
            self.config_seen = env_config

        def step(self, action: str) -> BaseTextEnvStepOutput:
            self.turns += 1
            found = re.search(r"\\\\boxed\\{([^}]+)\\}", action)
            answer = found.group(1).strip() if found else None
            correct = answer == str(self.ground_truth)
            if correct or self.turns >= self.max_turns:
                reward = 1.0 if correct else (0.5 if answer is not None else 0.0)
                return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata={"answer": answer})
            hint = "Put the product in \\\\boxed{}." if answer is None else f"{answer} is not it."
            return BaseTextEnvStepOutput(
                observations=[{"role": "user", "content": hint}], reward=0.0, done=False, metadata={}
            )
    """
)


@pytest.fixture
def product_env_id(tmp_path, monkeypatch):
    (tmp_path / "user_product_env.py").write_text(MULTIPLY_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    skyrl_gym.envs.register(id="product_test", entry_point="user_product_env:ProductEnv")
    yield "product_test"
    skyrl_gym.envs.deregister("product_test")
    sys.modules.pop("user_product_env", None)


def row(answer: str = "42", **extras):
    return {"reward_spec": {"method": "rule", "ground_truth": answer}, **extras}


def test_a_skyrl_tutorial_env_runs_unchanged(product_env_id):
    env = skyrl_gym.make(product_env_id, env_config=DictConfig({}), extras=row("42", max_turns=3))
    assert type(env).__name__ == "ProductEnv" and isinstance(env, BaseTextEnv)
    first = env.step("It is \\boxed{41}")  # no init(), as SkyRL's generator and tests do
    assert (first["reward"], first["done"], first["observations"][0]["content"]) == (
        0.0,
        False,
        "41 is not it.",
    )
    last = env.step("\\boxed{42}")
    assert (last["reward"], last["done"], last["metadata"]["end"]) == (1.0, True, "terminated")
    env.close()


def test_a_row_without_reward_spec_fails_in_make_as_in_skyrl(product_env_id):
    with pytest.raises(AssertionError, match="reward_spec field is required"):
        skyrl_gym.make(product_env_id, extras={"max_turns": 2})
    with pytest.raises(AssertionError, match="reward_spec field is required"):
        skyrl_gym.make(product_env_id)  # no extras: the constructor's own default ({}) is used
    with pytest.raises(AssertionError, match="ground_truth is required"):
        skyrl_gym.make(product_env_id, extras={"reward_spec": {"method": "rule"}})


def test_make_returns_the_instance_and_attribute_writes_reach_it(product_env_id):
    env = skyrl_gym.make(product_env_id, extras=row("6", max_turns=4))
    assert env.unwrapped is env
    env.max_turns = 1  # SkyRL code and tests set attributes on what make() returned
    assert vars(env)["max_turns"] == 1
    out = env.step("\\boxed{5}")
    assert out["done"] and out["reward"] == 0.5
    env.ground_truth = "5"
    env.reset(options={"prompt": "again", "extras": row("5", max_turns=2)})
    assert env.turns == 0 and env.max_turns == 2  # reset rebuilt it from the new row
    assert env.step("\\boxed{5}")["reward"] == 1.0


def test_env_config_none_reaches_the_env_as_none_and_dicts_as_dictconfig(product_env_id):
    assert skyrl_gym.make(product_env_id, extras=row(), env_config=None).config_seen is None
    assert skyrl_gym.make(product_env_id, extras=row()).config_seen is None
    config = skyrl_gym.make(product_env_id, extras=row(), env_config={"a": 1}).config_seen
    assert isinstance(config, DictConfig) and config.a == 1


def test_the_guard_still_holds_on_the_instance(product_env_id):
    env = skyrl_gym.make(product_env_id, extras=row("9", max_turns=10), budget={"max_turns": 2})
    assert guard_of(env).budget.max_turns == 2
    assert not env.step("no box")["done"]
    out = env.step("still none")
    assert out["done"] and (out["metadata"]["end"], out["metadata"]["truncated_by"]) == (
        "truncated",
        "max_turns",
    )
    with pytest.raises(skyrl_gym.EpisodeEndedError):
        env.step("\\boxed{9}")
    env.close()
    env.close()  # idempotent


def test_an_exception_in_step_ends_in_error_not_in_the_caller(product_env_id):
    env = skyrl_gym.make(product_env_id, extras=row())
    out = env.step(None)  # re.search(None) raises TypeError inside the user's step
    assert out["done"] and out["metadata"]["end"] == "error" and "TypeError" in out["metadata"]["error"]


def test_public_modules_and_names_skyrl_code_imports():
    import skyrl_gym.error
    import skyrl_gym.metrics
    from skyrl_gym.envs import deregister, register  # noqa: F401
    from skyrl_gym.envs.base_text_env import ConversationType  # noqa: F401
    from skyrl_gym.envs.registration import load_env_creator, registry  # noqa: F401
    from skyrl_gym.tools.core import ToolGroup, tool  # noqa: F401

    assert skyrl_gym.error.Error is skyrl_gym.Error
    assert issubclass(skyrl_gym.error.RegistrationError, skyrl_gym.error.Error)
    for name in ("envs", "tools", "error", "make", "spec", "register", "registry", "pprint_registry", "Env"):
        assert name in skyrl_gym.__all__ and hasattr(skyrl_gym, name)
    assert load_env_creator("skyrl_gym.envs.math.env:MathEnv").__name__ == "MathEnv"
    with pytest.raises(skyrl_gym.RegistrationError, match="has no attribute"):
        load_env_creator("skyrl_gym.envs.math.env:NoSuchEnv")


def test_metrics_aggregate_with_the_environment_class(product_env_id):
    from skyrl_gym.metrics import aggregate_for_environment, default_aggregate_metrics

    episodes = [{"queries": 2, "solved": True, "note": "x"}, {"queries": 4, "solved": False}]
    assert default_aggregate_metrics(episodes) == {"queries": 3.0, "solved": 0.5}
    assert default_aggregate_metrics([]) == {}
    assert aggregate_for_environment(product_env_id, episodes) == {"queries": 3.0, "solved": 0.5}

    class Custom(BaseTextEnv):
        @staticmethod
        def aggregate_metrics(metrics):
            return {"episodes": len(metrics)}

    skyrl_gym.register(id="custom_metrics_test", entry_point=Custom)
    try:
        assert aggregate_for_environment("custom_metrics_test", episodes) == {"episodes": 2}
    finally:
        skyrl_gym.deregister("custom_metrics_test")
    with pytest.raises(KeyError, match=re.escape("did you mean")):
        aggregate_for_environment("product_tes", episodes)
