"""The agent tools on real workspaces: the registry and schemas, the editor's edge cases, code search over a small
repository and over this project's own package, bash and python in the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import skyrl_gym
from skyrl_gym.tools import Tool, ToolResult, tool
from skyrl_gym.tools.agent import TOOLS
from skyrl_gym.tools.agent import code_search as code_search_module
from skyrl_gym.tools.agent.code_search import CACHE_STATS, CodeIndex
from skyrl_gym.tools.agent.core import AgentTool, ToolOutput, agent_tool, resolve_tools
from skyrl_gym.tools.workspace import FunctionWorkspace, LocalDirWorkspace

BUILTINS = ["bash", "code_search", "editor", "finish", "python", "search", "sql"]


def call(workspace, name, **arguments) -> ToolResult:
    return TOOLS.get(name).call(arguments, workspace=workspace, timeout_s=10)


# -- registry and schemas ------------------------------------------------------------------------------------
def test_registry_and_schemas():
    assert TOOLS.names() == BUILTINS
    for name in BUILTINS:
        schema = TOOLS.get(name).schema
        assert schema["type"] == "function" and schema["function"]["name"] == name
        assert schema["function"]["description"]
        parameters = schema["function"]["parameters"]
        assert "workspace" not in parameters["properties"] and "timeout_s" not in parameters["properties"]
        json.dumps(schema)
    editor = TOOLS.get("editor").schema["function"]["parameters"]
    assert editor["required"] == ["command", "path"]
    assert editor["properties"]["command"]["enum"] == ["view", "create", "str_replace", "insert", "undo_edit"]
    assert {"type": "array", "items": {"type": "integer"}} in editor["properties"]["view_range"]["anyOf"]
    assert TOOLS.get("search").schema["function"]["parameters"]["properties"]["k"]["default"] == 3
    with pytest.raises(ValueError, match="did you mean 'bash'"):
        TOOLS.get("bsh")


def test_a_workspace_tool_is_made_by_the_one_decorator_and_checks_its_arguments(repo):
    @tool(name="shout", register=False)
    def shout(workspace, text: str, times: int = 1, *, timeout_s: float = 1.0) -> str:
        """Repeat a text in capitals.

        Args:
            text: what to shout.
            times: how often.
        """
        return f"{text.upper() * times} within {timeout_s:g} s"

    assert isinstance(shout, Tool) and shout.takes_workspace and "shout" not in TOOLS
    # the workspace and the hidden timeout are the caller's: the model's schema has neither
    assert list(shout.schema["function"]["parameters"]["properties"]) == ["text", "times"]
    result = shout.call({"text": "a", "times": 2}, timeout_s=5)
    assert result == ToolResult("shout", "AA within 5 s", True)
    for arguments, message in [
        ({}, "is missing required argument 'text' (string)"),
        ({"text": 1}, "expected string"),
        ({"text": "a", "loud": True}, "got unexpected argument 'loud'"),
        ({"text": "a", "timeout_s": 99}, "got unexpected argument 'timeout_s'"),  # not the model's to set
        ([1, 2], "must be an object, got array"),
    ]:
        output = shout.call(arguments)
        assert not output.ok and message in output.content and output.content.startswith("Error: ")
        assert "'shout'" in output.content


def test_a_tools_failure_is_its_observation_and_a_result_it_returns_keeps_its_flags():
    @tool(register=False)
    def lookup(workspace, key: str) -> ToolResult:
        """Look a key up.

        Args:
            key: the key.
        """
        if key == "stop":
            return ToolResult(content="stopped", ok=False, timed_out=True)
        return {"a": 1}[key]

    assert lookup.call({"key": "b"}) == ToolResult("lookup", "Error: tool 'lookup' raised KeyError: b", False)
    assert lookup.call({"key": "a"}).content == "1"
    assert lookup.call({"key": "stop"}) == ToolResult("lookup", "stopped", ok=False, timed_out=True)


def test_the_old_names_of_agent_tools_still_work():
    @agent_tool(name="old_shout", requires=("sql",), register=False)
    def old_shout(ws, text: str) -> ToolOutput:
        """Shout.

        Args:
            text: what to shout.
        """
        return ToolOutput(text.upper(), ok=True)

    assert AgentTool is Tool and isinstance(old_shout, Tool) and old_shout.requires == ("sql",)
    assert old_shout.call({"text": "a"}, workspace=FunctionWorkspace(sql=lambda query: "")).content == "A"
    assert ToolOutput("x", ok=False) == ToolResult(content="x", ok=False)
    with pytest.raises(TypeError, match="first parameter must be the workspace"):
        agent_tool(lambda *args: None, register=False)


def test_tools_offered_follow_the_workspace(repo):
    assert [t.name for t in resolve_tools(None, repo)] == [
        "bash",
        "code_search",
        "editor",
        "python",
        "finish",
    ]
    sql_only = FunctionWorkspace(sql=lambda query: "rows")
    assert [t.name for t in resolve_tools(None, sql_only)] == ["sql", "finish"]
    assert [t.name for t in resolve_tools(None, None)] == ["finish"]
    output = call(sql_only, "bash", command="ls")
    assert not output.ok and "needs run" in output.content


def test_a_tool_may_need_a_capability_the_project_does_not_name():
    @tool(name="browse", requires=["browse"], register=False)
    def browse(workspace, url: str) -> str:
        """Fetch a page.

        Args:
            url: the page's address.
        """
        return workspace.call("browse", url)

    browser = FunctionWorkspace(browse=lambda url: f"page at {url}")
    assert browse.available(browser) and not browse.available(FunctionWorkspace(sql=lambda query: ""))
    assert (
        browse.call({"url": "https://example.org"}, workspace=browser).content
        == "page at https://example.org"
    )
    output = browse.call({"url": "x"}, workspace=FunctionWorkspace(sql=lambda query: ""))
    assert not output.ok and "needs browse" in output.content


# -- editor ----------------------------------------------------------------------------------------------------
def test_editor_view_with_line_numbers_and_ranges(repo):
    whole = call(repo, "editor", command="view", path="shop/cart.py").content
    assert whole.splitlines()[0] == "     1\tclass Cart:" and "    15\t" in whole
    part = call(repo, "editor", command="view", path="shop/cart.py", view_range=[10, 11]).content
    assert part.splitlines() == [
        "    10\t    def total(self):",
        "    11\t        return sum(price for _, price in self.items)",
    ]
    tail = call(repo, "editor", command="view", path="shop/cart.py", view_range=[14, -1]).content
    assert tail.splitlines()[0].startswith("    14\tdef apply_discount")
    for bad in ([0, 3], [5, 2], [1, 99], [1]):
        output = call(repo, "editor", command="view", path="shop/cart.py", view_range=bad)
        assert not output.ok and "view_range" in output.content
    listing = call(repo, "editor", command="view", path="shop").content
    assert "shop/cart.py" in listing and "shop/tax.py" in listing
    assert not call(repo, "editor", command="view", path="nope.py").ok
    long_text = "".join(f"line {i}\n" for i in range(1000))
    repo.write_file("long.txt", long_text)
    view = call(repo, "editor", command="view", path="long.txt").content
    assert "600 more lines" in view and "view_range=[401, -1]" in view


def test_editor_str_replace_needs_a_unique_match(repo):
    missing = call(
        repo, "editor", command="str_replace", path="shop/cart.py", old_str="def totl(self):", new_str="x"
    )
    assert not missing.ok and "not found" in missing.content
    many = call(repo, "editor", command="str_replace", path="shop/cart.py", old_str="self.items", new_str="x")
    assert not many.ok and "occurs 3 times" in many.content and "lines 5, 8, 11" in many.content
    empty = call(repo, "editor", command="str_replace", path="shop/cart.py", old_str="", new_str="x")
    assert not empty.ok
    before = repo.read_file("shop/cart.py")
    done = call(
        repo, "editor", command="str_replace", path="shop/cart.py",
        old_str="        return sum(price for _, price in self.items)",
        new_str="        return round(sum(price for _, price in self.items), 2)",
    )  # fmt: skip
    assert done.ok and "round(sum" in done.content and "    11\t" in done.content
    assert repo.read_file("shop/cart.py") == before.replace("return sum(", "return round(sum(").replace(
        "self.items)\n\n\ndef", "self.items), 2)\n\n\ndef"
    )
    assert call(repo, "editor", command="undo_edit", path="shop/cart.py").ok
    assert repo.read_file("shop/cart.py") == before
    assert not call(repo, "editor", command="undo_edit", path="shop/cart.py").ok  # nothing left to undo
    assert not call(repo, "editor", command="str_replace", path="absent.py", old_str="a", new_str="b").ok


def test_editor_create_and_insert(repo):
    created = call(repo, "editor", command="create", path="pkg/new.py", file_text="a = 1\nb = 2\n")
    assert created.ok and repo.read_file("pkg/new.py") == "a = 1\nb = 2\n"
    again = call(repo, "editor", command="create", path="pkg/new.py", file_text="x")
    assert not again.ok and "already exists" in again.content
    assert not call(repo, "editor", command="create", path="pkg/other.py").ok  # no file_text
    assert call(repo, "editor", command="insert", path="pkg/new.py", insert_line=0, new_str="# top").ok
    assert call(repo, "editor", command="insert", path="pkg/new.py", insert_line=3, new_str="c = 3").ok
    assert repo.read_file("pkg/new.py") == "# top\na = 1\nb = 2\nc = 3\n"
    out_of_range = call(repo, "editor", command="insert", path="pkg/new.py", insert_line=9, new_str="z")
    assert not out_of_range.ok and "0..4" in out_of_range.content
    assert not call(repo, "editor", command="insert", path="pkg/new.py", new_str="z").ok
    escape = call(repo, "editor", command="create", path="../escape.py", file_text="x")
    assert not escape.ok and "outside the workspace" in escape.content
    assert not (Path(repo.root).parent / "escape.py").exists()


# -- code search -----------------------------------------------------------------------------------------------
def test_code_index_of_a_small_repository(repo):
    index = CodeIndex.build(repo)
    spans = {s.qualname: (s.kind, s.path, s.start, s.end) for s in index.symbols if s.kind != "file"}
    assert spans["Cart"] == ("class", "shop/cart.py", 1, 11)
    assert spans["Cart.add_item"] == ("method", "shop/cart.py", 7, 8)
    assert spans["apply_discount"] == ("function", "shop/cart.py", 14, 15)
    assert spans["fetch_rate"] == ("function", "shop/tax.py", 4, 5)
    assert index.parse_errors == ["broken.py"]  # a file that does not parse is still listed as a file
    assert any(s.kind == "file" and s.path == "broken.py" for s in index.symbols)


def test_code_search_stages(repo):
    exact = call(repo, "code_search", query="add_item").content.splitlines()
    assert exact[0] == "shop/cart.py:7-8 method Cart.add_item  [exact name]"
    assert call(repo, "code_search", query="cart.add_item").content.startswith("shop/cart.py:7-8 method")
    fuzzy = call(repo, "code_search", query="aply_discont", kind="function").content
    assert fuzzy.splitlines()[0] == "shop/cart.py:14-15 function apply_discount  [similar name]"
    classes = call(repo, "code_search", query="Cart", kind="class").content.splitlines()
    assert classes == ["shop/cart.py:1-11 class Cart  [exact name]"]
    files = call(repo, "code_search", query="tax.py", kind="file").content
    assert files.startswith("shop/tax.py:1-5 file shop/tax.py")
    text = call(repo, "code_search", query="percent / 100").content
    assert "shop/cart.py:15 return total * (1 - percent / 100)  [text match]" in text
    words = call(repo, "code_search", query="sum of the prices in the cart", kind="function").content
    assert "Cart.total" in words.splitlines()[0] and "[related]" in words
    assert "No match" in call(repo, "code_search", query="zzzqqqxxx").content
    assert (
        not call(repo, "code_search", query="  ").ok
        or "empty" in call(repo, "code_search", query="  ").content
    )


def test_code_search_caches_the_index_per_workspace(repo, tmp_path):
    builds, hits = CACHE_STATS["builds"], CACHE_STATS["hits"]
    call(repo, "code_search", query="Cart")
    call(repo, "code_search", query="total")
    call(repo, "code_search", query="RATE")
    assert (CACHE_STATS["builds"] - builds, CACHE_STATS["hits"] - hits) == (1, 2)
    other = LocalDirWorkspace(tmp_path / "other", files={"m.py": "def helper():\n    pass\n"})
    assert "m.py:1-2 function helper" in call(other, "code_search", query="helper").content
    assert CACHE_STATS["builds"] - builds == 2
    # an edit through the editor (or any bash command) makes the next search rebuild and see it
    call(
        repo,
        "editor",
        command="insert",
        path="shop/tax.py",
        insert_line=5,
        new_str="def new_rule():\n    pass",
    )
    assert "shop/tax.py:6-7 function new_rule" in call(repo, "code_search", query="new_rule").content
    assert CACHE_STATS["builds"] - builds == 3


def test_code_search_over_this_package():
    root = Path(skyrl_gym.__file__).parent
    workspace = LocalDirWorkspace(root)
    found = call(workspace, "code_search", query="parse_tool_calls", kind="function").content.splitlines()
    assert found[0].startswith("tools/parsing.py:") and found[0].endswith(
        "function parse_tool_calls  [exact name]"
    )
    start, end = map(int, found[0].split(" ")[0].split(":")[1].split("-"))
    source = (root / "tools" / "parsing.py").read_text().splitlines()
    assert source[start - 1].startswith("def parse_tool_calls(") and end > start
    method = call(workspace, "code_search", query="ToolGroup.execute_call").content.splitlines()[0]
    assert method.startswith("tools/core.py:") and "method ToolGroup.execute_call" in method
    close = call(workspace, "code_search", query="EpisodeGuardd", kind="class").content.splitlines()[0]
    assert close.startswith("guard.py:") and "class EpisodeGuard" in close
    index = code_search_module.index_for(workspace)
    assert len(index.texts) > 50 and not index.parse_errors


# -- bash and python ---------------------------------------------------------------------------------------
def test_bash_and_python_in_the_sandbox(repo):
    listed = call(repo, "bash", command="ls shop")
    assert listed.ok and "cart.py" in listed.content and listed.content.endswith("[exit code 0]")
    failed = call(repo, "bash", command="cat nope")
    assert not failed.ok and "[exit code 1]" in failed.content
    slow = TOOLS.get("bash").call({"command": "sleep 30"}, workspace=repo, timeout_s=1)
    assert slow.timed_out and not slow.ok and "timed out after 1 s" in slow.content
    assert not call(repo, "bash", command="  ").ok
    code = "from shop.cart import apply_discount\nprint(apply_discount(200, 10))\nprint('EOF')"
    output = call(repo, "python", code=code)
    assert output.ok and output.content.split() == ["180.0", "EOF"]
    raised = call(repo, "python", code="raise ValueError('boom')")
    assert not raised.ok and "ValueError: boom" in raised.content


def test_finish_carries_the_answer():
    output = call(None, "finish", answer="SELECT 1")
    assert output.finish and output.content == "SELECT 1"
