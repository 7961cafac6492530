"""``SearchEnv``: question answering with a search engine, in Search-R1's protocol (as SkyRL runs it).

Each turn the model writes some of:

- ``<think>...</think>``: its reasoning (free; not checked);
- ``<search> query </search>``: a search; the environment answers with the best passages::

      \\n<information>Doc 1(Title: "Paris") Paris is the capital of France.
      Doc 2(Title: ...) ...</information>\\n

- ``<answer> ... </answer>``: the final answer, which ends the episode.

The reward comes at the end: 1.0 when the answer equals one of the targets after normalisation (lowercase,
no punctuation, no articles, single spaces; see :mod:`.scoring`), else 0.0; with ``env_config.reward =
"f1"`` it is the best token F1 instead. When ``max_turns`` turns pass without an answer the episode ends as
truncated by ``max_turns`` with reward 0.0. A turn with neither tag gets an observation that restates the
protocol.

Retrieval runs locally over a JSONL corpus (BM25 by default; dense or hybrid on request) or through a
Search-R1 / SkyRL retrieval server (``search_url``). A task is a SkyRL dataset row:
``extras["reward_spec"]["ground_truth"] = {"target": [answers...]}``. Made without a task,
``reset(seed=...)`` draws a question from the bundled set (:mod:`.data`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from skyrl_gym.budget import END_TERMINATED, END_TRUNCATED
from skyrl_gym.core import Task
from skyrl_gym.envs.base_text_env import (
    BaseTextEnv,
    BaseTextEnvStepOutput,
    ConversationType,
    env_config_values,
    positive_int,
)
from skyrl_gym.envs.search.retrieval.base import RetrievalError, Retriever, clean_query, format_passages
from skyrl_gym.envs.search.scoring import compute_score, em_check, extract_answer, f1_score, targets_of
from skyrl_gym.tools import ToolGroup, tool
from skyrl_gym.tools.parsing import ToolCall, parse_tag_calls

__all__ = ["SearchConfig", "SearchEnv", "SearchToolGroup", "make_retriever"]

_METADATA_CHARS = 500
_RETRIEVERS = ("bm25", "dense", "hybrid", "remote")

INVALID_ACTION = (
    "\nNo search or answer found. To search, put a query between <search> and </search>. "
    "To give the final answer, put it between <answer> and </answer>.\n"
)
"""The observation for a turn that holds neither a ``<search>`` nor an ``<answer>`` block."""


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """The environment's settings (``env_config``); every field has a default. SkyRL's keys
    (``search_url``, ``topk``, ``timeout``, ``log_requests``) mean what they mean there."""

    retriever: str | None = None
    """``"bm25"``, ``"dense"``, ``"hybrid"`` or ``"remote"``; unset: ``"remote"`` when ``search_url`` is
    given (SkyRL's behaviour), else ``"bm25"``."""
    corpus_path: str | None = None
    """The JSONL corpus of the local retrievers; unset: the bundled corpus."""
    search_url: str | None = None
    """A Search-R1 / SkyRL retrieval server, e.g. ``http://127.0.0.1:8000/retrieve``."""
    topk: int = 3
    """Passages shown per search."""
    timeout: float = 30.0
    """Seconds one request to the search server may take."""
    retries: int = 3
    """Further attempts when the search server cannot be reached or fails (5xx)."""
    log_requests: bool = False
    """Log every request to the search server."""
    reward: str = "em"
    """``"em"``: 1.0 for an exact match after normalisation; ``"f1"``: the best token F1."""
    max_turns: int = 4
    """Turns per episode when the task's ``extras`` do not say (``extras["max_turns"]`` wins)."""
    dense_model: str = "all-MiniLM-L6-v2"
    """The embedding model of the dense and hybrid retrievers (a name or a folder)."""
    hybrid_weights: tuple[float, float] = (1.0, 1.0)
    """Weights of BM25 and dense in the hybrid retriever's reciprocal rank fusion."""
    rrf_k: float = 60.0
    """The rank offset of reciprocal rank fusion."""
    on_search_error: str = "error"
    """When the retriever fails (a search server down after its retries): ``"error"`` ends the episode with
    an error end, so the trainer leaves it out instead of teaching the model on a broken search;
    ``"observe"`` shows the failure to the model and goes on."""

    def __post_init__(self) -> None:
        if self.retriever is not None and self.retriever not in _RETRIEVERS:
            raise ValueError(
                f"env_config.retriever must be one of {', '.join(_RETRIEVERS)}, got {self.retriever!r}"
            )
        if self.retriever == "remote" and not self.search_url:
            raise ValueError(
                "env_config.retriever='remote' needs env_config.search_url, e.g. http://127.0.0.1:8000/retrieve"
            )
        if self.reward not in ("em", "f1"):
            raise ValueError(f"env_config.reward must be 'em' or 'f1', got {self.reward!r}")
        if self.on_search_error not in ("error", "observe"):
            raise ValueError(
                f"env_config.on_search_error must be 'error' or 'observe', got {self.on_search_error!r}"
            )
        for name in ("topk", "max_turns"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"env_config.{name} must be a positive integer, got {value!r}")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise ValueError(f"env_config.retries must be a non-negative integer, got {self.retries!r}")
        for name in ("timeout", "rrf_k"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ValueError(f"env_config.{name} must be a positive number, got {value!r}")
        if not isinstance(self.log_requests, bool):
            raise TypeError(f"env_config.log_requests must be true or false, got {self.log_requests!r}")
        weights = self.hybrid_weights
        if len(weights) != 2 or any(
            isinstance(w, bool) or not isinstance(w, (int, float)) or w < 0 for w in weights
        ):
            raise ValueError(
                f"env_config.hybrid_weights must be two weights >= 0 (bm25, dense), got {weights!r}"
            )

    @property
    def retriever_kind(self) -> str:
        """The retriever in use: ``retriever`` if set, else ``remote`` with a ``search_url``, else ``bm25``."""
        return self.retriever or ("remote" if self.search_url else "bm25")

    @classmethod
    def from_env_config(cls, env_config: Any) -> SearchConfig:
        """Read the fields from a dict, an OmegaConf ``DictConfig``, a dataclass or ``None``."""
        if isinstance(env_config, cls):
            return env_config
        values = env_config_values(env_config, cls, "search")
        if values.get("corpus_path") is not None:
            values["corpus_path"] = str(values["corpus_path"])
        if values.get("hybrid_weights") is not None:
            values["hybrid_weights"] = tuple(values["hybrid_weights"])
        return cls(**values)


def make_retriever(config: SearchConfig) -> Retriever:
    """The retriever ``config`` asks for, shared with every environment that asks for the same one."""
    from skyrl_gym.envs.search.retrieval import get_retriever

    kind = config.retriever_kind
    if kind == "remote":
        return get_retriever(
            "remote",
            search_url=config.search_url,
            timeout=config.timeout,
            retries=config.retries,
            log_requests=config.log_requests,
        )
    options: dict[str, Any] = {}
    if kind in ("dense", "hybrid"):
        options["model"] = config.dense_model
    if kind == "hybrid":
        options.update(weights=list(config.hybrid_weights), k=config.rrf_k)
    return get_retriever(kind, config.corpus_path, **options)


# -- the tool -------------------------------------------------------------------------------------------------
class SearchToolGroup(ToolGroup):
    """The ``search`` tool (SkyRL's ``SearchToolGroup``): the best ``topk`` passages for a query, as text.

    ``SearchToolGroup(retriever)`` searches with any :class:`Retriever`; ``SearchToolGroup(search_url)`` (or
    ``search_url=...``, SkyRL's form) asks a retrieval server; with neither, BM25 over the bundled corpus.
    A failed search returns ``"Search error: ..."`` instead of raising. ``last`` holds JSON-serialisable
    facts about the last call (the passage ids, the error) for the step's metadata.
    """

    def __init__(
        self,
        retriever: Retriever | str | None = None,
        topk: int = 3,
        timeout: float = 30.0,
        log_requests: bool = False,
        *,
        search_url: str | None = None,
        log_request: bool | None = None,
    ):
        super().__init__(name="SearchToolGroup")
        if log_request is not None:  # SkyRL's spelling
            log_requests = log_request
        if isinstance(retriever, str):
            retriever, search_url = None, retriever
        if retriever is None:
            from skyrl_gym.envs.search.retrieval import get_retriever

            if search_url:
                retriever = get_retriever(
                    "remote", search_url=search_url, timeout=timeout, log_requests=log_requests
                )
            else:
                retriever = get_retriever("bm25")
        if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
            raise ValueError(f"topk must be a positive integer, got {topk!r}")
        self.retriever = retriever
        self.topk = topk
        self.last: dict[str, Any] = {}

    @tool
    def search(self, query: str) -> str:
        """Search the corpus and return the best passages, one per line.

        Args:
            query: what to search for.
        """
        query = clean_query(query)
        if not query:
            self.last = {"doc_ids": [], "search_error": "empty query"}
            return "Search error: the query is empty."
        try:
            passages = self.retriever.search(query, self.topk)
        except RetrievalError as exc:
            self.last = {"doc_ids": [], "search_error": str(exc)}
            return f"Search error: {exc}"
        self.last = {"doc_ids": [p.id for p in passages], "search_error": None}
        if not passages:
            return "No passages found for this query."
        return format_passages(passages)


# -- the environment ------------------------------------------------------------------------------------------
class SearchEnv(BaseTextEnv):
    """Search-R1 question answering (SkyRL constructor: ``SearchEnv(env_config=None, extras=None)``).

    See the module docstring for the protocol and :class:`SearchConfig` for the settings. ``step``
    metadata holds the ``turn`` and the ``action`` (``search``, ``answer``, ``invalid``, or ``none`` on a last
    turn without an answer); for a search the
    ``query``, the ``doc_ids`` shown and ``search_error`` (``None`` when it worked), plus SkyRL's
    ``tool_group``/``tool_name``/``tool_input``; at the end the ``answer``, ``em``, ``f1`` and ``searches``.
    """

    protocol_tags = ("think", "search", "answer")

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.config = SearchConfig.from_env_config(env_config)
        reward_spec = self.extras.get("reward_spec")
        self.ground_truth = reward_spec.get("ground_truth") if isinstance(reward_spec, dict) else None
        self.targets = targets_of(self.ground_truth)
        max_turns = self.extras.get("max_turns")
        self.max_turns = positive_int(self.config.max_turns if max_turns is None else max_turns, "max_turns")
        self.chat_history: ConversationType = []
        self.searches = 0
        self.search_errors = 0
        self.answer: str | None = None
        self.em = 0.0
        self.f1 = 0.0
        self.tool_group: SearchToolGroup | None = None

    # -- tasks ------------------------------------------------------------------------------------------------
    def sample_task(self, seed: int | None = None) -> Task:
        """A question of the bundled test set, the same one for the same seed."""
        from skyrl_gym.envs.search import data

        return data.default_task(seed)

    def reference_action(self) -> str | None:
        """The first target as the answer; it always earns 1.0."""
        return f"<answer>{self.targets[0]}</answer>" if self.targets else None

    # -- the episode ------------------------------------------------------------------------------------------
    def _search_tools(self) -> SearchToolGroup:
        if self.tool_group is None:
            self.tool_group = SearchToolGroup(make_retriever(self.config), topk=self.config.topk)
            self.init_tool_groups([self.tool_group])
        return self.tool_group

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        if not self.targets:
            raise ValueError(
                "SearchEnv needs the answers: make it with extras={'reward_spec': {'method': 'rule', "
                "'ground_truth': {'target': ['Paris']}}}, or start it with reset(seed=...) to draw a bundled task"
            )
        tools = self._search_tools()  # builds or loads the index now, not inside a timed step
        return prompt, {
            "retriever": tools.retriever.kind,
            "topk": self.config.topk,
            "max_turns": self.max_turns,
        }

    def _execute_tool(self, tool_group_name: str, tool_name: str, tool_input: Any) -> str:
        """Run the tool and wrap its output in ``<information>`` tags, as SkyRL's search environment does."""
        output = super()._execute_tool(tool_group_name, tool_name, tool_input)
        return f"\n<information>{str(output).strip()}</information>\n"

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        text = action if isinstance(action, str) else ""
        self.chat_history.append({"role": "assistant", "content": text})
        metadata: dict[str, Any] = {"turn": self.turns}
        answer = extract_answer(text)
        if answer is not None:
            return self._finish(text, answer, metadata)
        if self.turns >= self.max_turns:
            metadata.update(
                action="none",
                searches=self.searches,
                em=0.0,
                f1=0.0,
                end=END_TRUNCATED,
                truncated_by="max_turns",
            )
            return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, metadata=metadata)
        calls = parse_tag_calls(text, "search")
        call = next((c for c in calls if isinstance(c, ToolCall)), None)
        if call is not None:
            content = self._search(call.arguments["input"], metadata)
        elif calls:
            metadata["action"] = "invalid"
            content = f"\n{calls[0].message}, or give the final answer as <answer>...</answer>.\n"
        else:
            metadata["action"] = "invalid"
            content = INVALID_ACTION
        observation = {"role": "user", "content": content}
        self.chat_history.append(observation)
        return BaseTextEnvStepOutput(observations=[observation], reward=0.0, done=False, metadata=metadata)

    def _search(self, raw_query: str, metadata: dict[str, Any]) -> str:
        query = clean_query(raw_query)
        metadata.update(action="search", query=query[:_METADATA_CHARS])
        if not query:
            metadata.update(doc_ids=[], search_error="empty query")
            return "\nThe <search> block is empty: put a query between <search> and </search>.\n"
        tools = self._search_tools()
        self.searches += 1
        content = self._execute_tool("SearchToolGroup", "search", [query])
        metadata.update(
            tools.last, tool_group="SearchToolGroup", tool_name="search", tool_input=[query[:_METADATA_CHARS]]
        )
        if tools.last.get("search_error"):
            self.search_errors += 1
            if self.config.on_search_error == "error":
                raise RetrievalError(tools.last["search_error"])
        return content

    def _finish(self, text: str, answer: str, metadata: dict[str, Any]) -> BaseTextEnvStepOutput:
        self.answer = answer
        self.em = float(em_check(answer, self.targets))
        self.f1 = f1_score(answer, self.targets)
        reward = compute_score(text, self.targets, metric=self.config.reward)
        metadata.update(
            action="answer",
            answer=answer[:_METADATA_CHARS],
            em=self.em,
            f1=self.f1,
            searches=self.searches,
            end=END_TERMINATED,
        )
        return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata=metadata)

    # -- metrics ----------------------------------------------------------------------------------------------
    def get_metrics(self) -> dict[str, Any]:
        """``turns``, ``searches`` made, ``search_errors``, whether the episode ``answered``, its ``em`` and ``f1``."""
        return {
            "turns": self.turns,
            "searches": self.searches,
            "search_errors": self.search_errors,
            "answered": self.answer is not None,
            "em": self.em,
            "f1": self.f1,
        }
