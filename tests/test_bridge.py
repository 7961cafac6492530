"""The Gymnasium bridge: gymnasium.make("skyrl_gym/<id>") for every registered environment."""

from __future__ import annotations

import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import skyrl_gym
from skyrl_gym.bridge import GymnasiumEnv, TextSpace


def test_every_registered_id_is_mirrored_into_gymnasium():
    for env_id in skyrl_gym.registry:
        assert f"skyrl_gym/{env_id}" in gymnasium.registry


def test_register_and_deregister_follow_into_gymnasium():
    skyrl_gym.register(id="mirror_test", entry_point="envs_for_tests:CountdownEnv")
    assert "skyrl_gym/mirror_test" in gymnasium.registry
    env = gymnasium.make("skyrl_gym/mirror_test")
    obs, info = env.reset(seed=4)
    assert obs == "Guess a digit in <answer></answer>."
    assert info["messages"] == [{"role": "user", "content": obs}]
    obs, reward, terminated, truncated, info = env.step("<answer>1</answer>")
    assert (obs, reward, terminated, truncated) == ("1 is wrong.", 0.0, False, False)
    env.close()
    skyrl_gym.deregister("mirror_test")
    assert "skyrl_gym/mirror_test" not in gymnasium.registry


@pytest.mark.parametrize("env_id", ["math", "math_multi_turn", "wordle"])
def test_gymnasium_env_checker_passes(env_id):
    env = gymnasium.make(f"skyrl_gym/{env_id}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the checker warns about problems: make them fail
        check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_reset_options_carry_prompt_and_extras():
    env = gymnasium.make("skyrl_gym/math")
    obs, _ = env.reset(
        options={
            "prompt": [{"role": "user", "content": "1+1?"}],
            "extras": {"reward_spec": {"ground_truth": "2"}},
        }
    )
    assert obs == "1+1?"
    _, reward, terminated, truncated, info = env.step("#### 2")
    assert (reward, terminated, truncated, info["end"]) == (1.0, True, False, "terminated")


def test_truncation_and_errors_are_truncated_in_gymnasium_terms():
    skyrl_gym.register(id="crashy_bridge", entry_point="envs_for_tests:CrashyEnv")
    try:
        env = GymnasiumEnv("crashy_bridge")
        env.reset(options={"prompt": "x"})
        _, reward, terminated, truncated, info = env.step("boom")
        assert (reward, terminated, truncated, info["end"]) == (0.0, False, True, "error")
    finally:
        skyrl_gym.deregister("crashy_bridge")


def test_text_space_holds_any_string_and_samples_short_ones():
    space = TextSpace(max_length=10)
    assert space.contains("🙂\x00\ud800") and not space.contains("x" * 11) and not space.contains(3)
    space.seed(0)
    assert all(len(space.sample()) <= 10 for _ in range(50))


def test_render_mode_is_refused():
    with pytest.raises(ValueError, match="do not render"):
        GymnasiumEnv("math", render_mode="human")
