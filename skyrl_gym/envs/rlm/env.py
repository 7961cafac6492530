"""``BaseRLMEnv`` and ``RLMEnv``: recursive language model episodes, SkyRL's ``rlm`` protocol.

The model answers a query about a long ``context`` that it never sees whole: the context lives in a Python
REPL (:class:`~skyrl_gym.envs.rlm.repl.PersistentREPL`, sandboxed), and each turn the model writes code in a
```` ```repl ```` block that runs there. With an ``lm_callback`` in the extras (the trainer supplies it, as
SkyRL's RLM generator does) the code can call a language model on pieces of the context (``llm_query``,
``llm_query_batched``) and, with a ``subcall_fn``, hand sub-tasks to child agents with REPLs of their own
(``rlm_query``, ``rlm_query_batched``).

A turn, as in SkyRL:

- a reply without a ```` ```repl ```` block is told how to write one (a ``FINAL(...)`` line alone does not
  count);
- otherwise the last block runs; the episode ends with the final answer if the code called ``FINAL_VAR``
  or the reply has a line ``FINAL_VAR(name)`` (the variable's value) or ``FINAL(answer)``, scored by
  :meth:`BaseRLMEnv._get_reward`;
- otherwise the observation is the code and the REPL's output (cut at 20,000 characters), followed by the
  next turn's instruction; after ``max_turns`` turns without an answer the episode ends as truncated, reward 0.

The per-turn instruction is ephemeral, as in SkyRL: ``init`` returns ``[system, context description,
instruction]`` and each observation ends with the next instruction; ``step`` removes the previous one from
the conversation list ``init`` returned when that list (the generator's chat history, in SkyRL) still ends
with it.

Extras (SkyRL's names): ``max_turns`` (10), ``repl_timeout`` (seconds per cell, 180), ``lm_callback``,
``subcall_fn``, ``depth`` (of a child rollout), ``extra_info.context_text`` (the context; a JSON object
string becomes a dict; without it the prompt is the context) and ``reward_spec``.

Where this differs from SkyRL, on purpose: the code runs in a sandbox, not in the trainer's interpreter (see
:mod:`.repl` for what that changes: one namespace for the whole REPL, tools on the host, variables by name);
``step()`` before ``init()`` starts the REPL from the extras alone; every step's metadata says what happened.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from skyrl_gym.budget import END_TERMINATED, END_TRUNCATED
from skyrl_gym.core import Task
from skyrl_gym.envs.base_text_env import (
    BaseTextEnv,
    BaseTextEnvStepOutput,
    ConversationType,
    positive_int,
    task_ground_truth,
)
from skyrl_gym.envs.rlm import tasks
from skyrl_gym.envs.rlm.parsing import (
    find_code_block,
    find_final,
    find_final_var,
    format_context_metadata,
    format_execution_result,
    format_tools_for_prompt,
)
from skyrl_gym.envs.rlm.prompts import (
    DEFAULT_RLM_SYSTEM_PROMPT,
    LM_TOOLS_SECTION,
    NO_CODE_BLOCK,
    build_user_prompt,
    code_observation,
)
from skyrl_gym.envs.rlm.repl import PersistentREPL, REPLResult, _iter_tool_entries
from skyrl_gym.settings import Count, Flag, Name, PositiveNumber, read_settings, settings

__all__ = [
    "DEFAULT_RLM_SYSTEM_PROMPT",
    "BaseRLMEnv",
    "PersistentREPL",
    "REPLResult",
    "RLMEnv",
    "RLMEnvConfig",
    "answers_match",
    "normalise_answer",
]

MAX_CODE_CHARS = 1_000_000
"""A longer ```` ```repl ```` block is not run (the observation says so)."""


@settings(frozen=True)
class RLMEnvConfig:
    """The environment's settings (``env_config``); every field has a default. Per-row settings (turns,
    the cell timeout, the callbacks) come from the extras, as in SkyRL."""

    sandbox: Name = "auto"
    """Where the REPL runs: ``"auto"`` (the strongest sandbox here), ``"bwrap"`` or ``"process"``."""
    memory_mb: Count = 1024
    """Memory of the REPL's interpreter (the context lives there too)."""
    restricted_builtins: Flag = True
    """SkyRL's builtins table in the REPL (no import, open, eval...); ``False``: all of Python, still inside
    the sandbox."""
    max_lm_calls: Count = 1024
    """Prompts an episode's REPL may send to the LM (each ``rlm_query`` counts one); past it the LM functions
    answer with an error string."""
    repl_timeout_s: PositiveNumber = 180.0
    """Seconds one cell may run when the row's ``repl_timeout`` does not say (SkyRL's default). Keep it
    below the registered step budget (240 s for ``rlm``)."""

    @classmethod
    def from_env_config(cls, env_config: Any) -> RLMEnvConfig:
        """Read the fields from a dict, an OmegaConf ``DictConfig``, a dataclass or ``None``."""
        return read_settings(cls, env_config, "rlm")


class BaseRLMEnv(BaseTextEnv):
    """The RLM episode loop (SkyRL's ``BaseRLMEnv``): REPL set-up, turns, ``FINAL``/``FINAL_VAR``.

    Subclasses make a task of it through three hooks, as in SkyRL:

    - ``_get_reward(final_answer)``: the score of a final answer (here: 1.0 for any non-empty answer,
      SkyRL's placeholder; :class:`RLMEnv` compares with the ground truth);
    - ``_get_system_prompt()``: the system prompt, where ``{custom_tools_section}`` lists the LM functions
      and the custom tools;
    - ``_get_repl_tools()``: ``{name: callable or value}`` for the REPL, called once the context is known
      (``self._context``), so closures can use it. Callables run on the host when the code calls them.

    The module docstring describes a turn and the extras. ``self.repl`` is the episode's
    :class:`~skyrl_gym.envs.rlm.repl.PersistentREPL` (``None`` before ``init``).
    """

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.config = RLMEnvConfig.from_env_config(env_config)
        self.max_turns = positive_int(self.extras.get("max_turns", tasks.DEFAULT_MAX_TURNS), "max_turns")
        timeout = self.extras.get("repl_timeout", self.config.repl_timeout_s)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            raise ValueError(f"extras['repl_timeout'] must be a positive number of seconds, got {timeout!r}")
        self.repl_timeout = float(timeout)
        self.lm_callback = self.extras.get("lm_callback")
        self.subcall_fn = self.extras.get("subcall_fn")
        for name in ("lm_callback", "subcall_fn"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ValueError(f"extras[{name!r}] must be callable, got {type(value).__name__}")
        self.repl: PersistentREPL | None = None
        self._context: Any = None
        self._root_prompt: str = ""
        self._tools: dict[str, Any] = {}
        self._final_answer: str | None = None
        self._reward = 0.0
        self._turn_index = 0
        self._chat_history_ref: ConversationType | None = None
        self._pending_prompt: dict[str, str] | None = None

    # -- the hooks --------------------------------------------------------------------------------------
    def _get_reward(self, final_answer: str) -> float:
        """The score of a final answer (only called when there is one). Subclasses override it."""
        return 1.0 if final_answer else 0.0

    def _get_system_prompt(self) -> str:
        """The system prompt template (may contain ``{custom_tools_section}``)."""
        return DEFAULT_RLM_SYSTEM_PROMPT

    def _get_repl_tools(self) -> dict[str, Any]:
        """Task-specific REPL tools ``{name: callable or value}`` (or ``{name: {"tool", "description"}}``)."""
        return {}

    # -- the episode ------------------------------------------------------------------------------------
    def _context_payload(self, root_prompt: str) -> Any:
        extra_info = self.extras.get("extra_info")
        payload = extra_info.get("context_text") if isinstance(extra_info, Mapping) else None
        payload = payload or root_prompt
        if isinstance(payload, str):
            try:
                decoded = json.loads(payload)
            except (ValueError, RecursionError):
                decoded = None
            if isinstance(decoded, dict):
                payload = decoded
        return payload

    def _make_repl(self) -> PersistentREPL:
        """The episode's REPL (override to choose another sandbox or limits)."""
        return PersistentREPL(
            timeout=self.repl_timeout,
            custom_tools=self._tools,
            lm_callback=self.lm_callback,
            subcall_fn=self.subcall_fn,
            sandbox=self.config.sandbox,
            memory_mb=self.config.memory_mb,
            restricted_builtins=self.config.restricted_builtins,
            max_lm_calls=self.config.max_lm_calls,
        )

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        root_prompt = "\n".join(
            str(m["content"]) for m in prompt or [] if isinstance(m, Mapping) and m.get("content")
        )
        self._root_prompt = root_prompt
        self._context = self._context_payload(root_prompt)
        self._tools = dict(self._get_repl_tools() or {})
        if self.repl is not None:
            self.repl.cleanup()
        self.repl = self._make_repl()
        self.repl.add_context(self._context, context_index=0)
        self.turns = 0
        self._turn_index = 0
        self._final_answer = None
        self._reward = 0.0
        first = build_user_prompt(root_prompt, iteration=0)
        messages = [
            {"role": "system", "content": self._build_system_prompt()},
            {"role": "user", "content": format_context_metadata(self._context)},
            first,
        ]
        # SkyRL's generator keeps this very list as the chat history: step() removes the stale instruction
        self._chat_history_ref, self._pending_prompt = messages, first
        return messages, {}

    def _build_system_prompt(self) -> str:
        section = LM_TOOLS_SECTION if self.lm_callback is not None else ""
        if self._tools:
            listed = format_tools_for_prompt(list(_iter_tool_entries(self._tools)))
            if listed:
                number = 5 if self.lm_callback is not None else 4
                section += f"\n{number}. Custom tools and data available in the REPL:\n{listed}"
        return self._get_system_prompt().replace("{custom_tools_section}", section)

    def _drop_stale_prompt(self) -> None:
        history, pending = self._chat_history_ref, self._pending_prompt
        if history and pending is not None and (history[-1] is pending or history[-1] == pending):
            history.pop()
        self._pending_prompt = None

    def step(self, action: str) -> BaseTextEnvStepOutput:
        if self.repl is None:
            self.init([])
        assert self.repl is not None
        self.turns += 1
        self._turn_index += 1
        self._drop_stale_prompt()
        text = action if isinstance(action, str) else ""
        done = self.turns >= self.max_turns
        metadata: dict[str, Any] = {"turn": self.turns, "action": "none", "final_answer": None}
        code = find_code_block(text)
        if code is None:
            return self._output([{"role": "user", "content": NO_CODE_BLOCK}], done, metadata)
        metadata["action"] = "code"
        if len(code) > MAX_CODE_CHARS:
            notice = f"[The ```repl``` block has {len(code)} characters; at most {MAX_CODE_CHARS} are run.]"
            return self._output([{"role": "user", "content": notice}], done, metadata)
        result = self.repl.execute(code)
        metadata["repl"] = {
            "timed_out": result.timed_out,
            "crashed": result.crashed,
            "restarted": result.restarted,
            "backend": self.repl.backend,
        }
        final_answer = result.final_answer or self._final_from_text(text)
        if final_answer is not None:
            self._final_answer = final_answer
            self._reward = float(self._get_reward(final_answer))
            metadata.update(action="final", final_answer=final_answer)
            return self._output([], True, metadata)
        if done:
            return self._output([], True, metadata)
        shown = format_execution_result(result.stdout, result.stderr, result.variables)
        return self._output([{"role": "user", "content": code_observation(code, shown)}], False, metadata)

    def _final_from_text(self, text: str) -> str | None:
        """``FINAL_VAR(name)`` (the variable's value, read in the REPL) or ``FINAL(answer)`` in the reply."""
        assert self.repl is not None
        name = find_final_var(text)
        if name is not None:
            name = name.strip().strip('"').strip("'")
            answer = self.repl.execute(f"print(FINAL_VAR({name!r}))").stdout.strip()
            if not answer or ("Variable '" in answer and "' not found" in answer and "FINAL_VAR" in answer):
                return None
            return answer
        return find_final(text)

    def _output(
        self, observations: list[dict[str, str]], done: bool, metadata: dict[str, Any]
    ) -> BaseTextEnvStepOutput:
        if done:
            if self._final_answer is not None:
                metadata["end"] = END_TERMINATED
            else:
                metadata.update(end=END_TRUNCATED, truncated_by="max_turns")
        else:
            self._pending_prompt = build_user_prompt(self._root_prompt, self._turn_index)
            observations = [*observations, self._pending_prompt]
        return BaseTextEnvStepOutput(
            observations=observations,
            reward=self._reward if done else 0.0,
            done=done,
            metadata=metadata,
        )

    def abandon(self) -> None:
        """Kill the REPL's interpreter now (a step given up on returns soon); ``close`` follows."""
        repl = getattr(self, "repl", None)
        if repl is not None:
            repl.abandon()

    def close(self) -> None:
        repl = getattr(self, "repl", None)
        if repl is not None:
            repl.cleanup()
            self.repl = None

    # -- metrics ----------------------------------------------------------------------------------------
    def get_metrics(self) -> dict[str, Any]:
        """SkyRL's ``turns_used``, ``final_value_set``, ``final_answer`` and ``reward``, plus the REPL's
        ``repl_cells``, ``repl_timeouts``, ``repl_restarts`` and ``lm_calls``."""
        repl = self.repl
        return {
            "turns_used": self.turns,
            "final_value_set": self._final_answer is not None,
            "final_answer": self._final_answer,
            "reward": self._reward,
            "repl_cells": repl.cells if repl else 0,
            "repl_timeouts": repl.timeouts if repl else 0,
            "repl_restarts": repl.restarts if repl else 0,
            "lm_calls": repl.lm_calls if repl else 0,
        }


def normalise_answer(value: Any) -> str:
    """An answer as compared: stripped of quotes and a final full stop, case-folded, spaces collapsed."""
    text = str(value).strip()
    for _ in range(3):
        text = text.strip().strip("\"'`").strip()
        if text.endswith(".") and not text[:-1].rstrip().endswith("."):
            text = text[:-1]
    return re.sub(r"\s+", " ", text).casefold().strip()


def answers_match(answer: str, ground_truth: Any) -> bool:
    """Whether ``answer`` is the ground truth (or one of a list of them): the same text after
    :func:`normalise_answer`, or the same number."""
    truths = ground_truth if isinstance(ground_truth, (list, tuple)) else [ground_truth]
    given = normalise_answer(answer)
    for truth in truths:
        expected = normalise_answer(truth)
        if given == expected:
            return True
        try:
            if math.isclose(float(given.replace(",", "")), float(expected.replace(",", "")), rel_tol=1e-9):
                return True
        except (ValueError, OverflowError):
            continue
    return False


_REACH = "g = FINAL_VAR.__func__.__globals__\nch = FINAL_VAR.__self__.channel\n"
"""How code in the REPL reaches the driver's module and its channel despite the builtins table."""


class RLMEnv(BaseRLMEnv):
    """The registered ``rlm`` environment: a long-context question answered through the REPL, reward 1.0
    when the final answer matches the ground truth (:func:`answers_match`), else 0.0.

    A row needs ``reward_spec.ground_truth`` (a missing one is a ``ValueError`` when the environment is
    made) and usually ``extra_info.context_text``. Made without extras, ``reset(seed=...)`` draws a bundled
    logbook task (:mod:`skyrl_gym.envs.rlm.tasks`).
    """

    hostile_actions = tuple(
        f"```repl\n{_REACH}{code}\n```"
        for code in (
            'g["os"]._exit(3)',  # the interpreter dies
            'g["os"].write(ch.write_fd, b"not a frame at all")',  # garbage on the channel
            'body = b"[" * 200000\ng["os"].write(ch.write_fd, b"SKYRL%010d\\n" % len(body) + body)',  # deep JSON
            'g["os"].write(ch.write_fd, b"SKYRL9999999999\\n")',  # a 10 GB frame announced
            'ch.send({"op": "done", "seq": FINAL_VAR.__self__.seq, "stdout": 5})',  # a forged, malformed result
            'ch.send({"op": "call", "seq": FINAL_VAR.__self__.seq, "id": 1, "fn": "open", "args": [], "kwargs": {}})',
            'g["os"].close(ch.read_fd)',  # the driver's reader is gone: the next cell finds it dead
            'x = b"a" * (4 * 1024 ** 3)',  # past the memory limit
        )
    )
    """REPL code that breaks the REPL's interpreter or its protocol from inside (SkyRL's builtins table does not
    stop it: the scaffold functions lead to the driver's module). Each must end as the model's failure: an
    observation saying the REPL was restarted, never an environment error."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.ground_truth = task_ground_truth(extras, "rlm")

    def _get_reward(self, final_answer: str) -> float:
        return 1.0 if answers_match(final_answer, self.ground_truth) else 0.0

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        if self.ground_truth is None:
            raise ValueError(
                "the rlm environment needs a task: make it with extras={'reward_spec': {'method': 'rule', "
                "'ground_truth': ...}, 'extra_info': {'context_text': ...}}, or start it with "
                "reset(seed=...) to draw a bundled logbook task"
            )
        return super().init(prompt)

    def sample_task(self, seed: int | None = None) -> Task:
        """A bundled logbook task, the same one for the same seed."""
        return tasks.default_task(seed, max_turns=tasks.DEFAULT_MAX_TURNS)  # type: ignore[return-value]

    def reference_action(self) -> str | None:
        """Code that finds the answer in ``context`` and returns it with ``FINAL_VAR`` (for a bundled task),
        or that returns the ground truth itself (for any other row)."""
        if self.ground_truth is None:
            return None
        extra_info = self.extras.get("extra_info")
        code = extra_info.get("reference_code") if isinstance(extra_info, Mapping) else None
        if not isinstance(code, str):
            truth = (
                self.ground_truth[0] if isinstance(self.ground_truth, (list, tuple)) else self.ground_truth
            )
            code = f'answer = {str(truth)!r}\nFINAL_VAR("answer")'
        return f"Let me search the context in the REPL.\n```repl\n{code}\n```"
