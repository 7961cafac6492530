"""``LocalDirWorkspace`` (a folder whose commands run in the real sandbox) and ``FunctionWorkspace``."""

from __future__ import annotations

import pytest

from skyrl_gym.tools.workspace import FunctionWorkspace, LocalDirWorkspace, Workspace, WorkspaceUnsupported


def test_commands_see_the_folder_and_their_changes_come_back(repo):
    result = repo.run(
        "cat README.md | head -1; echo made > new.txt; rm broken.py; mkdir -p a/b; echo x > a/b/c"
    )
    assert result.ok and result.output.startswith("# shop")
    files = repo.list_files()
    assert "new.txt" in files and "a/b/c" in files and "broken.py" not in files
    assert repo.read_file("new.txt") == "made\n"
    assert repo.read_file("/work/new.txt") == "made\n"  # the path the command sees names the same file


def test_unchanged_files_are_left_alone(repo):
    path = repo.root / "shop" / "cart.py"
    before = path.stat().st_mtime_ns
    assert repo.run("echo hi > other.txt").ok
    assert path.stat().st_mtime_ns == before


def test_exit_codes_timeouts_and_isolation(repo):
    assert repo.run("exit 3").exit_code == 3
    slow = repo.run("echo partial > partial.txt; sleep 20", timeout_s=1)
    assert slow.timed_out and slow.exit_code is None
    assert "partial.txt" not in repo.list_files()  # a timed-out command's changes are dropped
    offline = repo.run("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), 2)\"")
    assert offline.exit_code != 0
    program = repo.run(
        "python3 -c 'from shop.cart import Cart; c = Cart(); c.add_item(1, 2); print(c.total())'"
    )
    assert program.ok and program.output.strip() == "2"


def test_paths_may_not_leave_the_folder(repo):
    for path in ("../outside.txt", "/etc/passwd", "shop/../../x", "", "a\x00b"):
        with pytest.raises(ValueError):
            repo.read_file(path)
    (repo.root / "link").symlink_to("/etc")
    with pytest.raises(ValueError):
        repo.read_file("link/passwd")
    with pytest.raises(FileNotFoundError):
        repo.read_file("missing.py")


def test_a_temporary_workspace_is_removed_on_close():
    workspace = LocalDirWorkspace(files={"x.txt": "1"})
    root = workspace.root
    assert root.is_dir() and workspace.read_file("x.txt") == "1"
    workspace.close()
    assert not root.exists()


def test_capabilities():
    def run_query(query: str) -> str:
        return f"rows of {query}"

    workspace = FunctionWorkspace(sql=run_query)
    assert workspace.supports("sql") and not workspace.supports("run")
    assert workspace.sql("SELECT 1") == "rows of SELECT 1"
    with pytest.raises(WorkspaceUnsupported, match="offers no 'run'"):
        workspace.run("ls")
    with pytest.raises(WorkspaceUnsupported):
        Workspace().read_file("x")


def test_a_capability_of_its_own_is_offered_by_name_and_used_through_call():
    pages = {"https://example.org": "<h1>Example</h1>"}
    workspace = FunctionWorkspace(browse=lambda url: pages.get(url, "404"), sql=lambda query: "rows")
    assert workspace.capabilities == {"browse", "sql"} and workspace.supports("browse")
    assert workspace.call("browse", "https://example.org") == "<h1>Example</h1>"
    assert workspace.call("sql", "SELECT 1") == "rows"  # a built-in one by name too
    with pytest.raises(WorkspaceUnsupported, match="offers no 'fly'"):
        workspace.call("fly")
    with pytest.raises(ValueError, match="cannot take run"):
        FunctionWorkspace(run=lambda command: "")
    # a workspace class answers call() for its built-in methods, and refuses what it does not offer
    assert not Workspace().supports("browse")
    with pytest.raises(WorkspaceUnsupported):
        Workspace().call("sql", "SELECT 1")
