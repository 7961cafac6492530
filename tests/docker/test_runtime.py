"""The Docker runtime against the real engine: commands, files, the persistent shell, limits, clean-up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from skyrl_gym.runtime import Limits, make_sandbox
from skyrl_gym.runtime.docker import (
    OWNER_LABEL,
    RUNTIME_LABEL,
    ContainerPool,
    DockerContainer,
    DockerEngine,
    ImageNotFound,
    _StartGate,
)
from tests.bounds import STOPPED_WITHIN_S
from tests.docker.conftest import labelled

LIMITS = Limits(timeout_s=5, memory_mb=256, max_processes=64, max_file_mb=16, max_output_bytes=64 * 1024)


@pytest.fixture(scope="module")
def box(docker_engine):
    with DockerContainer(limits=LIMITS, disk_mb=64) as container:
        yield container


def test_exec_output_exit_code_and_stdin(box):
    result = box.exec("echo out; echo err >&2; exit 3")
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 3)
    assert box.exec(["cat"], stdin="fed through stdin").stdout == "fed through stdin"
    assert result.backend == "docker" and result.isolation == "container"


def test_timeout_kills_the_command_and_what_it_started_and_the_container_stays_usable(box):
    result = box.exec("sleep 600 & setsid sleep 600 & sleep 600", timeout_s=1)
    assert result.timed_out and result.exit_code == -signal.SIGKILL
    assert result.duration_s < STOPPED_WITHIN_S
    assert "sleep 600" not in box.exec("ps -eo args").stdout
    assert box.exec("echo still here").stdout == "still here\n"


def test_files_in_and_out(box):
    box.put_files({"sub/dir/a.txt": "text\n", "b.bin": bytes(range(256))})
    assert box.get_file("sub/dir/a.txt") == b"text\n"
    assert box.exec(["wc", "-c", "b.bin"]).stdout.split()[0] == "256"
    box.put_files({"c.txt": "in tmp"}, dest="/tmp")
    assert box.get_file("/tmp/c.txt") == b"in tmp"
    assert box.get_file("/no/such/file") is None
    with pytest.raises(ValueError):
        box.put_files({"../escape": "x"})


def test_the_container_is_locked_down(box):
    status = box.exec("grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status").stdout
    assert "CapEff:\t0000000000000000" in status and "CapBnd:\t0000000000000000" in status
    assert "NoNewPrivs:\t1" in status
    assert box.exec("id -u").stdout.strip() == "1000"
    assert box.exec("ls /sys/class/net").stdout.split() == ["lo"]
    assert box.exec("touch /usr/x").exit_code != 0  # the image is read-only
    assert box.exec("test -e /var/run/docker.sock").exit_code != 0
    info = box.engine.api.inspect_container(box.id)
    assert info["Config"]["Labels"][RUNTIME_LABEL] == "docker"
    assert info["Config"]["Labels"][OWNER_LABEL] == box.engine.owner
    assert info["HostConfig"]["NetworkMode"] == "none"


def test_shell_state_lives_across_commands(box):
    with box.shell() as shell:
        assert shell.run("cd /tmp && export X=6 && f() { echo fn$1; }").exit_code == 0
        assert shell.run("echo $((X * 7)) $PWD; f 1").output == "42 /tmp\nfn1\n"
        assert shell.run("sleep 300 & echo started").exit_code == 0
        assert "Running" in shell.run("jobs").output
        quoted = shell.run("cat <<'EOF'\n$X 'quotes' \"and\" `ticks`\nEOF\nread line; echo after read")
        assert quoted.output.startswith("$X 'quotes' \"and\" `ticks`\n")
        assert shell.run("false").exit_code == 1


@pytest.mark.parametrize(
    "command", ["while true; do :; done", "sleep 600", "trap '' INT; sleep 600", "cat"], ids=str
)
def test_shell_timeout_interrupts_and_the_state_survives(box, command):
    with box.shell() as shell:
        shell.run("cd /tmp; Y=kept")
        result = shell.run(command, timeout_s=1)
        assert result.timed_out and result.exit_code is None, result
        assert result.duration_s < STOPPED_WITHIN_S, result
        after = shell.run("echo $Y $PWD")
        assert after.output == "kept /tmp\n" and not after.restarted, (result, after)


def test_shell_exit_gives_a_new_shell(box):
    with box.shell() as shell:
        shell.run("Z=1")
        ended = shell.run("exit 4")
        assert ended.shell_exited and ended.exit_code == 4
        again = shell.run("echo ${Z:-gone}")
        assert again.restarted and again.output == "gone\n"


def test_missing_image_is_named_with_the_fix(docker_engine):
    with pytest.raises(
        ImageNotFound, match=r"image local/nope:latest not found; build it with images/build.sh"
    ):
        DockerContainer("local/nope:latest")
    result = make_sandbox("docker", image="local/nope:latest").run(["true"])
    assert result.exit_code is None and "build it with images/build.sh" in result.stderr


def test_sandbox_interface_runs_python_in_a_fresh_container(docker_engine):
    sandbox = make_sandbox("docker", image="local/python:latest", limits=LIMITS)
    result = sandbox.run_python("import sys; print(open('data.txt').read(), sys.version_info[0])",
                                files={"data.txt": "given"})  # fmt: skip
    assert result.ok and result.stdout == "given 3\n"
    assert sandbox.describe()["enforced"]["network"].startswith("none")
    assert not labelled(docker_engine, docker_engine.owner) or all(
        c["Id"] in docker_engine.live() for c in labelled(docker_engine, docker_engine.owner)
    )


def test_remove_leaves_no_container_and_no_volume(docker_engine):
    volumes = {v["Name"] for v in docker_engine.api.volumes()["Volumes"] or []}
    container = DockerContainer(limits=LIMITS)
    container.exec("echo x > /app/f")
    container.remove()
    container.remove()  # idempotent
    assert container.id not in docker_engine.live()
    assert not docker_engine.api.containers(all=True, filters={"id": container.id})
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        left = {v["Name"] for v in docker_engine.api.volumes()["Volumes"] or []} - volumes
        if not left:
            break
        time.sleep(0.1)
    assert not left


def test_dead_owners_containers_are_swept_by_the_next_engine(docker_engine):
    dead = f"{docker_engine.host}:999999999:1"
    created = docker_engine.api.create_container(
        "local/terminal:latest", command=["sleep", "60"], labels={RUNTIME_LABEL: "docker", OWNER_LABEL: dead}
    )
    DockerEngine()
    assert not docker_engine.api.containers(all=True, filters={"id": created["Id"]})


def test_containers_are_removed_when_the_caller_is_killed(docker_engine):
    script = textwrap.dedent(
        """
        from skyrl_gym.runtime.docker import DockerContainer
        box = DockerContainer()
        print(box.engine.owner, flush=True)
        import time
        time.sleep(600)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    owner = child.stdout.readline().strip()
    assert len(labelled(docker_engine, owner)) == 1
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    deadline = time.monotonic() + 30
    while labelled(docker_engine, owner) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not labelled(docker_engine, owner)


def test_start_gate_bounds_concurrent_starts():
    gate = _StartGate(rate=1000, burst=100, concurrent=3)
    inside, most, lock = [0], [0], threading.Lock()

    def start():
        with gate.admit():
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.05)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=start) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most[0] == 3


def test_concurrent_execs_are_bounded(box):
    engine = box.engine
    engine.configure(max_concurrent_execs=2)
    try:
        stamp = "/tmp/concurrency"
        box.exec(f"rm -f {stamp}")
        script = f"echo start >> {stamp}; sleep 0.3; echo end >> {stamp}"
        threads = [threading.Thread(target=box.exec, args=(script,)) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        depth = most = 0
        for line in box.get_file(stamp).decode().split():
            depth += 1 if line == "start" else -1
            most = max(most, depth)
        assert most == 2
    finally:
        engine.configure(max_concurrent_execs=32)


def test_pool_hands_out_started_containers_and_refills(docker_engine):
    with ContainerPool(2, limits=LIMITS) as pool:
        deadline = time.monotonic() + 30
        while pool.ready() < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.ready() == 2
        first = pool.acquire()
        assert first.exec("echo ready").stdout == "ready\n"
        assert pool.hits == 1
        first.remove()
        while pool.ready() < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.ready() == 2
    assert pool.ready() == 0
