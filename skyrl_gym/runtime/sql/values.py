"""Inside a query worker: a cursor's rows as plain Python values, cut to the request's limits, pickled in batches.

:func:`fetch_rows` fetches within ``max_rows``, ``max_bytes`` and ``max_value_chars``: long strings and blobs
keep their first characters, nested values larger than the cap become a short text of them, and a result is
measured by the size of its pickle, which is exactly what the caller receives. Values of other types than
the few :class:`~.frames.ValueUnpickler` accepts become their text.

Standard library only: the worker process imports this module without the rest of the package.
"""

from __future__ import annotations

import datetime
import decimal
import itertools
import math
import pickle
import reprlib
import time
import uuid
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ResultTooLarge",
    "fetch_rows",
    "megabytes",
]

_SCALARS = frozenset(
    {int, float, bool, type(None), decimal.Decimal, datetime.date, datetime.timedelta, uuid.UUID}
)
_SHORT = reprlib.Repr()
_SHORT.maxlevel = 4
_SHORT.maxdict = _SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxset = 32
_SHORT.maxstring = _SHORT.maxother = 200


def _plain(value: Any, cap: int | None, depth: int = 0) -> tuple[Any, int, int]:
    """``(value, size, cut)``: ``value`` as plain Python data, its size in bytes, and how many values were cut.

    Strings and blobs longer than ``cap`` keep their first ``cap`` characters; a nested value larger than
    ``cap`` becomes a short text of it. Time zones become fixed offsets and values of other types their text,
    so that the caller's unpickler needs only a few classes.
    """
    kind = type(value)
    if kind is str:
        if cap is not None and len(value) > cap:
            return value[:cap], cap, 1
        return value, len(value), 0
    if kind in (bytes, bytearray, memoryview):
        data = bytes(value[:cap]) if cap is not None and len(value) > cap else bytes(value)
        return data, len(data), int(len(data) < len(value))
    if kind is int:
        return value, 16 + value.bit_length() // 8, 0
    if kind in _SCALARS:
        return value, 16, 0
    if kind is datetime.datetime or kind is datetime.time:
        if value.tzinfo is not None and type(value.tzinfo) is not datetime.timezone:
            offset = value.utcoffset()
            value = value.replace(tzinfo=datetime.timezone(offset) if offset is not None else None)
        return value, 16, 0
    if kind in (list, tuple, dict, set, frozenset) and depth < 32:
        items = list(value.items()) if kind is dict else list(value)
        out, size, cut = [], 8, 0
        for item in items:
            if kind is dict:
                (k, k_size, k_cut), (v, v_size, v_cut) = (
                    _plain(item[0], cap, depth + 1),
                    _plain(item[1], cap, depth + 1),
                )
                out.append((k, v))
                size, cut = size + k_size + v_size, cut + k_cut + v_cut
            else:
                v, v_size, v_cut = _plain(item, cap, depth + 1)
                out.append(v)
                size, cut = size + v_size, cut + v_cut
            if cap is not None and size > cap:
                text = _SHORT.repr(value)[:cap]
                return text, len(text), 1
        plain: Any = dict(out) if kind is dict else kind(out)
        return plain, size, cut
    text = str(value) if depth < 32 else _SHORT.repr(value)
    return _plain(text, cap, depth + 1)


def _plain_row(row: tuple, cap: int | None) -> tuple[tuple, int]:
    values, cut = [], 0
    for value in row:
        value, _, value_cut = _plain(value, cap)
        values.append(value)
        cut += value_cut
    return tuple(values), cut


_PLAIN_TYPES = frozenset(
    {int, float, bool, type(None), str, bytes, decimal.Decimal, datetime.date, uuid.UUID}
)
_PLAIN_TYPES |= {datetime.timedelta}
_SIZED_TYPES = (str, bytes)


def _pack(chunk: list[tuple], cap: int | None) -> tuple[list[tuple], bytes, list[int] | None]:
    """``(rows, their pickle, values cut per row or None)`` for rows fetched from the engine.

    Most chunks hold only plain values none longer than ``cap``: they are pickled as they are, at C speed.
    The others go through :func:`_plain` value by value.
    """
    flat = list(itertools.chain.from_iterable(chunk))
    if set(map(type, flat)) <= _PLAIN_TYPES:
        blob = pickle.dumps(chunk, protocol=pickle.HIGHEST_PROTOCOL)
        if cap is None or len(blob) <= cap or not any(len(v) > cap for v in flat if type(v) in _SIZED_TYPES):
            return chunk, blob, None
    rows, cuts = [], []
    for raw in chunk:
        row, row_cut = _plain_row(raw, cap)
        rows.append(row)
        cuts.append(row_cut)
    return rows, pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL), cuts


class ResultTooLarge(Exception):
    """The result does not fit in the request's ``max_bytes`` (and cutting rows cannot make it fit)."""


def fetch_rows(
    cursor: Any, request: Mapping[str, Any], deadline: float, first_batch: int = 1
) -> dict[str, Any]:
    """Fetch ``cursor``'s rows within the request's limits (``max_rows``, ``max_bytes``, ``count_limit``).

    Rows are converted ``first_batch`` at a time at first, then in batches that grow but never past the room
    left in ``max_bytes``, so that a result of huge values stops at its limit having converted little more.
    A result's size is the size of its pickle, which is what the caller receives (``chunks``).
    """
    description = cursor.description
    columns = [str(d[0]) for d in description] if description else []
    reply: dict[str, Any] = {
        "columns": columns,
        "chunks": [],
        "truncated": False,
        "total_rows": 0,
        "values_cut": 0,
    }
    if not description:
        return reply
    max_rows, cap = request.get("max_rows"), request.get("max_value_chars")
    budget = math.inf if request.get("max_bytes") is None else request["max_bytes"]
    wanted = math.inf if max_rows is None else max_rows + 1  # one more than shown: are there more?
    chunks: list[bytes] = reply["chunks"]
    last: list[tuple] = []
    last_cuts: list[int] | None = None
    count = used = cut = 0
    batch = first_batch
    exhausted = False
    while count < wanted and not exhausted:
        asked = int(min(batch, wanted - count))
        raw = cursor.fetchmany(asked)
        exhausted = len(raw) < asked  # fetchmany returns fewer rows only at the end
        if not raw:
            break
        rows, blob, cuts = _pack(raw, cap)
        if used + len(blob) > budget:
            fitting: list[tuple] = []
            for index, row in enumerate(rows):
                size = len(pickle.dumps(row, protocol=pickle.HIGHEST_PROTOCOL))
                if used + size > budget:
                    break
                fitting.append(row)
                used += size
                cut += cuts[index] if cuts else 0
            if max_rows is None or count + len(fitting) == 0:
                what = "the result" if max_rows is None else "one row of the result"
                raise ResultTooLarge(
                    f"{what} is larger than {megabytes(budget)}; select fewer or shorter values "
                    "(LIMIT, substr, fewer columns)"
                )
            fitting = fitting[: max(0, max_rows - count)]
            if fitting:
                chunks.append(pickle.dumps(fitting, protocol=pickle.HIGHEST_PROTOCOL))
            reply.update(truncated=True, total_rows=None, values_cut=cut)
            return reply
        chunks.append(blob)
        last, last_cuts = rows, cuts
        count += len(rows)
        used += len(blob)
        cut += sum(cuts) if cuts else 0
        # Grow fast for ordinary rows, but never convert more than the room left in the budget.
        batch = int(max(1, min(1024, batch * 32, (budget - used) // max(1, used // max(1, count)))))
    if max_rows is None or count <= max_rows:
        reply.update(total_rows=count, values_cut=cut)
        return reply
    keep = len(last) - (count - max_rows)  # drop the row fetched only to know that more exist
    if last_cuts:
        cut -= sum(last_cuts[keep:])
    chunks[-1] = pickle.dumps(last[:keep], protocol=pickle.HIGHEST_PROTOCOL)
    reply.update(truncated=True, values_cut=cut)
    if exhausted:
        reply["total_rows"] = count
        return reply
    limit = max_rows + request.get("count_limit", 0)
    total: int | None = count
    row_size = max(1, used // count)
    try:  # count some more rows, to say how many were cut; give up quietly on any trouble or at the deadline
        while total is not None and total <= limit:
            if time.monotonic() >= deadline:
                total = None
                break
            chunk = cursor.fetchmany(int(max(1, min(1024, (4 << 20) // row_size, limit + 1 - total))))
            if not chunk:
                break
            total += len(chunk)
        if total is not None and total > limit:
            total = None
    except Exception:
        total = None
    reply["total_rows"] = total
    return reply


def megabytes(size: float) -> str:
    """A size in bytes as megabytes for a message: ``"64 MB"``."""
    return f"{size / (1 << 20):g} MB"
