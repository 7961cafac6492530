"""The ``finish`` tool: end the episode with a final answer, which the task's verifier scores."""

from __future__ import annotations

from skyrl_gym.tools.core import ToolResult, tool
from skyrl_gym.tools.workspace import Workspace


@tool
def finish(workspace: Workspace, answer: str = "") -> ToolResult:
    """Finish the task and submit the final answer (for a task done in the workspace, a short summary).

    Args:
        answer: the final answer, e.g. the SQL query that answers the question.
    """
    return ToolResult(content=answer, finish=True)
