"""``PythonCodeExecutorToolGroup``: SkyRL's names and texts, every call a ``python -c`` in the real sandbox."""

from __future__ import annotations

import pytest

import skyrl_gym
from skyrl_gym.runtime import available_backends, make_sandbox
from skyrl_gym.tools import PythonCodeExecutorToolGroup, ToolCall
from skyrl_gym.tools.python import MAX_CODE_BYTES, SandboxUnavailable


@pytest.fixture(scope="module")
def tools() -> PythonCodeExecutorToolGroup:
    return PythonCodeExecutorToolGroup()


def test_skyrl_names():
    assert skyrl_gym.tools.PythonCodeExecutorToolGroup is PythonCodeExecutorToolGroup
    group = PythonCodeExecutorToolGroup()
    assert group.get_name() == "PythonCodeExecutorToolGroup"
    assert group.get_tool_names() == ["python"]
    assert group.get_tool_to_group_mapping() == {"python": "PythonCodeExecutorToolGroup"}
    assert group.timeout == 10.0
    assert PythonCodeExecutorToolGroup(timeout=3).timeout == 3


@pytest.mark.parametrize(
    "code, expected",
    [
        ("print('hello world')", "hello world"),
        ("print(1 + 1)", "2"),
        ("x = 1", ""),
        ("print('  padded  \\n')", "padded"),
        (
            "raise ValueError('fail')",
            'Error executing Python code: Traceback (most recent call last):\n  File "<string>", line 1, in '
            "<module>\nValueError: fail",
        ),
        ("import sys; print('out'); sys.stderr.write('warn\\n')", "Error executing Python code: warn"),
    ],
)
def test_skyrl_outputs(tools, code, expected):
    assert tools.execute_tool("python", code) == expected


def test_timeout_text():
    assert PythonCodeExecutorToolGroup(timeout=1).python("while True:\n    pass") == (
        "Error executing Python code: Execution timed out after 1 seconds."
    )


def test_code_runs_in_the_sandbox_not_on_the_host(tools, tmp_path):
    target = tmp_path / "written-by-the-tool"
    tools.python(f"open({str(target)!r}, 'w').write('x')")
    assert not target.exists()
    assert "Network is unreachable" in tools.python(
        "import socket; socket.create_connection(('1.1.1.1', 80), timeout=2)"
    )
    if tools.sandbox.name == "bwrap":
        assert tools.python("import os; print(os.getcwd())") == "/work"


def test_code_python_cannot_be_handed_gets_an_error_text(tools):
    assert tools.python("print('\x00')") == (
        "Error executing Python code: the code contains a NUL character, which Python cannot run."
    )
    too_long = "#" * (MAX_CODE_BYTES + 1)
    assert tools.python(too_long).startswith(
        f"Error executing Python code: the code is {MAX_CODE_BYTES + 1} bytes"
    )
    assert tools.python(5) == "Error executing Python code: the code must be a string, got int."
    assert tools.python("print('\ud800')") == "?"  # a lone surrogate cannot be passed on; it becomes '?'


def test_hostile_code_is_contained(tools):
    assert tools.python("x = bytearray(10**10)").startswith("Error executing Python code: ")
    assert tools.python("import os, signal; os.killpg(0, signal.SIGKILL)").startswith("Error executing")
    assert len(tools.python("print('x' * 10**7)")) < 10**7  # output is capped, with a note
    assert tools.python("print('x' * 10**7)").endswith("bytes were kept]")


def test_a_fork_bomb_is_contained_by_bwrap():
    if "bwrap" not in available_backends():
        pytest.skip("needs bubblewrap: without its cgroup a fork bomb run as root is not contained")
    tools = PythonCodeExecutorToolGroup(sandbox="bwrap")
    assert "BlockingIOError" in tools.python("import os\nwhile True:\n    os.fork()")
    assert tools.python("print(1)") == "1"  # and the sandbox still runs


def test_checked_calls_through_the_schema(tools):
    result = tools.execute_call(ToolCall("python", {"code": "print(6 * 7)"}))
    assert result.ok and result.content == "42"
    assert not tools.execute_call(ToolCall("python", {})).ok


def test_a_sandbox_that_cannot_start_python_raises():
    broken = make_sandbox("process", python="/nonexistent/python3")
    with pytest.raises(SandboxUnavailable, match="could not start Python"):
        PythonCodeExecutorToolGroup(sandbox=broken).python("print(1)")


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="timeout"):
        PythonCodeExecutorToolGroup(timeout=0)
    with pytest.raises(ValueError, match="memory_mb"):
        PythonCodeExecutorToolGroup(memory_mb=1)
    with pytest.raises(TypeError, match="sandbox"):
        PythonCodeExecutorToolGroup(sandbox=3)
