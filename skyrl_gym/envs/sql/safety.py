"""The read-only guard: a model's query runs only if it is one statement that reads the database and nothing else.

:func:`check_read_only` parses the query with sqlglot (in the database's dialect, then with sqlglot's generic
parser if that fails) and accepts exactly one statement of these kinds: ``SELECT`` (with ``WITH``), the set
operations ``UNION`` / ``INTERSECT`` / ``EXCEPT``, ``VALUES``, and ``EXPLAIN`` of one of those. Anything else
is refused with a message that tells the model what is allowed:

- statements that change or administer the database: DDL, DML (also inside a ``WITH``), ``SELECT ... INTO``,
  ``ATTACH`` / ``DETACH``, ``COPY``, ``EXPORT`` / ``IMPORT``, ``INSTALL`` / ``LOAD``, ``PRAGMA``, ``SET`` /
  ``RESET``, ``CALL``, ``CHECKPOINT``, ``VACUUM``, transactions, ``DESCRIBE`` / ``SHOW`` / ``SUMMARIZE``;
- functions that read or write files, reach the network or other databases, or reveal the server's settings
  (``read_csv``, ``read_parquet``, ``read_text``, ``glob``, ``sqlite_scan``, ``load_extension``,
  ``readfile``, ``current_setting``, ``query(...)``, ``duckdb_settings()``, ...), and any table function
  outside a short allow-list (``range``, ``generate_series``, ``unnest``, ``json_each``, DuckDB's catalog
  functions);
- table references that are file paths or URLs (``FROM 'data.csv'``);
- several statements at once, and text that cannot be parsed (it cannot be checked).

For DuckDB, DuckDB's own parser must also see exactly one ``SELECT`` or ``EXPLAIN`` statement, so that no
difference between the two parsers can smuggle a second statement through. The guard is the first line of
defence only: connections are read-only and sandboxed as well (see :mod:`.database`).

Verdicts are cached per (query, dialect), so a query that is run again costs a dictionary lookup.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from typing import Any

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, SqlglotError, TokenError

from skyrl_gym.envs.sql.database import UnparsableQuery, UnsafeQuery

__all__ = [
    "ALLOWED_TABLE_FUNCTIONS",
    "DENIED_FUNCTIONS",
    "MAX_QUERY_CHARS",
    "check_read_only",
]

MAX_QUERY_CHARS = 100_000
"""Longer queries are refused without parsing."""

ALLOWED_WORDS = "SELECT, WITH, UNION/INTERSECT/EXCEPT, VALUES, or EXPLAIN of one of these"

DENIED_FUNCTIONS = frozenset(
    {
        # files, globs, other databases, the network
        "glob",
        "sniff_csv",
        "parquet_metadata",
        "parquet_schema",
        "parquet_file_metadata",
        "parquet_kv_metadata",
        "parquet_bloom_probe",
        "load_extension",
        "readfile",
        "writefile",
        "edit",
        "fts3_tokenizer",
        "lo_import",
        "lo_export",
        "http_get",
        "http_post",
        "http_head",
        "dbgen",
        "dsdgen",
        # SQL inside strings, settings, secrets, sequences
        "query",
        "query_table",
        "sql_auto_complete",
        "json_execute_serialized_sql",
        "from_substrait",
        "from_substrait_json",
        "current_setting",
        "getenv",
        "getvariable",
        "which_secret",
        "nextval",
        "currval",
        "checkpoint",
        "force_checkpoint",
        "enable_profiling",
    }
)
"""Functions refused anywhere in a query (names compared in lower case)."""

_DENIED_PREFIXES = ("read_", "write_", "pragma_", "sqlite_", "postgres_", "mysql_", "iceberg_", "delta_")
_DENIED_SUFFIXES = ("_scan", "_attach", "_query", "_execute", "_secret", "_secrets")
_DUCKDB_CATALOG_FUNCTIONS = frozenset(
    {
        "duckdb_tables",
        "duckdb_columns",
        "duckdb_views",
        "duckdb_constraints",
        "duckdb_indexes",
        "duckdb_schemas",
        "duckdb_types",
        "duckdb_keywords",
        "duckdb_sequences",
        "duckdb_functions",
    }
)
ALLOWED_TABLE_FUNCTIONS = frozenset(
    {"range", "generate_series", "unnest", "json_each", "json_tree", "generate_subscripts"}
    | _DUCKDB_CATALOG_FUNCTIONS
)
"""The only functions allowed in a ``FROM`` clause (their results come from the query itself)."""

_ALLOWED_TABLE_FUNCTION_CLASSES = (exp.GenerateSeries, exp.Unnest, exp.Explode)

_STATEMENT_NAMES = {
    "Insert": "INSERT",
    "Update": "UPDATE",
    "Delete": "DELETE",
    "Merge": "MERGE",
    "Copy": "COPY",
    "Create": "CREATE",
    "Drop": "DROP",
    "Alter": "ALTER",
    "AlterSet": "ALTER",
    "TruncateTable": "TRUNCATE",
    "Pragma": "PRAGMA",
    "Set": "SET",
    "Use": "USE",
    "Transaction": "BEGIN TRANSACTION",
    "Commit": "COMMIT",
    "Rollback": "ROLLBACK",
    "Attach": "ATTACH",
    "Detach": "DETACH",
    "Install": "INSTALL",
    "LoadData": "LOAD DATA",
    "Cache": "CACHE",
    "Uncache": "UNCACHE",
    "Refresh": "REFRESH",
    "Grant": "GRANT",
    "Revoke": "REVOKE",
    "Kill": "KILL",
    "Declare": "DECLARE",
    "Execute": "EXECUTE",
    "ExecuteSql": "EXECUTE",
    "Export": "EXPORT",
    "Describe": "DESCRIBE",
    "Show": "SHOW",
    "Summarize": "SUMMARIZE",
    "Analyze": "ANALYZE",
    "Comment": "COMMENT",
    "LockingStatement": "LOCKING",
    "StoredProcedure": "a stored procedure",
    "Command": "this",
}
_FORBIDDEN_NODES = tuple(getattr(exp, name) for name in _STATEMENT_NAMES if hasattr(exp, name))

# A table name that is really a file or a URL: a path separator, a scheme, a home folder, or an extension.
_FILE_LIKE = re.compile(r"[/\\]|://|^~|^\.|\.(?:[A-Za-z][A-Za-z0-9]{0,7})(?:\.(?:gz|zst|bz2|xz|lz4))?$")
_EXPLAIN_OPTION = re.compile(r"\s*(?:ANALY[SZ]E|QUERY\s+PLAN)\b", re.IGNORECASE)
_CACHE_MAX_CHARS = 8192

# sqlglot logs a warning when it falls back to parsing a statement as an opaque command; the guard refuses
# those anyway, so the warning is dropped, for the guard's own parses only.
_quiet = threading.local()


class _DropGuardParseWarnings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_quiet, "active", False)


logging.getLogger("sqlglot").addFilter(_DropGuardParseWarnings())


def check_read_only(sql: str, dialect: str) -> str:
    """Return ``sql`` (stripped of surrounding space and trailing semicolons) if it is one read-only query.

    Args:
        sql: the query, as the model wrote it.
        dialect: the database's dialect, ``"duckdb"`` or ``"sqlite"`` (any sqlglot dialect name works).

    Raises:
        UnsafeQuery: the query is not allowed; the message says why, for the model.
        UnparsableQuery: sqlglot cannot parse the query (a subclass of ``UnsafeQuery`` with kind ``syntax``).
    """
    if not isinstance(sql, str):
        raise UnsafeQuery(f"the query must be text, got {type(sql).__name__}")
    if len(sql) > _CACHE_MAX_CHARS:
        verdict = _verdict(sql, dialect)
    else:
        verdict = _cached_verdict(sql, dialect)
    error, text = verdict
    if error is not None:
        raise error(text)
    return text


@functools.lru_cache(maxsize=4096)
def _cached_verdict(sql: str, dialect: str) -> tuple[type[UnsafeQuery] | None, str]:
    return _verdict(sql, dialect)


def _verdict(sql: str, dialect: str) -> tuple[type[UnsafeQuery] | None, str]:
    try:
        return None, _check(sql, dialect, depth=0)
    except UnsafeQuery as refusal:
        return type(refusal), str(refusal)


def _check(sql: str, dialect: str, depth: int) -> str:
    statement = sql.strip()
    while statement.endswith(";"):
        statement = statement[:-1].rstrip()
    if not statement:
        raise UnsafeQuery("the query is empty: write one SQL query")
    if len(statement) > MAX_QUERY_CHARS:
        raise UnsafeQuery(f"the query is {len(statement)} characters long; the limit is {MAX_QUERY_CHARS}")
    if "\x00" in statement:
        raise UnsafeQuery("the query contains a NUL character")
    try:
        statement.encode("utf-8")
    except UnicodeEncodeError:
        raise UnsafeQuery("the query is not valid text (it holds an unpaired surrogate)") from None

    tokens, tokens_dialect = _tokenize(statement, dialect)
    if not tokens:
        raise UnsafeQuery("the query holds only comments: write one SQL query")
    first = tokens[0]
    if first.text.upper() == "EXPLAIN" and depth == 0:
        rest = statement[first.end + 1 :]
        option = _EXPLAIN_OPTION.match(rest)
        if option:
            rest = rest[option.end() :]
        _check(rest, dialect, depth=1)
        _check_with_engine_parser(statement, dialect)
        return statement

    expressions = _parse(statement, dialect, tokens, tokens_dialect)
    if len(expressions) > 1:
        raise UnsafeQuery(f"write one statement at a time; found {len(expressions)} statements")
    if not expressions:
        raise UnsafeQuery("the query holds no statement: write one SQL query")
    root = expressions[0]
    while isinstance(root, (exp.Subquery, exp.Paren)) and isinstance(root.this, exp.Expression):
        root = root.this
    if not isinstance(root, (exp.Select, exp.SetOperation, exp.Values)):
        word = _statement_name(root, first.text)
        raise UnsafeQuery(
            f"{word} statements are not allowed; only read-only queries run here ({ALLOWED_WORDS})"
        )
    for node in root.walk():
        _check_node(node)
    _check_with_engine_parser(statement, dialect)
    return statement


@functools.lru_cache(maxsize=32)
def _dialect(name: str | None) -> Dialect:
    return Dialect.get_or_raise(name)


_ERRORS = (ParseError, TokenError, SqlglotError, ValueError, RecursionError)


def _tokenize(sql: str, dialect: str) -> tuple[list[Any], str | None]:
    """The tokens of ``sql`` and the dialect that read them (``None``: sqlglot's generic one)."""
    try:
        return _dialect(dialect).tokenize(sql), dialect
    except _ERRORS:
        try:
            return _dialect(None).tokenize(sql), None
        except _ERRORS as exc:
            raise UnparsableQuery(f"the query could not be read: {_describe_error(exc)}") from None


def _parse(sql: str, dialect: str, tokens: list[Any], tokens_dialect: str | None) -> list[exp.Expression]:
    # The tokens are parsed as they are (tokenising again would double the cost of a fresh query).
    _quiet.active = True
    try:
        try:
            parsed = _dialect(tokens_dialect).parser().parse(tokens, sql)
        except _ERRORS as first:
            try:
                if tokens_dialect is None:
                    raise
                parsed = _dialect(None).parser().parse(_dialect(None).tokenize(sql), sql)
            except _ERRORS:
                reason = _engine_syntax_error(sql, dialect) or _describe_error(first)
                raise UnparsableQuery(f"the query could not be parsed: {reason}") from None
    finally:
        _quiet.active = False
    return [expression for expression in parsed if expression is not None]


def _describe_error(exc: BaseException) -> str:
    errors = getattr(exc, "errors", None)
    if errors:
        error = errors[0]
        where = f" at line {error.get('line')}, column {error.get('col')}" if error.get("line") else ""
        return f"{_readable(str(error.get('description') or 'invalid syntax'))}{where}"
    if isinstance(exc, RecursionError):
        return "it is nested too deeply"
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _readable(description: str) -> str:
    # "Required keyword: 'expression' missing for <class 'sqlglot.expressions.core.Add'>" -> "... for Add"
    return re.sub(r"<class '(?:[\w.]+\.)?(\w+)'>", r"\1", description)


def _statement_name(node: exp.Expression, first_word: str) -> str:
    if isinstance(node, exp.Command):
        return str(node.this or first_word).upper()
    if isinstance(node, exp.Expression) and type(node).__name__ in _STATEMENT_NAMES:
        return _STATEMENT_NAMES[type(node).__name__]
    return first_word.upper() or type(node).__name__.upper()


def _function_name(node: exp.Func) -> str:
    if isinstance(node, (exp.Anonymous, exp.AnonymousAggFunc)):
        return str(node.name).lower()
    return node.sql_name().lower()


def _denied_name(name: str) -> bool:
    if name in DENIED_FUNCTIONS:
        return True
    if name.startswith("duckdb_"):
        return name not in _DUCKDB_CATALOG_FUNCTIONS
    return name.startswith(_DENIED_PREFIXES) or name.endswith(_DENIED_SUFFIXES)


def _check_node(node: exp.Expression) -> None:
    if isinstance(node, _FORBIDDEN_NODES):
        word = _statement_name(node, "")
        raise UnsafeQuery(
            f"{word} is not allowed inside a query; only read-only queries run here ({ALLOWED_WORDS})"
        )
    if isinstance(node, exp.Into):
        raise UnsafeQuery("SELECT ... INTO creates a table and is not allowed; drop the INTO clause")
    if isinstance(node, exp.Func):
        anonymous = isinstance(node, (exp.Anonymous, exp.AnonymousAggFunc))
        name = _function_name(node)
        # Known sqlglot classes are ordinary SQL functions, except the file readers sqlglot knows by name.
        if (anonymous and _denied_name(name)) or (not anonymous and name.startswith(("read_", "write_"))):
            raise UnsafeQuery(
                f"the function {name}() is not allowed: queries may not read files, other databases or "
                "server settings; query the tables of this database"
            )
        return
    if isinstance(node, exp.Table):
        target = node.this
        if isinstance(target, exp.Func):
            name = _function_name(target)
            if not (isinstance(target, _ALLOWED_TABLE_FUNCTION_CLASSES) or name in ALLOWED_TABLE_FUNCTIONS):
                raise UnsafeQuery(
                    f"the table function {name}() is not allowed in FROM; query the tables of this database"
                )
            return
        if isinstance(target, exp.Literal):
            raise UnsafeQuery(
                "a string in FROM reads a file and is not allowed; name a table of this database"
            )
        for part in node.parts:
            text = part.name if isinstance(part, exp.Expression) else str(part)
            if _FILE_LIKE.search(text):
                raise UnsafeQuery(
                    f"the table name {text!r} looks like a file path or URL, which is not allowed; "
                    "name a table of this database"
                )


# DuckDB's own parser, as a second opinion on how many statements there are and what they are.
_duckdb_parser: Any = None
_duckdb_parser_lock = threading.Lock()


def _duckdb_statements(sql: str) -> list[Any]:
    """DuckDB's parse of ``sql`` (raises ``duckdb.Error`` on a syntax error)."""
    global _duckdb_parser
    import duckdb

    with _duckdb_parser_lock:
        if _duckdb_parser is None:
            _duckdb_parser = duckdb.connect(
                ":memory:", config={"enable_external_access": False, "lock_configuration": True}
            )
        return _duckdb_parser.extract_statements(sql)


def _engine_syntax_error(sql: str, dialect: str) -> str | None:
    """DuckDB's own message for a syntax error in ``sql`` (clearer than sqlglot's), if it has one."""
    if dialect != "duckdb":
        return None
    import duckdb

    try:
        _duckdb_statements(sql)
    except duckdb.Error as exc:
        return str(exc).strip()[:500]
    return None


def _check_with_engine_parser(sql: str, dialect: str) -> None:
    if dialect != "duckdb":
        return  # sqlite3 runs one statement per call and its authorizer refuses anything but reading
    import duckdb

    try:
        statements = _duckdb_statements(sql)
    except duckdb.Error:
        return  # a syntax error: running it reports the engine's own message
    if len(statements) != 1:
        raise UnsafeQuery(f"write one statement at a time; found {len(statements)} statements")
    kind = getattr(statements[0].type, "name", str(statements[0].type)).upper()
    if kind not in ("SELECT", "EXPLAIN"):
        raise UnsafeQuery(
            f"{kind} statements are not allowed; only read-only queries run here ({ALLOWED_WORDS})"
        )
