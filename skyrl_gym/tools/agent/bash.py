"""The ``bash`` tool: a shell command in the workspace."""

from __future__ import annotations

from skyrl_gym.tools.agent.code_search import mark_changed
from skyrl_gym.tools.core import ToolResult, tool
from skyrl_gym.tools.workspace import Workspace


@tool(requires=("run",))
def bash(workspace: Workspace, command: str, *, timeout_s: float = 30.0) -> ToolResult:
    """Run a bash command in the task's workspace and return its output (stdout and stderr) and exit code.

    Args:
        command: the shell command to run, e.g. "ls -la" or "python -m pytest -q".
    """
    if not command.strip():
        return ToolResult(content="Error: the command is empty; give a shell command such as 'ls'.", ok=False)
    result = workspace.run(command, timeout_s=timeout_s)
    mark_changed(workspace)  # the command may have changed files: indexes of them are stale
    output = result.output if result.output.endswith("\n") or not result.output else result.output + "\n"
    if result.timed_out:
        return ToolResult(
            content=f"{output}[the command timed out after {timeout_s:g} s and was stopped]",
            ok=False,
            timed_out=True,
        )
    status = "no exit code" if result.exit_code is None else f"exit code {result.exit_code}"
    return ToolResult(content=f"{output}[{status}]", ok=result.exit_code == 0)
