"""What the swe tests of every backend share: the instances they check, the rows' extras, playing an episode,
and the oracle / no-op and hostile-edit checks, each given the backend's settings."""

from __future__ import annotations

import os
from collections import defaultdict

import skyrl_gym
from skyrl_gym.envs.swe.env import SWEEnv
from skyrl_gym.envs.swe.tasks import SWEInstance, load_instances
from skyrl_gym.testing import play_episode

PER_REPO = 2


def sample(instances: list[SWEInstance]) -> list[SWEInstance]:
    """Every instance with SKYRL_SWE_ALL=1, else the first few of each repository."""
    if os.environ.get("SKYRL_SWE_ALL") == "1":
        return instances
    chosen: dict[str, list[SWEInstance]] = defaultdict(list)
    for instance in instances:
        if len(chosen[instance.repo]) < PER_REPO:
            chosen[instance.repo].append(instance)
    return [i for group in chosen.values() for i in group]


INSTANCES = load_instances()
CHECKED = sample(INSTANCES)


def extras(instance: SWEInstance | dict) -> dict:
    """A row's extras: a bundled instance by id, or a user's own SWE-bench row (a dict) inline."""
    if isinstance(instance, dict):
        return {
            "instance": instance,
            "reward_spec": {"method": "rule", "ground_truth": instance["instance_id"]},
        }
    return {"reward_spec": {"method": "rule", "ground_truth": {"instance_id": instance.instance_id}}}


def play(env: SWEEnv, actions: list[str]) -> list[dict]:
    """``init`` then the actions until the episode ends; the step outputs."""
    env.init(None)
    outputs = []
    for action in actions:
        outputs.append(env.step(action))
        if outputs[-1]["done"]:
            break
    return outputs


def check_oracle_and_noop(config: dict, instance: SWEInstance) -> None:
    """The reference patch resolves the instance (reward 1); submitting at once earns 0."""
    env = SWEEnv(config, extras(instance))
    try:
        outputs = play(env, env.reference_action())
    finally:
        env.close()
    verification = outputs[-1]["metadata"]["verification"]
    assert outputs[-1]["reward"] == 1.0 and verification["outcome"] == "resolved", verification
    assert outputs[-1]["metadata"]["end"] == "terminated"
    env = SWEEnv(config, extras(instance))
    try:
        final = play(env, ["<submit/>"])[-1]
    finally:
        env.close()
    verification = final["metadata"]["verification"]
    assert final["done"] and final["reward"] == 0.0, verification
    # a bug may make a test loop forever: the suite then runs out of time, which earns nothing either
    assert verification["outcome"] in ("unresolved", "test_timeout"), verification
    if verification["outcome"] == "unresolved":
        assert verification["tests"]["fail_to_pass_failed"] + verification["tests"]["missing"] >= 1


def check_edits_earn_nothing(config: dict, edits: list[str]) -> None:
    """Hostile shell edits then a submission: never an error trajectory, never a reward."""
    env = SWEEnv({**config, "max_turns": 5}, extras(CHECKED[0]))
    try:
        task = {"prompt": [{"role": "user", "content": "Fix the bug."}], "extras": extras(CHECKED[0])}
        outputs = play_episode(env, [f"<bash>{edit}</bash>" for edit in edits] + ["<submit/>"], task=task)
    finally:
        env.close()
    verification = outputs[-1]["metadata"]["verification"]
    assert outputs[-1]["reward"] == 0.0
    assert verification["outcome"] in ("unresolved", "patch_failed", "test_timeout"), verification


def play_adversarial(config: dict, actions: list[str]) -> None:
    """An adversarial episode (``play_episode`` checks every output) on a registry-made environment."""
    env = skyrl_gym.make("swe", env_config={**config, "max_turns": 3})
    try:
        play_episode(env, actions, seed=1)
    finally:
        env.close()
