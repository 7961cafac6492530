"""The sandbox interface on both real backends: files, stdin, exit codes, limits, metadata, concurrency."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

from skyrl_gym.runtime import (
    BACKENDS as BACKEND_REGISTRY,
)
from skyrl_gym.runtime import (
    Limits,
    RunResult,
    Sandbox,
    available_backends,
    make_sandbox,
    register_backend,
)

BACKENDS = ["bwrap", "process"]


@pytest.fixture(
    scope="module", params=[(b, w) for b in BACKENDS for w in (0, 1)], ids=lambda p: f"{p[0]}-warm{p[1]}"
)
def sandbox(request):
    backend, warm = request.param
    box = make_sandbox(backend, limits=Limits(timeout_s=10, memory_mb=256), warm=warm)
    yield box
    box.close()


def wait_warm(box, n: int = 1) -> None:
    deadline = time.monotonic() + 10
    while len(box._warm) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(box._warm) >= n, "the warm pool did not fill"


def test_bubblewrap_is_the_default_here():
    # CI installs bubblewrap: the strongest backend must be the one chosen
    assert shutil.which("bwrap"), "bubblewrap is not installed (apt-get install bubblewrap)"
    assert available_backends() == ["bwrap", "process"]  # docker is chosen by name only, never by "auto"
    assert set(available_backends(named_only=True)) <= {"bwrap", "process", "docker"}
    assert BACKEND_REGISTRY.get("docker").auto is False
    box = make_sandbox()
    assert box.name == "bwrap" and box.isolation == "namespaces"
    assert box.describe()["enforced"]["network"].startswith("none")


def test_python_runs_with_files_and_stdin(sandbox):
    files = {"data/input.txt": "forty-two", "blob.bin": bytes(range(256))}
    code = (
        "import sys\n"
        "print(open('data/input.txt').read(), len(open('blob.bin', 'rb').read()))\n"
        "print('stdin:', sys.stdin.read().strip())\n"
        "print('to stderr', file=sys.stderr)\n"
    )
    result = sandbox.run_python(code, files=files, stdin="hello from stdin\n")
    assert result.ok, result.stderr
    assert result.stdout == "forty-two 256\nstdin: hello from stdin\n"
    assert result.stderr == "to stderr\n"
    assert result.backend == sandbox.name
    assert result.duration_s > 0


def test_exit_codes_and_signals(sandbox):
    assert sandbox.run(["sh", "-c", "exit 3"]).exit_code == 3
    killed = sandbox.run(["sh", "-c", "kill -9 $$"])
    assert killed.exit_code == -9 and killed.explain() == "was killed by SIGKILL"
    assert not killed.ok
    raised = sandbox.run_python("raise ValueError('boom')")
    assert raised.exit_code == 1 and "ValueError: boom" in raised.stderr


def test_missing_command_is_a_result_not_an_exception(sandbox):
    result = sandbox.run(["/no/such/program"])
    assert not result.ok
    assert result.exit_code != 0


def test_environment_is_cleared_and_extendable(sandbox, monkeypatch):
    monkeypatch.setenv("SKYRL_HOST_ONLY", "secret")
    result = sandbox.run(["sh", "-c", "echo ${SKYRL_HOST_ONLY:-unset} $GREETING"], env={"GREETING": "hi"})
    assert result.stdout == "unset hi\n"


def test_each_run_gets_a_fresh_work_folder(sandbox):
    first = sandbox.run_python("open('left.txt', 'w').write('x'); import os; print(os.getcwd())")
    second = sandbox.run_python("import os; print(os.path.exists('left.txt'))")
    assert first.ok and second.stdout == "False\n"


def test_timeout_is_reported(sandbox):
    result = sandbox.run(["sleep", "30"], limits=Limits(timeout_s=0.5))
    assert result.timed_out and not result.ok
    assert result.explain().startswith("timed out after")
    assert result.duration_s < 30


def test_output_is_capped_but_the_command_finishes(sandbox):
    code = "import sys\nsys.stdout.write('y' * 300000)\nprint('done', file=sys.stderr)"
    result = sandbox.run_python(code, limits=sandbox.limits.replace(max_output_bytes=1000))
    assert result.ok and result.output_truncated
    assert result.stdout == "y" * 1000 and result.stderr == "done\n"


def test_undecodable_output_is_replaced(sandbox):
    result = sandbox.run_python("import sys; sys.stdout.buffer.write(b'ok \\xff\\xfe end')")
    assert result.stdout == "ok \ufffd\ufffd end"


def test_metadata_is_json(sandbox):
    result = sandbox.run_python("print(1)")
    data = json.loads(json.dumps(result.to_metadata()))
    assert data["exit_code"] == 0 and data["backend"] == sandbox.name and "stdout" not in data
    assert json.loads(json.dumps(sandbox.describe()))["backend"] == sandbox.name


@pytest.mark.parametrize("path", ["/etc/passwd", "../escape.txt", "a/../../escape.txt"])
def test_file_paths_must_stay_in_the_work_folder(sandbox, path):
    with pytest.raises(ValueError, match="work folder"):
        sandbox.run_python("print(1)", files={path: "x"})


def test_concurrent_runs_do_not_mix(sandbox):
    results: dict[int, RunResult] = {}

    def run(n: int) -> None:
        results[n] = sandbox.run_python(f"import time; time.sleep(0.2); print({n} * {n})")

    threads = [threading.Thread(target=run, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {n: r.stdout for n, r in results.items()} == {n: f"{n * n}\n" for n in range(6)}


def test_memory_limit(sandbox):
    result = sandbox.run_python("x = bytearray(400 * 1024 * 1024); print('allocated')")
    assert not result.ok and "allocated" not in result.stdout
    if sandbox.name == "bwrap":
        assert result.oom and result.explain() == "ran out of memory and was killed"
    else:
        assert "MemoryError" in result.stderr


def test_bwrap_sees_no_host_python_environment():
    box = make_sandbox("bwrap")
    result = box.run_python(
        "import sys, os; print(sys.executable, os.path.exists('/root'), os.path.exists('/work'))"
    )
    assert result.stdout.split()[1:] == ["False", "True"]


def test_bwrap_ro_paths():
    # bwrap runs as the unprivileged sandbox user: the folder must be readable by it (pytest's tmp_path is not)
    shared = Path(tempfile.mkdtemp(prefix="skyrl-ro-"))
    try:
        (shared / "lib.py").write_text("ANSWER = 42\n")
        os.chmod(shared, 0o755)
        box = make_sandbox("bwrap", ro_paths=[str(shared)])
        code = f"import sys; sys.path.insert(0, {str(shared)!r}); import lib; print(lib.ANSWER)\n"
        code += f"open({str(shared / 'x')!r}, 'w')"
        result = box.run_python(code)
        assert result.stdout == "42\n" and "Read-only file system" in result.stderr
    finally:
        shutil.rmtree(shared)


def test_unknown_and_unavailable_backends():
    with pytest.raises(ValueError, match="unknown sandbox backend 'podman'.*bwrap"):
        make_sandbox("podman")
    register_backend("broken", lambda **_: None, strength=99, check=lambda: (False, "no engine running"))
    try:
        with pytest.raises(RuntimeError, match="no engine running"):
            make_sandbox("broken")
        assert make_sandbox().name == "bwrap"  # an unavailable stronger backend is passed over
    finally:
        BACKEND_REGISTRY.unregister("broken")


def test_registered_backend_is_used():
    class Echo(Sandbox):
        name, isolation = "echo", "none"

        def default_python(self) -> str:
            return "python3"

        def spawn(self, command, **kwargs):
            return make_sandbox("process").spawn(command, **kwargs)

    register_backend("echo", lambda **options: Echo(**options), strength=1)
    try:
        box = make_sandbox("echo")
        assert box.run(["echo", "hi"]).stdout == "hi\n"
        assert "echo" in available_backends()
    finally:
        BACKEND_REGISTRY.unregister("echo")


@pytest.mark.parametrize(
    "bad", [{"timeout_s": 0}, {"memory_mb": -1}, {"max_processes": True}, {"cpu_s": 0}, {"timeout_s": "5"}]
)
def test_limits_are_validated(bad):
    with pytest.raises(ValueError, match="Limits"):
        Limits(**bad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_warm_runs_behave_like_cold_ones(backend):
    cold = make_sandbox(backend)
    warm = make_sandbox(backend, warm=1)
    programs = [
        ("import sys; print(sys.argv[1:], __name__, sys.stdin.read())", {}, "piped", ["x", "y"]),
        ("print(open('sub/data.txt').read())", {"sub/data.txt": "from a file"}, None, []),
        ("def f():\n    raise KeyError('k')\nf()", {}, None, []),
        ("import sys; sys.exit(5)", {}, None, []),
        ("import sys; sys.exit('a message')", {}, None, []),
        ("import atexit; atexit.register(print, 'at exit'); print('body', end='')", {}, None, []),
        ("import os; print(os.path.basename(__file__), os.path.basename(os.getcwd()) != '')", {}, None, []),
        ("def broken(:", {}, None, []),
    ]
    try:
        for code, files, stdin, args in programs:
            wait_warm(warm)
            got = warm.run_python(code, files=files, stdin=stdin, args=args)
            want = cold.run_python(code, files=files, stdin=stdin, args=args)
            assert (got.stdout, got.exit_code) == (want.stdout, want.exit_code), code
            assert got.stderr.splitlines()[-1:] == want.stderr.splitlines()[-1:], code
            if "Traceback" in want.stderr:
                assert got.stderr.count("File ") == want.stderr.count("File "), (
                    "only the program's own frames"
                )
    finally:
        warm.close()


def test_warm_pool_is_used_and_refilled():
    box = make_sandbox("bwrap", warm=2)
    try:
        box.run_python("print(1)")  # starts the pool
        wait_warm(box, 2)
        first = list(box._warm)
        result = box.run_python("import os; print(os.getpid())")
        assert result.ok
        wait_warm(box, 2)
        assert len(set(map(id, box._warm)) - set(map(id, first))) == 1  # one used, one new in its place
        # a shorter timeout or less output fits a warm interpreter; another memory limit does not
        wait_warm(box, 2)
        shorter = box.limits.replace(timeout_s=3, max_output_bytes=1000)
        before = set(map(id, box._warm))
        assert box.run_python("print(2)", limits=shorter).stdout == "2\n"
        assert set(map(id, box._warm)) != before
        wait_warm(box, 2)
        before = set(map(id, box._warm))
        assert box.run_python("print(3)", limits=Limits(memory_mb=300)).stdout == "3\n"
        assert set(map(id, box._warm)) == before
        assert box.run_python("while True: pass", limits=box.limits.replace(timeout_s=0.5)).timed_out
    finally:
        box.close()
    assert box._warm == []


def test_warm_run_keeps_its_limits():
    box = make_sandbox("bwrap", limits=Limits(timeout_s=1, memory_mb=128), warm=1)
    try:
        wait_warm(box)
        assert box.run_python("while True: pass").timed_out
        wait_warm(box)
        assert box.run_python("x = bytearray(512 * 1024 * 1024)").oom
    finally:
        box.close()


def test_warm_must_be_a_count():
    with pytest.raises(ValueError, match="warm"):
        make_sandbox("process", warm=-1)


def test_runs_do_not_use_up_the_process_limit_of_later_runs():
    # control groups are reused: nothing of a finished run may still count against the next one's limit
    from skyrl_gym.runtime import cgroups

    box = make_sandbox("bwrap", limits=Limits(timeout_s=10, max_processes=8))
    forks = "import subprocess\nprocs = [subprocess.Popen(['sleep', '0.05']) for _ in range(3)]\nprint(len(procs))"
    for _ in range(15):
        result = box.run_python(forks)
        assert result.stdout == "3\n", result.stderr
    spawner = "import subprocess\nfor _ in range(5):\n    subprocess.Popen(['sleep', '60'])\nimport time\ntime.sleep(60)"
    assert box.run_python(spawner, limits=box.limits.replace(timeout_s=0.5)).timed_out
    assert box.run_python(forks).stdout == "3\n"
    assert all(group.counted_tasks() == 0 for group in cgroups._pool)
