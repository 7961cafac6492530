"""``ReActEnv`` over the text-to-SQL and code environments: conformance, adversarial properties, the oracle and
the no-op, and each named end."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyrl_gym.envs.code.env import CodeEnv
from skyrl_gym.envs.sql.env import Text2SQLEnv
from skyrl_gym.testing import check_env, play_episode
from skyrl_gym.testing.strategies import adversarial_actions, episodes, text_actions, tool_call_actions
from skyrl_gym.tools.agent import TOOLS
from skyrl_gym.tools.react import ReActEnv, render_tool_call, template_renders_tools, tools_system_prompt

MUST_PASS = ("oracle-earns-full-reward", "noop-earns-nothing", "deterministic", "no-shared-state")


def sql_react(**config) -> ReActEnv:
    return ReActEnv(Text2SQLEnv(), {"max_turns": 6, **config})


def test_react_over_text2sql_conforms():
    report = check_env(sql_react, seeds=(0, 1), gymnasium_check=False)
    for rule in MUST_PASS:
        assert rule in report.passed, report.summary()


def test_react_over_code_conforms():
    report = check_env(lambda: ReActEnv(CodeEnv(), {"max_turns": 4}), seeds=(0, 1), gymnasium_check=False)
    for rule in MUST_PASS:
        assert rule in report.passed, report.summary()


def test_prompt_lists_the_tools_the_workspace_supports():
    env = sql_react()
    messages, info = env.reset(seed=0)
    assert info["tools"] == ["sql", "finish"]
    assert messages[0]["role"] == "system" and "<tools>" in messages[0]["content"]
    assert '"name": "sql"' in messages[0]["content"] and '"name": "bash"' not in messages[0]["content"]
    assert messages[-1]["role"] == "user"
    env.close()
    quiet = ReActEnv(Text2SQLEnv(), tools_in_template=True)
    messages, _ = quiet.reset(seed=0)
    assert all("<tools>" not in m["content"] for m in messages)
    quiet.close()


def test_oracle_tool_calls_earn_full_reward_and_a_noop_none():
    env = sql_react()
    env.reset(seed=3)
    gold = env.inner.gold_sql
    ran = env.step(render_tool_call("sql", {"query": gold}))
    assert (
        not ran["done"]
        and ran["observations"][0]["role"] == "tool"
        and ran["observations"][0]["name"] == "sql"
    )
    final = env.step(render_tool_call("finish", {"answer": gold}))
    assert final["done"] and final["reward"] == 1.0 and final["metadata"]["end"] == "terminated"
    assert final["metadata"]["correct"] is True and env.get_metrics()["queries"] == 1
    env.close()
    wrong = sql_react()
    wrong.reset(seed=3)
    assert wrong.step(render_tool_call("finish", {"answer": "SELECT 1 WHERE 1 = 0"}))["reward"] == 0.0
    wrong.close()
    idle = sql_react(max_turns=3)
    idle.reset(seed=3)
    outputs = [idle.step("I am thinking.") for _ in range(3)]
    assert sum(o["reward"] for o in outputs) == 0.0 and outputs[-1]["metadata"]["truncated_by"] == "max_turns"
    assert "No tool call found" in outputs[0]["observations"][0]["content"]
    assert idle.get_metrics()["react_format_errors"] == 3
    idle.close()


def test_stuck_loop_ends_the_episode():
    env = sql_react(max_repeats=3)
    env.reset(seed=0)
    same = render_tool_call("sql", {"query": "SELECT 1"})
    assert not env.step(same)["done"]
    assert not env.step(same)["done"]
    last = env.step(same)
    assert last["done"] and last["reward"] == 0.0
    assert last["metadata"]["end"] == "truncated" and last["metadata"]["truncated_by"] == "stuck_loop"
    assert env.inner.queries == 2  # the repeated call that ends the episode is not run
    env.close()
    varied = sql_react(max_repeats=2)
    varied.reset(seed=0)
    for number in range(4):  # different calls never count as a loop
        assert not varied.step(render_tool_call("sql", {"query": f"SELECT {number}"}))["done"]
    varied.close()


def test_context_exhaustion_ends_the_episode():
    env = sql_react(max_context=6000)
    messages, _ = env.reset(seed=0)
    assert env.context_size == sum(len(m["content"]) for m in messages)
    output = env.step("x" * 6000)
    assert output["done"] and output["metadata"]["truncated_by"] == "context" and output["reward"] == 0.0
    env.close()
    counted = ReActEnv(Text2SQLEnv(), {"max_context": 10_000}, count_tokens=lambda text: len(text.split()))
    counted.reset(seed=0)
    assert not counted.step("word " * 500)["done"]
    counted.close()


def test_tool_timeouts_end_the_episode():
    env = ReActEnv(CodeEnv(), {"tool_timeout_s": 1, "max_tool_timeouts": 2, "max_turns": 10})
    env.reset(seed=0)
    first = env.step(render_tool_call("bash", {"command": "sleep 30; echo 1"}))
    assert not first["done"] and "timed out" in first["observations"][0]["content"]
    second = env.step(render_tool_call("bash", {"command": "sleep 30; echo 2"}))
    assert second["done"] and second["metadata"]["truncated_by"] == "tool_timeouts"
    assert env.get_metrics()["react_tool_timeouts"] == 2
    env.close()


def test_code_task_written_and_tested_in_the_workspace():
    env = ReActEnv(CodeEnv(), {"max_turns": 10})
    env.reset(seed=0)
    solution = env.inner.reference_action().split("\n", 1)[1].rsplit("```", 1)[0]
    steps = [
        render_tool_call("editor", {"command": "create", "path": "solution.py", "file_text": solution}),
        render_tool_call(
            "bash", {"command": "python3 -c 'import ast; ast.parse(open(\"solution.py\").read())'"}
        ),
        render_tool_call("editor", {"command": "view", "path": "solution.py", "view_range": [1, 1]}),
    ]
    for action in steps:
        output = env.step(action)
        assert not output["done"] and not output["observations"][0]["content"].startswith("Error"), output
    final = env.step(render_tool_call("finish", {"answer": solution}))
    assert final["done"] and final["reward"] == 1.0
    env.close()


def test_bad_calls_are_observations():
    env = sql_react()
    env.reset(seed=0)
    output = env.step(
        "<tool_call>{broken</tool_call>"
        + render_tool_call("nope", {})
        + render_tool_call("sql", {"query": 5})
        + render_tool_call("bash", {"command": "ls"})
        + render_tool_call("sql", {"query": "SELECT 1"})
    )
    contents = [m["content"] for m in output["observations"]]
    assert not output["done"] and len(contents) == 5 and "not run" in contents[-1]
    assert "not valid JSON" in contents[0] and "unknown tool 'nope'" in contents[1]
    assert "expected string" in contents[2] and "unknown tool 'bash'" in contents[3]
    env.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_adversarial_episodes_never_end_in_error(data):
    env = sql_react(max_turns=4)
    env.reset(seed=0)
    actions = data.draw(
        episodes(
            st.one_of(tool_call_actions(env), adversarial_actions(("tool_call",)), text_actions(200)), 1, 4
        )
    )
    env.close()
    outputs = play_episode(sql_react(max_turns=4), actions, seed=0)
    assert all(o["reward"] <= 1.0 for o in outputs)


def test_tools_prompt_and_template_probe():
    schemas = [TOOLS.get("sql").schema, TOOLS.get("finish").schema]
    text = tools_system_prompt(schemas)
    assert '"name": "sql"' in text and "<tool_call>" in text

    class PlainTemplate:
        def apply_chat_template(self, messages, tokenize=False, **kwargs):
            return "".join(m["content"] for m in messages)

    class ToolTemplate(PlainTemplate):
        def apply_chat_template(self, messages, tokenize=False, tools=None, **kwargs):
            names = [t["function"]["name"] for t in tools or []]
            return " ".join(names) + super().apply_chat_template(messages)

    assert not template_renders_tools(PlainTemplate(), schemas)
    assert template_renders_tools(ToolTemplate(), schemas)


def test_the_react_agent_wraps_the_row_environment():
    from skyrl_train.rollout.agents import agent_class
    from skyrl_train.rollout.react import ReActTrajectory

    assert agent_class("react") is ReActTrajectory
    trajectory = ReActTrajectory(None, {"prompt": []}, None, react={"max_repeats": 2, "tools": ["sql"]})
    env = trajectory.wrap_env(Text2SQLEnv())
    assert isinstance(env, ReActEnv) and env.config.max_repeats == 2
    _, info = env.reset(seed=0)
    assert info["tools"] == ["sql", "finish"]
    env.close()
