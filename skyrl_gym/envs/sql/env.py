"""``Text2SQLEnv``: multi-turn text-to-SQL on a real database, with SkyRL-SQL's protocol.

Each turn the model writes some of:

- ``<think>...</think>``: its reasoning (required once per episode by the format rule);
- ``<sql>...</sql>``: a query to run; the environment answers ``<observation>...</observation>`` with the
  result (or the error) and a reminder of the turns left;
- ``<solution>...</solution>``: its final query, which ends the episode.

The reward comes only at the end, over all the assistant text of the episode (:mod:`.scoring`): the format
penalty (-1.0) when the format rule is broken, otherwise 1.0 when the solution's result matches the gold
query's, 0.0 when it does not. When ``max_turns`` turns pass without a solution the episode ends as
truncated by ``max_turns`` with ``no_solution_reward`` (the format penalty by default).

A task is a SkyRL dataset row: ``extras["reward_spec"]["ground_truth"]`` is the gold SQL and the database is
``extras["db_path"]``, or ``extras["db_id"]`` + ``extras["data"]`` under ``env_config.db_path``. Made without
a task, ``reset(seed=...)`` draws one from the bundled synthetic test split.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

from skyrl_gym.budget import END_TRUNCATED
from skyrl_gym.core import Task
from skyrl_gym.envs.base_text_env import (
    BaseTextEnv,
    BaseTextEnvStepOutput,
    ConversationType,
    env_config_values,
    positive_int,
)
from skyrl_gym.envs.sql.database import (
    DEFAULT_TIMEOUT_S,
    Database,
    QueryError,
    QueryResult,
    open_database,
    resolve_database,
)
from skyrl_gym.tools import ToolGroup, tool
from skyrl_gym.tools.parsing import ToolCall, parse_tag_calls

__all__ = ["SQLToolGroup", "Text2SQLConfig", "Text2SQLEnv", "format_result"]

_SOLUTION_OPEN = "<solution>"
_SOLUTION_CLOSE = "</solution>"
_METADATA_SQL_CHARS = 2000
_CELL_CHARS = 200


@dataclasses.dataclass(frozen=True)
class Text2SQLConfig:
    """The environment's settings (``env_config``); every field has a default.

    ``db_file_path`` is accepted as SkyRL's name for ``db_path``.
    """

    db_path: str | None = None
    """Root folder for tasks that name their database by ``db_id`` + ``data`` (SkyRL's layouts)."""
    max_turns: int = 5
    """Turns per episode when the task's ``extras`` do not say (``extras["max_turns"]`` wins)."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    """Seconds a query may run before it is interrupted."""
    max_rows: int = 50
    """Rows shown in an observation."""
    max_chars: int = 4000
    """Characters of query output shown in an observation."""
    require_think: bool = True
    """The format rule asks for a ``<think>...</think>`` block."""
    format_penalty: float = -1.0
    """Reward of an episode whose text breaks the format rule."""
    no_solution_reward: float | None = None
    """Reward when the turns run out without a solution; ``None`` means ``format_penalty``."""
    float_tol: float = 1e-6
    """Relative/absolute tolerance when comparing numbers in results."""
    ignore_column_order: bool = True
    """A solution may return the gold columns in another order."""
    transpile_from: str | None = "auto"
    """``None``: run queries as written; a sqlglot dialect (``"sqlite"``, ``"mysql"``...): rewrite from it
    first; ``"auto"``: on a syntax or schema error, retry rewritten from other dialects."""
    engine: str = "auto"
    """``"auto"`` (from the file header), ``"duckdb"`` or ``"sqlite"``."""
    sqlite_temp_store: str = "memory"
    """Where SQLite sorts and groups: ``"memory"`` (no temporary files at all) or ``"file"`` (faster on big
    ``GROUP BY``/``ORDER BY``; SQLite deletes its temporary files as it creates them)."""

    def __post_init__(self) -> None:
        _check_type("max_turns", self.max_turns, int, positive=True)
        _check_type("max_rows", self.max_rows, int, positive=True)
        _check_type("max_chars", self.max_chars, int, positive=True)
        _check_type("timeout_s", self.timeout_s, (int, float), positive=True)
        _check_type("float_tol", self.float_tol, (int, float))
        _check_type("format_penalty", self.format_penalty, (int, float))
        if self.float_tol < 0:
            raise ValueError(f"env_config.float_tol must be >= 0, got {self.float_tol!r}")
        if self.no_solution_reward is not None:
            _check_type("no_solution_reward", self.no_solution_reward, (int, float))
        for name in ("require_think", "ignore_column_order"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"env_config.{name} must be true or false, got {getattr(self, name)!r}")
        if self.engine not in ("auto", "duckdb", "sqlite"):
            raise ValueError(f"env_config.engine must be 'auto', 'duckdb' or 'sqlite', got {self.engine!r}")
        if self.sqlite_temp_store not in ("memory", "file"):
            raise ValueError(
                f"env_config.sqlite_temp_store must be 'memory' or 'file', got {self.sqlite_temp_store!r}"
            )
        if self.transpile_from is not None and not isinstance(self.transpile_from, str):
            raise TypeError(
                f"env_config.transpile_from must be a dialect name, 'auto' or null, got {self.transpile_from!r}"
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
        if isinstance(env_config, cls):
            return env_config
        values = env_config_values(env_config, cls, "text2sql", aliases={"db_file_path": "db_path"})
        if values.get("db_path") is not None:
            values["db_path"] = str(values["db_path"])
        return cls(**values)


def _check_type(name: str, value: Any, types: Any, *, positive: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, types):
        raise TypeError(f"env_config.{name} must be a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"env_config.{name} must be finite, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"env_config.{name} must be positive, got {value!r}")


# -- showing results to the model ----------------------------------------------------------------------------
def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        text = f"{value:.10g}"
    elif isinstance(value, (datetime.datetime, datetime.date, datetime.time, Decimal)):
        text = str(value)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        text = "0x" + raw[: _CELL_CHARS // 2].hex()
    else:
        text = str(value)
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= _CELL_CHARS else text[: _CELL_CHARS - 3] + "..."


def format_result(result: QueryResult, *, max_chars: int = 4000) -> str:
    """The result as a ``|``-separated table, cut at ``max_chars`` characters, saying what was cut."""
    lines = [" | ".join(_cell(c) for c in result.columns)] if result.columns else []
    used = len(lines[0]) + 1 if lines else 0
    shown = 0
    cut_by_chars = False
    for row in result.rows:
        line = " | ".join(_cell(v) for v in row)
        if used + len(line) + 1 > max_chars and shown > 0:
            cut_by_chars = True
            break
        if used + len(line) + 1 > max_chars:  # one huge first row: show its beginning
            line = line[: max(0, max_chars - used - 3)] + "..."
        lines.append(line)
        used += len(line) + 1
        shown += 1
    total = result.total_rows
    if not result.rows:
        lines.append("(no rows)")
    elif cut_by_chars or result.truncated:
        of = f"{total}" if total is not None else f"more than {len(result.rows)}"
        why = (
            f"output cut at {max_chars} characters"
            if cut_by_chars
            else f"at most {len(result.rows)} rows are shown"
        )
        lines.append(f"[{shown} of {of} rows shown; {why}]")
    else:
        lines.append(f"({shown} row{'s' if shown != 1 else ''})")
    return "\n".join(lines)


# -- the tool -------------------------------------------------------------------------------------------------
class SQLToolGroup(ToolGroup):
    """The ``sql`` tool: run one read-only query on the episode's database and describe the result.

    ``last`` holds JSON-serialisable facts about the last call (the query, row count, error kind), for the
    step's metadata.
    """

    def __init__(self, db: Database, config: Text2SQLConfig):
        super().__init__(name="SQLCodeExecutorToolGroup")
        self.db = db
        self.config = config
        self.last: dict[str, Any] = {}

    @tool
    def sql(self, query: str) -> str:
        """Run one read-only SQL query and return its result as text (or the error).

        Args:
            query: the SQL query.
        """
        config = self.config
        info: dict[str, Any] = {"sql": query[:_METADATA_SQL_CHARS]}
        try:
            result = self.db.execute(
                query,
                timeout_s=config.timeout_s,
                max_rows=config.max_rows,
                transpile_from=config.transpile_from,
            )
        except QueryError as exc:
            info.update(error_kind=exc.kind, rows=None)
            self.last = info
            return _cap(f"Error: {exc}", config.max_chars)
        info.update(
            error_kind=None,
            rows=result.total_rows,
            rows_shown=len(result.rows),
            truncated=result.truncated,
            transpiled_from=result.transpiled_from,
        )
        self.last = info
        return format_result(result, max_chars=config.max_chars)


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} characters cut]"


def _turns_left(left: int) -> str:
    if left == 1:
        return "You have 1 turn left: give your final answer now as <solution>...</solution>."
    return f"You have {left} turns left to complete the task."


_NO_ACTION = (
    "No query found. Run a query with <sql>SELECT ...</sql>, or give your final answer with "
    "<solution>SELECT ...</solution>."
)


# -- the environment ------------------------------------------------------------------------------------------
class Text2SQLEnv(BaseTextEnv):
    """Multi-turn text-to-SQL on a DuckDB or SQLite database (SkyRL constructor: ``(env_config, extras)``).

    See the module docstring for the protocol and the reward, and :class:`Text2SQLConfig` for the settings.
    ``step`` metadata holds the ``turn``, the ``action`` (``sql``, ``solution`` or ``none``) and, for a
    query, the ``sql``, ``rows`` (``None`` when it failed or is unknown), ``error_kind``, ``truncated`` and
    ``transpiled_from``; at the end ``format_valid`` and ``correct``.
    """

    protocol_tags = ("think", "sql", "solution")

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.config = Text2SQLConfig.from_env_config(env_config)
        reward_spec = self.extras.get("reward_spec")
        ground_truth = reward_spec.get("ground_truth") if isinstance(reward_spec, dict) else None
        self.gold_sql: str | None = (
            ground_truth if isinstance(ground_truth, str) and ground_truth.strip() else None
        )
        max_turns = self.extras.get("max_turns")
        self.max_turns = positive_int(self.config.max_turns if max_turns is None else max_turns, "max_turns")
        self.history: list[str] = []
        self.queries = 0
        self.query_errors = 0
        self.solved = False
        self.format_valid = False
        self.db: Database | None = None
        self.db_file: Path | None = None
        if self.extras.get("db_path") or self.extras.get("db_id"):
            self.db_file = resolve_database(self.extras, self.config.db_path)
            self.db = open_database(
                self.db_file, engine=self.config.engine, sqlite_temp_store=self.config.sqlite_temp_store
            )
            self.init_tool_groups([SQLToolGroup(self.db, self.config)])

    # -- tasks ------------------------------------------------------------------------------------------------
    def sample_task(self, seed: int | None = None) -> Task:
        """A question of the bundled synthetic test split, the same one for the same seed."""
        from skyrl_gym.envs.sql import data

        return data.default_task(seed)

    def reference_action(self) -> str | None:
        """The gold query as the solution, after a short thought; it always earns 1.0."""
        if self.gold_sql is None:
            return None
        return f"<think>I know the query that answers this.</think>\n<solution>{self.gold_sql}</solution>"

    # -- the episode ------------------------------------------------------------------------------------------
    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        if self.db is None:
            raise ValueError(
                "Text2SQLEnv needs a database: make it with extras={'db_path': 'shop.duckdb', ...} or "
                "extras={'db_id': ..., 'data': 'spider'} and env_config={'db_path': <root folder>}, "
                "or start it with reset(seed=...) to draw a bundled task"
            )
        if self.gold_sql is None:
            raise ValueError(
                "Text2SQLEnv needs the gold SQL: extras={'reward_spec': {'method': 'rule', "
                "'ground_truth': 'SELECT ...'}, ...}"
            )
        info = {
            "dialect": self.db.dialect,
            "database": self.db_file.name if self.db_file else None,
            "max_turns": self.max_turns,
        }
        return prompt, info

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        text = action if isinstance(action, str) else ""
        self.history.append(text)
        metadata: dict[str, Any] = {"turn": self.turns}
        opened = text.find(_SOLUTION_OPEN)
        if opened >= 0 and text.find(_SOLUTION_CLOSE, opened) >= 0:
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
        calls = parse_tag_calls(text, "sql")
        query = next((c.arguments["input"] for c in calls if isinstance(c, ToolCall)), None)
        if query is not None:
            body = self._run_query(query, metadata)
        elif calls:
            metadata["action"] = "none"
            body = f"{calls[0].message}, for example <sql>SELECT ...</sql>."
        else:
            metadata["action"] = "none"
            body = _NO_ACTION
        content = f"<observation>\n{body}\n</observation>\n{_turns_left(self.max_turns - self.turns)}"
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": content}], reward=0.0, done=False, metadata=metadata
        )

    def _run_query(self, query: str, metadata: dict[str, Any]) -> str:
        metadata["action"] = "sql"
        self.queries += 1
        query = _strip_fence(query)
        if not query:
            self.query_errors += 1
            metadata.update(sql="", rows=None, error_kind="unsafe")
            return "Error: the <sql> block is empty; write one SQL query inside it."
        body = self._execute_tool("SQLCodeExecutorToolGroup", "sql", [query])
        group = self.tool_groups[0]
        metadata.update(group.last)
        if group.last.get("error_kind") is not None:
            self.query_errors += 1
        return body

    def _finish(self, metadata: dict[str, Any]) -> BaseTextEnvStepOutput:
        from skyrl_gym.envs.sql.scoring import grade_completion

        assert self.db is not None and self.gold_sql is not None
        config = self.config
        grade = grade_completion(
            "\n".join(self.history),
            self.gold_sql,
            self.db,
            format_penalty=config.format_penalty,
            require_think=config.require_think,
            float_tol=config.float_tol,
            ignore_column_order=config.ignore_column_order,
            timeout_s=config.timeout_s,
            transpile_from=config.transpile_from,
        )
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

    def close(self) -> None:
        if self.db is not None:
            self.db.close()

    # -- metrics ----------------------------------------------------------------------------------------------
    def get_metrics(self) -> dict[str, Any]:
        """``turns``, ``queries`` run, ``query_errors``, whether the episode was ``solved``, ``format_valid``."""
        return {
            "turns": self.turns,
            "queries": self.queries,
            "query_errors": self.query_errors,
            "solved": self.solved,
            "format_valid": self.format_valid,
        }


_FENCE = re.compile(r"\A```[A-Za-z0-9_+-]*[ \t]*\n?(.*?)\n?```\Z", re.DOTALL)


def _strip_fence(query: str) -> str:
    query = query.strip()
    fenced = _FENCE.match(query)
    return fenced.group(1).strip() if fenced else query
