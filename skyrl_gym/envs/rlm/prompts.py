"""The texts of SkyRL's RLM protocol, byte for byte: the system prompt, the per-turn user prompts and the
REPL's notices. A model trained on SkyRL's RLM environment sees exactly these."""

from __future__ import annotations

__all__ = [
    "DEFAULT_RLM_SYSTEM_PROMPT",
    "LM_TOOLS_SECTION",
    "NO_CODE_BLOCK",
    "build_user_prompt",
    "code_observation",
]

DEFAULT_RLM_SYSTEM_PROMPT = """\
You are tasked with answering a query with associated context. You can access, transform, and analyze this \
context interactively in a REPL environment. You will be queried iteratively until you provide a final answer.

The REPL environment is initialized with:
1. A `context` variable that contains extremely important information about your query. You should check the \
content of the `context` variable to understand what you are working with. Make sure you look through it \
sufficiently as you answer your query.
2. A `SHOW_VARS()` function that returns all variables you have created in the REPL. Use this to check what \
variables exist before using FINAL_VAR.
3. The ability to use `print()` statements to view the output of your REPL code and continue your reasoning.
{custom_tools_section}
When you want to execute Python code in the REPL environment, wrap it in triple backticks with 'repl' language \
identifier:
```repl
# your code here
```

Use variables as buffers to build up your final answer. Make sure to explicitly look through the context in \
the REPL before answering your query.

IMPORTANT: When you are done with the iterative process, you MUST provide a final answer using one of:
1. FINAL(your final answer here) — provide the answer directly as text
2. FINAL_VAR(variable_name) — return a variable you have created in the REPL

WARNING: FINAL_VAR retrieves an EXISTING variable. You MUST create and assign the variable in a ```repl``` \
block FIRST, then call FINAL_VAR in a SEPARATE response.

Think step by step carefully, plan, and execute this plan immediately in your response -- do not just say \
"I will do this". Output to the REPL environment as much as possible.\
"""
"""The system prompt; ``{custom_tools_section}`` is replaced by the LM functions' and custom tools' lines."""

LM_TOOLS_SECTION = (
    "\n4. LM query tools available in the REPL:\n"
    "- `llm_query(prompt)` — make a direct LLM call, returns str\n"
    "- `llm_query_batched(prompts)` — batch LLM calls, returns list[str]\n"
    "- `rlm_query(prompt)` — recursive LM call that spawns a child agent with its own REPL, returns str\n"
    "- `rlm_query_batched(prompts)` — batch recursive calls in parallel, returns list[str]"
)
"""Added to the system prompt when the REPL has the LM functions (an ``lm_callback`` was given)."""

NO_CODE_BLOCK = "[No ```repl``` code block found. Wrap your code in ```repl\\n...\\n``` blocks.]"
"""The observation for a reply without a ```` ```repl ```` block."""

_NEXT_ACTION = (
    "Continue using the REPL environment, which has the `context` variable, "
    "by writing to a ```repl``` tag, and determine your answer. Your next action:"
)
_FIRST_TURN = (
    "You have not interacted with the REPL environment or seen your prompt / context yet. "
    "Your next action should be to look through and figure out how to answer the prompt, "
    "so don't just provide a final answer yet.\n\n"
)
_LATER_TURN = "The history before is your previous interactions with the REPL environment. "


def build_user_prompt(root_prompt: str | None, iteration: int) -> dict[str, str]:
    """The user message placed before each model call (turn ``iteration``, 0 for the first)."""
    if root_prompt:
        body = (
            "Think step-by-step on what to do using the REPL environment (which contains the context) "
            f'to answer the original prompt: "{root_prompt}".\n\n' + _NEXT_ACTION
        )
    else:
        body = (
            "Think step-by-step on what to do using the REPL environment (which contains the context) "
            "to answer the prompt.\n\n" + _NEXT_ACTION
        )
    lead = _FIRST_TURN if iteration == 0 else _LATER_TURN
    return {"role": "user", "content": lead + body}


def code_observation(code: str, result_text: str) -> str:
    """The observation after a cell ran: the code, then the REPL's output."""
    return f"Code executed:\n```python\n{code}\n```\n\nREPL output:\n{result_text}"
