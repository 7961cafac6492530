"""Tools for text environments: the one tool type and its decorator, tool groups, JSON schemas and tool-call
parsing.

- :func:`tool` makes a :class:`Tool`: a method of a :class:`ToolGroup` (SkyRL compatible), or a function of a
  workspace, registered for agents (:mod:`skyrl_gym.tools.agent`, :class:`~skyrl_gym.tools.react.ReActEnv`);
- :func:`function_schema` derives an OpenAI function schema from a signature and docstring;
- :func:`parse_tool_calls`, :func:`parse_tag_calls` and :func:`extract_tag` read calls out of model text;
- :meth:`ToolGroup.execute_call` and :func:`execute_tool_calls` run them, turning every failure into a
  :class:`ToolResult` the model can read.

``PythonCodeExecutorToolGroup`` is SkyRL's ``python`` tool, run in a :mod:`skyrl_gym.runtime` sandbox.

Only the standard library is imported. ``SearchToolGroup`` (SkyRL's ``from skyrl_gym.tools import
SearchToolGroup``) is the ``search`` tool of :mod:`skyrl_gym.tools.search`, imported when first used.
"""

from skyrl_gym.tools.core import Tool, ToolGroup, ToolResult, execute_tool_calls, tool
from skyrl_gym.tools.parsing import (
    ToolCall,
    ToolCallParseError,
    extract_tag,
    parse_tag_calls,
    parse_tool_calls,
)
from skyrl_gym.tools.python import PythonCodeExecutorToolGroup
from skyrl_gym.tools.schema import function_schema
from skyrl_gym.tools.sql import SQLCodeExecutorToolGroup

__all__ = [
    "ToolCall",
    "ToolCallParseError",
    "PythonCodeExecutorToolGroup",
    "SearchToolGroup",
    "SQLCodeExecutorToolGroup",
    "Tool",
    "ToolGroup",
    "ToolResult",
    "execute_tool_calls",
    "extract_tag",
    "function_schema",
    "parse_tag_calls",
    "parse_tool_calls",
    "tool",
]


def __getattr__(name: str):
    if name == "SearchToolGroup":
        from skyrl_gym.tools.search import SearchToolGroup

        return SearchToolGroup
    raise AttributeError(f"module 'skyrl_gym.tools' has no attribute {name!r}")
