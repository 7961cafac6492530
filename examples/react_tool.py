"""A tool of your own, called the way the ReAct agent calls it, in an environment that lends a workspace.

    python examples/react_tool.py

The `python` environment (math with a sandboxed interpreter) lends its interpreter as the workspace's
"python" capability. The tool below uses it; `ReActEnv` (what `generator.agent=react` plays) parses the
model's <tool_call>{...}</tool_call>, checks the arguments against the tool's schema and runs it. No model
here: the two turns are scripted.
"""

from __future__ import annotations

import json

import skyrl_gym
from skyrl_gym.tools import tool
from skyrl_gym.tools.react import ReActEnv
from skyrl_gym.tools.workspace import Workspace


# The first parameter, `workspace`, makes it a workspace tool (the agent gives it); the rest, with the
# docstring, is the JSON schema the model sees. `requires` names the capability it needs: it is offered only
# where a workspace has it.
@tool(requires=("python",))
def calculate(workspace: Workspace, expression: str) -> str:
    """Evaluate an arithmetic expression with Python and return its value.

    Args:
        expression: a Python expression, e.g. "(26 + 68) / 9".
    """
    return workspace.python(f"print({expression})", timeout_s=5.0).strip()


inner = skyrl_gym.make("python")  # made without a task: reset(seed=...) draws one from its own task set
env = ReActEnv(inner, tools=[calculate, "finish"])  # "finish" hands the answer to the environment's verifier
messages, info = env.reset(seed=0)
print("tools offered:", info["tools"])
print("task:", messages[-1]["content"])
print("schema:", json.dumps(env.tool_schemas[0]["function"]["parameters"]))

# Turn 1: the "model" calls the tool on the task's expression.
expression = messages[-1]["content"].removeprefix("Calculate ").rstrip(".")
call = {"name": "calculate", "arguments": {"expression": expression}}
output = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
result = output["observations"][0]["content"]  # a {"role": "tool", "name": "calculate"} message
print("tool result:", result)

# Turn 2: it finishes with that value, which the python environment scores (\boxed{...}).
answer = str(int(float(result))) if float(result).is_integer() else result
finish = {"name": "finish", "arguments": {"answer": answer}}
output = env.step(f"<tool_call>{json.dumps(finish)}</tool_call>")
print("reward:", output["reward"], "done:", output["done"])
env.close()
