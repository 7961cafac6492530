"""Held-out evaluation sets for the text-to-SQL main job: databases and domains never seen in training.

The synthetic dataset's splits never share a database, but they share domains (a hospital database in train,
another in test). A reader who asks "does the model generalise?" wants more than a new seed: the held-out
set here is drawn from whole domains that training never sees (:data:`HELDOUT_DOMAINS`), on fresh database
instances (``<domain>_h<k>``), and the training rows of the main job are filtered to the other domains
(:func:`training_domain_rows`). The questions are made and checked by the synthesiser's own machinery
(:func:`~skyrl_gym.datasets.sql.synth.build.generate_questions`), and every row gets the compact prompt the
model trains on.

The real Chinook questions (``datasets/sql/chinook_questions.jsonl``) make the transfer set
(:func:`chinook_rows`): a real schema written by someone else, with hand-checked gold queries.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "HELDOUT_DOMAINS",
    "HELDOUT_LEVELS",
    "build_heldout",
    "chinook_rows",
    "compact_row",
    "domain_of",
    "heldout_instances",
    "training_domain_rows",
]

HELDOUT_DOMAINS = ("hospital", "real_estate")
"""Domains whose databases only the held-out set uses: the main job trains on the other six."""

HELDOUT_LEVELS = ("easy", "medium")
"""Levels of the held-out set."""


def domain_of(row: dict[str, Any]) -> str | None:
    """The synthesiser's domain of a row (``extra_info.domain``), None for rows from elsewhere."""
    return (row.get("extra_info") or {}).get("domain")


def training_domain_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows whose domain is not held out (rows without a domain are refused: their origin is unknown)."""
    out = []
    for row in rows:
        domain = domain_of(row)
        if domain is None:
            raise ValueError(
                f"row {row.get('db_id')!r} names no extra_info.domain; cannot tell if it is held out"
            )
        if domain not in HELDOUT_DOMAINS:
            out.append(row)
    return out


def heldout_instances(seed: int = 0, per_domain: int = 3) -> list[Any]:
    """The held-out database instances: ``per_domain`` fresh instances of each held-out domain, seeded apart
    from the synthetic dataset's instances (their ids, ``<domain>_h<k>``, never occur there)."""
    import random

    from skyrl_gym.datasets.sql.synth.build import Instance
    from skyrl_gym.datasets.sql.synth.domains import DOMAINS

    by_name = {d.name: d for d in DOMAINS}
    missing = [name for name in HELDOUT_DOMAINS if name not in by_name]
    if missing:
        raise ValueError(f"held-out domains {missing} are not synthesiser domains ({sorted(by_name)})")
    out = []
    for name in HELDOUT_DOMAINS:
        for k in range(per_domain):
            db_id = f"{name}_h{k:02d}"
            instance_seed = f"skyrl_sql_heldout/{seed}/{db_id}"
            scale = round(random.Random(instance_seed + "/scale").uniform(0.6, 1.5), 2)
            out.append(Instance(db_id, by_name[name], "heldout", instance_seed, scale))
    return out


def compact_row(row: dict[str, Any], db: Any, data_source: str) -> dict[str, Any]:
    """``row`` with the compact prompt the main job trains on (and ``data_source`` set)."""
    from skyrl_gym.envs.sql.prompts import build_compact_prompt

    row["prompt"] = build_compact_prompt(db, row["extra_info"]["question"])
    row["data_source"] = data_source
    return row


def build_heldout(
    out_dir: str | Path,
    *,
    per_level: int = 120,
    levels: Sequence[str] = HELDOUT_LEVELS,
    seed: int = 0,
    per_domain: int = 3,
) -> list[dict[str, Any]]:
    """Build the held-out databases under ``out_dir/databases`` (DuckDB) and return ``per_level`` rows of
    each level, spread evenly over the databases, in a seeded order.

    Raises RuntimeError when the templates cannot make that many questions.
    """
    import math
    import random

    from skyrl_gym.datasets.sql.synth.build import Guard, Writer, generate_questions, populate
    from skyrl_gym.datasets.sql.synth.templates import LEVELS
    from skyrl_gym.envs.sql.prompts import build_row
    from skyrl_gym.runtime.sql.database import close_idle_databases, open_database

    unknown = [level for level in levels if level not in LEVELS]
    if unknown:
        raise ValueError(f"unknown levels {unknown}; levels are {LEVELS}")
    db_dir = Path(out_dir).resolve() / "databases"
    db_dir.mkdir(parents=True, exist_ok=True)
    instances = heldout_instances(seed, per_domain)
    quota = math.ceil(per_level / len(instances))
    quotas = {level: quota if level in levels else 0 for level in LEVELS}
    seen: set[str] = set()
    guard = Guard("duckdb")
    by_level: dict[str, list[dict[str, Any]]] = {level: [] for level in levels}
    with Writer() as writer:
        for instance in instances:
            data = populate(instance)
            path = db_dir / f"{instance.db_id}.duckdb"
            writer.write(instance.domain, data, path)
            with open_database(path) as db:

                def run(sql: str, db: Any = db) -> Sequence[tuple[Any, ...]]:
                    return db.execute(sql, check=False, timeout_s=None).rows

                for q in generate_questions(instance, data, run, quotas, seen, guard):
                    row = build_row(
                        db,
                        q.question,
                        q.sql,
                        db_id=q.db_id,
                        split="heldout",
                        index=-1,
                        level=q.level,
                        db_path=str(path),
                        extra_info={"domain": q.domain, "template": q.template},
                    )
                    by_level[q.level].append(compact_row(row, db, "skyrl_sql_heldout_domains"))
    close_idle_databases()
    rows: list[dict[str, Any]] = []
    for level in levels:
        if len(by_level[level]) < per_level:
            raise RuntimeError(f"only {len(by_level[level])} held-out {level} questions, {per_level} asked")
        rows += by_level[level][:per_level]
    random.Random(f"skyrl_sql_heldout/{seed}/order").shuffle(rows)
    for index, row in enumerate(rows):
        row["extra_info"]["index"] = index
    return rows


def chinook_rows(copy_to: str | Path | None = None) -> list[dict[str, Any]]:
    """The hand-written Chinook questions as rows with the compact prompt (the transfer set); the database
    is copied into ``copy_to`` when given."""
    from skyrl_gym.datasets.sql.realdb import build_rows
    from skyrl_gym.runtime.sql.database import open_database

    out = []
    for row in build_rows(["chinook"], copy_to=copy_to):
        with open_database(row["db_path"]) as db:
            out.append(compact_row(row, db, "skyrl_sql_chinook"))
    return out
