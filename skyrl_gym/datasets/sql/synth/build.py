"""Build the synthetic text-to-SQL dataset: database instances, checked questions, rows in SkyRL's format.

Every domain is instantiated several times with its own seed and size; each instance is a database file
(DuckDB, or SQLite with ``engine="sqlite"``) named ``{domain}_{k:02d}``. Instances belong to one split only (:data:`INSTANCES_PER_SPLIT`: per domain, the first
ones are train, then dev, then test), so train, dev and test never share a database.

For each instance the builder draws questions from the templates of every level and keeps a question only
when :func:`.templates.check_candidate` accepts it: a non-empty, non-degenerate result that differs from
careless readings and agrees with fair ones. Those checks run many small queries, so they run on an
in-memory SQLite copy of the instance (:class:`Mirror`, a fraction of a millisecond each); the gold query
of every kept question then runs on the database file itself through
:class:`~skyrl_gym.runtime.sql.database.Database`, and must give the same non-degenerate result there. The
read-only guard of :mod:`~skyrl_gym.runtime.sql.guard` must accept every gold query too (the oracle runs it
as a solution); its verdict depends on the shape of a query, not on its literal values, so it runs once per
shape. Questions are unique across the whole dataset, and gold queries unique per database.

Everything is deterministic for a seed: the same seed and sizes give the same rows.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import math
import random
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from skyrl_gym.bundled import Bundle
from skyrl_gym.datasets.sql.synth.domains import DOMAINS
from skyrl_gym.datasets.sql.synth.schema import Domain, create_table_sql
from skyrl_gym.datasets.sql.synth.templates import (
    GENERIC_TEMPLATES,
    LEVELS,
    Candidate,
    Context,
    Template,
    check_candidate,
    degenerate,
    same_rows,
)

__all__ = [
    "DEFAULT_SIZES",
    "ENGINES",
    "GENERATOR_VERSION",
    "INSTANCES_PER_SPLIT",
    "LEVEL_SHARES",
    "SPLITS",
    "Instance",
    "Question",
    "BUNDLE",
    "build_bundled",
    "build_synthetic",
    "bundled_version",
    "fingerprint",
    "level_counts",
    "plan_instances",
    "write_database",
    "write_sqlite",
]

GENERATOR_VERSION = "1"
"""The generator's version; cached datasets carry it, and :func:`fingerprint`, in their folder name."""


def fingerprint() -> str:
    """A short hash of the sources that shape the rows (this package and the environment's prompts).

    Any change to them gives the cached dataset a new folder, so a stale build is never reused.
    """
    from skyrl_gym.envs.sql import prompts

    here = Path(__file__).resolve().parent
    package = here.parents[2]  # skyrl_gym/: names are hashed relative to it, so the checkout's place is not
    files = sorted(here.rglob("*.py")) + [Path(prompts.__file__).resolve()]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(package).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:10]


SPLITS = ("train", "dev", "test")

ENGINES = ("duckdb", "sqlite")
"""The engines a dataset can be built for (the file suffix is the engine's name)."""

INSTANCES_PER_SPLIT = {"train": 6, "dev": 1, "test": 2}
"""Database instances of every domain in each split."""

DEFAULT_SIZES = {"train": 2400, "dev": 300, "test": 400}
"""Questions per split of the bundled dataset."""

LEVEL_SHARES = {"easy": 0.24, "medium": 0.32, "hard": 0.26, "extra": 0.18}
"""The share of each level in a split (Spider's development set has 24/43/17/16: more room here for the hard
levels, where a small model has most to learn)."""

ATTEMPTS_PER_QUESTION = 30
MISSES_IN_A_ROW = 10


@dataclasses.dataclass(frozen=True)
class Instance:
    """One database: a domain filled for a seed at a scale, in one split."""

    db_id: str
    domain: Domain
    split: str
    seed: str
    scale: float


@dataclasses.dataclass(frozen=True)
class Question:
    """A checked question on one instance."""

    db_id: str
    domain: str
    level: str
    template: str
    question: str
    sql: str


def plan_instances(seed: int = 0) -> list[Instance]:
    """Every database instance of the dataset for ``seed``, split by split."""
    out = []
    for domain in DOMAINS:
        k = 0
        for split in SPLITS:
            for _ in range(INSTANCES_PER_SPLIT[split]):
                db_id = f"{domain.name}_{k:02d}"
                instance_seed = f"skyrl_sql/{seed}/{db_id}"
                scale = round(random.Random(instance_seed + "/scale").uniform(0.6, 1.5), 2)
                out.append(Instance(db_id, domain, split, instance_seed, scale))
                k += 1
    return out


def populate(instance: Instance) -> dict[str, list[tuple[Any, ...]]]:
    """The rows of every table of ``instance`` (deterministic for its seed)."""
    return instance.domain.populate(random.Random(instance.seed + "/rows"), instance.scale)


class Writer:
    """Writes DuckDB files through one in-memory DuckDB connection that attaches each new file in turn.

    Attaching is several times faster than opening a connection per file. Use it as a context manager.
    """

    def __init__(self) -> None:
        import duckdb

        self._con = duckdb.connect(":memory:", config={"threads": 1})

    def write(self, domain: Domain, data: dict[str, list[tuple[Any, ...]]], path: str | Path) -> None:
        """Create the DuckDB file ``path`` with ``domain``'s tables (keys included) filled with ``data``."""
        import duckdb
        import pyarrow as pa

        path = Path(path)
        path.unlink(missing_ok=True)
        con = self._con
        try:  # small blocks: files of a few hundred KB instead of 4 MB (DuckDB 1.2 and newer)
            con.execute(f"ATTACH '{_quoted(str(path))}' AS target (BLOCK_SIZE 16384)")
        except duckdb.Error:
            path.unlink(missing_ok=True)
            con.execute(f"ATTACH '{_quoted(str(path))}' AS target")
        try:
            con.execute("USE target")
            con.execute("BEGIN TRANSACTION")
            for table in domain.tables:
                con.execute(create_table_sql(table))
            for table in domain.tables:
                rows = data[table.name]
                # a table that references itself needs the referenced rows first: insert those in a first batch
                own = [c for c in table.columns if c.references and c.references[0] == table.name]
                batches = [rows]
                if own:
                    i = table.index(own[0].name)
                    batches = [[r for r in rows if r[i] is None], [r for r in rows if r[i] is not None]]
                for batch in batches:
                    if not batch:
                        continue
                    columns = {c.name: [row[j] for row in batch] for j, c in enumerate(table.columns)}
                    con.register("staged_rows", pa.table(columns))
                    con.execute(f"INSERT INTO {table.name} SELECT * FROM staged_rows")
                    con.unregister("staged_rows")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        finally:
            con.execute("USE memory")
            con.execute("DETACH target")

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _quoted(text: str) -> str:
    return text.replace("'", "''")


def write_sqlite(domain: Domain, data: dict[str, list[tuple[Any, ...]]], path: str | Path) -> None:
    """Create the SQLite file ``path`` with ``domain``'s tables (same DDL, keys included) filled with ``data``.

    Dates are stored as ISO text and booleans as 0/1, as SQLite databases (Spider, BIRD) usually do.
    """
    path = Path(path)
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    try:
        for table in domain.tables:
            con.execute(create_table_sql(table))
            marks = ", ".join("?" for _ in table.columns)
            con.executemany(
                f"INSERT INTO {table.name} VALUES ({marks})",
                ([_sqlite_value(v) for v in row] for row in data[table.name]),
            )
        con.commit()
        broken = con.execute("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise ValueError(f"{path}: rows break foreign keys: {broken[:3]}")
    finally:
        con.close()


def write_database(
    domain: Domain, data: dict[str, list[tuple[Any, ...]]], path: str | Path, engine: str = "duckdb"
) -> None:
    """Create the database file ``path`` (``engine`` "duckdb" or "sqlite") with ``domain``'s tables."""
    if engine == "sqlite":
        write_sqlite(domain, data, path)
        return
    with Writer() as writer:
        writer.write(domain, data, path)


class Mirror:
    """An in-memory SQLite copy of one instance, for the many small queries that check candidates.

    Dates are ISO strings (they compare like dates), booleans are 0/1, LIKE is case-sensitive as in DuckDB.
    """

    def __init__(self, domain: Domain, data: dict[str, list[tuple[Any, ...]]]):
        self._con = sqlite3.connect(":memory:")
        self._con.execute("PRAGMA case_sensitive_like = ON")
        for table in domain.tables:
            self._con.execute(f"CREATE TABLE {table.name} ({', '.join(c.name for c in table.columns)})")
            marks = ", ".join("?" for _ in table.columns)
            self._con.executemany(
                f"INSERT INTO {table.name} VALUES ({marks})",
                ([_sqlite_value(v) for v in row] for row in data[table.name]),
            )

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        return self._con.execute(sql).fetchall()

    def close(self) -> None:
        self._con.close()


def _sqlite_value(value: Any) -> Any:
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, bool):
        return int(value)
    return value


_LITERALS = re.compile(r"'(?:[^']|'')*'|\b\d+(?:\.\d+)?\b")


class Guard:
    """The environment's read-only guard, run once per query shape (the query with its literals masked)."""

    def __init__(self, dialect: str = "duckdb"):
        self.dialect = dialect
        self._shapes: set[str] = set()

    def check(self, sql: str) -> None:
        """Raise :class:`~skyrl_gym.runtime.sql.database.UnsafeQuery` when the guard refuses ``sql``."""
        shape = _LITERALS.sub("?", sql)
        if shape in self._shapes:
            return
        from skyrl_gym.runtime.sql.guard import check_read_only

        check_read_only(sql, self.dialect)
        self._shapes.add(shape)


def _quotas(n: int, n_databases: int) -> dict[str, int]:
    """Questions of each level to generate per database for ``n`` in a split (with a little to spare)."""
    return {level: math.ceil(n * share / n_databases) + 1 for level, share in LEVEL_SHARES.items()}


def _templates(domain: Domain) -> dict[str, list[Template]]:
    by_level: dict[str, list[Template]] = {level: [] for level in LEVELS}
    for t in (*GENERIC_TEMPLATES, *domain.templates):
        by_level[t.level].append(t)
    return by_level


def _normal_question(text: str) -> str:
    return " ".join(text.lower().split()).rstrip("?.!")


def generate_questions(
    instance: Instance,
    data: dict[str, list[tuple[Any, ...]]],
    run: Callable[[str], Sequence[tuple[Any, ...]]],
    quotas: dict[str, int],
    seen: set[str],
    guard: Guard | None = None,
) -> list[Question]:
    """Questions for one instance, ``quotas[level]`` of each level where the templates allow.

    ``run(sql)`` returns the rows of a query on the instance's database file; ``seen`` holds the questions
    already used in the dataset and is updated; ``guard`` checks every kept gold query.
    """
    rng = random.Random(instance.seed + "/questions")
    ctx = Context(instance.domain, data, rng)
    templates = _templates(instance.domain)
    mirror = Mirror(instance.domain, data)
    sqls: set[str] = set()
    out: list[Question] = []
    try:
        for level in LEVELS:
            made = attempts = 0
            accepted: Counter = Counter()
            misses: Counter = Counter()  # failures in a row; a template that keeps failing here is dropped
            while made < quotas[level] and attempts < ATTEMPTS_PER_QUESTION * quotas[level]:
                live = [t for t in templates[level] if misses[t.name] < MISSES_IN_A_ROW]
                if not live:
                    break
                attempts += 1
                fewest = min(accepted[t.name] for t in live)  # balance the templates of a level
                chosen = rng.choice([t for t in live if accepted[t.name] == fewest])
                question = _accept(chosen.make(ctx), mirror, run, seen, sqls, guard)
                if question is None:
                    misses[chosen.name] += 1
                    continue
                misses[chosen.name] = 0
                accepted[chosen.name] += 1
                out.append(Question(instance.db_id, instance.domain.name, level, chosen.name, *question))
                made += 1
    finally:
        mirror.close()
    return out


def _accept(
    candidate: Candidate | None,
    mirror: Mirror,
    run: Callable[[str], Sequence[tuple[Any, ...]]],
    seen: set[str],
    sqls: set[str],
    guard: Guard | None,
) -> tuple[str, str] | None:
    """(question, gold SQL) when ``candidate`` is new and passes every check, else ``None``."""
    if candidate is None:
        return None
    key = _normal_question(candidate.question)
    if key in seen or candidate.sql in sqls:
        return None
    if check_candidate(candidate, mirror.rows) is not None:
        return None
    actual = run(candidate.sql)  # the real engine must agree with the mirror
    if degenerate(actual, candidate.max_rows) or not same_rows(actual, mirror.rows(candidate.sql)):
        return None
    if guard is not None:
        guard.check(candidate.sql)  # a refused gold query is a template bug: fail loudly
    seen.add(key)
    sqls.add(candidate.sql)
    return candidate.question, candidate.sql


def _select(questions: list[Question], n: int, rng: random.Random) -> list[Question]:
    """``n`` questions with the level shares of :data:`LEVEL_SHARES`, spread evenly over the databases."""
    targets = {level: round(n * share) for level, share in LEVEL_SHARES.items()}
    targets["medium"] += n - sum(targets.values())
    by_level: dict[str, dict[str, list[Question]]] = {level: {} for level in LEVELS}
    for q in questions:
        by_level[q.level].setdefault(q.db_id, []).append(q)

    def round_robin(groups: dict[str, list[Question]]) -> list[Question]:
        queues = [list(groups[db]) for db in sorted(groups)]
        ordered = []
        while any(queues):
            for queue in queues:
                if queue:
                    ordered.append(queue.pop(0))
        return ordered

    chosen: list[Question] = []
    spare: list[Question] = []
    for level in LEVELS:
        ordered = round_robin(by_level[level])
        chosen += ordered[: targets[level]]
        spare += ordered[targets[level] :]
    if len(chosen) < n:  # a level ran short: fill from the others
        chosen += spare[: n - len(chosen)]
    rng.shuffle(chosen)
    return chosen


def build_synthetic(
    out_dir: str | Path,
    *,
    seed: int = 0,
    sizes: dict[str, int] | None = None,
    db_root: str | Path | None = None,
    engine: str = "duckdb",
    log: Callable[[str], None] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Build the databases under ``out_dir/databases`` and return the rows of every split.

    ``sizes`` maps a split to its number of questions (:data:`DEFAULT_SIZES` for missing ones). ``engine``
    is ``"duckdb"`` (``<db_id>.duckdb`` files) or ``"sqlite"`` (``<db_id>.sqlite``); the gold queries are
    checked on that engine. Rows point at ``db_root/databases/<file>`` (``db_root`` defaults to ``out_dir``;
    the cache builds in a temporary folder that is renamed afterwards). A split of size 0 builds no database.
    """
    from skyrl_gym.envs.sql.prompts import build_row
    from skyrl_gym.runtime.sql.database import close_idle_databases, open_database

    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    sizes = {**DEFAULT_SIZES, **(sizes or {})}
    for split, n in sizes.items():
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; splits are {SPLITS}")
        if n < 0:
            raise ValueError(f"the size of {split!r} must be at least 0, got {n}")
    out_dir = Path(out_dir).resolve()
    db_dir = out_dir / "databases"
    db_dir.mkdir(parents=True, exist_ok=True)
    final_db_dir = (Path(db_root).resolve() if db_root is not None else out_dir) / "databases"
    instances = plan_instances(seed)
    seen: set[str] = set()
    guard = Guard(engine)
    writer = Writer()
    rows: dict[str, list[dict[str, Any]]] = {}
    for split in SPLITS:
        started = time.perf_counter()
        mine = [i for i in instances if i.split == split]
        if sizes[split] == 0:
            rows[split] = []
            continue
        quotas = _quotas(sizes[split], len(mine))
        questions: list[Question] = []
        drafts: dict[tuple[str, str], dict[str, Any]] = {}  # rows of every question, before the selection
        for instance in mine:
            data = populate(instance)
            path = db_dir / f"{instance.db_id}.{engine}"
            if engine == "sqlite":
                write_sqlite(instance.domain, data, path)
            else:
                writer.write(instance.domain, data, path)
            with open_database(path) as db:  # one open file at a time: each holds a few MB

                def run(sql: str, db: Any = db) -> Sequence[tuple[Any, ...]]:
                    return db.execute(sql, check=False, timeout_s=None).rows

                made = generate_questions(instance, data, run, quotas, seen, guard)
                for q in made:
                    drafts[(q.db_id, q.sql)] = build_row(
                        db,
                        q.question,
                        q.sql,
                        db_id=q.db_id,
                        split=split,
                        index=-1,
                        level=q.level,
                        db_path=str(final_db_dir / path.name),
                        extra_info={"domain": q.domain, "template": q.template},
                    )
            questions += made
        picked = _select(questions, sizes[split], random.Random(f"skyrl_sql/{seed}/{split}/order"))
        split_rows = []
        for index, q in enumerate(picked):
            row = drafts[(q.db_id, q.sql)]
            row["extra_info"]["index"] = index
            split_rows.append(row)
        rows[split] = split_rows
        if len(split_rows) < sizes[split]:
            raise RuntimeError(
                f"only {len(split_rows)} {split} questions could be made, {sizes[split]} were asked"
            )
        if log:
            log(
                f"{split}: {len(split_rows)} questions on {len(mine)} databases in {time.perf_counter() - started:.1f} s"
            )
    writer.close()
    close_idle_databases()  # release the files at once (a cache build renames their folder next)
    return rows


def level_counts(rows: Iterable[dict[str, Any]]) -> Counter:
    """How many rows of each level (``extra_info.level``)."""
    return Counter(row["extra_info"]["level"] for row in rows)


def bundled_version() -> str:
    """The bundled dataset's version: :data:`GENERATOR_VERSION` and :func:`fingerprint` (hashed once)."""
    return f"{GENERATOR_VERSION}-{_fingerprint_once()}"


@functools.cache
def _fingerprint_once() -> str:
    return fingerprint()


def build_bundled(staging: Path, target: Path, seed: int) -> None:
    """Build the bundled dataset for ``seed`` into ``staging``: its databases and one JSONL file per split,
    the rows' ``db_path`` naming ``target``, where the folder is renamed once complete."""
    from skyrl_gym.rows import write_split

    rows = build_synthetic(staging, seed=seed, db_root=target)
    for split, split_rows in rows.items():
        write_split(split_rows, staging, split, parquet=False)


BUNDLE = Bundle(prefix="synthetic", version=bundled_version, build=build_bundled, done="test.jsonl")
"""The bundled dataset that :mod:`skyrl_gym.envs.sql.tasks` reads (``skyrl_gym.bundled``'s ``"sql"``); the split
written last, ``test``, marks it complete."""
