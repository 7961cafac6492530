"""Dataset rows on disk: one reader and one writer for JSONL and parquet files in SkyRL's format.

A row is a dict (``prompt``, ``env_class``, ``reward_spec`` and any other columns). :func:`read_rows` reads
``.parquet``, a ``.json`` file holding a list of objects, or JSON lines (any other suffix); a bad line is an
error that names ``file:line``. :func:`write_rows` writes ``.jsonl`` or ``.parquet`` atomically (a temporary
file in the same folder, renamed into place), so a reader never sees half a file.

Parquet has one schema per column. Every key of every row becomes a column, and a nested dict column is one
struct with the union of its rows' keys, so a key that only some rows have reads back as ``None`` in the
others. Where a nested value's fields differ from row to row by design (a task's own config), name it in
``json_columns`` and it is stored as JSON text instead.

pyarrow is imported only when a parquet file is read or written.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "RowFormatError",
    "has_parquet",
    "read_rows",
    "to_json_columns",
    "write_rows",
    "write_split",
]


class RowFormatError(ValueError):
    """A dataset file is not what its suffix says: bad JSON on a line, or not an object per row."""


def has_parquet() -> bool:
    """Whether pyarrow is installed, that is whether parquet files can be read and written here."""
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return False
    return True


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError(
            "parquet files need pyarrow: pip install pyarrow (or the 'sql' extra); JSONL needs nothing"
        ) from None
    return pa, pq


# -- reading ----------------------------------------------------------------------------------------------------
def read_rows(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of one dataset file: ``.parquet``, ``.json`` (a list of objects, or JSON lines) or JSONL.

    Blank lines are skipped. Raises :class:`FileNotFoundError` naming the file when it does not exist and
    :class:`RowFormatError` naming ``file:line`` for a line that is not a JSON object.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"dataset file {str(path)!r} does not exist")
    if path.suffix == ".parquet":
        _, pq = _pyarrow()
        return pq.read_table(path).to_pylist()
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" and text.lstrip().startswith("["):
        # Spider and BIRD ship one JSON list per file; other .json files are JSON lines.
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RowFormatError(f"{path}:{exc.lineno}: not a JSON list of objects ({exc.msg})") from None
        for number, row in enumerate(data, 1):
            if not isinstance(row, dict):
                raise RowFormatError(
                    f"{path}: item {number} of the list is a {type(row).__name__}, not an object"
                )
        return data
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RowFormatError(f"{path}:{number}: not a JSON object ({exc.msg})") from None
        if not isinstance(row, dict):
            raise RowFormatError(
                f"{path}:{number}: expected a JSON object per line, got {type(row).__name__}"
            )
        rows.append(row)
    return rows


# -- writing ----------------------------------------------------------------------------------------------------
def to_json_columns(row: Mapping[str, Any], json_columns: Iterable[str]) -> dict[str, Any]:
    """A copy of ``row`` with each named value as JSON text (sorted keys); ``row`` itself is not changed.

    A name is a column (``"config"``) or a dotted path into nested dicts (``"reward_spec.entry"``). A path
    that a row does not have is left alone, so rows of different kinds can share one list of names.
    """
    out = dict(row)
    for name in json_columns:
        *parents, leaf = name.split(".")
        node: Any = out
        for key in parents:
            child = node.get(key) if isinstance(node, dict) else None
            if not isinstance(child, Mapping):
                node = None
                break
            node[key] = child = dict(
                child
            )  # copy on the way down: the caller's nested dicts stay as they were
            node = child
        if isinstance(node, dict) and leaf in node:
            node[leaf] = json.dumps(node[leaf], ensure_ascii=False, sort_keys=True)
    return out


def _parquet_table(rows: Sequence[Mapping[str, Any]]):
    pa, _ = _pyarrow()
    # Every key of every row becomes a column, in first-seen order (Table.from_pylist keeps the first row's).
    columns = list(dict.fromkeys(key for row in rows for key in row))
    return pa.table({key: [row.get(key) for row in rows] for key in columns})


def write_rows(
    rows: Iterable[Mapping[str, Any]], path: str | os.PathLike, *, json_columns: Iterable[str] = ()
) -> Path:
    """Write ``rows`` to ``path`` as JSONL (``.jsonl``) or parquet (``.parquet``), atomically; return the path.

    JSONL is one ``json.dumps(row, ensure_ascii=False)`` a line, UTF-8. In parquet, ``json_columns`` (see
    :func:`to_json_columns`) are stored as JSON text; JSONL keeps them as they are, since JSON needs no
    schema. The parent folder is created if needed.
    """
    path = Path(path)
    if path.suffix not in (".jsonl", ".parquet"):
        raise ValueError(f"{path}: dataset files are written as .jsonl or .parquet")
    rows = list(rows)
    json_columns = tuple(json_columns)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        if path.suffix == ".parquet":
            os.close(handle)
            _, pq = _pyarrow()
            if json_columns:
                rows = [to_json_columns(row, json_columns) for row in rows]
            pq.write_table(_parquet_table(rows), tmp)
        else:
            with open(handle, "w", encoding="utf-8") as out:
                for row in rows:
                    out.write(json.dumps(row, ensure_ascii=False) + "\n")
        os.chmod(tmp, 0o644)  # mkstemp makes the file private; a dataset is meant to be read by others
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_split(
    rows: Sequence[Mapping[str, Any]],
    out_dir: str | os.PathLike,
    name: str,
    *,
    parquet: bool | None = None,
    json_columns: Iterable[str] = (),
) -> list[Path]:
    """Write one split as ``out_dir/name.jsonl`` and ``out_dir/name.parquet``; return the paths written.

    ``parquet=None`` writes the parquet copy when pyarrow is installed, ``True`` requires it, ``False``
    skips it. ``json_columns`` applies to the parquet copy (see :func:`write_rows`).
    """
    out_dir = Path(out_dir)
    paths = [write_rows(rows, out_dir / f"{name}.jsonl")]
    if parquet or (parquet is None and has_parquet()):
        paths.append(write_rows(rows, out_dir / f"{name}.parquet", json_columns=json_columns))
    return paths
