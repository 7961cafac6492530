"""Import text-to-SQL data a user downloaded (SkyRL-SQL-653, Spider, BIRD) into SkyRL dataset rows.

Nothing here downloads anything: each importer reads files already on disk and returns rows in the same
format as the bundled datasets (``data_source``, ``prompt``, ``env_class="text2sql"``, ``reward_spec``,
``db_id``, ``db_path``, ``data``, ``extra_info`` with ``split``, ``index``, ``level`` and ``question``), ready
for :func:`skyrl_gym.rows.write_rows` (JSONL or parquet).

What each importer assumes of its input is written in its docstring; anything else is an error that names
the file and what was expected. Spider and BIRD prompts are rebuilt from the SQLite database itself (schema
as DDL, a few sample rows), so they match the bundled data; SkyRL-SQL-653 keeps its own prompts, and its
rows keep SkyRL's ``db_id`` + ``data`` so that the environment finds each database under
``env_config.db_path`` exactly as SkyRL does.

Spider and BIRD carry no Spider-style level on every row, so :func:`spider_hardness` computes one from the
gold SQL (easy / medium / hard / extra, after the component-counting rules of the Spider benchmark).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from skyrl_gym.envs.sql.prompts import build_row
from skyrl_gym.rows import read_rows


class ImportFormatError(ValueError):
    """An input file does not have the layout or fields an importer expects."""


# -- Spider-style hardness -------------------------------------------------------------------------------------
def spider_hardness(sql: str, dialect: str = "sqlite") -> str | None:
    """The Spider difficulty level of a query: ``easy``, ``medium``, ``hard`` or ``extra`` (None if unparseable).

    Counts, on the outermost SELECT, the "first-order" components (WHERE, GROUP BY, ORDER BY, LIMIT, each
    join, each OR and LIKE in WHERE), the "second-order" ones (set operations and nested SELECTs) and the
    "others" (more than one aggregate, selected column, WHERE condition or GROUP BY column), then applies
    Spider's thresholds: few first-order components and nothing else is easy; nesting or many components
    is extra.
    """
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except Exception:
        return None
    main = tree
    while isinstance(main, exp.SetOperation):
        main = main.this
    if isinstance(main, exp.Subquery):
        main = main.unnest()
    if not isinstance(main, exp.Select):
        return None
    # Every other SELECT is second-order: the right side of each set operation, subqueries, CTEs.
    comp2 = sum(1 for node in tree.find_all(exp.Select) if node is not main)

    def own(*node_types):
        """Nodes inside ``main`` (or its WHERE) that do not belong to a nested SELECT."""
        return [n for n in main.find_all(*node_types) if n.find_ancestor(exp.Select) is main]

    where = main.args.get("where")
    in_where = [n for n in own(exp.Or, exp.And, exp.Like) if where is not None and n.find_ancestor(exp.Where)]
    comp1 = sum(bool(main.args.get(k)) for k in ("where", "group", "order", "limit"))
    comp1 += len(main.args.get("joins") or [])
    comp1 += sum(isinstance(n, (exp.Or, exp.Like)) for n in in_where)
    group = main.args.get("group")
    others = sum(
        (
            len(own(exp.AggFunc)) > 1,
            len(main.expressions) > 1,
            sum(isinstance(n, exp.Connector) for n in in_where) + 1 > 1,
            group is not None and len(group.expressions) > 1,
        )
    )

    if comp1 <= 1 and others == 0 and comp2 == 0:
        return "easy"
    if (others <= 2 and comp1 <= 1 and comp2 == 0) or (comp1 <= 2 and others < 2 and comp2 == 0):
        return "medium"
    if (
        (others > 2 and comp1 <= 2 and comp2 == 0)
        or (2 < comp1 <= 3 and others <= 2 and comp2 == 0)
        or (comp1 <= 1 and others == 0 and comp2 <= 1)
    ):
        return "hard"
    return "extra"


# -- row building -----------------------------------------------------------------------------------------------
class _Databases:
    """Opens each database once per import (prompts for many questions share one connection)."""

    def __init__(self, stack: ExitStack):
        self._stack = stack
        self._open: dict[Path, Any] = {}

    def get(self, path: Path):
        from skyrl_gym.runtime.sql.database import open_database

        if path not in self._open:
            self._open[path] = self._stack.enter_context(open_database(path))
        return self._open[path]


def _limited(records: Iterable[dict[str, Any]], limit: int | None) -> Iterator[tuple[int, dict[str, Any]]]:
    for index, record in enumerate(records):
        if limit is not None and index >= limit:
            return
        yield index, record


def _require(record: dict[str, Any], keys: Sequence[str], where: str) -> None:
    missing = [k for k in keys if k not in record]
    if missing:
        raise ImportFormatError(f"{where}: missing field(s) {missing}; has {sorted(record)}")


def _database_file(folder: Path, db_id: str, where: str) -> Path:
    path = folder / db_id / f"{db_id}.sqlite"
    if not path.exists():
        raise FileNotFoundError(f"{where}: database {db_id!r} not found at {path}")
    return path.resolve()


# -- Spider -------------------------------------------------------------------------------------------------------
SPIDER_SPLITS = {
    "train": (("train_spider.json", "train_others.json"), "database"),
    "dev": (("dev.json",), "database"),
    "test": (("test.json",), "test_database"),
}


def import_spider(
    spider_dir: str | os.PathLike, split: str = "dev", *, limit: int | None = None, n_sample_rows: int = 3
) -> list[dict[str, Any]]:
    """Rows for a Spider split, with prompts rebuilt from each database's schema.

    Assumes the layout of the official Spider release, unpacked at ``spider_dir``:

    - the questions: ``train_spider.json`` (and ``train_others.json`` if present) for ``train``,
      ``dev.json`` for ``dev``, ``test.json`` for ``test``; each a JSON list of objects with at least
      ``db_id``, ``question`` and ``query`` (the gold SQL, SQLite dialect); other fields are ignored;
    - the databases: ``database/<db_id>/<db_id>.sqlite`` (``test_database/`` for ``test``);
    - ``tables.json`` (``test_tables.json`` for ``test``) if present lists the known ``db_id`` values, and a
      question naming another ``db_id`` is an error; the schema itself is read from the SQLite file.

    Rows get ``data="spider"``, ``db_id``, an absolute ``db_path`` and a Spider level from the gold SQL.
    """
    root = Path(spider_dir)
    if split not in SPIDER_SPLITS:
        raise ValueError(f"unknown Spider split {split!r}; choose from {sorted(SPIDER_SPLITS)}")
    names, db_folder = SPIDER_SPLITS[split]
    files = [root / name for name in names if (root / name).exists()]
    if not files:
        raise FileNotFoundError(f"no Spider {split} file in {root} (expected {names[0]})")
    tables_file = root / ("test_tables.json" if split == "test" else "tables.json")
    known = {t["db_id"] for t in read_rows(tables_file)} if tables_file.exists() else None
    records = [r for f in files for r in read_rows(f)]
    rows = []
    with ExitStack() as stack:
        dbs = _Databases(stack)
        for index, record in _limited(records, limit):
            where = f"Spider {split} record {index}"
            _require(record, ("db_id", "question", "query"), where)
            db_id = record["db_id"]
            if known is not None and db_id not in known:
                raise ImportFormatError(f"{where}: db_id {db_id!r} is not in {tables_file}")
            path = _database_file(root / db_folder, db_id, where)
            rows.append(
                build_row(
                    dbs.get(path),
                    record["question"],
                    record["query"],
                    db_id=db_id,
                    db_path=str(path),
                    data="spider",
                    data_source=f"spider/{split}",
                    split=split,
                    index=index,
                    level=spider_hardness(record["query"]),
                    n_sample_rows=n_sample_rows,
                )
            )
    return rows


# -- BIRD ---------------------------------------------------------------------------------------------------------
def bird_question(question: str, evidence: str | None) -> str:
    """A BIRD question with its evidence (the external knowledge the gold SQL relies on) appended."""
    evidence = (evidence or "").strip()
    return f"{question.strip()}\nHint: {evidence}" if evidence else question.strip()


def _bird_files(root: Path, split: str) -> tuple[Path, Path]:
    for folder in (root, root / split):
        questions = folder / f"{split}.json"
        if questions.exists():
            return questions, folder / f"{split}_databases"
    raise FileNotFoundError(
        f"no BIRD {split} file: looked for {root / f'{split}.json'} and {root / split / f'{split}.json'}"
    )


def import_bird(
    bird_dir: str | os.PathLike, split: str = "dev", *, limit: int | None = None, n_sample_rows: int = 3
) -> list[dict[str, Any]]:
    """Rows for a BIRD split, the evidence folded into each question, prompts rebuilt from each database.

    Assumes the layout of the official BIRD release: ``<split>.json`` (``train`` or ``dev``) either in
    ``bird_dir`` or in ``bird_dir/<split>/``, with the databases beside it in
    ``<split>_databases/<db_id>/<db_id>.sqlite``. The JSON file is a list of objects with at least
    ``db_id``, ``question`` and ``SQL`` (the gold SQL, SQLite dialect), and optionally ``evidence`` (a hint,
    appended to the question as ``Hint: ...``), ``difficulty`` (``simple`` / ``moderate`` / ``challenging``,
    kept in ``extra_info["difficulty"]``) and ``question_id`` (kept as ``extra_info["id"]``).

    Rows get ``data="bird"``, ``db_id``, an absolute ``db_path`` and a Spider level from the gold SQL.
    """
    root = Path(bird_dir)
    if split not in ("train", "dev"):
        raise ValueError(f"unknown BIRD split {split!r}; choose 'train' or 'dev'")
    questions_file, db_folder = _bird_files(root, split)
    rows = []
    with ExitStack() as stack:
        dbs = _Databases(stack)
        for index, record in _limited(read_rows(questions_file), limit):
            where = f"BIRD {split} record {index}"
            _require(record, ("db_id", "question", "SQL"), where)
            path = _database_file(db_folder, record["db_id"], where)
            extra = {"evidence": record.get("evidence") or ""}
            if record.get("difficulty"):
                extra["difficulty"] = record["difficulty"]
            if record.get("question_id") is not None:
                extra["id"] = record["question_id"]
            rows.append(
                build_row(
                    dbs.get(path),
                    bird_question(record["question"], record.get("evidence")),
                    record["SQL"],
                    db_id=record["db_id"],
                    db_path=str(path),
                    data="bird",
                    data_source=f"bird/{split}",
                    split=split,
                    index=index,
                    level=spider_hardness(record["SQL"]),
                    n_sample_rows=n_sample_rows,
                    extra_info=extra,
                )
            )
    return rows


# -- SkyRL-SQL-653 ------------------------------------------------------------------------------------------------
def _ground_truth(record: dict[str, Any], where: str) -> str:
    for key in ("reward_spec", "reward_model"):
        spec = record.get(key)
        if isinstance(spec, str):
            spec = json.loads(spec)
        if isinstance(spec, dict) and spec.get("ground_truth"):
            return spec["ground_truth"]
    for key in ("sql", "SQL", "query"):
        if record.get(key):
            return record[key]
    raise ImportFormatError(f"{where}: no gold SQL (looked for reward_spec.ground_truth, reward_model, sql)")


def _question(record: dict[str, Any]) -> str | None:
    if record.get("question"):
        return record["question"]
    extra = record.get("extra_info")
    if isinstance(extra, dict) and extra.get("question"):
        return extra["question"]
    return None


def import_skyrl_sql(
    path: str | os.PathLike,
    *,
    db_root: str | os.PathLike | None = None,
    rebuild_prompts: bool = False,
    split: str = "train",
    limit: int | None = None,
    n_sample_rows: int = 3,
) -> list[dict[str, Any]]:
    """Rows from SkyRL's published text-to-SQL set (SkyRL-SQL-653, 540 SynSQL + 113 Spider questions).

    Assumes a parquet, JSONL or JSON-list file whose records have:

    - ``db_id`` and ``data`` (``synsql``, ``spider`` or ``bird``: which collection the database is from);
    - the gold SQL in ``reward_spec.ground_truth`` (SkyRL's format; ``reward_spec`` may also be a JSON
      string), or in ``reward_model.ground_truth`` (the older veRL format), or in ``sql`` / ``query``;
    - the prompt as ``prompt`` (a list of chat messages, or a string taken as one user message); a record
      without one needs ``question`` (or ``extra_info.question``) and ``db_root``, and gets a rebuilt prompt.

    The rows keep ``db_id`` + ``data`` and have no ``db_path``, so the environment resolves the database
    under ``env_config.db_path`` like SkyRL (``database.DATA_LAYOUTS``). With ``db_root`` every database must
    exist there (a missing one is an error naming the path tried); with ``rebuild_prompts`` as well, every
    prompt is rebuilt from the database with this project's system prompt and schema rendering.
    """
    from skyrl_gym.runtime.sql.database import DATA_LAYOUTS, resolve_database

    source = Path(path)
    records = read_rows(source)
    root = Path(db_root) if db_root is not None else None
    rows = []
    with ExitStack() as stack:
        dbs = _Databases(stack)
        for index, record in _limited(records, limit):
            where = f"{source.name} record {index}"
            _require(record, ("db_id", "data"), where)
            db_id, data = record["db_id"], record["data"]
            if data not in DATA_LAYOUTS:
                raise ImportFormatError(f"{where}: data={data!r}; expected one of {sorted(DATA_LAYOUTS)}")
            gold = _ground_truth(record, where)
            question = _question(record)
            db_file = None
            if root is not None:
                try:
                    db_file = resolve_database({"db_id": db_id, "data": data}, root)
                except FileNotFoundError as exc:
                    raise FileNotFoundError(f"{where}: {exc}") from None
            prompt = record.get("prompt")
            if isinstance(prompt, str):
                prompt = [{"role": "user", "content": prompt}]
            if rebuild_prompts or not prompt:
                if question is None or db_file is None:
                    raise ImportFormatError(
                        f"{where}: rebuilding a prompt needs a 'question' field and db_root"
                        + ("" if prompt else " (the record has no prompt)")
                    )
                row = build_row(
                    dbs.get(db_file),
                    question,
                    gold,
                    db_id=db_id,
                    db_path=None,
                    data=data,
                    data_source=record.get("data_source") or f"skyrl-sql/{data}",
                    split=split,
                    index=index,
                    level=spider_hardness(gold),
                    n_sample_rows=n_sample_rows,
                )
                row.pop("db_path", None)
            else:
                row = {
                    "data_source": record.get("data_source") or f"skyrl-sql/{data}",
                    "prompt": [{"role": m["role"], "content": m["content"]} for m in prompt],
                    "env_class": "text2sql",
                    "reward_spec": {"method": "rule", "ground_truth": gold},
                    "db_id": db_id,
                    "data": data,
                    "extra_info": {
                        "split": split,
                        "index": index,
                        "level": spider_hardness(gold),
                        "question": question,
                    },
                }
            rows.append(row)
    return rows


# -- datasets/sql/build.py --import-* ------------------------------------------------------------------------------
def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``datasets/sql/build.py`` for importing downloaded data (nothing is downloaded)."""
    group = parser.add_argument_group("imports of data you downloaded (rows point at your database files)")
    group.add_argument(
        "--import-skyrl-sql653",
        type=Path,
        metavar="PATH",
        help="SkyRL-SQL-653 (parquet or JSONL) -> skyrl_sql_653; rows keep db_id + data for env_config.db_path",
    )
    group.add_argument(
        "--skyrl-sql-db-root",
        type=Path,
        metavar="DIR",
        help="with --import-skyrl-sql653: check every database exists under DIR (SkyRL's layout)",
    )
    group.add_argument(
        "--skyrl-sql-rebuild-prompts",
        action="store_true",
        help="with --skyrl-sql-db-root: rebuild the prompts with this project's system prompt and schema",
    )
    group.add_argument(
        "--import-spider", type=Path, metavar="DIR", help="Spider release folder -> spider_train/dev/test"
    )
    group.add_argument(
        "--import-bird", type=Path, metavar="DIR", help="BIRD release folder -> bird_train/dev"
    )


def build_for_command(args: argparse.Namespace, out: Path) -> dict[str, list[dict[str, Any]]]:
    """The imported files named on the command line, by output name (``spider_dev``, ``bird_train``...)."""
    outputs: dict[str, list[dict[str, Any]]] = {}
    if args.import_skyrl_sql653:
        outputs["skyrl_sql_653"] = import_skyrl_sql(
            args.import_skyrl_sql653,
            db_root=args.skyrl_sql_db_root,
            rebuild_prompts=args.skyrl_sql_rebuild_prompts,
        )
    if args.import_spider:
        for split, (names, _) in SPIDER_SPLITS.items():
            if (Path(args.import_spider) / names[0]).exists():
                outputs[f"spider_{split}"] = import_spider(args.import_spider, split)
        if not any(k.startswith("spider_") for k in outputs):
            raise FileNotFoundError(
                f"--import-spider {args.import_spider}: no train_spider.json, dev.json or test.json"
            )
    if args.import_bird:
        for split in ("train", "dev"):
            try:
                _bird_files(Path(args.import_bird), split)
            except FileNotFoundError:
                continue
            outputs[f"bird_{split}"] = import_bird(args.import_bird, split)
        if not any(k.startswith("bird_") for k in outputs):
            raise FileNotFoundError(
                f"--import-bird {args.import_bird}: no train.json or dev.json (top level or in train/, dev/)"
            )
    return outputs
