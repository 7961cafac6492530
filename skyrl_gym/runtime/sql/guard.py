"""The read-only guard: a model's query runs only if it is one statement that reads this database and nothing else.

:func:`check_read_only` parses the query with sqlglot (in the database's dialect, then with sqlglot's generic
parser if that fails) and accepts exactly one statement of these kinds: ``SELECT`` (with ``WITH``), the set
operations ``UNION`` / ``INTERSECT`` / ``EXPLAIN`` of one of those, and ``VALUES``. Then it checks what the
query reads against an allow-list, :class:`Relations`:

- every table reference (in ``FROM``, a ``JOIN``, a subquery, a ``LATERAL``, a ``PIVOT``, ``TABLE t``...) must
  be a common table expression in scope, one of the database's own tables and views, or one of a few
  catalogue views that describe only the database's schema (:data:`CATALOG_RELATIONS`:
  ``information_schema.tables``, ``sqlite_master``...). The engine's system views (``pg_settings``,
  ``duckdb_databases``, ``pragma_database_list``...), other schemas and catalogues are refused; an unknown
  name is refused with the database's table names (kind ``schema``);
- every table function, however it is called (``FROM f()``, ``LATERAL f()``, ``JOIN f() ON``...), must be
  one that computes rows from its arguments alone (:data:`ALLOWED_TABLE_FUNCTIONS`: ``range``,
  ``generate_series``, ``unnest``...) or a catalogue function of that list;
- scalar functions that read files, reach the network, run SQL from a string, or read or change the
  engine's state (settings, variables, sequences, the random seed, the log) are refused
  (:data:`DENIED_FUNCTIONS`);
- table references that are file paths or URLs (``FROM 'data.csv'``) are refused.

Anything else (DDL, DML also inside a ``WITH``, ``SELECT ... INTO``, ``ATTACH``, ``COPY``, ``EXPORT``,
``INSTALL``/``LOAD``, ``PRAGMA``, ``SET``, ``CALL``, ``CHECKPOINT``, ``VACUUM``, transactions, ``DESCRIBE`` /
``SHOW`` / ``SUMMARIZE``, several statements, text that cannot be parsed) is refused with a message that
says what was refused and what is allowed, without host paths.

For DuckDB, DuckDB's own parser must also see exactly one ``SELECT`` or ``EXPLAIN`` statement, and the same
allow-list is checked a second time on DuckDB's own parse tree (``json_serialize_sql``), with DuckDB's own
rules for the scope of common table expressions, so that no difference between the two parsers can smuggle
a table or a function through. The guard is the first line of defence only: connections are read-only, and
SQLite's authorizer allows reading only the database's own tables (see :mod:`.sqlite_engine`).

Verdicts are cached per (query, dialect, relations), so a query that is run again costs a dictionary lookup.
"""

from __future__ import annotations

import difflib
import functools
import json
import logging
import re
import threading
from collections.abc import Iterable
from typing import Any

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, SqlglotError, TokenError

from skyrl_gym.runtime.sql.base import UnparsableQuery, UnsafeQuery

__all__ = [
    "ALLOWED_TABLE_FUNCTIONS",
    "CATALOG_RELATIONS",
    "DENIED_FUNCTIONS",
    "MAX_QUERY_CHARS",
    "Relations",
    "UnknownRelation",
    "check_read_only",
]

MAX_QUERY_CHARS = 20_000
"""Longer queries are refused without parsing (parsing costs the caller about 1 ms and 1 MB per 1,000
characters of an adversarial query; real queries, gold ones included, stay well under this)."""

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
        # SQL inside strings
        "query",
        "query_table",
        "sql_auto_complete",
        "json_execute_serialized_sql",
        "from_substrait",
        "from_substrait_json",
        # the engine's state: settings, variables, secrets, sequences, the random seed, the log, checkpoints
        "current_setting",
        "getenv",
        "getvariable",
        "which_secret",
        "nextval",
        "currval",
        "setseed",
        "write_log",
        "checkpoint",
        "force_checkpoint",
        "enable_profiling",
        "truncate_duckdb_logs",
    }
)
"""Scalar functions refused anywhere in a query (names compared in lower case)."""

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
    }
)
ALLOWED_TABLE_FUNCTIONS = frozenset(
    {"range", "generate_series", "unnest", "json_each", "json_tree", "generate_subscripts"}
    | _DUCKDB_CATALOG_FUNCTIONS
)
"""The only table functions a DuckDB query may call: they compute rows from their arguments, or describe
only the schema (SQLite queries may call none: its authorizer refuses its table-valued functions)."""

CATALOG_RELATIONS: dict[str, frozenset[tuple[str, str]]] = {
    "duckdb": frozenset(
        [("main", name) for name in sorted(_DUCKDB_CATALOG_FUNCTIONS - {"duckdb_keywords"})]
        + [("main", "sqlite_master"), ("main", "sqlite_schema")]
        + [
            ("information_schema", name)
            for name in (
                "tables",
                "columns",
                "views",
                "schemata",
                "table_constraints",
                "key_column_usage",
                "referential_constraints",
                "constraint_column_usage",
                "check_constraints",
            )
        ]
    ),
    "sqlite": frozenset(
        [("main", "sqlite_master"), ("main", "sqlite_schema"), ("temp", "sqlite_temp_master")]
        + [("temp", "sqlite_temp_schema")]
    ),
}
"""The engines' catalogue views a query may read besides the database's own tables, as (schema, name): they
describe only the schema (names, types, keys), never settings, files or other databases."""

_SYSTEM_SCHEMAS = frozenset({"pg_catalog", "information_schema"})
_SYSTEM_CATALOGS = frozenset({"system", "temp"})
_SYSTEM_PREFIXES = ("duckdb_", "pg_", "pragma_", "sqlite_")
_SQLITE_SYSTEM = frozenset({"json_each", "json_tree", "dbstat", "fts3tokenize", "generate_series", "carray"})
_SHOWN_NAMES = 40


class UnknownRelation(UnsafeQuery):
    """The guard refused a table reference that names no table of the database (kind ``schema``)."""

    kind = "schema"


class Relations:
    """What a query may read: one database's own tables and views (and :data:`CATALOG_RELATIONS`).

    Make one with :meth:`of`; a :class:`~skyrl_gym.runtime.sql.client.Database` makes its own
    (``db.relations()``). Names compare as the engines compare them, without regard to case.
    """

    __slots__ = ("_hash", "catalog", "dialect", "names", "tables")

    def __init__(self, dialect: str, tables: Iterable[tuple[str, str]], catalog: str | None = None):
        pairs = [(str(schema), str(name)) for schema, name in tables]
        self.dialect = dialect
        self.catalog = catalog.lower() if catalog else None
        self.tables = frozenset((schema.lower(), name.lower()) for schema, name in pairs)
        self.names = tuple(name if schema.lower() == "main" else f"{schema}.{name}" for schema, name in pairs)
        self._hash = hash((dialect, self.catalog, self.tables))

    @classmethod
    def of(cls, dialect: str, tables: Iterable[Any], catalog: str | None = None) -> Relations:
        """From ``(schema, name)`` pairs, or names (``"t"`` for ``main.t``, ``"s.t"``)."""
        pairs = []
        for table in tables:
            if isinstance(table, str):
                schema, _, name = table.rpartition(".")
                pairs.append((schema or "main", name))
            else:
                pairs.append((str(table[0]), str(table[1])))
        return cls(dialect, pairs, catalog)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, Relations)
            and (self.dialect, self.catalog, self.tables) == (other.dialect, other.catalog, other.tables)
        )

    def listing(self) -> str:
        """The names, for a message (the first few, then how many more)."""
        names = sorted(self.names, key=str.lower)
        if not names:
            return "(none)"
        shown = ", ".join(names[:_SHOWN_NAMES])
        return shown + (f" and {len(names) - _SHOWN_NAMES} more" if len(names) > _SHOWN_NAMES else "")

    def __repr__(self) -> str:
        return f"Relations({self.dialect!r}, {len(self.tables)} tables, catalog={self.catalog!r})"


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


def check_read_only(sql: str, dialect: str, relations: Relations | Iterable[Any] | None = None) -> str:
    """Return ``sql`` (stripped of surrounding space and trailing semicolons) if it is one read-only query.

    Args:
        sql: the query, as the model wrote it.
        dialect: the database's dialect, ``"duckdb"`` or ``"sqlite"`` (any sqlglot dialect name works).
        relations: what the query may read (:class:`Relations`, or table names); ``None`` allows any table
            that is not one of the engine's system relations (for checking a query without its database).

    Raises:
        UnsafeQuery: the query is not allowed; the message says why, for the model.
        UnknownRelation: it reads a table the database does not have (a subclass with kind ``schema``).
        UnparsableQuery: sqlglot cannot parse the query (a subclass of ``UnsafeQuery`` with kind ``syntax``).
    """
    if not isinstance(sql, str):
        raise UnsafeQuery(f"the query must be text, got {type(sql).__name__}")
    if relations is not None and not isinstance(relations, Relations):
        relations = Relations.of(dialect, relations)
    if len(sql) > _CACHE_MAX_CHARS:
        verdict = _verdict(sql, dialect, relations)
    else:
        verdict = _cached_verdict(sql, dialect, relations)
    error, text = verdict
    if error is not None:
        raise error(text)
    return text


@functools.lru_cache(maxsize=4096)
def _cached_verdict(
    sql: str, dialect: str, relations: Relations | None
) -> tuple[type[UnsafeQuery] | None, str]:
    return _verdict(sql, dialect, relations)


def _verdict(sql: str, dialect: str, relations: Relations | None) -> tuple[type[UnsafeQuery] | None, str]:
    try:
        return None, _check(sql, dialect, relations, depth=0)
    except UnsafeQuery as refusal:
        return type(refusal), str(refusal)


def _check(sql: str, dialect: str, relations: Relations | None, depth: int) -> str:
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
        _check(rest, dialect, relations, depth=1)
        _check_with_engine_parser(statement, dialect, relations, explain=True)
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
        typo = _not_a_statement(statement, dialect, root, first.text)
        if typo is not None:
            raise UnparsableQuery(f"the query could not be parsed: {typo}")
        word = _statement_name(root, first.text)
        raise UnsafeQuery(
            f"{word} statements are not allowed; only read-only queries run here ({ALLOWED_WORDS})"
        )
    _check_tree(root, dialect, relations)
    _check_with_engine_parser(statement, dialect, relations, explain=False)
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


# Words that begin a statement in DuckDB or SQLite (or other engines) that sqlglot may read as a bare
# expression (``CHECKPOINT`` as a column, ``INSTALL x`` as an alias): such a statement is refused as forbidden.
_STATEMENT_WORDS = frozenset(
    """ABORT ALTER ANALYZE ATTACH BEGIN CALL CHECKPOINT COMMENT COMMIT COPY CREATE DEALLOCATE DECLARE DELETE DESC
    DESCRIBE DETACH DROP END EXECUTE EXPLAIN EXPORT FORCE FROM GRANT IMPORT INSERT INSTALL KILL LOAD LOCK MERGE
    PIVOT PRAGMA PREPARE REFRESH REINDEX RELEASE REPLACE RESET REVOKE ROLLBACK SAVEPOINT SELECT SET SHOW
    SUMMARIZE TABLE TRUNCATE UNINSTALL UNLOCK UNPIVOT UPDATE UPSERT USE VACUUM VALUES WITH""".split()
)


def _not_a_statement(sql: str, dialect: str, root: exp.Expression, first_word: str) -> str | None:
    """The parser's message when ``sql`` is no statement at all (a typo such as ``SELEC * FROM t``, or prose,
    that sqlglot read as a bare expression), else ``None`` (a real statement: refused as forbidden)."""
    if isinstance(root, _FORBIDDEN_NODES) or first_word.upper() in _STATEMENT_WORDS:
        return None
    if dialect == "duckdb":
        return _engine_syntax_error(sql, dialect)  # None: DuckDB reads a statement there, which is refused
    if dialect == "sqlite":
        message = _sqlite_syntax_error(sql)
        if message is not None:
            return message
    return f'syntax error at or near "{first_word}"'


def _sqlite_syntax_error(sql: str) -> str | None:
    """SQLite's own message for a syntax error in ``sql``: compiled (as ``EXPLAIN``, never run) on an empty
    in-memory database whose authorizer denies every action."""
    import sqlite3

    connection = sqlite3.connect(":memory:")
    try:
        connection.set_authorizer(lambda *_: sqlite3.SQLITE_DENY)
        connection.execute(f"EXPLAIN {sql}")
    except sqlite3.Error as exc:
        text = str(exc)
        return text[:500] if "syntax error" in text or "incomplete input" in text else None
    finally:
        connection.close()
    return None


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


def _refuse_function(name: str) -> None:
    raise UnsafeQuery(
        f"the function {name}() is not allowed: queries may not read files, other databases or the "
        "engine's settings and state; query the tables of this database"
    )


def _refuse_table_function(name: str, dialect: str) -> None:
    allowed = "range(), generate_series() and unnest()" if dialect != "sqlite" else "none"
    raise UnsafeQuery(
        f"the table function {name}() is not allowed: queries may read only this database's tables and "
        f"views (table functions allowed: {allowed})"
    )


def _table_function_allowed(name: str, dialect: str) -> bool:
    return dialect != "sqlite" and name in ALLOWED_TABLE_FUNCTIONS


# -- the sqlglot tree --------------------------------------------------------------------------------------
def _with_of(node: exp.Expression) -> exp.With | None:
    found = node.args.get("with_") or node.args.get("with")
    return found if isinstance(found, exp.With) else None


def _check_tree(root: exp.Expression, dialect: str, relations: Relations | None) -> None:
    """Check every node of sqlglot's tree, each table reference with the common table expressions in scope."""
    stack: list[tuple[exp.Expression, frozenset[str]]] = [(root, frozenset())]
    while stack:
        node, scope = stack.pop()
        inner = scope
        with_ = _with_of(node)
        if with_ is not None:
            names = [str(cte.alias_or_name).lower() for cte in with_.expressions if isinstance(cte, exp.CTE)]
            recursive = bool(with_.args.get("recursive"))
            seen: list[str] = []
            for cte in with_.expressions:
                if not isinstance(cte, exp.CTE):
                    stack.append((cte, scope))
                    continue
                name = str(cte.alias_or_name).lower()
                if dialect == "sqlite":
                    visible = frozenset(names)  # SQLite: every name of the WITH, in every one of its bodies
                else:  # DuckDB (and the generic rule): the earlier names, and itself when recursive
                    visible = frozenset(seen) | (frozenset({name}) if recursive else frozenset())
                stack.append((cte, scope | visible))
                seen.append(name)
            inner = scope | frozenset(names)
        _check_node(node, scope, dialect, relations)
        for child in node.iter_expressions():
            if child is not with_:
                stack.append((child, inner))


def _check_node(
    node: exp.Expression, scope: frozenset[str], dialect: str, relations: Relations | None
) -> None:
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
            _refuse_function(name)
        return
    if isinstance(node, exp.Lateral) and isinstance(node.this, exp.Func):
        _check_table_function(node.this, dialect)
        return
    if isinstance(node, exp.Table):
        target = node.this
        if isinstance(target, exp.Func):
            _check_table_function(target, dialect)
            return
        if isinstance(target, exp.Literal):
            raise UnsafeQuery(
                "a string in FROM reads a file and is not allowed; name a table of this database"
            )
        parts = [p.name if isinstance(p, exp.Expression) else str(p) for p in node.parts]
        _check_relation(parts, scope, dialect, relations)


def _check_table_function(node: exp.Func, dialect: str) -> None:
    if isinstance(node, (exp.GenerateSeries, exp.Unnest, exp.Explode)) and dialect != "sqlite":
        return
    name = _function_name(node)
    if not _table_function_allowed(name, dialect):
        _refuse_table_function(name, dialect)


# -- table references ----------------------------------------------------------------------------------------
def _check_relation(
    parts: list[str], scope: frozenset[str], dialect: str, relations: Relations | None
) -> None:
    """Refuse a table reference (``parts``: [catalog.][schema.]name) that is not allowed."""
    if len(parts) == 1 and parts[0].lower() in scope:
        return  # a common table expression
    verdict = _resolve([p.lower() for p in parts], dialect, relations)
    file_like = [part for part in parts if _FILE_LIKE.search(part)]
    if verdict == "ok" and (relations is not None or not file_like):
        return  # a table of the database (whatever its name looks like), or any other name when unchecked
    shown = ".".join(parts)
    for part in file_like:
        if part:
            raise UnsafeQuery(
                f"the table name {part!r} looks like a file path or URL, which is not allowed; "
                "name a table of this database"
            )
    listing = relations.listing() if relations is not None else "the database's own tables"
    if verdict == "system":
        raise UnsafeQuery(
            f"{shown!r} is not a table of this database (it belongs to the engine's catalogue or another "
            f"schema or database): queries may read only this database's tables and views: {listing}"
        )
    close = difflib.get_close_matches(parts[-1], list(relations.names) if relations else [], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise UnknownRelation(f"no table or view named {shown!r} in this database{hint}; its tables: {listing}")


def _resolve(parts: list[str], dialect: str, relations: Relations | None) -> str:
    """``"ok"``, ``"system"`` (the engine's, another schema's or another database's) or ``"unknown"``."""
    if len(parts) > 3:
        return "system"
    name = parts[-1]
    schema = parts[-2] if len(parts) >= 2 else ""
    catalog = parts[-3] if len(parts) >= 3 else ""
    own = relations.tables if relations is not None else None
    if dialect == "sqlite":
        allowed = CATALOG_RELATIONS["sqlite"]
        where = schema or "main"
        if catalog:
            return "system"
        if (where, name) in allowed or (not schema and ("temp", name) in allowed):
            return "ok"
        if where != "main":
            return "system"  # the temporary schema, or another (attached) database
        if own is not None and ("main", name) in own:
            return "ok"
        if name.startswith(_SYSTEM_PREFIXES) or name in _SQLITE_SYSTEM:
            return "system"
        return "ok" if own is None else "unknown"
    db = relations.catalog if relations is not None else None
    # What the reference may denote, as (catalog, schema, name); None stands for this database.
    if not schema:
        meanings = [(None, "main", name), ("system", "main", name), ("system", "pg_catalog", name)]
    elif not catalog:
        meanings = [(None, schema, name), (schema, "main", name), ("system", schema, name)]
    else:
        meanings = [(catalog, schema, name)]
    for cat, sch, table in meanings:
        this_database = cat is None or (db is not None and cat == db)
        if own is not None and this_database and (sch, table) in own:
            return "ok"
    for cat, sch, table in meanings:
        if cat == "system" and (sch, table) in CATALOG_RELATIONS["duckdb"]:
            return "ok"
    own_schemas = {s for s, _ in own} if own is not None else set()
    if (
        (catalog and catalog != db)
        or schema in _SYSTEM_CATALOGS
        or schema in _SYSTEM_SCHEMAS
        or (schema and own is not None and schema not in own_schemas and schema != db)
        or name.startswith(_SYSTEM_PREFIXES)
        or name in _duckdb_system_names()
    ):
        return "system"
    return "ok" if own is None else "unknown"


# -- DuckDB's own parser, as a second opinion --------------------------------------------------------------
_duckdb_parser: Any = None
_duckdb_parser_lock = threading.Lock()
_duckdb_names: frozenset[str] | None = None


def _duckdb_connection() -> Any:
    global _duckdb_parser
    import duckdb

    if _duckdb_parser is None:
        _duckdb_parser = duckdb.connect(
            ":memory:", config={"enable_external_access": False, "lock_configuration": True, "threads": 1}
        )
    return _duckdb_parser


def _duckdb_system_names() -> frozenset[str]:
    """The names of DuckDB's system views and table functions (read once from an empty database)."""
    global _duckdb_names
    if _duckdb_names is None:
        with _duckdb_parser_lock:
            connection = _duckdb_connection()
            views = connection.execute("SELECT view_name FROM duckdb_views() WHERE internal").fetchall()
            functions = connection.execute(
                "SELECT DISTINCT function_name FROM duckdb_functions() "
                "WHERE function_type IN ('table', 'table_macro')"
            ).fetchall()
        _duckdb_names = frozenset(str(n).lower() for (n,) in views + functions)
    return _duckdb_names


def _duckdb_statements(sql: str) -> list[Any]:
    """DuckDB's parse of ``sql`` (raises ``duckdb.Error`` on a syntax error)."""
    with _duckdb_parser_lock:
        return _duckdb_connection().extract_statements(sql)


def _duckdb_tree(sql: str) -> dict[str, Any]:
    """DuckDB's parse tree of a ``SELECT`` (``json_serialize_sql``)."""
    with _duckdb_parser_lock:
        [(text,)] = _duckdb_connection().execute("SELECT json_serialize_sql(?)", [sql]).fetchall()
    return json.loads(text)


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


def _check_with_engine_parser(sql: str, dialect: str, relations: Relations | None, *, explain: bool) -> None:
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
    if kind not in ("SELECT", "EXPLAIN") or (kind == "EXPLAIN") != explain:
        raise UnsafeQuery(
            f"{kind} statements are not allowed; only read-only queries run here ({ALLOWED_WORDS})"
        )
    if explain:
        return  # the explained statement was checked on its own
    tree = _duckdb_tree(sql)
    if tree.get("error"):
        raise UnsafeQuery(f"the query could not be checked: {str(tree.get('error_message'))[:300]}")
    if len(tree.get("statements") or []) != 1:
        raise UnsafeQuery("write one statement at a time")
    _check_duckdb_tree(tree["statements"][0], relations)


def _check_duckdb_tree(statement: dict[str, Any], relations: Relations | None) -> None:
    """The allow-list on DuckDB's own tree: table references, table functions and functions."""
    stack: list[tuple[Any, frozenset[str]]] = [(statement, frozenset())]
    while stack:
        node, scope = stack.pop()
        if isinstance(node, list):
            stack.extend((item, scope) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        inner = scope
        ctes = node.get("cte_map")
        if isinstance(ctes, dict) and isinstance(ctes.get("map"), list):
            seen: list[str] = []
            for entry in ctes["map"]:
                name = str(entry.get("key", "")).lower()
                value = entry.get("value") or {}
                query = value.get("query_node") if isinstance(value, dict) else None
                recursive = isinstance(query, dict) and query.get("type") == "RECURSIVE_CTE_NODE"
                visible = frozenset(seen) | (frozenset({name}) if recursive else frozenset())
                stack.append((value, scope | visible))
                seen.append(name)
            inner = scope | frozenset(seen)
        kind = node.get("type") if isinstance(node.get("type"), str) else None
        if node.get("class") == "FUNCTION":
            name = str(node.get("function_name", "")).lower()
            if _denied_name(name):
                _refuse_function(name)
        elif "class" not in node and kind == "BASE_TABLE":
            parts = [str(node.get(k) or "") for k in ("catalog_name", "schema_name", "table_name")]
            _check_relation([p for p in parts if p], scope, "duckdb", relations)
        elif "class" not in node and kind == "TABLE_FUNCTION":
            function = node.get("function") or {}
            name = str(function.get("function_name", "")).lower()
            if not _table_function_allowed(name, "duckdb"):
                _refuse_table_function(name, "duckdb")
            stack.extend((value, inner) for key, value in function.items() if key != "function_name")
            stack.extend((value, inner) for key, value in node.items() if key != "function")
            continue
        elif "class" not in node and kind == "SHOW_REF":
            raise UnsafeQuery(
                f"DESCRIBE, SHOW and SUMMARIZE are not allowed; only read-only queries run here ({ALLOWED_WORDS})"
            )
        stack.extend((value, inner) for key, value in node.items() if key != "cte_map")
