"""The ``search`` tool: passages from the task's search engine."""

from __future__ import annotations

from skyrl_gym.tools.core import tool
from skyrl_gym.tools.workspace import Workspace


@tool(requires=("search",))
def search(workspace: Workspace, query: str, k: int = 3) -> str:
    """Search for passages about the query and return the best ones.

    Args:
        query: what to search for.
        k: how many passages to return (1 to 20).
    """
    if not query.strip():
        return "Error: the query is empty; say what to search for."
    return workspace.search(query, max(1, min(int(k), 20)))
