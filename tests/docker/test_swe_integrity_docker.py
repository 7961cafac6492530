"""The SWE reward cannot be forged on the Docker backend: the attack battery of tests/swe/attacks.py, each
played in a real container (the diff is taken on this machine from the paused container, the tests run in a
fresh one with the report plugin owned by root)."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyrl_gym.envs.swe.env import SWEEnv
from tests.swe.attacks import INSTANCE, attacks, host_state, play_attack
from tests.swe.common import extras, play

FAST = {"backend": "docker", "command_timeout_s": 10, "timings": False, "test_timeout_s": 120}
# the classes that differ on Docker (a persistent shell, init-adopted processes, git in the container), and a
# sample of the others: the bwrap suite plays every one
CHOSEN = {
    "report rewritten at exit",
    "pytest11 entry point at the root",
    "user-site .pth under HOME",
    "git filter configured everywhere git could read it",
    "a left-behind process writing conftest.py",
    "a symbolic link created while the tests run",
    "every process of the agent's user killed",
}


@pytest.mark.parametrize("attack", [a for a in attacks("docker") if a.name in CHOSEN], ids=lambda a: a.name)
def test_attack_earns_nothing_and_is_no_error(docker_engine, attack, tmp_path):
    sentinel = tmp_path / "sentinel"
    sentinel.write_text("unchanged")
    before = host_state([sentinel, Path("/etc/passwd")])
    play_attack(FAST, attack)
    assert host_state([sentinel, Path("/etc/passwd")]) == before


def test_the_oracle_still_earns_one(docker_engine):
    env = SWEEnv(FAST, extras(INSTANCE))
    try:
        final = play(env, env.reference_action())[-1]
    finally:
        env.close()
    assert final["reward"] == 1.0, final["metadata"]["verification"]
