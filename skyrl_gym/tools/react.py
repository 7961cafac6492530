"""``ReActEnv``: any skyrl_gym environment played as a ReAct loop over tools in the OpenAI tool-call format.

The model writes ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; the wrapper runs each call on the
inner environment's workspace (:meth:`skyrl_gym.Env.workspace`) and answers with ``{"role": "tool"}``
messages. ``finish(answer)`` becomes one step of the inner environment with ``inner.finish_action(answer)``
(``<solution>answer</solution>`` for text-to-SQL, ``<submit/>`` for a terminal task), and that step's reward
and end are the episode's. The tool list reaches the model as a system message holding the JSON schemas and the
call format, or through the tokenizer's chat template (``tools=``) when it renders them
(:func:`template_renders_tools`; the wrapper is then made with ``tools_in_template=True``).

Named ends (``metadata["end"] == "truncated"`` and ``metadata["truncated_by"]``):

- ``stuck_loop``: the same call (name and arguments) asked for ``max_repeats`` times in a row; the last one is
  not run;
- ``tool_timeouts``: ``max_tool_timeouts`` tool calls ran out of time;
- ``context``: the conversation (prompt, actions and observations) grew past ``max_context`` characters
  (or tokens, with a tokenizer's ``count_tokens``);
- ``max_turns``: ``max_turns`` actions without ``finish``.

An action without a tool call gets a user message saying how to write one (counted in ``format_errors``). A
tool's failure or timeout is an observation, never an exception out of the environment.

The reference episode is the inner environment's ``reference_tool_calls()`` where it has one (a list of
``{"name", "arguments"}`` calls ending with ``finish``), one call per turn; the reference action holds them
all in one turn.

The tools are the agent tools of :mod:`skyrl_gym.tools.agent`. The trainer's ``react`` agent
(``skyrl_train.rollout.react``) plays a row's environment through this wrapper.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

from skyrl_gym.budget import END_TERMINATED, END_TRUNCATED
from skyrl_gym.core import Env, Task
from skyrl_gym.tools.agent.core import resolve_tools
from skyrl_gym.tools.core import Tool, ToolResult
from skyrl_gym.tools.parsing import TOOL_CALL_FORMAT, ToolCall, ToolCallParseError, parse_tool_calls

__all__ = ["ReActConfig", "ReActEnv", "render_tool_call", "template_renders_tools", "tools_system_prompt"]


@dataclasses.dataclass(frozen=True)
class ReActConfig:
    """Settings of the ReAct loop; every field has a default."""

    tools: tuple[str, ...] | None = None
    """Tool names (``None``: every registered tool the workspace can run); ``finish`` is always offered."""
    max_turns: int = 30
    """Actions per episode before it ends truncated by ``max_turns``."""
    max_repeats: int = 3
    """The same call this many times in a row ends the episode (``stuck_loop``)."""
    max_tool_timeouts: int = 3
    """Tool calls that may time out before the episode ends (``tool_timeouts``)."""
    tool_timeout_s: float = 30.0
    """Seconds one command of a tool may run."""
    max_context: int = 200_000
    """Size of the conversation (characters, or tokens with ``count_tokens``) that ends it (``context``)."""
    max_calls_per_turn: int = 4
    """Tool calls run per action; later ones are skipped with a note."""
    max_tool_output_chars: int = 10_000
    """Characters of one tool result shown (its beginning and end are kept)."""

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_repeats", "max_tool_timeouts", "max_context", "max_calls_per_turn"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"react.{name} must be a positive integer, got {value!r}")
        if isinstance(self.max_tool_output_chars, bool) or self.max_tool_output_chars < 100:
            raise ValueError(
                f"react.max_tool_output_chars must be at least 100, got {self.max_tool_output_chars!r}"
            )
        if not isinstance(self.tool_timeout_s, (int, float)) or not self.tool_timeout_s > 0:
            raise ValueError(f"react.tool_timeout_s must be a positive number, got {self.tool_timeout_s!r}")
        if self.tools is not None:
            if isinstance(self.tools, str) or not all(isinstance(t, str) for t in self.tools):
                raise ValueError(f"react.tools must be a list of tool names, got {self.tools!r}")
            object.__setattr__(self, "tools", tuple(self.tools))


def render_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """One call as the model writes it: ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``."""
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False).replace("<", "\\u003c")
    return f"<tool_call>{payload}</tool_call>"


def tools_system_prompt(schemas: Sequence[dict[str, Any]]) -> str:
    """The system text that lists the tools (their JSON schemas) and how to call them."""
    listed = "\n".join(json.dumps(schema, ensure_ascii=False) for schema in schemas)
    return (
        "# Tools\n\nAct only through these tools. The function signatures, as JSON schemas:\n"
        f"<tools>\n{listed}\n</tools>\n\n"
        f"To call a tool, write {TOOL_CALL_FORMAT}. Each result comes back in a tool message. "
        "When you are done, call finish with your final answer."
    )


def template_renders_tools(tokenizer: Any, schemas: Sequence[dict[str, Any]]) -> bool:
    """Whether ``tokenizer``'s chat template renders a ``tools=`` list (the first tool's name appears)."""
    if not schemas:
        return False
    name = schemas[0]["function"]["name"]
    probe = [{"role": "user", "content": "x"}]
    try:
        with_tools = tokenizer.apply_chat_template(probe, tools=list(schemas), tokenize=False)
        without = tokenizer.apply_chat_template(probe, tokenize=False)
    except Exception:  # a template that refuses tools= does not render them
        return False
    return name in with_tools and name not in without


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 3 // 4], text[-(limit // 4) :]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters not shown ...]\n{tail}"


_NO_CALL = (
    "No tool call found. Call a tool by writing " + TOOL_CALL_FORMAT + ", for example "
    '<tool_call>{"name": "finish", "arguments": {"answer": "..."}}</tool_call> to give your final answer.'
)


class ReActEnv(Env):
    """The inner environment played through tool calls (see the module docstring).

    Args:
        inner: any skyrl_gym environment; its ``workspace()`` lends the tools a place to run.
        config: a :class:`ReActConfig`, or a dict of its fields.
        tools: tool names or workspace :class:`~skyrl_gym.tools.core.Tool` objects (overrides ``config.tools``).
        tools_in_template: the chat template renders the tools (``tools=``): add no system message for them.
        count_tokens: counts a text's tokens, to measure the conversation in tokens instead of characters.
    """

    protocol_tags = ("tool_call",)
    stop_strings = ("</tool_call>",)
    """A turn ends after a tool call: the model sees the result before it goes on."""

    def __init__(
        self,
        inner: Env,
        config: ReActConfig | dict[str, Any] | None = None,
        *,
        tools: Sequence[str | Tool] | None = None,
        tools_in_template: bool = False,
        count_tokens: Callable[[str], int] | None = None,
    ):
        if not isinstance(inner, Env):
            raise TypeError(f"ReActEnv wraps a skyrl_gym.Env, got {type(inner).__name__}")
        self.inner = inner
        self.config = config if isinstance(config, ReActConfig) else ReActConfig(**dict(config or {}))
        self._tool_names = tools if tools is not None else self.config.tools
        self.tools_in_template = tools_in_template
        self.count_tokens = count_tokens
        self._workspace: Any = None
        self.tools: dict[str, Tool] = {}
        self._new_episode()

    def _new_episode(self) -> None:
        self.turns = 0
        self.done = False
        self.context_size = 0
        self.tool_calls = 0
        self.tool_errors = 0
        self.tool_timeouts = 0
        self.format_errors = 0
        self.finished = False
        self.end_reason: str | None = None
        self._last_call: str | None = None
        self._repeats = 0

    # -- what the agent needs --------------------------------------------------------------------------
    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        """The OpenAI schemas of the tools offered this episode (known after ``init``/``reset``)."""
        return [tool.schema for tool in self.tools.values()]

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """The same as :attr:`tool_schemas` (the shape hypothesis' ``tool_call_actions`` reads)."""
        return self.tool_schemas

    def get_name(self) -> str:
        """The name of the tool set, for messages."""
        return "react"

    @property
    def unwrapped(self) -> Env:
        """The wrapper itself: it speaks another protocol than the inner environment (``self.inner``)."""
        return self

    def _measure(self, text: str) -> int:
        return self.count_tokens(text) if self.count_tokens is not None else len(text)

    def _prepare(self, prompt: Any) -> list[dict[str, Any]]:
        self._new_episode()
        self._workspace = self.inner.workspace()
        self.tools = {tool.name: tool for tool in resolve_tools(self._tool_names, self._workspace)}
        messages = [dict(m) for m in (prompt or [])]
        if not self.tools_in_template:
            section = tools_system_prompt(self.tool_schemas)
            if messages and messages[0].get("role") == "system":
                messages[0]["content"] = f"{messages[0]['content']}\n\n{section}"
            else:
                messages.insert(0, {"role": "system", "content": section})
        self.context_size = sum(self._measure(str(m.get("content", ""))) for m in messages)
        return messages

    # -- the contract -----------------------------------------------------------------------------------
    def init(self, prompt: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        observations, info = self.inner.init(prompt)
        messages = self._prepare(observations)
        return messages, {**info, "tools": list(self.tools)}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        observations, info = self.inner.reset(seed=seed, options=options)
        messages = self._prepare(observations)
        return messages, {**info, "tools": list(self.tools)}

    def sample_task(self, seed: int | None = None) -> Task | None:
        return self.inner.sample_task(seed)

    def step(self, action: Any) -> dict[str, Any]:
        text = action if isinstance(action, str) else ""
        self.turns += 1
        self.context_size += self._measure(text)
        metadata: dict[str, Any] = {"turn": self.turns, "tool_calls": []}
        items = parse_tool_calls(text)
        observations: list[dict[str, Any]] = []
        if not items:
            self.format_errors += 1
            observations.append({"role": "user", "content": _NO_CALL})
        for number, item in enumerate(items):
            if number == self.config.max_calls_per_turn:
                observations.append(
                    self._tool_message(
                        "",
                        f"[{len(items) - number} more tool call(s) not run: at most "
                        f"{self.config.max_calls_per_turn} per turn]",
                    )  # fmt: skip
                )
                break
            if isinstance(item, ToolCallParseError):
                self.tool_errors += 1
                observations.append(self._tool_message("", item.message))
                continue
            ended = self._call(item, metadata, observations)
            if ended is not None:
                return ended
        return self._after_turn(observations, metadata)

    def _call(self, call: ToolCall, metadata: dict[str, Any], observations: list[dict[str, Any]]) -> Any:
        """Run one call; returns the step's output when it ends the episode, else ``None``."""
        name = call.name[:100]
        signature = json.dumps([call.name, call.arguments], sort_keys=True, default=str)
        self._repeats = self._repeats + 1 if signature == self._last_call else 1
        self._last_call = signature
        metadata["tool_calls"].append(name)
        if self._repeats >= self.config.max_repeats:
            observations.append(
                self._tool_message(name, f"[the same call {self._repeats} times in a row: the episode ends]")
            )
            return self._truncate("stuck_loop", observations, metadata)
        tool = self.tools.get(call.name)
        self.tool_calls += 1
        if tool is None:
            self.tool_errors += 1
            known = ", ".join(self.tools)
            observations.append(
                self._tool_message(name, f"Error: unknown tool {name!r}; the tools are {known}.")
            )
            return None
        output: ToolResult = tool.call(
            call.arguments, workspace=self._workspace, timeout_s=self.config.tool_timeout_s
        )
        if output.finish:
            return self._finish(output.content, metadata, observations)
        self.tool_errors += int(not output.ok)
        observations.append(self._tool_message(name, _cap(output.content, self.config.max_tool_output_chars)))
        if output.timed_out:
            self.tool_timeouts += 1
            if self.tool_timeouts >= self.config.max_tool_timeouts:
                return self._truncate("tool_timeouts", observations, metadata)
        return None

    def _tool_message(self, name: str, content: str) -> dict[str, Any]:
        message = {"role": "tool", "content": content}
        if name:
            message["name"] = name
        return message

    def _finish(
        self, answer: str, metadata: dict[str, Any], observations: list[dict[str, Any]]
    ) -> dict[str, Any]:
        output = self.inner.step(self.inner.finish_action(answer))
        inner_metadata = dict(output.get("metadata") or {})
        done = bool(output.get("done"))
        merged = {**inner_metadata, **metadata, "finish": True}
        if done:  # an inner environment made without the framework's guard does not name its end itself
            merged.setdefault("end", END_TERMINATED)
        observations = observations + list(output.get("observations") or [])
        if done:
            self.done = self.finished = True
            self.end_reason = inner_metadata.get("end")
            return {"observations": observations, "reward": float(output.get("reward", 0.0)), "done": True,
                    "metadata": merged}  # fmt: skip
        # the inner environment goes on (another attempt allowed): its feedback is the observation
        result = self._after_turn(observations, merged)
        result["reward"] = float(output.get("reward", 0.0)) + result["reward"]
        return result

    def _after_turn(self, observations: list[dict[str, Any]], metadata: dict[str, Any]) -> dict[str, Any]:
        self.context_size += sum(self._measure(str(m["content"])) for m in observations)
        if self.context_size >= self.config.max_context:
            return self._truncate("context", observations, metadata)
        if self.turns >= self.config.max_turns:
            return self._truncate("max_turns", observations, metadata)
        return {"observations": observations, "reward": 0.0, "done": False, "metadata": metadata}

    def _truncate(
        self, why: str, observations: list[dict[str, Any]], metadata: dict[str, Any]
    ) -> dict[str, Any]:
        self.done = True
        self.end_reason = why
        metadata.update(end=END_TRUNCATED, truncated_by=why)
        return {"observations": observations, "reward": 0.0, "done": True, "metadata": metadata}

    # -- references --------------------------------------------------------------------------------------
    def _reference_calls(self) -> list[str] | None:
        hook = getattr(self.inner, "reference_tool_calls", None)
        calls = hook() if callable(hook) else None
        if not calls:
            return None
        return [render_tool_call(call["name"], call.get("arguments", {})) for call in calls]

    def reference_action(self) -> str | None:
        """The inner environment's ``reference_tool_calls()`` as one action holding every call (``None``
        without them); it earns the full reward when they fit in ``max_calls_per_turn``."""
        calls = self._reference_calls()
        return None if calls is None else "".join(calls)

    def reference_episode(self) -> list[str] | None:
        """The inner environment's ``reference_tool_calls()``, one call per turn."""
        return self._reference_calls()

    # -- the end -----------------------------------------------------------------------------------------
    def close(self) -> None:
        self._workspace = None
        self.inner.close()

    def abandon(self) -> None:
        from skyrl_gym.core import abandon_quietly

        abandon_quietly(self.inner)

    def get_metrics(self) -> dict[str, Any]:
        """The inner environment's metrics and the loop's: ``react_turns``, ``react_tool_calls``,
        ``react_tool_errors``, ``react_tool_timeouts``, ``react_format_errors``, ``react_finished``,
        ``react_stuck_loop`` and ``react_context``."""
        getter = getattr(self.inner, "get_metrics", None)
        metrics = dict(getter() or {}) if callable(getter) else {}
        metrics.update(
            react_turns=self.turns,
            react_tool_calls=self.tool_calls,
            react_tool_errors=self.tool_errors,
            react_tool_timeouts=self.tool_timeouts,
            react_format_errors=self.format_errors,
            react_finished=self.finished,
            react_stuck_loop=self.end_reason == "stuck_loop",
            react_context=self.context_size,
        )
        return metrics

    def __str__(self) -> str:
        return f"ReActEnv<{self.inner}>"
