"""The ``sql`` tool: a read-only query on the task's database."""

from __future__ import annotations

from skyrl_gym.tools.core import tool
from skyrl_gym.tools.workspace import Workspace


@tool(requires=("sql",))
def sql(workspace: Workspace, query: str) -> str:
    """Run one read-only SQL query on the task's database and return the result rows (or the error).

    Args:
        query: the SQL query, e.g. "SELECT name FROM customers LIMIT 5".
    """
    if not query.strip():
        return "Error: the query is empty; write one SQL statement."
    return workspace.sql(query)
