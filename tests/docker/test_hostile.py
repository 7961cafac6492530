"""The hostile battery in containers: each attack is contained, returns within its timeout plus a second or two,
and leaves nothing behind (no container, no volume, no process), through the runtime and the terminal env."""

from __future__ import annotations

import shutil
import time

import pytest

from skyrl_gym.runtime import Limits
from skyrl_gym.runtime.docker import DockerContainer
from tests.bounds import STOPPED_WITHIN_S
from tests.docker.conftest import labelled

TIMEOUT_S = 3.0
LIMITS = Limits(
    timeout_s=TIMEOUT_S, memory_mb=256, max_processes=64, max_file_mb=32, max_output_bytes=64 * 1024
)
DISK_MB = 64

ATTACKS = {
    "fork bomb": ":(){ :|:& };:",
    "memory hog": "python3 -c 'b = []\nwhile True: b.append(bytearray(64 * 1024 * 1024))'",
    "disk fill": "dd if=/dev/zero of=/app/fill bs=1M count=100000; dd if=/dev/zero of=/tmp/fill bs=1M; df -m /app /tmp",
    "network": "curl -sS -m 2 http://1.1.1.1/; nc -w 1 -z 8.8.8.8 53; echo rc=$?",
    "privileged": "mount -t tmpfs x /mnt; chroot / true; echo 1 > /proc/sys/kernel/panic; su -c id; "
    "touch /etc/x; ip link add x type dummy",
    "leftover process": "(sleep 900 &); nohup sleep 900 >/dev/null 2>&1 & setsid sleep 900 & disown; sleep 900",
    "gigabytes of output": "yes 'a line of output that goes on and on'",
}


@pytest.fixture
def box(docker_engine):
    container = DockerContainer(limits=LIMITS, disk_mb=DISK_MB)
    yield container
    container.remove()
    assert not docker_engine.api.containers(all=True, filters={"id": container.id})


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_is_contained_by_exec(box, name):
    host_free = shutil.disk_usage("/").free
    start = time.monotonic()
    result = box.exec(["bash", "-c", ATTACKS[name]])
    assert time.monotonic() - start < STOPPED_WITHIN_S
    assert box.exec("echo alive").stdout == "alive\n", "the container must stay usable"
    if name == "memory hog":
        assert result.oom and not result.timed_out
    if name == "disk fill":
        assert "No space left" in result.stderr or "File size limit exceeded" in result.stderr
        used = int(box.exec("du -sm /app /tmp | awk '{s += $1} END {print s}'").stdout)
        assert used <= 2 * DISK_MB + 2
        assert shutil.disk_usage("/").free > host_free - 50 * 1024 * 1024
    if name == "network":
        assert "rc=1" in result.stdout and "<html" not in result.stdout.lower()
    if name == "privileged":
        assert "Operation not permitted" in result.stderr or "Permission denied" in result.stderr
        assert box.exec("test -e /etc/x").exit_code != 0
    if name in ("leftover process", "gigabytes of output"):
        assert result.timed_out
    if name in ("leftover process", "fork bomb"):
        assert "sleep 900" not in box.exec("ps -eo args").stdout
        deadline = time.monotonic() + 3  # killed processes may take a moment to be reaped
        while len(box.exec("ps -e").stdout.splitlines()) > 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(box.exec("ps -e").stdout.splitlines()) <= 5, "only init, its sleep, sh and ps are left"
    if name == "gigabytes of output":
        assert result.output_truncated and len(result.stdout) <= LIMITS.max_output_bytes


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_is_contained_in_the_shell(box, name):
    with box.shell(max_output_bytes=64 * 1024) as shell:
        shell.run("cd /tmp; MARK=kept")
        start = time.monotonic()
        result = shell.run(ATTACKS[name], timeout_s=TIMEOUT_S)
        assert time.monotonic() - start < STOPPED_WITHIN_S
        if name == "memory hog":
            assert result.oom
        if name == "gigabytes of output":
            assert result.timed_out and result.output_truncated and len(result.output) < 200_000
        after = shell.run("echo $MARK", timeout_s=TIMEOUT_S)
        if name == "fork bomb":
            # its background jobs live on in the shell, contained by the process limit: the shell answers with
            # its state when a slot is free (the bomb's own "fork: retry" lines may come before and after that
            # answer), or the next command times out while the bomb holds every slot
            assert "kept" in after.output.splitlines() or after.timed_out, after
        else:
            assert after.output.endswith("kept\n") and after.exit_code == 0
    box.kill_commands()
    assert box.exec("echo usable").stdout == "usable\n"


def test_terminal_episode_with_every_attack_leaves_nothing(docker_engine):
    from skyrl_gym.envs.terminal.env import TerminalEnv

    extras = {"reward_spec": {"method": "tests", "ground_truth": "log-errors-0"}}
    env = TerminalEnv({"command_timeout_s": TIMEOUT_S, "max_turns": 20}, extras)
    env.init(None)
    container_id = env.container.id
    for name, attack in ATTACKS.items():
        start = time.monotonic()
        output = env.step(f"<bash>{attack}</bash>")
        assert time.monotonic() - start < STOPPED_WITHIN_S, name
        assert not output["done"] and output["metadata"].get("end") != "error"
    final = env.step("<submit/>")
    assert final["done"] and final["reward"] == 0.0 and final["metadata"]["end"] == "terminated"
    env.close()
    assert not docker_engine.api.containers(all=True, filters={"id": container_id})
    assert container_id not in docker_engine.live()
    assert all(c["Id"] in docker_engine.live() for c in labelled(docker_engine, docker_engine.owner))
