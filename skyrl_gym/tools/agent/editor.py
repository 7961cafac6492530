"""The ``editor`` tool: view, create and edit files in the workspace (``str_replace`` needs a unique match).

Commands:

- ``view``: a file with line numbers (``view_range=[start, end]``, 1-based, ``end`` -1 for the last line), or
  the files under a folder;
- ``create``: write ``file_text`` to a new file (an existing one is refused: edit it instead);
- ``str_replace``: replace ``old_str``, which must occur exactly once, by ``new_str``;
- ``insert``: put ``new_str`` after line ``insert_line`` (0: at the top);
- ``undo_edit``: put back the file as it was before the last edit made with this tool.

Every mistake (a missing file, a string found zero or several times, a line out of range) is an observation
that says what to do instead.
"""

from __future__ import annotations

import weakref
from typing import Literal

from skyrl_gym.tools.agent.code_search import mark_changed
from skyrl_gym.tools.core import ToolResult, tool
from skyrl_gym.tools.workspace import Workspace

MAX_VIEW_LINES = 400
"""Lines shown by one ``view`` of a whole file; past it the view says how to ask for a range."""
MAX_LISTED_FILES = 200

_history: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Workspace -> path -> earlier contents (``None``: the file did not exist), for ``undo_edit``."""


def _numbered(lines: list[str], first: int) -> str:
    return "\n".join(f"{number:6d}\t{line}" for number, line in enumerate(lines, start=first))


def _remember(workspace: Workspace, path: str, before: str | None) -> None:
    try:
        per_path = _history.setdefault(workspace, {})
    except TypeError:  # a workspace that cannot be weakly referenced: no undo for it
        return
    per_path.setdefault(path, []).append(before)
    del per_path[path][:-20]


def _exists(workspace: Workspace, path: str) -> bool:
    try:
        workspace.read_file(path)
    except (FileNotFoundError, IsADirectoryError):
        return False
    return True


@tool(requires=("files",))
def editor(
    workspace: Workspace,
    command: Literal["view", "create", "str_replace", "insert", "undo_edit"],
    path: str,
    file_text: str | None = None,
    old_str: str | None = None,
    new_str: str | None = None,
    insert_line: int | None = None,
    view_range: list[int] | None = None,
) -> ToolResult:
    """View, create and edit files: view (with line numbers), create, str_replace, insert, undo_edit.

    Args:
        command: what to do: "view", "create", "str_replace", "insert" or "undo_edit".
        path: the file (or, for view, a folder), relative to the workspace's root.
        file_text: the content of the new file (create).
        old_str: the exact text to replace; it must occur exactly once in the file (str_replace).
        new_str: the replacement (str_replace) or the text to insert (insert).
        insert_line: the line after which new_str is inserted, 0 for the top (insert).
        view_range: [first, last] line to show, 1-based; last -1 means the end of the file (view).
    """
    if command == "view":
        return _view(workspace, path, view_range)
    if command == "create":
        if file_text is None:
            return ToolResult(content="Error: create needs file_text, the content of the new file.", ok=False)
        if _exists(workspace, path):
            return ToolResult(
                content=f"Error: {path} already exists; change it with str_replace or insert, or undo_edit.",
                ok=False,
            )
        workspace.write_file(path, file_text)
        _remember(workspace, path, None)
        mark_changed(workspace)
        return ToolResult(content=f"Created {path} ({len(file_text.splitlines())} lines).")
    if command == "undo_edit":
        return _undo(workspace, path)
    try:
        text = workspace.read_file(path)
    except FileNotFoundError:
        return ToolResult(
            content=f"Error: there is no file {path}; create it first (command create).", ok=False
        )
    except IsADirectoryError:
        return ToolResult(content=f"Error: {path} is a folder; give a file.", ok=False)
    if command == "str_replace":
        return _replace(workspace, path, text, old_str, new_str)
    return _insert(workspace, path, text, new_str, insert_line)


def _view(workspace: Workspace, path: str, view_range: list[int] | None) -> ToolResult:
    try:
        text = workspace.read_file(path)
    except IsADirectoryError:
        files = workspace.list_files(path, max_files=MAX_LISTED_FILES + 1)
        more = "\n[more files not listed: view a sub-folder]" if len(files) > MAX_LISTED_FILES else ""
        return ToolResult(content=f"Files under {path}:\n" + "\n".join(files[:MAX_LISTED_FILES]) + more)
    except FileNotFoundError:
        try:
            files = workspace.list_files(path, max_files=MAX_LISTED_FILES + 1)
        except (FileNotFoundError, ValueError):
            return ToolResult(content=f"Error: there is no file or folder {path}.", ok=False)
        if not files:
            return ToolResult(content=f"Error: there is no file or folder {path}.", ok=False)
        return ToolResult(content=f"Files under {path}:\n" + "\n".join(files[:MAX_LISTED_FILES]))
    lines = text.splitlines()
    if view_range is None:
        if len(lines) > MAX_VIEW_LINES:
            shown = _numbered(lines[:MAX_VIEW_LINES], 1)
            return ToolResult(
                content=f"{shown}\n[{len(lines) - MAX_VIEW_LINES} more lines: view them with view_range=[{MAX_VIEW_LINES + 1}, -1]]"
            )
        return ToolResult(content=_numbered(lines, 1) if lines else f"({path} is empty)")
    if len(view_range) != 2 or not all(isinstance(n, int) for n in view_range):
        return ToolResult(content="Error: view_range must be two line numbers, [first, last].", ok=False)
    first, last = view_range
    last = len(lines) if last == -1 else last
    if not 1 <= first <= max(len(lines), 1) or last < first or last > len(lines):
        return ToolResult(
            content=f"Error: view_range {view_range} is outside the file, which has {len(lines)} lines "
            f"(first must be 1..{len(lines)}, last >= first and <= {len(lines)}, or -1).",
            ok=False,
        )
    return ToolResult(content=_numbered(lines[first - 1 : last], first))


def _replace(workspace: Workspace, path: str, text: str, old: str | None, new: str | None) -> ToolResult:
    if not old:
        return ToolResult(
            content="Error: str_replace needs old_str, the exact text to replace (not empty).", ok=False
        )
    count = text.count(old)
    if count == 0:
        return ToolResult(
            content=f"Error: old_str was not found in {path}; it must match the file exactly, spaces and indentation "
            "included (view the file to copy it).",
            ok=False,
        )
    if count > 1:
        lines = [str(text[:i].count("\n") + 1) for i in _find_all(text, old)]
        return ToolResult(
            content=f"Error: old_str occurs {count} times in {path} (lines {', '.join(lines[:10])}); include more of the "
            "surrounding lines so that it is unique.",
            ok=False,
        )
    updated = text.replace(old, new or "", 1)
    workspace.write_file(path, updated)
    _remember(workspace, path, text)
    mark_changed(workspace)
    start = text[: text.index(old)].count("\n")
    lines = updated.splitlines()
    low, high = max(0, start - 3), min(len(lines), start + (new or "").count("\n") + 4)
    return ToolResult(
        content=f"Edited {path}. The lines around the change:\n{_numbered(lines[low:high], low + 1)}"
    )


def _insert(workspace: Workspace, path: str, text: str, new: str | None, line: int | None) -> ToolResult:
    if new is None or line is None:
        return ToolResult(
            content="Error: insert needs new_str and insert_line (0 for the top of the file).", ok=False
        )
    lines = text.splitlines(keepends=True)
    if not 0 <= line <= len(lines):
        return ToolResult(
            content=f"Error: insert_line {line} is outside the file, which has {len(lines)} lines (0..{len(lines)}).",
            ok=False,
        )
    if lines and not lines[-1].endswith("\n") and line == len(lines):
        lines[-1] += "\n"
    added = new if new.endswith("\n") else new + "\n"
    updated = "".join(lines[:line]) + added + "".join(lines[line:])
    workspace.write_file(path, updated)
    _remember(workspace, path, text)
    mark_changed(workspace)
    shown = updated.splitlines()
    low, high = max(0, line - 2), min(len(shown), line + added.count("\n") + 2)
    return ToolResult(
        content=f"Inserted into {path} after line {line}:\n{_numbered(shown[low:high], low + 1)}"
    )


def _undo(workspace: Workspace, path: str) -> ToolResult:
    try:
        earlier = _history.get(workspace, {}).get(path)
    except TypeError:
        earlier = None
    if not earlier:
        return ToolResult(content=f"Error: no edit of {path} to undo.", ok=False)
    before = earlier.pop()
    if before is None:
        # the file was created by the editor: empty it rather than delete (the workspace cannot delete)
        workspace.write_file(path, "")
        mark_changed(workspace)
        return ToolResult(content=f"Undid the creation of {path}: it is empty now.")
    workspace.write_file(path, before)
    mark_changed(workspace)
    return ToolResult(content=f"Undid the last edit of {path}.")


def _find_all(text: str, needle: str) -> list[int]:
    found, start = [], 0
    while True:
        at = text.find(needle, start)
        if at < 0:
            return found
        found.append(at)
        start = at + 1
