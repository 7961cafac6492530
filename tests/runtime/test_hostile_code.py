"""The hostile-code battery: each attack is contained, returns in time with a clear result, leaves nothing.

Every attack runs in the real bubblewrap sandbox (the default backend; CI installs bubblewrap), both as a
one-shot run and as a cell of a persistent session, and through the ``python`` environment's ``step``.
Afterwards the host must be unaffected: its canary files unchanged, no process of the sandbox user left, no
control group and no work folder left behind. The ``process`` backend gets the attacks it can contain.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

import skyrl_gym
import skyrl_gym.envs.python.env
from skyrl_gym.runtime import Limits, PythonSession, make_sandbox
from skyrl_gym.runtime import cgroups as cg
from skyrl_gym.runtime.bwrap import SANDBOX_UID
from skyrl_gym.runtime.process import work_root
from skyrl_gym.runtime.session import SessionError
from tests.bounds import STOPPED_WITHIN_S

TIMEOUT_S = 2.0
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


def process_backend_processes(owner: int) -> list[int]:
    """Processes of ``process``-backend runs started by ``owner``: they carry the run's marker variable, named
    after its work folder (``<owner pid>-...``). Scoped to the owner: other programs may run sandboxes too."""
    from skyrl_gym.runtime.process import MARKER

    needle = f"{MARKER}={owner}-".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


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
    assert elapsed < STOPPED_WITHIN_S, f"not stopped: returned after {elapsed:.2f} s"
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
        assert time.monotonic() - start < STOPPED_WITHIN_S
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
        assert time.monotonic() - start < STOPPED_WITHIN_S
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
    # the owner's death signals its sandboxes' processes (the parent-death signal, the cgroup sweep); each
    # exits when next scheduled, which on a loaded machine can take seconds: wait for both kinds, bounded
    deadline = time.monotonic() + 60
    while (
        sandbox_processes(owner.pid) or process_backend_processes(owner.pid)
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes(owner.pid) == []
    assert process_backend_processes(owner.pid) == []
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


# == the hostile battery: every step bounded in time and in the caller's memory, nothing left behind ==========
#
# Each case below is an attack on one class of weakness: the persistent session's protocol, the difference
# between the model's failure and the machinery's, the code judge's verdict, unprivileged sandboxes and the
# temporary folders of sandboxes. Every one asserts that the call was stopped (it returns within
# STOPPED_WITHIN_S), that the caller's peak memory grew by at most MEMORY_BOUND_MB, that no host path reached the
# output, and (through assert_nothing_left) that no process, control group or work folder is left. The worst
# time and memory per class are printed at the end of the module (pytest -s).

MEMORY_BOUND_MB = 64
"""Largest growth of the caller's peak resident memory during one hostile call (outputs are capped far below)."""
REPO = Path(__file__).resolve().parents[2]
_worst: dict[str, list[float]] = {}


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/self/status")


def host_markers(*extra: str) -> list[str]:
    """Strings that only a host path holds (inside bwrap the repository, the virtual environment, the Python
    installation behind it and pytest's folders do not exist)."""
    python_home = os.path.dirname(os.path.dirname(os.path.realpath(os.sys.executable)))
    return [f"{REPO}/", os.sys.prefix, python_home + "/", "pytest-of-", str(work_root()), *extra]


def bounded(kind: str, call, timeout_s: float, *, markers: tuple[str, ...] = ()):
    """Run ``call()``; assert it was stopped (returned within STOPPED_WITHIN_S) with the caller's peak memory grown by
    at most MEMORY_BOUND_MB, and that no host path is in what it returned; record the worst per ``kind``."""
    before = _status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM, the peak resident size, to the current one
    start = time.monotonic()
    result = call()
    elapsed = time.monotonic() - start
    growth_mb = max(0, _status_kb("VmHWM") - before) / 1024
    worst = _worst.setdefault(kind, [0.0, 0.0, 0])
    worst[0], worst[1], worst[2] = max(worst[0], elapsed), max(worst[1], growth_mb), worst[2] + 1
    assert elapsed < STOPPED_WITHIN_S, (
        f"{kind}: not stopped, returned after {elapsed:.2f} s (limit {timeout_s} s)"
    )
    assert growth_mb <= MEMORY_BOUND_MB, f"{kind}: the caller's peak memory grew by {growth_mb:.0f} MB"
    text = repr(result)
    for marker in host_markers(*markers):
        assert marker not in text, f"{kind}: a host path ({marker}) is in the result"
    return result


@pytest.fixture(scope="module", autouse=True)
def _print_worst():
    yield
    if _worst:
        print("\nhostile battery: worst step time and caller memory growth per class")
        for kind, (seconds, megabytes, count) in sorted(_worst.items()):
            print(f"  {kind:<28} {count:>3} attacks  worst {seconds:6.2f} s  {megabytes:6.1f} MB")


def assert_nothing_left_at_all() -> None:
    """``assert_nothing_left`` and no work folder of this process under the process backend's root."""
    assert_nothing_left()
    mine = f"{os.getpid()}-"
    folders = (
        [p.name for p in work_root().iterdir() if p.name.startswith(mine)] if work_root().exists() else []
    )
    assert folders == []


# -- class 1: the persistent session's protocol ------------------------------------------------------------------

REACH = "import os, sys\nm = sys.modules['__main__']\n"
"""How a cell reaches the driver: it runs as the interpreter's __main__ module."""
HIJACK = REACH + "import time\nm.receive = lambda: time.sleep(3600)\n"
"""The driver stops reading the host's cells (and writes nothing)."""


def frame(body: str) -> str:
    """A cell that writes ``body`` (Python bytes expression) on the driver's channel as one framed message."""
    return REACH + f"data = {body}\nos.write(m.PROTOCOL, b'SKYRL%010d\\n' % len(data) + data)\n"


SESSION_ATTACKS = {
    "json nested 200000 deep": frame("b'[' * 200000 + b']' * 200000"),
    "error that is a number": frame(
        "__import__('json').dumps({'cell': m.request['cell'], 'output': '', 'error': 5, "
        "'truncated': False}).encode()"
    ),
    "output that is a list": frame(
        "__import__('json').dumps({'cell': m.request['cell'], 'output': ['x'], 'error': None, "
        "'truncated': False}).encode()"
    ),
    "truncated that is text": frame(
        "__import__('json').dumps({'cell': m.request['cell'], 'output': '', 'error': None, "
        "'truncated': 'yes'}).encode()"
    ),
    "extra fields": frame(
        "__import__('json').dumps({'cell': m.request['cell'], 'output': '', 'error': None, "
        "'truncated': False, 'reward': 1.0}).encode()"
    ),
    "a reply to an earlier cell": frame(
        "__import__('json').dumps({'cell': m.request['cell'] - 1, 'output': 'stale', 'error': None, "
        "'truncated': False}).encode()"
    ),
    "a JSON array": frame("b'[1, 2, 3]'"),
    "invalid utf-8": frame("b'\\xff\\xfe{'"),
    "10 GB announced": REACH + "os.write(m.PROTOCOL, b'SKYRL9999999999\\n')\n",
    "header without digits": REACH + "os.write(m.PROTOCOL, b'SKYRLxxxxxxxxxx\\n{}')\n",
    "garbage on the channel": REACH + "os.write(m.PROTOCOL, b'\\x00' * 100000)\n",
    "half a message, then silence": REACH + "os.write(m.PROTOCOL, b'SKYRL0000001000\\n{')\nimport time\n"
    "time.sleep(60)\n",
    "the channel closed": REACH + "os.close(m.PROTOCOL)\n",
    "every descriptor closed": "import os\nos.closerange(0, 1024)\n",
    "send replaced": REACH + "m.send = lambda message: None\n",
    "reader that answers itself": REACH
    + "m.receive = lambda: {'code': 'pass', 'cell': 0, 'max_output': 9, 'max_error': 9}\n",
    "driver stopped": "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\n",
    "exception of 50 MB": "raise ValueError('x' * 50_000_000)\n",
    "exception whose str raises": "class E(Exception):\n    def __str__(self):\n        raise RuntimeError\nraise E()\n",
    "recursion in repr": "class R:\n    def __repr__(self):\n        return repr(self)\nR()\n",
    "output of lone surrogates": "import sys\nsys.stdout.write('\\ud800' * 1000)\n",
}


@pytest.mark.parametrize("name", sorted(SESSION_ATTACKS))
def test_session_protocol_attacks_are_the_cells_own_failure(bwrap, name):
    with PythonSession(bwrap, limits=LIMITS, cell_timeout_s=TIMEOUT_S) as session:
        assert session.run_cell("x = 41").ok
        result = bounded("session protocol", lambda: session.run_cell(SESSION_ATTACKS[name]), TIMEOUT_S)
        assert isinstance(result.render(), str)
        if not result.ok:  # a failure says what happened
            assert (result.crashed or result.timed_out or result.error) and result.render().strip()
        follow = session.run_cell("print('alive')")
        if not follow.ok:  # a broken driver found only when the next cell is sent: that cell says so
            assert follow.crashed and "protocol" in follow.error
            follow = session.run_cell("print('alive')")
        assert "alive" in follow.output and follow.ok
    assert_nothing_left()


def test_session_reader_replaced_then_a_cell_over_64_kb(bwrap):
    """The attack that once blocked ``_send`` and ``close()`` for ever: the driver stops reading, then a cell
    larger than the pipe's buffer arrives."""
    session = PythonSession(bwrap, limits=LIMITS, cell_timeout_s=TIMEOUT_S)
    hijack = HIJACK
    assert session.run_cell(hijack).ok
    big = "x = '" + "a" * 300_000 + "'\n"
    result = bounded("session protocol", lambda: session.run_cell(big), TIMEOUT_S)
    assert result.crashed and not result.ok and "stopped reading cells" in result.error
    assert session.run_cell("print('fresh')").output == "fresh\n"
    assert session.run_cell(hijack).ok
    bounded("session close", session.close, 1.0)
    assert_nothing_left()


def test_session_close_returns_while_a_cell_blocks(bwrap):
    session = PythonSession(bwrap, limits=LIMITS, cell_timeout_s=60)
    session.run_cell(HIJACK)
    results = []
    worker = threading.Thread(target=lambda: results.append(session.run_cell("y = '" + "b" * 500_000 + "'")))
    worker.start()
    time.sleep(0.3)  # the worker is now blocked writing a cell nobody reads (up to its 60 s deadline)
    bounded("session close", session.close, 1.0)
    worker.join(timeout=STOPPED_WITHIN_S)
    assert not worker.is_alive() and results and results[0].crashed
    with pytest.raises(SessionError, match="closed"):
        session.run_cell("1")
    assert_nothing_left()


def test_session_output_written_between_cells_restarts_the_interpreter(bwrap):
    with PythonSession(bwrap, limits=LIMITS, cell_timeout_s=TIMEOUT_S) as session:
        writer = REACH + (
            "import threading, time\n"
            "def late():\n    time.sleep(0.2)\n    os.write(m.PROTOCOL, b'SKYRL0000000002\\n{}')\n"
            "threading.Thread(target=late, daemon=True).start()\n"
        )
        assert session.run_cell(writer).ok
        time.sleep(0.5)
        result = bounded("session protocol", lambda: session.run_cell("print('next')"), TIMEOUT_S)
        assert result.output == "next\n" and result.restarted
    assert_nothing_left()


@pytest.mark.parametrize("index", range(len(skyrl_gym.envs.python.env.PythonEnv.hostile_actions)))
def test_python_env_hostile_actions_are_the_models_failure(index):
    action = skyrl_gym.envs.python.env.PythonEnv.hostile_actions[index]
    env = skyrl_gym.make(
        "python", env_config={"cell_timeout_s": TIMEOUT_S, "memory_mb": 256, "sandbox": "bwrap"}
    )
    env.reset(seed=0)
    try:
        for _ in range(2):
            out = bounded("python env step", lambda: env.step(action), TIMEOUT_S)
            assert out["metadata"].get("end") != "error", out["metadata"]
            assert out["observations"] and out["observations"][0]["content"].strip()
            assert out["reward"] == 0.0
        # the next honest cell gets its answer: at once when the session saw the hostile cell's leftovers
        # (stray output) before sending it, or, on a busy machine where the leftovers had not written yet, on
        # the retry after the session reports that interpreter as crashed and replaces it (never an error)
        for attempt in range(2):
            after = env.step("```python\nprint(6 * 7)\n```")
            assert after["metadata"].get("end") != "error", after["metadata"]
            content = after["observations"][0]["content"]
            if "42" in content:
                break
            assert attempt == 0 and "restarted" in content, content
    finally:
        env.close()
    assert_nothing_left()


def test_python_env_reader_replaced_then_a_long_block_in_one_reply():
    env = skyrl_gym.make(
        "python", env_config={"cell_timeout_s": TIMEOUT_S, "memory_mb": 256, "sandbox": "bwrap"}
    )
    env.reset(seed=0)
    hijack = HIJACK
    big = "x = '" + "a" * 90_000 + "'"
    action = f"```python\n{hijack}\n```\nand\n```python\n{big}\n```\n"
    try:
        out = bounded("python env step", lambda: env.step(action), 2 * TIMEOUT_S)
        assert out["metadata"].get("end") != "error" and out["metadata"]["crashed"]
        assert "stopped reading cells" in out["observations"][0]["content"]
    finally:
        bounded("session close", env.close, 1.0)
    assert_nothing_left()


# -- class 2: the model's failures are results, the machinery's are errors -----------------------------------------


@pytest.fixture
def broken_bwrap():
    """A registered backend whose sandboxes cannot start (bwrap is asked to show a path that does not exist)."""
    from skyrl_gym.runtime import BACKENDS, register_backend
    from skyrl_gym.runtime.bwrap import BwrapSandbox

    register_backend(
        "broken-bwrap",
        lambda **options: BwrapSandbox(ro_paths=["/nonexistent/skyrl-test"], **options),
        strength=-1,
    )
    yield "broken-bwrap"
    BACKENDS.unregister("broken-bwrap")
    from skyrl_gym.envs.code.env import _SANDBOXES

    _SANDBOXES.pop("broken-bwrap", None)


def test_a_sandbox_that_cannot_start_is_not_the_programs_output(broken_bwrap):
    sandbox = make_sandbox(broken_bwrap)
    for result in (sandbox.run(["true"]), sandbox.run_python("print(1)")):
        assert result.exit_code is None and not result.ok and result.stdout == ""
        assert result.explain() == "could not be started"
        assert result.stderr.startswith("the sandbox could not start the command: bwrap:")
    with pytest.raises(SessionError, match="did not start"):
        PythonSession(sandbox).run_cell("1")
    assert_nothing_left()


@pytest.mark.parametrize("env_id", ["python", "python-script", "code-humaneval", "code-stdio"])
def test_a_sandbox_that_cannot_start_ends_the_episode_in_error(broken_bwrap, env_id):
    from skyrl_gym.envs.code.tasks import task_for_seed

    if env_id.startswith("python"):
        config = {"sandbox": broken_bwrap, "persistent": env_id == "python", "cell_timeout_s": TIMEOUT_S}
        env = skyrl_gym.make("python", env_config=config)
        env.reset(seed=0)
        action = "```python\nprint(1)\n```"
    else:
        env = skyrl_gym.make("code", env_config={"sandbox": broken_bwrap})
        env.reset(options=task_for_seed(1 if env_id == "code-humaneval" else 0))
        action = env.unwrapped.reference_action() if hasattr(env, "unwrapped") else env.reference_action()
    try:
        out = env.step(action)
    finally:
        env.close()
    assert out["metadata"]["end"] == "error", out["metadata"]
    assert "could not" in out["metadata"]["error"] or "did not start" in out["metadata"]["error"]


MONSTER_PROGRAMS = {
    "an expression nested 50000 deep": "return " + "-" * 50_000 + "1",
    "900 KB of code": "x = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n" * 25_000 + "return None",
    "a definition after 900 KB": "#" * 900_000
    + "\ndef has_close_elements(numbers, threshold):\n    return True",
    "attributes 300000 deep": "return x" + ".y" * 300_000,
}


@pytest.mark.parametrize("name", sorted(MONSTER_PROGRAMS))
def test_monster_programs_are_wrong_answers_at_a_bounded_cost(name):
    from skyrl_gym.envs.code.tasks import humaneval_rows

    row = humaneval_rows()[0]
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    env = skyrl_gym.make("code", env_config={"sandbox": "bwrap", "timeout_s": TIMEOUT_S})
    env.reset(options={"prompt": row["prompt"], "extras": extras})
    action = f"```python\n{MONSTER_PROGRAMS[name]}\n```"
    out = bounded("code env step", lambda: env.step(action), TIMEOUT_S)
    env.close()
    assert out["reward"] == 0.0 and out["metadata"]["end"] == "terminated", out["metadata"]
    assert_nothing_left()


# -- class 3: the code judge cannot be fooled ----------------------------------------------------------------------

ALWAYS_EQUAL = """
class Anything:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __lt__ = __le__ = __gt__ = __ge__ = __eq__
    def __bool__(self): return True
    def __hash__(self): return 0
    def __abs__(self): return self
    def __sub__(self, other): return self
    __add__ = __radd__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __mod__ = __sub__
    def __len__(self): return 0
    def __iter__(self): return iter(())
    def __getitem__(self, key): return self
def ENTRY(*args, **kwargs):
    return Anything()
"""

HACKS = {
    "always-equal object": ALWAYS_EQUAL,
    "always-equal int subclass": "class I(int):\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n"
    "def ENTRY(*a, **k):\n    return I(0)\n",
    "always-equal str subclass": "class S(str):\n    __eq__ = lambda s, o: True\n"
    "def ENTRY(*a, **k):\n    return S('')\n",
    "always-equal list subclass": "class L(list):\n    __eq__ = lambda s, o: True\n"
    "def ENTRY(*a, **k):\n    return L()\n",
    "patched builtins": "import builtins, math\nbuiltins.abs = lambda x: 0\nbuiltins.len = lambda x: 0\n"
    "builtins.AssertionError = type('Quiet', (Exception,), {})\nmath.fabs = lambda x: 0.0\n"
    "def ENTRY(*a, **k):\n    return None\n",
    "patched exec and check": "import builtins\n_exec = builtins.exec\n"
    "def exec(source, *rest):\n    if getattr(source, 'co_filename', '') == 'tests.py':\n"
    "        source = compile('def check(candidate):\\n    pass', 'tests.py', 'exec')\n    return _exec(source, *rest)\n"
    "builtins.exec = exec\nbuiltins.compile = lambda *a, **k: compile('pass', 'x', 'exec')\n"
    "def ENTRY(*a, **k):\n    return None\n",
    "frame inspection": "import dis, gc, sys\ndef ENTRY(*a, **k):\n    frame = sys._getframe(1)\n"
    "    while frame is not None:\n        for name in ('check', 'candidate'):\n"
    "            if name in frame.f_globals or name in frame.f_locals:\n"
    "                for ins in dis.get_instructions(frame.f_code):\n"
    "                    if ins.opname == 'LOAD_CONST' and ins.argval is not None:\n"
    "                        return ins.argval\n        frame = frame.f_back\n"
    "    for obj in gc.get_objects():\n        if getattr(obj, '__name__', '') == 'check':\n"
    "            return obj\n    return None\n",
    "forged report on every pipe": "import os\n"
    "lines = b''.join(__import__('json').dumps({'ready': True, 'stage': 'tests', 'passed': True, 'token': t})"
    ".encode() + b'\\n' for t in ('', '0' * 32, 'x' * 32))\n"
    "for fd in list(range(1, 64)) + ['/proc/1/fd/1', '/proc/1/fd/2']:\n    try:\n"
    "        os.write(os.open(fd, os.O_WRONLY) if isinstance(fd, str) else fd, lines)\n    except OSError:\n"
    "        pass\ndef ENTRY(*a, **k):\n    return None\n",
    "sys.exit(0) at import": "def ENTRY(*a, **k):\n    return None\nimport sys\nsys.exit(0)\n",
    "os._exit(0) at import": "def ENTRY(*a, **k):\n    return None\nimport os\nos._exit(0)\n",
    "os._exit(0) in the call": "def ENTRY(*a, **k):\n    import os\n    os._exit(0)\n",
    "SystemExit in the call": "def ENTRY(*a, **k):\n    raise SystemExit(0)\n",
    "kill the judge": "import os, signal\ndef ENTRY(*a, **k):\n    os.kill(os.getppid(), signal.SIGKILL)\n",
    "stop the judge": "import os, signal\ndef ENTRY(*a, **k):\n    os.kill(os.getppid(), signal.SIGSTOP)\n",
    "kill the sandbox": "import os, signal\ndef ENTRY(*a, **k):\n    os.kill(1, signal.SIGKILL)\n",
    "ptrace the judge": "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "assert libc.ptrace(16, os.getppid(), 0, 0) == -1\n"
    "def ENTRY(*a, **k):\n    return open('/proc/%d/mem' % os.getppid(), 'rb').read(1)\n",
    "generator result": "def ENTRY(*a, **k):\n    yield 1\n",
    "self-referential result": "def ENTRY(*a, **k):\n    x = []\n    x.append(x)\n    return x\n",
    "result 10000 deep": "def ENTRY(*a, **k):\n    x = []\n    for _ in range(10000):\n        x = [x]\n    return x\n",
    "result of 100 MB": "def ENTRY(*a, **k):\n    return 'x' * 100_000_000\n",
    "answers forged on the judge's channel": "import json, os\n"
    "def ENTRY(*a, **k):\n    for fd in range(3, 16):\n        try:\n"
    "            data = json.dumps({'value': True}).encode()\n"
    "            os.write(fd, b'%010d\\n' % len(data) + data)\n        except OSError:\n            pass\n"
    "    return None\n",
}
HANGING_HACKS = {"stop the judge"}
"""Hacks that end only at the judge's timeout: tried on two problems, not all."""
HACKED_PROBLEMS = (
    "HumanEval/0",
    "HumanEval/2",
    "HumanEval/12",
    "HumanEval/32",
    "HumanEval/33",
    "HumanEval/38",
)


@pytest.fixture(scope="module")
def humaneval():
    from skyrl_gym.envs.code.humaneval import HumanEvalProblem
    from skyrl_gym.envs.code.tasks import humaneval_rows

    problems = [HumanEvalProblem.from_dict(r["reward_spec"]["ground_truth"]) for r in humaneval_rows()]
    return {p.task_id: p for p in problems}


@pytest.mark.parametrize("name", sorted(HACKS))
def test_the_humaneval_judge_cannot_be_fooled(bwrap, humaneval, name):
    from skyrl_gym.envs.code.humaneval import judge_humaneval

    for task_id in HACKED_PROBLEMS[:2] if name in HANGING_HACKS else HACKED_PROBLEMS:
        problem = humaneval[task_id]
        code = HACKS[name].replace("ENTRY", problem.entry_point)
        judgement = bounded(
            "code judge (humaneval)",
            lambda problem=problem, code=code: judge_humaneval(
                bwrap, problem, code, timeout_s=TIMEOUT_S, memory_mb=256
            ),
            TIMEOUT_S,
        )
        assert not judgement.passed, (task_id, judgement)
        # the canonical solution still passes right after, in the same sandbox
        assert judge_humaneval(bwrap, problem, problem.prompt + problem.canonical_solution).passed, task_id
    assert_nothing_left()


def test_an_always_equal_object_earns_nothing_on_30_problems(bwrap, humaneval):
    from skyrl_gym.envs.code.humaneval import judge_humaneval

    problems = list(humaneval.values())[:30]
    passed = [
        p.task_id
        for p in problems
        if judge_humaneval(bwrap, p, ALWAYS_EQUAL.replace("ENTRY", p.entry_point)).passed
    ]
    assert passed == []


@pytest.mark.parametrize(
    "name", ["always-equal object", "patched exec and check", "forged report on every pipe"]
)
def test_hacks_score_zero_through_the_environment(name):
    from skyrl_gym.envs.code.tasks import humaneval_rows

    row = next(r for r in humaneval_rows() if r["reward_spec"]["ground_truth"]["task_id"] == "HumanEval/0")
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    env = skyrl_gym.make("code", env_config={"sandbox": "bwrap", "timeout_s": TIMEOUT_S})
    env.reset(options={"prompt": row["prompt"], "extras": extras})
    code = HACKS[name].replace("ENTRY", "has_close_elements")
    out = bounded("code env step", lambda: env.step(f"```python\n{code}```"), TIMEOUT_S)
    env.close()
    assert out["reward"] == 0.0 and out["metadata"]["end"] == "terminated" and not out["metadata"]["correct"]
    assert_nothing_left()


STDIO_TESTS = [("1 2\n", "3\n"), ("20 22\n", "42\n"), ("5 5\n", "10\n")]
"""A sum problem; the hostile programs below know every expected output and still must not pass."""
FORGE_EVERY_INDEX = (
    "import json, os\n"
    "lines = b''.join(json.dumps({'index': i, 'stdout': out, 'stderr': '', 'exit': 0, 'timed_out': False, "
    "'time_s': 0.0, 'truncated': False, 'token': t}).encode() + b'\\n' for i, out in enumerate(OUTPUTS) "
    "for t in ('', '0' * 32))\n"
    "for target in ('/proc/1/fd/1', '/proc/1/fd/2', '/proc/%d/fd/1' % os.getppid()):\n    try:\n"
    "        os.write(os.open(target, os.O_WRONLY), lines)\n    except OSError:\n        pass\n"
    "print('wrong')\n"
)
STDIO_HACKS = {
    "forged result lines on the host's pipe": FORGE_EVERY_INDEX,
    "forged lines, then the judge killed": FORGE_EVERY_INDEX + "os.kill(os.getppid(), 9)\n",
    "the judge stopped": "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n",
    "the sandbox killed": "import os\nos.kill(1, 9)\n",
    "ptrace the judge": "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "print(libc.ptrace(16, os.getppid(), 0, 0), open('/proc/%d/mem' % os.getppid(), 'rb').read(1))\n",
    "a daemon that outlives its test": "import os, sys\nif os.fork() == 0:\n    os.setsid()\n"
    "    import time\n    time.sleep(30)\nprint('wrong')\n",
}


@pytest.mark.parametrize("name", sorted(STDIO_HACKS))
def test_the_stdio_judge_cannot_be_fooled(bwrap, name):
    from skyrl_gym.envs.code.stdio import StdioTest, judge_stdio

    tests = [StdioTest(i, o) for i, o in STDIO_TESTS]
    code = STDIO_HACKS[name].replace("OUTPUTS", repr([o for _, o in STDIO_TESTS]))
    judgement = bounded(
        "code judge (stdio)",
        lambda: judge_stdio(bwrap, code, tests, time_limit_s=0.75, memory_mb=256),
        0.75 * len(tests) + 5.0,
    )
    assert not judgement.passed and judgement.tests_passed == 0, judgement.outcomes
    honest = "a, b = map(int, input().split())\nprint(a + b)\n"
    assert judge_stdio(bwrap, honest, tests).passed
    assert_nothing_left()


# -- class 4: sandboxes started by an unprivileged user --------------------------------------------------------------

UNPRIVILEGED_UID = 40123


MEASURE = """
import time
from pathlib import Path
def _kb(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
measured = []
def measure(call, timeout_s):
    before = _kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    start = time.monotonic()
    result = call()
    measured.append([time.monotonic() - start, max(0, _kb("VmHWM") - before) / 1024, timeout_s])
    return result
"""
"""What the unprivileged scripts use to time their hostile calls and their peak memory (as ``bounded`` does)."""


def run_unprivileged(script: str, timeout_s: float = 120) -> dict:
    """Run ``script`` (Python; its last line of output is JSON, with ``measured``: the calls it timed) as an
    unprivileged user: as the uid UNPRIVILEGED_UID when the tests run as root (setpriv), as the tests' own user
    otherwise. The measured calls are checked and recorded like those of ``bounded``."""
    script = MEASURE + script
    prefix = []
    if os.geteuid() == 0:
        prefix = ["setpriv", f"--reuid={UNPRIVILEGED_UID}", f"--regid={UNPRIVILEGED_UID}", "--clear-groups"]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": str(REPO), "LANG": "C.UTF-8"}
    probe = [*prefix, os.sys.executable, "-c", "import skyrl_gym.runtime"]
    tried = subprocess.run(probe, capture_output=True, text=True, timeout=60, cwd="/", env=env)
    if tried.returncode != 0 and os.geteuid() == 0:
        # A checkout in a private folder (mktemp -d makes it 0700): let others through its ancestors while the
        # script runs, and put the modes back after.
        with _traversable(REPO):
            return _run_unprivileged(prefix, script, env, timeout_s)
    if tried.returncode != 0:
        pytest.skip(
            f"uid {UNPRIVILEGED_UID} cannot run this checkout's Python (keep the checkout and its virtual "
            f"environment readable by every user): {tried.stderr.strip()[-300:]}"
        )
    return _run_unprivileged(prefix, script, env, timeout_s)


@contextlib.contextmanager
def _traversable(path: Path):
    """Give others search permission on the ancestors of ``path`` that lack it, for the block's length."""
    changed = []
    try:
        for folder in [path, *path.parents]:
            mode = folder.stat().st_mode
            if not mode & 0o001:
                os.chmod(folder, mode | 0o005)
                changed.append((folder, mode))
        yield
    finally:
        for folder, mode in changed:
            os.chmod(folder, mode)


def _run_unprivileged(prefix: list, script: str, env: dict, timeout_s: float) -> dict:
    out = subprocess.run(
        [*prefix, os.sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout_s, cwd="/",
        env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    if os.geteuid() == 0:
        ps = subprocess.run(
            ["ps", "-o", "pid=,args=", "-u", str(UNPRIVILEGED_UID)], capture_output=True, text=True
        )
        assert ps.stdout.strip() == "", f"processes of the unprivileged user are left: {ps.stdout}"
    found = json.loads(out.stdout.strip().splitlines()[-1])
    for seconds, growth_mb, limit_s in found.pop("measured", []):
        worst = _worst.setdefault("unprivileged sandbox", [0.0, 0.0, 0])
        worst[0], worst[1], worst[2] = max(worst[0], seconds), max(worst[1], growth_mb), worst[2] + 1
        assert seconds < STOPPED_WITHIN_S and growth_mb <= MEMORY_BOUND_MB, (seconds, limit_s, growth_mb)
    return found


FILL_DEVICES = r"""
import os
written = {}
for folder in ("/dev", "/dev/shm", "/tmp", "/work"):
    total = 0
    for n in range(8):
        try:
            with open(os.path.join(folder, "fill%d" % n), "wb") as handle:
                for _ in range(200):
                    handle.write(b"\0" * (1 << 20))
                    total += 1 << 20
        except OSError:
            pass
    written[folder] = total
import json
print(json.dumps(written))
"""


def _files_bound_mb(limits: Limits) -> int:
    from skyrl_gym.runtime.bwrap import SHM_MB

    return 2 * limits.max_file_mb + min(limits.max_file_mb, SHM_MB)


def test_files_in_a_sandbox_hold_a_bounded_amount_of_memory(bwrap):
    limits = LIMITS.replace(timeout_s=20, memory_mb=128)
    result = bounded("unprivileged sandbox", lambda: bwrap.run_python(FILL_DEVICES, limits=limits), 20)
    written = json.loads(result.stdout)
    assert written["/dev"] == 0  # read-only
    assert sum(written.values()) <= _files_bound_mb(limits) * 1024 * 1024
    assert_nothing_left()


def test_unprivileged_sandboxes_are_bounded_and_separate():
    script = f"""
import json, threading, time
from skyrl_gym.runtime import Limits, make_sandbox
box = make_sandbox("bwrap")
limits = Limits(timeout_s=20, memory_mb=128, max_processes=16, max_file_mb=16)
fill = measure(lambda: box.run_python({FILL_DEVICES!r}, limits=limits), 20)
hog = '''
import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
print(n, flush=True)
time.sleep(4)
'''
hogs = []
def hog_run():
    hogs.append(measure(lambda: box.run_python(hog, limits=limits), 20))
threads = [threading.Thread(target=hog_run) for _ in range(3)]
for thread in threads:
    thread.start()
time.sleep(2)
few = "import subprocess\\nprint(sum(subprocess.run(['true']).returncode == 0 for _ in range(5)))"
other = measure(lambda: box.run_python(few, limits=limits), 20)
for thread in threads:
    thread.join()
print(json.dumps({{"fill": json.loads(fill.stdout), "hogs": [h.stdout.strip() for h in hogs],
                  "other": other.stdout.strip(), "other_exit": other.exit_code,
                  "enforced": box.describe()["enforced"], "measured": measured}}))
"""
    found = run_unprivileged(script)
    assert found["fill"]["/dev"] == 0
    assert sum(found["fill"].values()) <= _files_bound_mb(LIMITS.replace(max_file_mb=16)) * 1024 * 1024
    # each fork bomb used up its own 16 processes (its shell and python are two of them), nobody else's
    assert found["hogs"] == ["14"] * 3, found
    assert found["other"] == "5" and found["other_exit"] == 0, found
    if os.geteuid() == 0:
        assert found["enforced"]["user"] == "caller"


def test_unprivileged_judges_and_sessions_work_and_hold():
    script = """
import json
from skyrl_gym.runtime import PythonSession, make_sandbox
from skyrl_gym.envs.code.humaneval import HumanEvalProblem, judge_humaneval
from skyrl_gym.envs.code.tasks import humaneval_rows
from skyrl_gym.envs.code.stdio import StdioTest, judge_stdio
box = make_sandbox("bwrap")
problem = HumanEvalProblem.from_dict(humaneval_rows()[0]["reward_spec"]["ground_truth"])
canonical = judge_humaneval(box, problem, problem.prompt + problem.canonical_solution).passed
always_equal = "class A:\\n    __eq__ = lambda s, o: True\\nreturn A()"
hacked = measure(lambda: judge_humaneval(box, problem, always_equal), 5)
stdio = judge_stdio(box, "print(sum(map(int, input().split())))", [StdioTest("1 2\\n", "3\\n")]).passed
stop_reading = "import sys, time\\nm = sys.modules['__main__']\\nm.receive = lambda: time.sleep(3600)"
with PythonSession(box, cell_timeout_s=2) as session:
    session.run_cell(stop_reading)
    blocked = measure(lambda: session.run_cell("x = '" + "a" * 200000 + "'"), 2)
    alive = session.run_cell("print('alive')").output
    session.run_cell(stop_reading)
    measure(session.close, 1)
print(json.dumps({"canonical": canonical, "hacked": hacked.passed, "stdio": stdio, "blocked": blocked.crashed,
                  "alive": alive, "measured": measured}))
"""
    found = run_unprivileged(script)
    assert found == {"canonical": True, "hacked": False, "stdio": True, "blocked": True, "alive": "alive\n"}


def test_unprivileged_start_failures_are_machinery_errors():
    script = """
import json, resource
import skyrl_gym
from skyrl_gym.runtime import make_sandbox, register_backend
from skyrl_gym.runtime.bwrap import BwrapSandbox
register_backend("broken", lambda **o: BwrapSandbox(ro_paths=["/nonexistent/x"], **o), strength=-1)
broken = measure(lambda: make_sandbox("broken").run_python("print(1)"), 10)
env = skyrl_gym.make("python", env_config={"sandbox": "broken", "persistent": False})
env.reset(seed=0)
step = measure(lambda: env.step("```python\\nprint(1)\\n```"), 10)
box = make_sandbox("bwrap")
assert box.run_python("print(1)").stdout == "1\\n"
# the user's own process budget is used up (by something else on the machine): no sandbox can start
soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
resource.setrlimit(resource.RLIMIT_NPROC, (1, hard))
full = measure(lambda: box.run_python("print(1)"), 10)
print(json.dumps({"broken": [broken.exit_code, broken.stderr[:60]], "end": step["metadata"].get("end"),
                  "full": [full.exit_code, full.explain()], "measured": measured}))
"""
    found = run_unprivileged(script)
    assert found["broken"][0] is None
    assert found["broken"][1].startswith("the sandbox could not start the command: bwrap: Can't")
    assert found["end"] == "error"
    assert found["full"] == [None, "could not be started"]


# -- class 5: temporary folders of dead owners -----------------------------------------------------------------------


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_folders_and_groups_of_dead_or_replaced_owners_are_swept():
    from skyrl_gym.runtime.cgroups import owner_tag, start_time
    from skyrl_gym.runtime.process import _make_work_root, sweep_stale_folders

    root = _make_work_root()
    me, dead = os.getpid(), _dead_pid()
    init_start = start_time(1)
    stale = [
        f"{dead}-12345-aaaa",  # a dead owner
        f"{dead}-oldstyle",  # a dead owner, older naming
        f"{me}-{(start_time(me) or 0) + 1}-bbbb",  # an earlier process that had our pid (a restarted container)
        f"1-{(init_start or 0) + 7}-cccc",  # a live pid that belongs to another process now
    ]
    kept = [f"{owner_tag(me)}-dddd", "1-oldstyle-live"]
    for name in stale + kept:
        (root / name).mkdir()
        (root / name / "file").write_text("x")
    try:
        assert sweep_stale_folders() >= len(stale)
        left = {p.name for p in root.iterdir()}
        assert not left & set(stale) and set(kept) <= left
    finally:
        for name in stale + kept:
            subprocess.run(["rm", "-rf", str(root / name)])
    if cg.available():
        parents = (
            [cg.ROOT / cg.GROUP] if cg.version() == 2 else [cg.ROOT / c / cg.GROUP for c in cg.V1_CONTROLLERS]
        )
        names = [f"{dead}-12345-0", f"{me}-{(start_time(me) or 0) + 1}-0"]
        for parent in parents:
            for name in names:
                (parent / name).mkdir(parents=True)
        assert cg.sweep_stale() >= len(names)
        assert not [p / n for p in parents for n in names if (p / n).exists()]


def test_a_long_lived_process_sweeps_again_while_runs_start(monkeypatch):
    from skyrl_gym.runtime import cgroups
    from skyrl_gym.runtime.process import _make_work_root

    sandbox = make_sandbox("process", limits=LIMITS)  # sweeps once when made, and at its first run
    assert sandbox.run_python("print(1)").ok
    stale = _make_work_root() / f"{_dead_pid()}-999-late"
    stale.mkdir()
    assert sandbox.run_python("print(1)").ok
    assert stale.exists()  # the next sweep is not due yet
    monkeypatch.setattr(cgroups, "_last_sweep", {})
    assert sandbox.run_python("print(1)").ok
    assert not stale.exists()
    assert_nothing_left_at_all()


def test_a_killed_owner_of_judges_and_sessions_leaves_nothing(tmp_path):
    script = tmp_path / "owner.py"
    script.write_text(
        "import threading\n"
        "from skyrl_gym.runtime import Limits, PythonSession, make_sandbox\n"
        "from skyrl_gym.envs.code.humaneval import HumanEvalProblem, judge_humaneval\n"
        "from skyrl_gym.envs.code.stdio import StdioTest, judge_stdio\n"
        "problem = HumanEvalProblem('t', 'def f(x):\\n    pass\\n', 'def check(c):\\n    assert c(1) == 1\\n', 'f')\n"
        "box = make_sandbox('bwrap')\n"
        "proc = make_sandbox('process')\n"
        "loop = 'def f(x):\\n    while True:\\n        pass\\n'\n"
        "threading.Thread(target=judge_humaneval, args=(box, problem, loop), kwargs={'timeout_s': 60}, daemon=True).start()\n"
        "threading.Thread(target=judge_stdio, args=(proc, 'while True: pass', [StdioTest('', '')]),\n"
        "                 kwargs={'time_limit_s': 60}, daemon=True).start()\n"
        "session = PythonSession(box)\n"
        'session.run_cell(\'import subprocess; subprocess.Popen(["sleep", "60"], start_new_session=True)\')\n'
        "print('ready', flush=True)\n"
        "threading.Event().wait()\n"
    )
    owner = subprocess.Popen([os.sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert owner.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    assert sandbox_processes(owner.pid)
    owner.kill()
    owner.wait()
    # the owner's death signals its sandboxes' processes (the parent-death signal, the cgroup sweep); each
    # exits when next scheduled, which on a loaded machine can take seconds: wait for both kinds, bounded
    deadline = time.monotonic() + 60
    while (
        sandbox_processes(owner.pid) or process_backend_processes(owner.pid)
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes(owner.pid) == []
    # the stdio program in a session of its own outlived the process backend's judge: the sweep of the next
    # sandbox made on the machine kills it with the folders and groups its owner left
    make_sandbox("bwrap")
    make_sandbox("process")
    deadline = time.monotonic() + 2  # SIGKILL is delivered, not waited for
    while process_backend_processes(owner.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_backend_processes(owner.pid) == []
    assert not [p for p in work_root().iterdir() if p.name.startswith(f"{owner.pid}-")]
    if cg.available():
        roots = (
            [cg.ROOT / cg.GROUP] if cg.version() == 2 else [cg.ROOT / c / cg.GROUP for c in cg.V1_CONTROLLERS]
        )
        assert not [p for r in roots if r.exists() for p in r.iterdir() if p.name.startswith(f"{owner.pid}-")]


def test_only_lines_signed_with_the_token_count():
    from skyrl_gym.envs.code.judging import read_report, sign

    token, data = "k" * 32, json.dumps({"stage": "tests", "passed": False})
    good = f"{sign(token, data)} {data}"
    flipped = good.replace("false", "true ")
    other_key = f"{sign('j' * 32, data)} {data}"
    spliced = good[:40] + '", "passed": true, "x": "' + good[40:]
    unsigned = json.dumps({"stage": "tests", "passed": True, "token": token})
    stdout = "\n".join([unsigned, flipped, other_key, spliced, "garbage", good, good + "\u2028"])
    assert read_report(stdout, token) == [{"stage": "tests", "passed": False}]
