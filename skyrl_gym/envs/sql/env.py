"""``Text2SQLEnv`` (also ``SQLEnv``): multi-turn text-to-SQL on a real database, with SkyRL-SQL's protocol.

Each turn the model writes some of:

- ``<think>...</think>``: its reasoning;
- ``<sql>...</sql>``: a query to run; the environment answers with the result (or the error) inside
  ``<observation>...</observation>``, with a reminder of the turns left;
- ``<solution>...</solution>``: its final query, which ends the episode.

``env_config.protocol`` chooses the rules:

- ``"skyrl"`` (the default) is SkyRL-SQL's protocol byte for byte: the observation texts of
  :class:`~skyrl_gym.tools.sql.SQLCodeExecutorToolGroup` (``\\n\\n<observation>{result}\\n<reminder>You have N
  turns left to complete the task.</reminder></observation>\\n\\n``, SkyRL's message for a turn without
  ``<sql>``, the result as SkyRL's pandas table of distinct rows); a turn holding both ``<solution>`` and
  ``</solution>`` ends the episode; the reward is SkyRL's (:mod:`.utils`) over the whole episode as SkyRL
  joins it, observations included: -1.0 for a broken format (which includes a turn after an observation that
  does not start with ``<think>``), 1.0 when the solution's rows equal the gold rows as sets, else 0.0 (an
  empty solution scores 0.0). Queries run as written.
- ``"strict"`` is this package's own: ``<observation>`` with a table that names the columns, shows ``NULL``,
  keeps duplicate rows and says what was cut; specific messages for an unclosed or empty ``<sql>``; the
  format rule of :mod:`.scoring` over the model's turns only (a non-empty solution, a ``<think>`` block
  somewhere); results compared as multisets, in order when the gold query orders them, with a float
  tolerance and any column order; queries in another dialect rewritten on a syntax or schema error.

Either way the episode ends truncated by ``max_turns`` with ``no_solution_reward`` (the format penalty by
default) when the turns run out without a solution, and queries go through the read-only guard, the timeout
and the row cap of :mod:`.database`.

A task is a SkyRL dataset row: ``extras["reward_spec"]["ground_truth"]`` is the gold SQL and the database is
``extras["db_path"]``, or ``extras["db_id"]`` + ``extras["data"]`` under ``env_config.db_path`` (SkyRL's
layouts: ``spider/database/{db_id}/{db_id}.sqlite``, ``bird/train/train_databases/...``,
``SynSQL-2.5M/databases/...``). Made without a task, ``reset(seed=...)`` draws one from the bundled
synthetic test split.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path
from typing import Any

from skyrl_gym.budget import END_TRUNCATED
from skyrl_gym.core import Continuation, Misstep, Task
from skyrl_gym.envs.base_text_env import (
    BaseTextEnv,
    BaseTextEnvStepOutput,
    ConversationType,
    positive_int,
    task_ground_truth,
)
from skyrl_gym.runtime.sql.database import (
    DEFAULT_TIMEOUT_S,
    Database,
    open_database,
    resolve_database,
)
from skyrl_gym.settings import (
    Count,
    Flag,
    Name,
    NonNegativeNumber,
    Number,
    PathText,
    PositiveNumber,
    Share,
    read_settings,
    settings,
)
from skyrl_gym.tools.parsing import ToolCall, parse_tag_calls
from skyrl_gym.tools.sql import (
    GROUP_NAME,
    SKYRL_MAX_CHARS,
    TABLE_MAX_CHARS,
    SQLCodeExecutorToolGroup,
    format_result,
    wrap_observation,
)

__all__ = [
    "PROTOCOLS",
    "SQLEnv",
    "Text2SQLConfig",
    "Text2SQLEnv",
    "Text2SQLEnvConfig",
    "format_result",
    "sql_hint",
]

PROTOCOLS = ("skyrl", "strict")
"""The values of ``env_config.protocol``; see the module docstring."""

_SOLUTION_OPEN = "<solution>"
_SOLUTION_CLOSE = "</solution>"
_SQL_OPEN = "<sql>"
_SQL_CLOSE = "</sql>"
_METADATA_SQL_CHARS = 2000
_TOOL_NAME = "sql"


class _FromProtocol:
    """The default of a setting whose value depends on ``protocol`` (replaced when the config is made)."""

    def __repr__(self) -> str:
        return "<the protocol's default>"


FROM_PROTOCOL: Any = _FromProtocol()
"""Marks a setting left to the protocol's default (see :data:`PROTOCOL_DEFAULTS`)."""

PROTOCOL_DEFAULTS: dict[str, dict[str, Any]] = {
    "skyrl": {"match": "set", "max_chars": SKYRL_MAX_CHARS, "transpile_from": None},
    "strict": {"match": "execution", "max_chars": TABLE_MAX_CHARS, "transpile_from": "auto"},
}
"""The settings each protocol changes when they are not given."""


@settings(frozen=True)
class Text2SQLConfig:
    """The environment's settings (``env_config``); every field has a default.

    ``db_file_path`` is accepted as another name for ``db_path``. ``match``, ``max_chars`` and
    ``transpile_from`` default to the protocol's values (:data:`PROTOCOL_DEFAULTS`).
    """

    db_path: PathText | None = None
    """Root folder for tasks that name their database by ``db_id`` + ``data`` (SkyRL's layouts)."""
    protocol: str = "skyrl"
    """``"skyrl"``: SkyRL-SQL's texts and reward rules; ``"strict"``: this package's (module docstring)."""
    max_turns: Count = 5
    """Turns per episode when the task's ``extras`` do not say (``extras["max_turns"]`` wins)."""
    timeout_s: PositiveNumber = DEFAULT_TIMEOUT_S
    """Seconds a query may run before it is interrupted."""
    max_rows: Count = 50
    """Rows shown: SkyRL cuts a too-long result to this many rows; ``strict`` never shows more."""
    max_chars: Count = FROM_PROTOCOL
    """Characters of a result shown: past it SkyRL cuts to ``max_rows`` rows (9000); ``strict`` stops (4000)."""
    match: str = FROM_PROTOCOL
    """``"set"``: the solution's rows equal the gold rows as sets (SkyRL); ``"execution"``: as multisets, in
    order when the gold query orders them, within ``float_tol``, in any column order if ``ignore_column_order``."""
    require_think: Flag = True
    """The format rule asks for ``<think>`` (``skyrl``: a block, and at the start of every turn after an
    observation; ``strict``: a block somewhere)."""
    format_penalty: Number = -1.0
    """Reward of an episode whose text breaks the format rule."""
    no_solution_reward: Number | None = None
    """Reward when the turns run out without a solution; ``None`` means ``format_penalty``."""
    float_tol: NonNegativeNumber = 1e-6
    """Relative/absolute tolerance when comparing numbers in results (``match="execution"``)."""
    ignore_column_order: Flag = True
    """A solution may return the gold columns in another order (``match="execution"``)."""
    transpile_from: Name | None = FROM_PROTOCOL
    """``None``: run queries as written (``skyrl``); a sqlglot dialect (``"sqlite"``, ``"mysql"``...): rewrite
    from it first; ``"auto"`` (``strict``): on a syntax or schema error, retry rewritten from other dialects."""
    engine: str = "auto"
    """``"auto"`` (from the file header), ``"duckdb"`` or ``"sqlite"``."""
    reference_corrections: Share = 0.0
    """Share of tasks whose :meth:`~Text2SQLEnv.reference_episode` is a correction episode: a near-miss first
    query (:mod:`.corrections`), the database's real answer to it, then the gold solution with a line that reads
    that answer. Which tasks is fixed by the question; the others run the gold query first."""
    sqlite_temp_store: str = "memory"
    """Where SQLite sorts and groups: ``"memory"`` (no temporary files at all) or ``"file"`` (faster on big
    ``GROUP BY``/``ORDER BY``; SQLite deletes its temporary files as it creates them)."""

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(
                f"env_config.protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}"
            )
        for name, value in PROTOCOL_DEFAULTS[self.protocol].items():
            if getattr(self, name) is FROM_PROTOCOL:
                object.__setattr__(self, name, value)
        if self.match not in ("set", "execution"):
            raise ValueError(f"env_config.match must be 'set' or 'execution', got {self.match!r}")
        if self.match == "set" and (self.float_tol != 1e-6 or self.ignore_column_order is not True):
            raise ValueError(
                "env_config.float_tol and ignore_column_order apply to match='execution'; with match='set' "
                "(SkyRL's rule) values compare exactly and columns in order"
            )
        if self.engine not in ("auto", "duckdb", "sqlite"):
            raise ValueError(f"env_config.engine must be 'auto', 'duckdb' or 'sqlite', got {self.engine!r}")
        if self.sqlite_temp_store not in ("memory", "file"):
            raise ValueError(
                f"env_config.sqlite_temp_store must be 'memory' or 'file', got {self.sqlite_temp_store!r}"
            )
        if self.transpile_from not in (None, "auto"):
            from sqlglot.dialects.dialect import Dialect

            try:
                Dialect.get_or_raise(self.transpile_from)
            except (ValueError, KeyError) as exc:
                raise ValueError(f"env_config.transpile_from: {exc}") from None

    @classmethod
    def from_env_config(cls, env_config: Any) -> Text2SQLConfig:
        """Read the fields from a dict, an OmegaConf ``DictConfig``, a dataclass or ``None``."""
        return read_settings(cls, env_config, "text2sql", aliases={"db_file_path": "db_path"})


Text2SQLEnvConfig = Text2SQLConfig
"""SkyRL's name for the settings class (its one field, ``db_path``, is ours too)."""


def _first_sql_block(text: str) -> str | None:
    """The text of the first ``<sql>...</sql>`` exactly as written (SkyRL's rule), or ``None``."""
    start = text.find(_SQL_OPEN)
    if start < 0:
        return None
    end = text.find(_SQL_CLOSE, start + len(_SQL_OPEN))
    # No later <sql> can be closed when this one is not.
    return None if end < 0 else text[start + len(_SQL_OPEN) : end]


def sql_hint(gold_sql: str) -> str:
    """A one-line plan for a query, from its tables ("Use the tables orders and customers."); "Write the
    query." when it names none or does not parse."""
    try:
        import sqlglot
        from sqlglot import exp

        tables = list(dict.fromkeys(t.name for t in sqlglot.parse_one(gold_sql).find_all(exp.Table)))
    except Exception:  # any query the parser cannot read gets the plain plan
        tables = []
    if not tables:
        return "Write the query."
    names = tables[0] if len(tables) == 1 else ", ".join(tables[:-1]) + f" and {tables[-1]}"
    return f"Use the table{'s' if len(tables) > 1 else ''} {names}."


_NO_ACTION = (
    "No query found. Run a query with <sql>SELECT ...</sql>, or give your final answer with "
    "<solution>SELECT ...</solution>."
)


# -- the environment ------------------------------------------------------------------------------------------
class Text2SQLEnv(BaseTextEnv):
    """Multi-turn text-to-SQL on a DuckDB or SQLite database (SkyRL constructor: ``(env_config, extras)``).

    See the module docstring for the protocols and :class:`Text2SQLConfig` for the settings. Every turn that
    is not the last has SkyRL's metadata ``tool_group``, ``tool_name`` and ``tool_input`` (``(db_id, the
    query or None, turns left)``), and this package's: the ``turn``, the ``action`` (``sql``, ``solution`` or
    ``none``) and, for a query, the ``sql``, ``rows`` (``None`` when it failed or is unknown), ``rows_shown``,
    ``error_kind``, ``truncated`` and ``transpiled_from``; at the end ``format_valid`` and ``correct``.
    ``chat_history`` holds the episode as SkyRL keeps it (the model's turns and the observations).
    """

    protocol_tags = ("think", "sql", "solution")
    stop_strings = (_SQL_CLOSE, _SOLUTION_CLOSE)
    """A turn ends once it closes a query or the solution (SkyRL-SQL's stop strings)."""
    hostile_actions = (
        "<sql>DROP TABLE IF EXISTS anything</sql>",
        "<sql>SELECT 1; DELETE FROM anything</sql>",
        "<sql>ATTACH DATABASE '/tmp/skyrl_gym_hostile.db' AS other</sql>",
        "<sql>SELECT * FROM read_csv('/etc/passwd')</sql>",
        "<sql>SELECT zeroblob(2000000000), repeat('x', 2000000000)</sql>",  # values of gigabytes
        "<sql>" + "SELECT 1 UNION ALL " * 500 + "SELECT 1</sql>",
        "<sql>\x00\ud800\U0001f600</sql>",
        "<think>done</think><solution>" + "x" * 100_000 + "</solution>",
    )
    """Queries a model might write that a database must refuse or survive; each ends as the model's failure."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.config = Text2SQLConfig.from_env_config(env_config)
        ground_truth = task_ground_truth(extras, "text2sql")
        if ground_truth is not None and not (isinstance(ground_truth, str) and ground_truth.strip()):
            raise ValueError(
                f"text2sql: reward_spec.ground_truth must be the gold SQL query, got {ground_truth!r:.200}"
            )
        self.gold_sql: str | None = ground_truth
        max_turns = self.extras.get("max_turns")
        self.max_turns = positive_int(self.config.max_turns if max_turns is None else max_turns, "max_turns")
        self.history: list[str] = []
        self.chat_history: ConversationType = []
        self.queries = 0
        self.query_errors = 0
        self.empty_results = 0
        self.solved = False
        self.format_valid = False
        self.db: Database | None = None
        self.db_file: Path | None = None
        self.db_id: str | None = None
        self.tool_group: SQLCodeExecutorToolGroup | None = None
        if extras is not None:
            config = self.config
            self.db_file = resolve_database(self.extras, config.db_path)
            self.db = open_database(
                self.db_file, engine=config.engine, sqlite_temp_store=config.sqlite_temp_store
            )
            db_id = self.extras.get("db_id")
            self.db_id = str(db_id) if db_id else self.db_file.stem
            self.tool_group = SQLCodeExecutorToolGroup(
                database=self.db,
                db_id=self.db_id,
                db_file=str(self.db_file),
                style="skyrl" if config.protocol == "skyrl" else "table",
                timeout_s=config.timeout_s,
                max_rows=config.max_rows,
                max_chars=config.max_chars,
                transpile_from=config.transpile_from,
            )
            self.init_tool_groups([self.tool_group])

    # -- tasks ------------------------------------------------------------------------------------------------
    def sample_task(self, seed: int | None = None) -> Task:
        """A question of the bundled synthetic test split, the same one for the same seed."""
        from skyrl_gym.envs.sql import tasks

        return tasks.default_task(seed)

    def reference_action(self) -> str | None:
        """The gold query as the solution, after a one-line plan naming its tables; it always earns 1.0."""
        if self.gold_sql is None:
            return None
        return f"<think>{sql_hint(self.gold_sql)}</think>\n<solution>{self.gold_sql}</solution>"

    def reference_episode(self) -> list[str] | None:
        """Run a query in ``<sql>`` first, then answer with the gold query once its result came back (a single
        :meth:`reference_action` when the task allows one turn only). The first query is the gold one, or, for
        the share ``env_config.reference_corrections`` of tasks, a near miss of it (:mod:`.corrections`) played
        as a :class:`~skyrl_gym.core.Misstep` (its plan and ``<sql>`` tag kept in a warm-up's loss, the query
        not), whose error, empty or too long result the answer's ``<think>`` line reads. Every turn opens with ``<think>``, as SkyRL's format rule asks after an observation. It
        always earns 1.0."""
        if self.gold_sql is None:
            return None
        if self.max_turns < 2:
            return [self.reference_action()]
        gold = self.gold_sql
        plan = f"<think>{sql_hint(gold)} Let me run it first.</think>\n"
        miss = self._near_miss()
        if miss is not None:
            return [
                # the decision to run a query first is right and stays trained on; the near miss is not
                Misstep(f"{plan}<sql>{miss.query}</sql>", keep=f"{plan}<sql>"),
                f"<think>{miss.fix}</think>\n<solution>{gold}</solution>",
            ]
        return [
            f"{plan}<sql>{gold}</sql>",
            f"<think>The result answers the question.</think>\n<solution>{gold}</solution>",
        ]

    def reference_continuation(self) -> Continuation | None:
        """After the model's own queries (the episode not over): the gold query as the solution, after a
        ``<think>`` line that reads what the last query gave (an error, no rows, a result that does not answer
        the question, or one that does). Each played query whose result is not the gold one, and each turn
        that ran no query, is marked a :class:`~skyrl_gym.core.Misstep` (its text up to its ``<sql>`` tag
        kept: the decision to query was right); a right query is kept whole. ``None`` before the first turn,
        after the episode ended, with no turn left for the answer, or without a gold query."""
        if self.gold_sql is None or self.db is None or not self.history or self.turns >= self.max_turns:
            return None
        if any(self._ends_with_solution(text) for text in self.history):
            return None
        played: list[str] = []
        right = False
        for text in self.history:
            query = self._query_in(text)
            right = query is not None and self._matches_gold(query)
            if right:
                played.append(text)
            else:
                opened = text.find(_SQL_OPEN)
                played.append(
                    Misstep(text, keep=text[: opened + len(_SQL_OPEN)] if query is not None else "")
                )
        assert self.tool_group is not None
        last = self.tool_group.last  # what the last turn's query gave (empty when it ran none)
        hint = sql_hint(self.gold_sql)
        if right:
            reading = "The result answers the question."
        elif not last:
            reading = f"That ran no query. {hint}"
        elif last.get("error_kind") is not None:
            reading = f"The query failed. {self._misnamed(last.get('sql', '')) or hint}"
        elif last.get("rows") == 0:
            reading = f"No rows came back, so the query is wrong. {hint}"
        else:
            reading = f"The result does not answer the question. {hint}"
        return Continuation(played, [f"<think>{reading}</think>\n<solution>{self.gold_sql}</solution>"])

    def _schema(self) -> dict[str, list[str]]:
        """Each table of the task's database and its columns."""
        assert self.db is not None
        return {table: list(self.db.sample_rows(table, 0).columns) for table in self.db.tables()}

    def _misnamed(self, query: str) -> str | None:
        """What a failed ``query`` misnamed, read against the schema, and the gold query's name for it
        (:func:`~skyrl_gym.envs.sql.corrections.misnamed`); ``None`` when it named nothing unknown."""
        from skyrl_gym.envs.sql.corrections import misnamed

        assert self.db is not None and self.gold_sql is not None
        return misnamed(query, self.gold_sql, self._schema(), self.db.dialect)

    def _query_in(self, text: str) -> str | None:
        """The query a turn runs under the episode's protocol (as :meth:`step` reads it), or ``None``."""
        if self.config.protocol == "skyrl":
            return _first_sql_block(text)
        calls = parse_tag_calls(text, "sql")
        written = next((c.arguments["input"] for c in calls if isinstance(c, ToolCall)), None)
        return None if written is None else _strip_fence(written) or None

    def _matches_gold(self, query: str) -> bool:
        """Whether ``query``, given as the solution, would earn the reward (the grader and its settings)."""
        from skyrl_gym.envs.sql.utils import grade_episode

        assert self.db is not None and self.gold_sql is not None
        answer = f"<think>Check.</think>\n<solution>{query}</solution>"
        return grade_episode(answer, self.gold_sql, self.db, **self._grading()).correct

    def _near_miss(self) -> Any:
        """The task's near miss when it is drawn into ``reference_corrections`` (by a hash of its question and
        gold query, so the same task always gets the same episode) and one can be derived; else ``None``."""
        share = self.config.reference_corrections
        if share <= 0 or self.db is None or self.gold_sql is None:
            return None
        question = str((self.extras.get("extra_info") or {}).get("question", ""))
        draw = zlib.crc32(f"{question}\n{self.gold_sql}".encode())
        if (draw % 10_000) / 10_000 >= share:
            return None
        from skyrl_gym.envs.sql.corrections import KINDS, RunResult, near_misses

        # the kind is drawn too, so that the warm-up shows every kind; the others follow when it has none
        first = KINDS[(draw // 10_000) % len(KINDS)]
        kinds = [first, *(k for k in KINDS if k != first)]
        schema = self._schema()

        def run(query: str) -> RunResult:
            assert self.tool_group is not None
            self.tool_group.run(self.db_id or "", query)
            last = self.tool_group.last
            return RunResult(last.get("error_kind"), last.get("rows"))

        found = near_misses(self.gold_sql, schema, self.db.dialect, run, kinds=kinds)
        return found[0] if found else None

    def reference_tool_calls(self) -> list[dict[str, Any]] | None:
        """The reference episode as OpenAI-style tool calls: ``sql`` with the gold query, then ``finish``."""
        if self.gold_sql is None:
            return None
        return [
            {"name": "sql", "arguments": {"query": self.gold_sql}},
            {"name": "finish", "arguments": {"answer": self.gold_sql}},
        ]

    def workspace(self) -> Any:
        """The task's database as the ``sql`` capability (read-only, with the episode's timeout and row cap)."""
        self._require_task()
        from skyrl_gym.tools.workspace import FunctionWorkspace

        return FunctionWorkspace(sql=self._workspace_sql, key=f"sql:{self.db_file}")

    def _workspace_sql(self, query: str) -> str:
        assert self.tool_group is not None
        text = self.tool_group.run(self.db_id or "", query)
        self.queries += 1
        self.query_errors += int(self.tool_group.last.get("error_kind") is not None)
        self.empty_results += int(self.tool_group.last.get("rows") == 0)
        return text

    def finish_action(self, answer: str) -> str:
        """The answer as the ``<solution>``, after a ``<think>`` line: the reasoning happened in the tool turns,
        and the format rule asks for a ``<think>`` block."""
        return f"<think>The query was checked with the sql tool.</think>\n<solution>{answer}</solution>"

    # -- the episode ------------------------------------------------------------------------------------------
    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        self._require_task()
        assert self.db is not None
        info = {
            "dialect": self.db.dialect,
            "database": self.db_file.name if self.db_file else None,
            "max_turns": self.max_turns,
        }
        return prompt, info

    def _require_task(self) -> None:
        if self.db is None:
            raise ValueError(
                "Text2SQLEnv needs a task: make it with extras={'reward_spec': {'method': 'rule', "
                "'ground_truth': 'SELECT ...'}, 'db_path': 'shop.duckdb'} (or 'db_id' and 'data' with "
                "env_config={'db_path': <root folder>}), or start it with reset(seed=...) to draw a bundled task"
            )

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self._require_task()
        self.turns += 1
        text = action if isinstance(action, str) else ""
        self.history.append(text)
        self.chat_history.append({"role": "assistant", "content": text})
        metadata: dict[str, Any] = {"turn": self.turns}
        if self._ends_with_solution(text):
            return self._finish(metadata)
        if self.turns >= self.max_turns:
            reward = self.config.no_solution_reward
            metadata.update(
                action="none", format_valid=False, correct=False, end=END_TRUNCATED, truncated_by="max_turns"
            )
            return BaseTextEnvStepOutput(
                observations=[],
                reward=float(self.config.format_penalty if reward is None else reward),
                done=True,
                metadata=metadata,
            )
        turns_left = self.turns_left()
        if self.config.protocol == "skyrl":
            content = self._skyrl_turn(text, turns_left, metadata)
        else:
            content = self._strict_turn(text, turns_left, metadata)
        observation = {"role": "user", "content": content}
        self.chat_history.append(observation)
        return BaseTextEnvStepOutput(observations=[observation], reward=0.0, done=False, metadata=metadata)

    def _ends_with_solution(self, text: str) -> bool:
        if self.config.protocol == "skyrl":
            return _SOLUTION_OPEN in text and _SOLUTION_CLOSE in text
        opened = text.find(_SOLUTION_OPEN)
        return opened >= 0 and text.find(_SOLUTION_CLOSE, opened) >= 0

    def _skyrl_turn(self, text: str, turns_left: int, metadata: dict[str, Any]) -> str:
        query = _first_sql_block(text)
        return self._call_tool(query, turns_left, metadata)

    def _strict_turn(self, text: str, turns_left: int, metadata: dict[str, Any]) -> str:
        calls = parse_tag_calls(text, "sql")
        written = next((c.arguments["input"] for c in calls if isinstance(c, ToolCall)), None)
        query = None if written is None else _strip_fence(written)
        if query:
            return self._call_tool(query, turns_left, metadata)
        if query is not None:
            self.queries += 1
            self.query_errors += 1
            metadata.update(action="sql", sql="", rows=None, error_kind="unsafe")
            body = "Error: the <sql> block is empty; write one SQL query inside it."
        elif calls:
            metadata["action"] = "none"
            body = f"{calls[0].message}, for example <sql>SELECT ...</sql>."
        else:
            metadata["action"] = "none"
            body = _NO_ACTION
        metadata.update(
            tool_group=GROUP_NAME, tool_name=_TOOL_NAME, tool_input=(self.db_id, query, turns_left)
        )
        return wrap_observation(body, turns_left, "table")

    def _call_tool(self, query: str | None, turns_left: int, metadata: dict[str, Any]) -> str:
        """Run the SQL tool as SkyRL does (``(db_id, query, turns_left)``) and note what it did."""
        tool_input = (self.db_id, query, turns_left)
        content = self._execute_tool(GROUP_NAME, _TOOL_NAME, tool_input)
        metadata.update(tool_group=GROUP_NAME, tool_name=_TOOL_NAME, tool_input=tool_input)
        if query is None:
            metadata["action"] = "none"
            return content
        assert self.tool_group is not None
        self.queries += 1
        metadata["action"] = "sql"
        metadata.update(self.tool_group.last)
        if self.tool_group.last.get("error_kind") is not None:
            self.query_errors += 1
        self.empty_results += int(self.tool_group.last.get("rows") == 0)  # ran, returned nothing
        return content

    def _finish(self, metadata: dict[str, Any]) -> BaseTextEnvStepOutput:
        assert self.db is not None and self.gold_sql is not None
        config = self.config
        from skyrl_gym.envs.sql.utils import grade_episode

        if config.protocol == "skyrl":
            # SkyRL grades the episode as one text: every turn and observation, joined with nothing between.
            episode = "".join(message["content"] for message in self.chat_history)
        else:
            episode = "\n".join(self.history)
        grade = grade_episode(episode, self.gold_sql, self.db, **self._grading())
        self.solved = grade.correct
        self.format_valid = grade.format_valid
        metadata.update(action="solution", format_valid=grade.format_valid, correct=grade.correct)
        if grade.solution is not None:
            metadata["sql"] = grade.solution[:_METADATA_SQL_CHARS]
        if grade.error_kind is not None:
            metadata["error_kind"] = grade.error_kind
        if grade.transpiled_from is not None:
            metadata["transpiled_from"] = grade.transpiled_from
        return BaseTextEnvStepOutput(observations=[], reward=grade.reward, done=True, metadata=metadata)

    def _grading(self) -> dict[str, Any]:
        """The grader's settings from the env config (``grade_episode``'s keyword arguments)."""
        config = self.config
        return {
            "rule": config.protocol,
            "match": config.match,
            "format_penalty": config.format_penalty,
            "require_think": config.require_think,
            "float_tol": config.float_tol,
            "ignore_column_order": config.ignore_column_order,
            "timeout_s": config.timeout_s,
            "transpile_from": config.transpile_from,
        }

    def close(self) -> None:
        if self.db is not None:
            self.db.close()

    # -- metrics ----------------------------------------------------------------------------------------------
    def get_metrics(self) -> dict[str, Any]:
        """``turns``, ``queries`` run, ``query_errors``, ``empty_results`` (queries that ran and returned no
        rows), whether the episode was ``solved``, ``format_valid``."""
        return {
            "turns": self.turns,
            "queries": self.queries,
            "query_errors": self.query_errors,
            "empty_results": self.empty_results,
            "solved": self.solved,
            "format_valid": self.format_valid,
        }


SQLEnv = Text2SQLEnv
"""SkyRL's name for the environment class."""


_FENCE = re.compile(r"\A```[A-Za-z0-9_+-]*[ \t]*\n?(.*?)\n?```\Z", re.DOTALL)


def _strip_fence(query: str) -> str:
    query = query.strip()
    fenced = _FENCE.match(query)
    return fenced.group(1).strip() if fenced else query
