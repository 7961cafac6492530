"""The ``python`` tool: Python code in the workspace's interpreter, or with ``python3`` in its shell."""

from __future__ import annotations

import secrets

from skyrl_gym.tools.agent.code_search import mark_changed
from skyrl_gym.tools.core import ToolResult, tool
from skyrl_gym.tools.workspace import Workspace


@tool(requires=("python", "run"))
def python(workspace: Workspace, code: str, *, timeout_s: float = 30.0) -> ToolResult:
    """Run Python code and return what it printed (and the traceback if it raised).

    Args:
        code: the Python program to run; print what you want to see.
    """
    if not code.strip():
        return ToolResult(content="Error: the code is empty.", ok=False)
    if workspace.supports("python"):
        return ToolResult(content=workspace.python(code, timeout_s=timeout_s))
    # a heredoc with a random delimiter: nothing the code holds can end it early
    delimiter = "PYTHON_" + secrets.token_hex(8)
    result = workspace.run(f"python3 - <<'{delimiter}'\n{code}\n{delimiter}", timeout_s=timeout_s)
    mark_changed(workspace)
    if result.timed_out:
        return ToolResult(
            content=f"{result.output}[timed out after {timeout_s:g} s]", ok=False, timed_out=True
        )
    return ToolResult(content=result.output or "(no output)", ok=result.exit_code == 0)
