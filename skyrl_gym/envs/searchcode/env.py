"""``SearchCodeEnv`` (SkyRL's ``searchcode``): a search tool and a Python tool, one call per turn.

Protocol, SkyRL's byte for byte:

- a turn calls a tool as ``<tool><search>query</search></tool>`` or ``<tool><python>code</python></tool>``
  (:meth:`SearchCodeEnv._parse_action`); the observation is the tool's text as a user message: the search
  tool's answer, or what the program printed (``Error executing Python code: ...`` for an error, see
  :mod:`skyrl_gym.tools.python`), and none when the program printed nothing;
- a turn without a tool call gets SkyRL's error text as the observation: ``No <tool>...</tool> block found in
  action string.``, ``No valid inner tool tag found inside <tool> block.`` or ``Tool 'x' not found in any
  registered tool group.``;
- the episode ends on a turn holding ``<solution>`` and ``</solution>`` (no tool runs then) or after
  ``max_turns`` turns (``extras["max_turns"]``, else ``env_config.max_turns``: 2, SkyRL's default). Only then
  is there a reward: the GSM8K strict score (:mod:`skyrl_gym.envs.gsm8k.scoring`) of the whole conversation so
  far, the model's turns and the observations joined by newlines: 1.0 when the first ``#### N`` in it equals
  the ground truth, else 0.0. An end by ``max_turns`` without a solution is named truncated.

Step metadata (SkyRL's): ``tool_group``, ``tool_name``, ``tool_input`` (the argument list; ``""`` when the turn
had no valid call) and ``tools`` (the names of each group's tools).

Python runs in this project's sandbox, never in the host interpreter. Search uses the local retriever over
the bundled corpus (BM25) unless ``env_config.search_url`` names a retrieval server (SkyRL's tool asks
``http://127.0.0.1:8000/retrieve``). A sandbox that cannot start and a budget that runs out end the episode
(error, truncated) instead of becoming observations. Made without extras, ``reset(seed=...)`` draws a question
from :mod:`.tasks`.
"""

from __future__ import annotations

import bisect
import re
from typing import Any

from skyrl_gym.budget import END_TRUNCATED
from skyrl_gym.core import Task
from skyrl_gym.envs.base_text_env import (
    BaseTextEnv,
    BaseTextEnvStepOutput,
    ConversationType,
    positive_int,
    task_ground_truth,
)
from skyrl_gym.envs.gsm8k import scoring
from skyrl_gym.envs.searchcode import tasks
from skyrl_gym.errors import BudgetExceeded
from skyrl_gym.settings import Count, Name, PathText, PositiveNumber, read_settings, settings
from skyrl_gym.tools import PythonCodeExecutorToolGroup, SearchToolGroup
from skyrl_gym.tools.python import SandboxUnavailable

__all__ = ["SearchCodeConfig", "SearchCodeEnv"]

NO_TOOL_BLOCK = "No <tool>...</tool> block found in action string."
NO_INNER_TAG = "No valid inner tool tag found inside <tool> block."
_LOCAL_RETRIEVERS = ("bm25", "dense", "hybrid")
_OPENING = re.compile(r"<(\w+)>")
_CLOSING = re.compile(r"</(\w+)>")


@settings(frozen=True)
class SearchCodeConfig:
    """The settings of ``searchcode`` (``env_config``); every field has a default."""

    max_turns: Count = 2
    """Turns per episode when the row does not say (``extras["max_turns"]`` wins); SkyRL's default."""
    search_url: Name | None = None
    """A retrieval server (SkyRL's API, e.g. ``http://127.0.0.1:8000/retrieve``); ``None``: the local one."""
    retriever: str = "bm25"
    """The local retriever: ``"bm25"``, ``"dense"`` or ``"hybrid"`` (see the ``search`` environment)."""
    corpus_path: PathText | None = None
    """The JSONL corpus of the local retriever; ``None``: the bundled one."""
    topk: Count = 3
    """Passages per search."""
    search_timeout: PositiveNumber = 30.0
    """Seconds one request to the retrieval server may take."""
    python_timeout: PositiveNumber = 10.0
    """Seconds one Python call may run (SkyRL's tool default)."""
    sandbox: Name = "auto"
    """The sandbox backend of the Python tool: ``"auto"`` (the strongest available), ``"bwrap"``..."""

    def __post_init__(self) -> None:
        if self.retriever not in _LOCAL_RETRIEVERS:
            raise ValueError(
                f"env_config.retriever must be one of {', '.join(_LOCAL_RETRIEVERS)}, got {self.retriever!r}"
            )

    @classmethod
    def from_env_config(cls, env_config: Any) -> SearchCodeConfig:
        """Read the fields from a dict, an OmegaConf ``DictConfig``, a dataclass or ``None``."""
        return read_settings(cls, env_config, "searchcode")


class LocalPassages:
    """A local retriever that is built (or loaded from its saved index) on first use, not when the
    environment is made: ``search(query, topk)`` as the search tool expects."""

    def __init__(self, kind: str = "bm25", corpus_path: str | None = None):
        self.kind = kind
        self.corpus_path = corpus_path

    def retriever(self) -> Any:
        """The shared retriever (one per process per kind and corpus)."""
        from skyrl_gym.envs.search.retrieval import get_retriever

        return get_retriever(self.kind, self.corpus_path)

    def search(self, query: str, topk: int = 3) -> list[Any]:
        """The ``topk`` best passages for ``query``."""
        return self.retriever().search(query, topk)


def _search_tools(config: SearchCodeConfig) -> Any:
    if config.search_url:
        return SearchToolGroup(
            search_url=config.search_url, topk=config.topk, timeout=config.search_timeout, log_requests=False
        )
    return SearchToolGroup(retriever=LocalPassages(config.retriever, config.corpus_path), topk=config.topk)


def _inner_call(content: str) -> tuple[str, str] | None:
    """The first ``<name>...</name>`` of ``content`` (the leftmost opening tag that is closed later, up to its
    first closing tag): SkyRL's ``<(\\w+)>(.*?)</\\1>``, in time linear in the text rather than quadratic."""
    closings: dict[str, list[int]] = {}
    for found in _CLOSING.finditer(content):
        closings.setdefault(found.group(1), []).append(found.start())
    for found in _OPENING.finditer(content):
        positions = closings.get(found.group(1))
        if not positions:
            continue
        at = bisect.bisect_left(positions, found.end())
        if at < len(positions):
            return found.group(1), content[found.end() : positions[at]]
    return None


class SearchCodeEnv(BaseTextEnv):
    """SkyRL's search-and-code environment (constructor: ``SearchCodeEnv(env_config=None, extras=None)``).

    See the module docstring for the protocol; ``chat_history`` holds the model's turns and the observations.
    """

    protocol_tags = ("tool", "search", "python", "solution")
    stop_strings = ("</tool>", "</solution>")
    """A turn ends once it closes its tool call or the solution."""
    hostile_actions = tuple(
        f"<tool><python>{code}</python></tool>"
        for code in (
            # no fork bomb and no kill of the parent: the process backend (no bwrap) would not contain them
            "import os, signal; os.killpg(0, signal.SIGKILL)",  # kill everything in the run
            "x = bytearray(10**10)",  # ten gigabytes
            "print('x' * 10**8)",  # a hundred megabytes of output
            "import os; os.close(1); os.close(2)",  # no pipes left
            "1+" * 60_000 + "1",  # more code than one argument may hold
        )
    ) + ("<tool><search>" + "the of and a " * 40_000 + "</search></tool>",)  # half a megabyte of stopwords
    """Calls a model might write that strain the tools; each must end as an observation, never in error."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.config = SearchCodeConfig.from_env_config(env_config)
        self.ground_truth = task_ground_truth(extras, "SearchCodeEnv")
        max_turns = self.extras.get("max_turns")
        self.max_turns = positive_int(self.config.max_turns if max_turns is None else max_turns, "max_turns")
        self.search_tools = _search_tools(self.config)
        self.python_tools = PythonCodeExecutorToolGroup(
            timeout=self.config.python_timeout, sandbox=self.config.sandbox
        )
        self.init_tool_groups([self.search_tools, self.python_tools])
        self.chat_history: ConversationType = []

    # -- tasks ----------------------------------------------------------------------------------------
    def sample_task(self, seed: int | None = None) -> Task:
        """A question from the offline task set, the same one for the same seed."""
        return tasks.task_for_seed(seed)

    def reference_action(self) -> str | None:
        """``"<solution>#### <ground truth></solution>"``, which ends the episode with 1.0."""
        return None if self.ground_truth is None else f"<solution>#### {self.ground_truth}</solution>"

    # -- the protocol ---------------------------------------------------------------------------------
    def _parse_action(self, action: str) -> tuple[str, str, list[str]]:
        """``(tool group, tool name, [tool input])`` of the turn's ``<tool><name>input</name></tool>`` call.

        Raises ``ValueError`` with SkyRL's message when the turn has no ``<tool>`` block, no tag inside it, or
        names a tool no group has.
        """
        start = action.find("<tool>")
        end = action.find("</tool>", start + len("<tool>")) if start >= 0 else -1
        if end < 0:
            raise ValueError(NO_TOOL_BLOCK)
        call = _inner_call(action[start + len("<tool>") : end].strip())
        if call is None:
            raise ValueError(NO_INNER_TAG)
        tool_name, tool_input = call[0], call[1].strip()
        if tool_name not in self.tool_to_toolgroup:
            raise ValueError(f"Tool '{tool_name}' not found in any registered tool group.")
        return self.tool_to_toolgroup[tool_name], tool_name, [tool_input]

    def _is_done(self, action: str) -> bool:
        return self.turns >= self.max_turns or ("<solution>" in action and "</solution>" in action)

    def _get_reward(self, action: str, done: bool) -> float:
        if not done:
            return 0.0
        return scoring.compute_score("\n".join(m["content"] for m in self.chat_history), self.ground_truth)

    # -- the episode ----------------------------------------------------------------------------------
    def _require_task(self) -> None:
        if self.ground_truth is None:
            raise ValueError(
                "SearchCodeEnv needs a ground truth: make it with extras={'reward_spec': {'method': 'rule', "
                "'ground_truth': '42'}}, or start it with reset(seed=...) to draw a question"
            )

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        self._require_task()
        search = self.search_tools.retriever
        if isinstance(search, LocalPassages):
            search.retriever()  # build or load the index now, not inside a timed step
        return prompt, {"max_turns": self.max_turns}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self._require_task()
        text = action if isinstance(action, str) else ""
        self.turns += 1
        self.chat_history.append({"role": "assistant", "content": text})
        done = self._is_done(text)
        reward = self._get_reward(text, done)
        if done:
            metadata: dict[str, Any] = {}
            if "<solution>" not in text or "</solution>" not in text:
                metadata.update(end=END_TRUNCATED, truncated_by="max_turns")
            return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata=metadata)

        group = name = None
        tool_input: Any = ""
        try:
            group, name, tool_input = self._parse_action(text)
            observation, error = self._execute_tool(group, name, tool_input), None
        except (BudgetExceeded, SandboxUnavailable):
            raise  # a budget or the infrastructure, not the model's turn: the framework ends the episode
        except Exception as exc:  # SkyRL shows any failure of the call to the model
            observation, error = None, str(exc)
            group = name = None
            tool_input = ""
        content = observation if observation else error
        new_observations = [{"role": "user", "content": str(content)}] if content else []
        self.chat_history.extend(new_observations)
        metadata = {
            "tool_group": group,
            "tool_name": name,
            "tool_input": tool_input,
            "tools": [g.get_tool_names() for g in self.tool_groups],
        }
        return BaseTextEnvStepOutput(
            observations=new_observations, reward=reward, done=False, metadata=metadata
        )
