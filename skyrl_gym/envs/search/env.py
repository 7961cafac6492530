"""``SearchEnv``: question answering with a search engine, in SkyRL's search protocol (Search-R1's tags).

Each turn the model writes some of:

- ``<think>...</think>``: its reasoning (free; not checked);
- ``<search> query </search>``: a search; the environment answers with the ``search`` tool's result,
  SkyRL's way::

      \\n<information>{"result": "Doc 1: \\"Paris\\"\\nParis is the capital of France.\\nDoc 2: ..."}</information>\\n

  ``{"result": "No search results found."}`` when nothing matched, ``{"result": "Search error: ..."}`` when
  the search failed (the episode goes on), and an empty ``\\n<information></information>\\n`` for a turn
  without a complete ``<search>...</search>`` block;
- ``<answer> ... </answer>``: the final answer, which ends the episode.

The reward comes at the end (SkyRL's ``compute_score`` over the whole conversation): 1.0 when the last
``<answer>`` block equals one of the targets after normalisation (lowercase, no punctuation, no articles,
single spaces; see :mod:`.scoring`), else 0.0 (no format score); with ``env_config.reward = "f1"`` it is
the best token F1 instead. When ``max_turns`` turns pass without an answer the episode ends as truncated by
``max_turns``.

Retrieval runs locally over a JSONL corpus (BM25 by default; dense or hybrid on request) or through a
SkyRL / Search-R1 retrieval server (``search_url``). A task is a SkyRL dataset row:
``extras["reward_spec"]["ground_truth"] = {"target": [answers...]}``. Made without a task,
``reset(seed=...)`` draws a question from the bundled set (:mod:`.tasks`).

Settings that keep this project's other behaviours (see :class:`SearchConfig`): ``on_search_error="error"``
ends the episode as an error when the retriever fails, ``invalid_action="explain"`` tells the model what was
wrong with a turn, ``observation_format="search_r1"`` shows plain ``Doc 1(Title: ...)`` lines, and
``request_format="search_r1"`` speaks to a Search-R1 server.
"""

from __future__ import annotations

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
from skyrl_gym.envs.search.retrieval.base import RetrievalError, Retriever
from skyrl_gym.envs.search.scoring import compute_score, em_check, extract_answer, f1_score, targets_of
from skyrl_gym.errors import BudgetExceeded
from skyrl_gym.settings import (
    Count,
    Flag,
    NonNegativeInt,
    NonNegativeNumber,
    PathText,
    PositiveNumber,
    read_settings,
    settings,
)
from skyrl_gym.tools.parsing import ToolCallParseError, parse_tag_calls
from skyrl_gym.tools.search import OBSERVATION_FORMATS, REQUEST_FORMATS, SearchToolGroup

__all__ = [
    "INVALID_ACTION",
    "SearchConfig",
    "SearchEnv",
    "SearchEnvConfig",
    "SearchToolGroup",
    "make_retriever",
    "make_tool_group",
]

_METADATA_CHARS = 500
_SEARCH_OPEN = "<search>"
_SEARCH_CLOSE = "</search>"

INVALID_ACTION = (
    "\nNo search or answer found. To search, put a query between <search> and </search>. "
    "To give the final answer, put it between <answer> and </answer>.\n"
)
"""With ``invalid_action="explain"``: the observation for a turn with neither a search nor an answer."""
EMPTY_QUERY = "\nThe <search> block is empty: put a query between <search> and </search>.\n"
"""With ``invalid_action="explain"``: the observation for an empty ``<search></search>``."""


@settings(frozen=True)
class SearchConfig:
    """The environment's settings (``env_config``); every field has a default. SkyRL's keys
    (``search_url``, ``topk``, ``timeout``, ``log_requests``) mean what they mean there; the defaults
    follow SkyRL except ``search_url``: unset, the environment searches the bundled corpus offline."""

    retriever: str | None = None
    """``"bm25"``, ``"dense"``, ``"hybrid"`` or ``"remote"``; unset: ``"remote"`` when ``search_url`` is
    given (SkyRL's behaviour), else ``"bm25"``."""
    corpus_path: PathText | None = None
    """The JSONL corpus of the local retrievers; unset: the bundled corpus."""
    search_url: str | None = None
    """A SkyRL / Search-R1 retrieval server, e.g. ``http://127.0.0.1:8000/retrieve``."""
    topk: Count = 3
    """Passages shown per search."""
    timeout: PositiveNumber = 30.0
    """Seconds one request to the search server may take."""
    retries: NonNegativeInt = 3
    """Further attempts when the search server cannot be reached or fails (5xx)."""
    log_requests: Flag = False
    """Log every request to the search server."""
    request_format: str = "skyrl"
    """What the search server speaks: ``"skyrl"`` (``{"query": "...", "topk": 3}``, SkyRL's server) or
    ``"search_r1"`` (``{"queries": ["..."], "topk": 3}``, Search-R1's). This project's server takes both."""
    observation_format: str = "skyrl"
    """``"skyrl"``: the search result as SkyRL's JSON text (``{"result": "Doc 1: ..."}``); ``"search_r1"``:
    Search-R1's plain ``Doc 1(Title: "...") ...`` lines."""
    invalid_action: str = "empty"
    """A turn without a complete ``<search>`` block: ``"empty"`` answers ``<information></information>``
    (SkyRL), ``"explain"`` says what was wrong (no tags, an unclosed tag, an empty query) and runs no
    search."""
    on_search_error: str = "observe"
    """When the search fails (a server down after its retries): ``"observe"`` shows SkyRL's ``Search error``
    text to the model and goes on; ``"error"`` ends the episode with an error end, so that a trainer leaves
    it out instead of teaching the model on a broken search."""
    reward: str = "em"
    """``"em"``: 1.0 for an exact match after normalisation; ``"f1"``: the best token F1."""
    max_turns: Count = 2
    """Turns per episode when the task's ``extras`` do not say (``extras["max_turns"]`` wins; SkyRL's
    trainer puts its ``generator.max_turns`` there)."""
    dense_model: str = "all-MiniLM-L6-v2"
    """The embedding model of the dense and hybrid retrievers (a name or a folder)."""
    hybrid_weights: tuple[NonNegativeNumber, NonNegativeNumber] = (1.0, 1.0)
    """Weights of BM25 and dense in the hybrid retriever's reciprocal rank fusion."""
    rrf_k: PositiveNumber = 60.0
    """The rank offset of reciprocal rank fusion."""

    def __post_init__(self) -> None:
        if self.retriever is not None:
            from skyrl_gym.envs.search.retrieval import RETRIEVERS

            if self.retriever not in RETRIEVERS:
                raise ValueError(RETRIEVERS.unknown_message(self.retriever))
        if self.retriever == "remote" and not self.search_url:
            raise ValueError(
                "env_config.retriever='remote' needs env_config.search_url, e.g. http://127.0.0.1:8000/retrieve"
            )
        choices = {
            "reward": ("em", "f1"),
            "on_search_error": ("observe", "error"),
            "invalid_action": ("empty", "explain"),
            "request_format": REQUEST_FORMATS,
            "observation_format": OBSERVATION_FORMATS,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"env_config.{name} must be one of {', '.join(map(repr, allowed))}, got {getattr(self, name)!r}"
                )

    @property
    def retriever_kind(self) -> str:
        """The retriever in use: ``retriever`` if set, else ``remote`` with a ``search_url``, else ``bm25``."""
        return self.retriever or ("remote" if self.search_url else "bm25")

    @classmethod
    def from_env_config(cls, env_config: Any) -> SearchConfig:
        """Read the fields from a dict, an OmegaConf ``DictConfig``, a dataclass or ``None``."""
        return read_settings(cls, env_config, "search")


SearchEnvConfig = SearchConfig
"""SkyRL's name for the search environment's settings (``skyrl_gym.envs.search.env.SearchEnvConfig``)."""


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
            request_format=config.request_format,
        )
    options: dict[str, Any] = {}
    if kind in ("dense", "hybrid"):
        options["model"] = config.dense_model
    if kind == "hybrid":
        options.update(weights=list(config.hybrid_weights), k=config.rrf_k)
    return get_retriever(kind, config.corpus_path, **options)


def make_tool_group(config: SearchConfig) -> SearchToolGroup:
    """The ``search`` tool ``config`` asks for: over the search server at ``search_url`` (SkyRL's path,
    through :func:`skyrl_gym.tools.search.call_search_api`), or over a local retriever."""
    if config.retriever_kind == "remote":
        return SearchToolGroup(
            search_url=config.search_url,
            topk=config.topk,
            timeout=config.timeout,
            log_requests=config.log_requests,
            request_format=config.request_format,
            retries=config.retries,
            observation_format=config.observation_format,
        )
    return SearchToolGroup(
        retriever=make_retriever(config),
        topk=config.topk,
        observation_format=config.observation_format,
    )


def _cap(text: Any) -> Any:
    return text[:_METADATA_CHARS] if isinstance(text, str) else text


# -- the environment ------------------------------------------------------------------------------------------
class SearchEnv(BaseTextEnv):
    """Search-R1 question answering in SkyRL's protocol (``SearchEnv(env_config=None, extras=None)``).

    See the module docstring for the protocol and :class:`SearchConfig` for the settings. As in SkyRL,
    ``tool_group`` (the ``search`` tool), ``ground_truth``, ``max_turns``, ``turns`` and ``chat_history`` are
    set by the constructor, and ``_parse_action`` / ``_is_done`` decide a turn. Extras without
    ``reward_spec.ground_truth`` fail here; without extras the environment waits for ``reset()`` to bring a
    task.

    ``step`` metadata holds SkyRL's ``tool_group``/``tool_name``/``tool_input`` on a search turn, and the
    ``turn`` and the ``action`` (``search``, ``invalid``, ``answer``, or ``none`` on a last turn without an
    answer); for a search the ``query``, the ``doc_ids`` shown and ``search_error`` (``None`` when it
    worked); at the end the ``answer``, ``em``, ``f1`` and ``searches``.
    """

    protocol_tags = ("think", "search", "answer")
    stop_strings = ("</search>", "</answer>")
    """A turn ends once it closes a search or the answer (Search-R1's stop strings, as in SkyRL's recipes)."""
    hostile_actions = (
        "<search>" + "the of and a " * 40_000 + "</search>",  # half a megabyte of stopwords
        "<search>" + " ".join(f"term{i}" for i in range(60_000)) + "</search>",  # tens of thousands of terms
        "<search>\x00\ud800\U0001f600\u202e" * 2_000 + "</search>",  # NUL, a lone surrogate, emoji, bidi
        "<search>" * 50_000,  # opening tags that never close
    )
    """Queries a model might write that strain a retriever; each must end as a search, never in error."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.config = SearchConfig.from_env_config(env_config)
        self.ground_truth = task_ground_truth(extras, "search")
        self.targets = targets_of(self.ground_truth)
        if self.ground_truth is not None and not self.targets:
            raise ValueError(
                "search needs the answers in reward_spec.ground_truth, as {'target': ['Paris', ...]}; "
                f"got {self.ground_truth!r:.200}"
            )
        max_turns = self.extras.get("max_turns")
        self.max_turns = positive_int(self.config.max_turns if max_turns is None else max_turns, "max_turns")
        self.chat_history: ConversationType = []
        self.searches = 0
        self.search_errors = 0
        self.answer: str | None = None
        self.em = 0.0
        self.f1 = 0.0
        # SkyRL builds its tool in the constructor; a local index is built (or loaded) once per process here
        self.tool_group = make_tool_group(self.config)
        self.init_tool_groups([self.tool_group])

    # -- tasks ------------------------------------------------------------------------------------------------
    def sample_task(self, seed: int | None = None) -> Task:
        """A question of the bundled test set, the same one for the same seed."""
        from skyrl_gym.envs.search import tasks

        return tasks.default_task(seed)

    def reference_action(self) -> str | None:
        """The first target as the answer; it always earns 1.0."""
        return f"<answer>{self.targets[0]}</answer>" if self.targets else None

    def reference_tool_calls(self) -> list[dict[str, Any]] | None:
        """The first target handed to ``finish`` as OpenAI-style tool calls; it always earns 1.0."""
        return [{"name": "finish", "arguments": {"answer": self.targets[0]}}] if self.targets else None

    def workspace(self) -> Any:
        """The environment's search engine as the ``search`` capability (the observation text of its tool)."""
        from skyrl_gym.tools.workspace import FunctionWorkspace

        return FunctionWorkspace(search=self._workspace_search)

    def _workspace_search(self, query: str, k: int) -> str:
        group = self.tool_group
        saved, group.topk = group.topk, max(1, min(int(k), 20))
        try:
            text = group.search(query)
        finally:
            group.topk = saved
        self.searches += 1
        self.search_errors += int(bool(group.last.get("search_error")))
        return text

    def finish_action(self, answer: str) -> str:
        """``<answer>answer</answer>``, which ends the episode and is scored."""
        return f"<answer>{answer}</answer>"

    def _require_task(self) -> None:
        if not self.targets:
            raise ValueError(
                "SearchEnv needs the answers: make it with extras={'reward_spec': {'method': 'rule', "
                "'ground_truth': {'target': ['Paris']}}}, or start it with reset(seed=...) to draw a bundled task"
            )

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        self._require_task()
        retriever = self.tool_group.retriever
        return prompt, {
            "retriever": "remote" if retriever is None else retriever.kind,
            "topk": self.config.topk,
            "max_turns": self.max_turns,
        }

    # -- SkyRL's turn rules -----------------------------------------------------------------------------------
    def _parse_action(self, action: str) -> list[str | None]:
        """``[query]``: the text inside the first ``<search>...</search>`` block (unstripped), or ``[None]``.

        The first ``<search>`` pairs with the next ``</search>`` (the regex ``<search>(.*?)</search>``), found
        in one linear scan whatever the text.
        """
        start = action.find(_SEARCH_OPEN)
        if start < 0:
            return [None]
        end = action.find(_SEARCH_CLOSE, start + len(_SEARCH_OPEN))
        return [None] if end < 0 else [action[start + len(_SEARCH_OPEN) : end]]

    def _is_done(self, action: str) -> bool:
        """The episode ends at ``max_turns`` or with a turn holding both ``<answer>`` and ``</answer>``."""
        if self.turns >= self.max_turns:
            return True
        return "<answer>" in action and "</answer>" in action

    def _execute_tool(self, tool_group_name: str, tool_name: str, tool_input: Any) -> str:
        """Run the tool and wrap its output in ``<information>`` tags, as SkyRL's search environment does."""
        output = super()._execute_tool(tool_group_name, tool_name, tool_input)
        return f"\n<information>{output}</information>\n"

    # -- the episode ------------------------------------------------------------------------------------------
    def step(self, action: str) -> BaseTextEnvStepOutput:
        self._require_task()
        self.turns += 1
        text = action if isinstance(action, str) else ""
        self.chat_history.append({"role": "assistant", "content": text})
        metadata: dict[str, Any] = {"turn": self.turns}
        if self._is_done(text):
            return self._finish(text, metadata)
        query = self._parse_action(text)
        raw = query[0]
        metadata.update(
            action="invalid" if raw is None else "search",
            tool_group="SearchToolGroup",
            tool_name="search",
            tool_input=[_cap(raw)],
        )
        if self.config.invalid_action == "explain" and (raw is None or not raw.strip()):
            content = self._explain(text, raw)
        else:
            content = self._search(query, metadata)
        observation = {"role": "user", "content": content}
        self.chat_history.append(observation)
        return BaseTextEnvStepOutput(observations=[observation], reward=0.0, done=False, metadata=metadata)

    def _explain(self, text: str, raw: str | None) -> str:
        if raw is not None:
            return EMPTY_QUERY
        problems = [c for c in parse_tag_calls(text, "search") if isinstance(c, ToolCallParseError)]
        if problems:
            return f"\n{problems[0].message}, or give the final answer as <answer>...</answer>.\n"
        return INVALID_ACTION

    def _search(self, query: list[str | None], metadata: dict[str, Any]) -> str:
        tools = self.tool_group
        tools.last = {}
        if query[0] is not None:
            self.searches += 1
            metadata["query"] = _cap(query[0].strip())
        try:
            content = self._execute_tool("SearchToolGroup", "search", query)
        except BudgetExceeded:
            raise
        except Exception as exc:  # SkyRL shows a failing tool's message to the model and goes on
            if self.config.on_search_error == "error":
                raise
            self.search_errors += 1
            message = str(exc) or type(exc).__name__
            metadata.update(doc_ids=[], search_error=_cap(message))
            return message
        if query[0] is not None:
            metadata.update(
                doc_ids=tools.last.get("doc_ids", []), search_error=tools.last.get("search_error")
            )
        error = tools.last.get("search_error")
        if error:
            self.search_errors += 1
            if self.config.on_search_error == "error":
                raise RetrievalError(self._failure(error))
        return content

    def _failure(self, error: str) -> str:
        if self.tool_group.retriever is not None:
            return f"the {self.tool_group.retriever.kind} retriever failed: {error}"
        from skyrl_gym.envs.search.retrieval.remote import START_HINT

        return f"the search server at {self.tool_group.search_url} failed: {error}; {START_HINT}"

    def _finish(self, text: str, metadata: dict[str, Any]) -> BaseTextEnvStepOutput:
        # SkyRL scores the whole conversation: the last <answer> block anywhere in it is the answer
        history = "".join(str(message["content"]) for message in self.chat_history)
        reward = compute_score(history, self.targets, metric=self.config.reward)
        answer = extract_answer(history)
        self.answer = answer
        self.em = float(em_check(answer, self.targets)) if answer is not None else 0.0
        self.f1 = f1_score(answer, self.targets) if answer is not None else 0.0
        metadata.update(answer=_cap(answer), em=self.em, f1=self.f1, searches=self.searches)
        if "<answer>" in text and "</answer>" in text:
            metadata.update(action="answer", end=END_TERMINATED)
        else:
            metadata.update(action="none", end=END_TRUNCATED, truncated_by="max_turns")
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
