"""The hostile-code battery: each attack is contained, returns in time with a clear result, leaves nothing.

Every attack runs in the real bubblewrap sandbox (the default backend; CI installs bubblewrap), both as a
one-shot run and as a cell of a persistent session, and through the ``python`` environment's ``step``.
Afterwards the host must be unaffected: its canary files unchanged, no process of the sandbox user left, no
control group and no work folder left behind. The ``process`` backend gets the attacks it can contain.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

import skyrl_gym
from skyrl_gym.runtime import Limits, PythonSession, make_sandbox
from skyrl_gym.runtime import cgroups as cg
from skyrl_gym.runtime.bwrap import SANDBOX_UID
from skyrl_gym.runtime.process import work_root

TIMEOUT_S = 2.0
SLACK_S = 1.0
LIMITS = Limits(
    timeout_s=TIMEOUT_S, memory_mb=256, max_processes=32, max_file_mb=16, max_output_bytes=64 * 1024
)

FORK_BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
MEMORY_HOG = "blocks = []\nwhile True:\n    blocks.append(bytearray(64 * 1024 * 1024))\n"
INFINITE_LOOP = "while True:\n    pass\n"
BACKGROUND_CHILD = (
    "import subprocess\n"
    "subprocess.Popen(['sh', '-c', 'while :; do :; done'], start_new_session=True,\n"
    "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "print('left a child behind')\n"
)
OUTPUT_FLOOD = "import sys\nchunk = 'x' * (1 << 20)\nwhile True:\n    sys.stdout.write(chunk)\n"
BIG_FILE = "with open('big.bin', 'wb') as f:\n    while True:\n        f.write(b'\\0' * (1 << 20))\n"


@pytest.fixture(scope="module")
def bwrap():
    return make_sandbox("bwrap", limits=LIMITS)


@pytest.fixture(scope="module")
def host_canary(tmp_path_factory):
    folder = tmp_path_factory.mktemp("canary")
    canary = folder / "canary.txt"
    canary.write_text("untouched")
    os.chmod(folder, 0o777)
    os.chmod(canary, 0o666)  # even world-writable, the sandbox must not be able to reach it
    return canary


@pytest.fixture(scope="module")
def listening_port():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1], accepted
    server.close()


_before: set[str] = set()


@pytest.fixture(autouse=True)
def _baseline():
    """Sandbox processes that were already running (other tests' sessions) are not this test's leftovers."""
    _before.clear()
    _before.update(_sandbox_pids())
    yield


def _owner_of(pid: str) -> int | None:
    """The process that started a sandboxed process: its cgroup is named ``<owner pid>-<n>``."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if f"/{cg.GROUP}/" in line:
            return int(line.rsplit("/", 1)[1].split("-")[0])
    return None


def _sandbox_pids(owner: int | None = None) -> set[str]:
    out = subprocess.run(["ps", "-eo", "uid=,pid=,stat="], capture_output=True, text=True).stdout
    rows = [line.split() for line in out.splitlines()]
    # zombies (state Z) run nothing: they wait for the host's init to collect their exit status
    pids = {
        row[1] for row in rows if len(row) == 3 and row[0] == str(SANDBOX_UID) and not row[2].startswith("Z")
    }
    if owner is not None and cg.available():
        # other programs on the machine may run sandboxes too: count only the owner's
        pids = {pid for pid in pids if _owner_of(pid) == owner}
    return pids


def sandbox_processes(owner: int | None = None) -> list[str]:
    """Processes of the sandbox user (uid 65534) started by ``owner`` (default: this process) since the test
    began."""
    return sorted(_sandbox_pids(owner or os.getpid()) - _before)


def leftover_cgroups() -> list[str]:
    """This process's control groups that still hold processes (emptied ones are kept for reuse)."""
    if not cg.available():
        return []
    roots = [cg.ROOT / cg.GROUP] if cg.version() == 2 else [cg.ROOT / c / cg.GROUP for c in cg.V1_CONTROLLERS]
    own = f"{os.getpid()}-"
    groups = [p for r in roots if r.exists() for p in r.iterdir() if p.is_dir() and p.name.startswith(own)]
    return [str(p) for p in groups if (p / "cgroup.procs").read_text().strip()]


def assert_nothing_left() -> None:
    deadline = time.monotonic() + 2
    while sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes() == []
    assert leftover_cgroups() == []


def timed_run(sandbox, code, limits=LIMITS):
    start = time.monotonic()
    result = sandbox.run_python(code, limits=limits)
    elapsed = time.monotonic() - start
    assert elapsed < limits.timeout_s + SLACK_S, f"returned after {elapsed:.2f} s"
    return result


# -- one-shot runs in bubblewrap -------------------------------------------------------------------------------


def test_fork_bomb_is_contained(bwrap):
    result = timed_run(bwrap, FORK_BOMB)
    assert result.timed_out
    assert "timed out" in result.explain()
    assert_nothing_left()
    # the host can still start processes
    assert subprocess.run(["true"]).returncode == 0


def test_memory_hog_is_killed_for_memory(bwrap):
    result = timed_run(bwrap, MEMORY_HOG)
    assert not result.ok
    assert result.oom or "MemoryError" in result.stderr
    assert "memory" in (result.explain() + result.stderr).lower()
    assert_nothing_left()


def test_infinite_loop_times_out(bwrap):
    result = timed_run(bwrap, INFINITE_LOOP)
    assert result.timed_out and result.exit_code == -9
    assert result.explain().startswith("timed out after")


def test_background_child_does_not_outlive_the_run(bwrap):
    result = timed_run(bwrap, BACKGROUND_CHILD)
    assert result.ok and "left a child behind" in result.stdout
    assert_nothing_left()


def test_network_is_unreachable(bwrap, listening_port):
    port, accepted = listening_port
    code = (
        "import socket\n"
        "for host in ('127.0.0.1', '1.1.1.1', 'pypi.org'):\n"
        "    try:\n"
        f"        socket.create_connection((host, {port} if host == '127.0.0.1' else 443), timeout=1).close()\n"
        "        print('CONNECTED', host)\n"
        "    except OSError as exc:\n"
        "        print('refused', host, type(exc).__name__)\n"
        "import os\n"
        "print(sorted(os.listdir('/sys/class/net')) if os.path.exists('/sys/class/net') else 'no sysfs')\n"
    )
    result = timed_run(bwrap, code)
    assert result.ok, result.stderr
    assert "CONNECTED" not in result.stdout
    assert result.stdout.count("refused") == 3
    assert accepted == []  # the host's loopback server saw no connection


def test_writes_outside_the_work_folder_fail(bwrap, host_canary):
    targets = ["/usr/pwned", "/etc/pwned", "/pwned", str(host_canary), "/root/pwned", "/home/pwned"]
    code = (
        "import os\n"
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        with open(path, 'w') as f:\n"
        "            f.write('pwned')\n"
        "        print('WROTE', path)\n"
        "    except OSError as exc:\n"
        "        print('denied', path, type(exc).__name__)\n"
        "open('/tmp/inside.txt', 'w').write('private tmp')\n"
        "open('ok.txt', 'w').write('work folder')\n"
        "print('work folder and /tmp writable')\n"
    )
    result = timed_run(bwrap, code)
    assert result.ok, result.stderr
    assert "WROTE" not in result.stdout
    assert result.stdout.count("denied") == len(targets)
    assert "work folder and /tmp writable" in result.stdout
    assert host_canary.read_text() == "untouched"
    for target in targets[:3]:
        assert not os.path.exists(target)


def test_host_secrets_are_not_readable(bwrap, monkeypatch):
    monkeypatch.setenv("SKYRL_TEST_SECRET", "hunter2")
    code = (
        "import os\n"
        "for path in ('/etc/shadow', '/root/.bashrc', '/proc/1/environ'):\n"
        "    try:\n"
        "        print('READ', path, open(path, 'rb').read()[:40])\n"
        "    except OSError as exc:\n"
        "        print('denied', path, type(exc).__name__)\n"
        "print('ENV', sorted(os.environ))\n"
        "print('uid', os.getuid())\n"
    )
    result = timed_run(bwrap, code)
    assert result.ok, result.stderr
    assert "hunter2" not in result.stdout
    assert "SKYRL_TEST_SECRET" not in result.stdout
    assert "denied /etc/shadow" in result.stdout and "denied /root/.bashrc" in result.stdout
    # /proc/1 is the sandbox's own first process: its environment is the cleared one, not the host's
    assert "root:" not in result.stdout
    assert f"uid {SANDBOX_UID}" in result.stdout


def test_no_way_to_become_root_inside(bwrap):
    result = timed_run(
        bwrap, "import os; os.execv('/usr/bin/unshare', ['unshare', '--user', '--map-root-user', 'id'])"
    )
    assert result.exit_code != 0 and "uid=0" not in result.stdout
    assert "unshare failed" in result.stderr


def test_gigabytes_of_output_are_capped(bwrap):
    result = timed_run(bwrap, OUTPUT_FLOOD)
    assert result.timed_out and result.output_truncated
    assert len(result.stdout) <= LIMITS.max_output_bytes


def test_big_files_hit_the_file_size_limit(bwrap):
    result = timed_run(bwrap, BIG_FILE)
    assert not result.ok
    assert "File too large" in result.stderr or "No space left" in result.stderr or result.exit_code == -25


# -- the same attacks in a persistent session ------------------------------------------------------------------


@pytest.mark.parametrize(
    "attack",
    [FORK_BOMB, MEMORY_HOG, INFINITE_LOOP, OUTPUT_FLOOD, BIG_FILE],
    ids=lambda a: a.split("\n")[1][:20],
)
def test_session_survives_attacks(bwrap, attack):
    with PythonSession(bwrap, limits=LIMITS, cell_timeout_s=TIMEOUT_S) as session:
        assert session.run_cell("x = 41").ok
        start = time.monotonic()
        result = session.run_cell(attack)
        assert time.monotonic() - start < TIMEOUT_S + SLACK_S
        assert not result.ok or result.truncated
        assert result.render().strip()
        follow = session.run_cell("print('alive')")
        assert follow.output == "alive\n"
    assert_nothing_left()


# -- through an environment's step -------------------------------------------------------------------------------


@pytest.mark.parametrize("attack", [FORK_BOMB, MEMORY_HOG, INFINITE_LOOP, BACKGROUND_CHILD, OUTPUT_FLOOD])
def test_python_env_step_contains_attacks(attack):
    env = skyrl_gym.make("python", env_config={"cell_timeout_s": TIMEOUT_S, "memory_mb": 256})
    env.reset(seed=0)
    try:
        start = time.monotonic()
        out = env.step(f"Let me run this.\n```python\n{attack}```")
        assert time.monotonic() - start < TIMEOUT_S + SLACK_S
        assert out["observations"] and out["observations"][0]["content"].strip()
        assert out["metadata"].get("end") != "error"
    finally:
        env.close()
    assert_nothing_left()


# -- the weaker backend ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("attack", [MEMORY_HOG, INFINITE_LOOP, BACKGROUND_CHILD, OUTPUT_FLOOD, BIG_FILE])
def test_process_backend_contains_resource_attacks(attack):
    # no fork bomb here: RLIMIT_NPROC does not bind root, so the process backend cannot stop one as root
    sandbox = make_sandbox("process", limits=LIMITS)
    marker = "while :; do :; done"
    result = timed_run(sandbox, attack)
    assert not result.ok or "left a child behind" in result.stdout
    time.sleep(0.1)
    ps = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout
    assert marker not in ps
    assert [p for p in work_root().iterdir() if p.name.startswith(f"{os.getpid()}-")] == []


def test_caller_killed_leaves_nothing(tmp_path):
    """SIGKILL the process that owns running sandboxes: their processes die with it, and the next sandbox
    sweeps the control groups and work folders it left."""
    script = tmp_path / "owner.py"
    script.write_text(
        "import sys, threading\n"
        "from skyrl_gym.runtime import make_sandbox, Limits, PythonSession\n"
        "limits = Limits(timeout_s=60)\n"
        "box = make_sandbox('bwrap', limits=limits)\n"
        "proc = make_sandbox('process', limits=limits)\n"
        "threading.Thread(target=box.run_python, args=('while True: pass',), daemon=True).start()\n"
        "threading.Thread(target=proc.run_python, args=('while True: pass',), daemon=True).start()\n"
        "session = PythonSession(box)\n"
        "session.run_cell('x = 1')\n"
        "print('ready', flush=True)\n"
        "threading.Event().wait()\n"
    )
    owner = subprocess.Popen(
        [os.sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2]
    )
    assert owner.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    assert sandbox_processes(owner.pid)  # the runs are going
    owner.kill()
    owner.wait()
    deadline = time.monotonic() + 5
    while sandbox_processes(owner.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes(owner.pid) == []
    ps = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout
    assert "while True: pass" not in ps and "main.py" not in ps
    # its folders and groups are swept by the next sandbox started on the machine
    make_sandbox("bwrap")
    make_sandbox("process")
    stale = str(owner.pid)
    assert not [p for p in work_root().iterdir() if p.name.startswith(f"{stale}-")]
    if cg.available():
        roots = (
            [cg.ROOT / cg.GROUP] if cg.version() == 2 else [cg.ROOT / c / cg.GROUP for c in cg.V1_CONTROLLERS]
        )
        assert not [p for r in roots if r.exists() for p in r.iterdir() if p.name.startswith(f"{stale}-")]
