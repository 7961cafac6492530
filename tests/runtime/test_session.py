"""Persistent Python sessions in the real sandboxes: state across cells, errors, timeouts, crashes, restarts."""

from __future__ import annotations

import threading
import time

import pytest

from skyrl_gym.runtime import CellResult, Limits, PythonSession, make_sandbox
from skyrl_gym.runtime.session import ProtocolError, SessionError


@pytest.fixture(params=["bwrap", "process"])
def session(request):
    with PythonSession(make_sandbox(request.param), limits=Limits(memory_mb=256), cell_timeout_s=2) as s:
        yield s


def test_state_lives_across_cells(session):
    assert session.run_cell("import math\nx = 6").output == ""
    assert session.run_cell("x * 7").output == "42\n"
    assert session.run_cell("def f(n):\n    return math.factorial(n)").ok
    assert session.run_cell("print(f(5)); f(3)").output == "120\n6\n"
    assert session.run_cell("_ + 1").output == "7\n"  # the last value, as in a REPL
    assert session.cells == 5 and session.restarts == 0


def test_output_from_children_and_stderr_is_captured(session):
    cell = "import subprocess, sys\nprint('out')\nprint('err', file=sys.stderr)\nsubprocess.run(['echo', 'child'])"
    result = session.run_cell(cell)
    assert result.output.splitlines()[:3] == ["out", "err", "child"]


def test_exceptions_keep_the_state(session):
    session.run_cell("y = 1")
    result = session.run_cell("y += 1\nraise KeyError('missing')")
    assert not result.ok and not result.restarted
    assert result.error.startswith("Traceback") and "KeyError: 'missing'" in result.error
    assert ".skyrl_session" not in result.error  # only the cell's own frames
    assert session.run_cell("y").output == "2\n"


def test_syntax_error_and_system_exit(session):
    assert "SyntaxError" in session.run_cell("def broken(:").error
    assert "SystemExit: 3" in session.run_cell("import sys; sys.exit(3)").error
    assert session.run_cell("print('still here')").output == "still here\n"


def test_timeout_restarts_the_interpreter(session):
    session.run_cell("z = 5")
    result = session.run_cell("while True:\n    pass", timeout_s=1)
    assert result.timed_out and result.restarted and not result.ok
    assert "restarted" in result.render() and "TimeoutError" in result.render()
    after = session.run_cell("z")
    assert "NameError" in after.error
    assert session.run_cell("z = 6; z").output == "6\n"
    assert session.restarts == 1


def test_crash_restarts_the_interpreter(session):
    session.run_cell("w = 1")
    crashed = session.run_cell("import os; os._exit(9)")
    assert crashed.crashed and crashed.restarted and "crashed" in crashed.render()
    assert "NameError" in session.run_cell("w").error


def test_segfault_is_a_crash(session):
    result = session.run_cell("import ctypes; ctypes.string_at(0)")
    assert result.crashed
    assert session.run_cell("1 + 1").output == "2\n"


def test_explicit_restart_is_reported(session):
    session.run_cell("v = 1")
    session.restart()
    result = session.run_cell("print('fresh')")
    assert result.restarted and "earlier variables are gone" in result.render()


def test_long_output_is_truncated():
    with PythonSession(make_sandbox(), limits=Limits(max_output_bytes=100)) as session:
        result = session.run_cell("print('a' * 10000)")
        assert result.truncated and len(result.output) == 100 and "[output truncated]" in result.render()


def test_memory_limit_applies_to_the_session():
    with PythonSession(make_sandbox("bwrap"), limits=Limits(memory_mb=128)) as session:
        result = session.run_cell("x = bytearray(512 * 1024 * 1024)")
        assert not result.ok
        assert result.crashed or "MemoryError" in (result.error or "")
        assert session.run_cell("2 + 2").output == "4\n"


def test_closed_session_refuses_cells():
    session = PythonSession(make_sandbox())
    session.run_cell("1")
    session.close()
    session.close()
    with pytest.raises(SessionError, match="closed"):
        session.run_cell("1")


def test_non_string_cell_is_a_type_error(session):
    with pytest.raises(TypeError, match="str of Python code"):
        session.run_cell(b"print(1)")


def test_files_are_there_after_restarts():
    with PythonSession(make_sandbox(), files={"data.csv": "a,b\n1,2\n"}) as session:
        assert session.run_cell("open('data.csv').read()").output == "'a,b\\n1,2\\n'\n"
        session.restart()
        assert session.run_cell("len(open('data.csv').read())").output == "8\n"


def test_sessions_are_independent_and_thread_safe():
    results: dict[int, CellResult] = {}
    sessions = [PythonSession(make_sandbox()) for _ in range(3)]

    def work(n: int) -> None:
        sessions[n].run_cell(f"k = {n}")
        results[n] = sessions[n].run_cell("k * 10")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for s in sessions:
        s.close()
    assert {n: r.output for n, r in results.items()} == {0: "0\n", 1: "10\n", 2: "20\n"}


def test_session_started_in_a_short_lived_thread_survives_it():
    # sandboxed processes die with the thread that started them unless a long-lived thread starts them
    session = PythonSession(make_sandbox())
    thread = threading.Thread(target=session.run_cell, args=("kept = 'yes'",))
    thread.start()
    thread.join()
    assert session.run_cell("kept").output == "'yes'\n"
    session.close()


FORGED = {
    "deep JSON": "data = b'[' * 100000 + b']' * 100000",
    "error not text": "data = json.dumps({'cell': m.request['cell'], 'output': '', 'error': 5, 'truncated': False}).encode()",
    "wrong cell": "data = json.dumps({'cell': -1, 'output': '', 'error': None, 'truncated': False}).encode()",
    "not an object": "data = b'\"just a string\"'",
}


@pytest.mark.parametrize("name", sorted(FORGED))
def test_forged_messages_are_the_cells_failure_on_both_backends(session, name):
    cell = (
        "import json, os, sys\nm = sys.modules['__main__']\n"
        + FORGED[name]
        + "\nos.write(m.PROTOCOL, b'SKYRL%010d\\n' % len(data) + data)\n"
    )
    session.run_cell("kept = 1")
    result = session.run_cell(cell)
    assert result.crashed and result.restarted and "protocol" in result.error
    assert "protocol" in result.render()
    assert session.run_cell("print('fresh')").output == "fresh\n"


@pytest.mark.parametrize(
    "reply",
    [
        {"cell": 1, "output": "", "error": None},
        {"cell": 1, "output": b"", "error": None, "truncated": False},
        {"cell": True, "output": "", "error": None, "truncated": False},
        {"cell": 2, "output": "", "error": None, "truncated": False},
        {"cell": 1, "output": "", "error": {}, "truncated": False},
        {"cell": 1, "output": "", "error": None, "truncated": 0},
        {"cell": 1, "output": "", "error": None, "truncated": False, "extra": 1},
    ],
)
def test_replies_are_checked_field_by_field(reply):
    with pytest.raises(ProtocolError):
        PythonSession._check_reply(reply, 1)
    assert PythonSession._check_reply({"cell": 1, "output": "x", "error": None, "truncated": False}, 1) == (
        "x",
        None,
        False,
    )


def test_a_driver_that_stops_reading_cannot_block_send_or_close(session):
    session.run_cell("import sys, time\nm = sys.modules['__main__']\nm.receive = lambda: time.sleep(3600)")
    result = session.run_cell("x = '" + "a" * 300_000 + "'", timeout_s=1)
    assert result.crashed and "stopped reading cells" in result.error
    session.run_cell("import sys, time\nm = sys.modules['__main__']\nm.receive = lambda: time.sleep(3600)")
    results = []
    blocked = threading.Thread(
        target=lambda: results.append(session.run_cell("y = '" + "b" * 300_000 + "'", timeout_s=60))
    )
    blocked.start()
    time.sleep(0.2)
    session.close()
    blocked.join(30)  # the cell's own deadline is 60 s: only close() can end it before this
    assert not blocked.is_alive()
    assert not results[0].timed_out and not results[0].ok, results[0]
