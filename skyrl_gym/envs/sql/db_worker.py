"""Query workers: the child processes that run a :class:`~.db_client.Database`'s queries, and their pools.

Why a process: some queries cannot be stopped from inside the engine. A single SQLite ``LIKE``, ``GLOB``,
``instr``, ``replace`` or ``printf`` call runs as one virtual-machine instruction and never reaches the
progress handler; some DuckDB functions (``list_sort`` of a huge list, ``damerau_levenshtein`` of long
strings) neither check for an interrupt nor count their memory against ``memory_limit``. A process can be
killed, and the kernel bounds its memory. The caller only ever receives a result already cut to its
limits.

Both ends of the pipe live here:

- the worker (:func:`serve`): forked on request by the zygote (:func:`zygote_main`), one single-threaded
  child of the caller that imported the engines once, so that a worker starts in milliseconds (a fresh
  interpreter importing DuckDB takes a few hundred). It opens the file with an :class:`~.db_base.Engine`,
  caps its own memory (``RLIMIT_DATA``) and file sizes, runs each query with a deadline (a watchdog thread
  interrupts the engine when it passes), fetches rows a few at a time, cuts values and the result to the
  request's limits, and sends plain Python values back. It exits when the pipe closes or its parent ends
  (the zygote ends with the caller), removing its private temporary folder, and retires itself after a
  query that left it holding much memory or that may have changed its connection.
- the caller: :data:`POOLS` keeps, per (engine, file, settings), the idle workers for the databases open on
  it; a query takes one, and a worker that has not answered :data:`~.db_base.KILL_GRACE_S` after the
  query's deadline is killed (a fresh one is started for the next query).

Temporary folders: each worker makes ``<tmp>/skyrl-sql-<worker pid>-<caller pid>-<random>`` (DuckDB's
spill files, SQLite's temporary files) and holds an exclusive ``flock`` on ``.owner`` inside it while it
lives. The kernel drops the lock when the worker dies however it dies, so :func:`sweep_stale_folders`
(run whenever a database opens) removes exactly the folders whose owner is gone, whatever reused its pid.

The frames on the pipe are an 8-byte length and a pickle. The caller reads at most the request's size
limit and unpickles with an allow-list of classes (dates, decimals, UUIDs), so a worker cannot make it
build anything else.

This module imports only the standard library: the worker imports it (and the engine modules) without
importing the rest of the package.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import decimal
import errno
import fcntl
import io
import itertools
import math
import os
import pickle
import reprlib
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Mapping
from typing import Any

__all__ = [
    "POOLS",
    "PRIVATE_PREFIX",
    "WORKER_LINGER_S",
    "Worker",
    "live_workers",
    "serve",
    "sweep_stale_folders",
]

PRIVATE_PREFIX = "skyrl-sql-"
"""Prefix of the workers' private temporary folders."""
WORKER_LINGER_S = 2.0
"""Seconds the last idle worker of a file stays after the last database on it closed, so that the next
episode on the same file (a ``reset``) does not pay a worker's start (tens of milliseconds)."""
OPEN_TIMEOUT_S = 60.0
"""Seconds a worker may take to start and open its file."""
MEMORY_SLACK_BYTES = 1 << 30
"""Memory a worker may use beyond its engine's own limit (the interpreter, fetched values)."""
TEMP_FILE_LIMIT_BYTES = 4 << 30
"""The largest temporary file a worker may write (``RLIMIT_FSIZE``)."""
_FRAME_SLACK = 1 << 20
_HEADER = struct.Struct(">Q")
_OWNER_FILE = ".owner"


# -- frames ------------------------------------------------------------------------------------------------
def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _send(fd: int, message: Any) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    _write_all(fd, _HEADER.pack(len(payload)) + payload)


def _recv_blocking(fd: int) -> Any:
    """One frame from ``fd`` (the worker's side: the caller is trusted); ``EOFError`` when it closed."""
    header = _read_exactly(fd, _HEADER.size)
    (size,) = _HEADER.unpack(header)
    return pickle.loads(_read_exactly(fd, size))


def _read_exactly(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


_SAFE_CLASSES = {
    ("datetime", "date"),
    ("datetime", "datetime"),
    ("datetime", "time"),
    ("datetime", "timedelta"),
    ("datetime", "timezone"),
    ("decimal", "Decimal"),
    ("uuid", "UUID"),
    ("uuid", "SafeUUID"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "complex"),
    ("builtins", "bytearray"),
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAFE_CLASSES:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a query worker sent a {module}.{name}, which is not a query value")


# -- values, inside the worker -----------------------------------------------------------------------------
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


class _TooLarge(Exception):
    pass


def _fetch(cursor: Any, request: Mapping[str, Any], deadline: float, first_batch: int = 1) -> dict[str, Any]:
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
                raise _TooLarge(
                    f"{what} is larger than {_megabytes(budget)}; select fewer or shorter values "
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


def _megabytes(size: float) -> str:
    return f"{size / (1 << 20):g} MB"


# -- the worker process ------------------------------------------------------------------------------------
class _Watchdog(threading.Thread):
    """Inside the worker: interrupts the engine at the query's deadline, and ends the worker with its parent."""

    TICK_S = 0.25
    """Seconds between two checks of the parent."""

    def __init__(self, engine: Any, parent: int, folder: str):
        super().__init__(name="skyrl-sql-worker-watchdog", daemon=True)
        self.engine, self.parent, self.folder = engine, parent, folder
        self.cond = threading.Condition()
        self.deadline = math.inf
        self.wake_at = 0.0

    def arm(self, deadline: float) -> None:
        """Interrupt the engine at ``deadline`` (``inf``: never)."""
        with self.cond:
            self.deadline = deadline
            if deadline < self.wake_at:  # only then: a query costs no wake-up of this thread
                self.cond.notify()

    def run(self) -> None:
        with self.cond:
            while True:
                now = time.monotonic()
                if now >= self.deadline:
                    self.deadline = math.inf
                    with contextlib.suppress(Exception):
                        self.engine.interrupt()
                if os.getppid() != self.parent:  # the caller died: nobody will read the answer
                    shutil.rmtree(self.folder, ignore_errors=True)
                    os._exit(0)
                self.wake_at = min(now + self.TICK_S, self.deadline)
                self.cond.wait(max(0.0, self.wake_at - now))


def _make_private_folder(temp_root: str, caller: int) -> tuple[str, int]:
    folder = tempfile.mkdtemp(prefix=f"{PRIVATE_PREFIX}{os.getpid()}-{caller}-", dir=temp_root)
    fd = os.open(os.path.join(folder, _OWNER_FILE), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # held until this process ends, however it ends
    return folder, fd


def _limit(resource_id: int, size: int) -> None:
    import resource

    soft, hard = resource.getrlimit(resource_id)
    if hard != resource.RLIM_INFINITY:
        size = min(size, hard)
    resource.setrlimit(resource_id, (size, hard))


def _open_engine(request: Mapping[str, Any], folder: str) -> Any:
    if request["engine"] == "duckdb":
        from skyrl_gym.envs.sql.db_duckdb import DuckDBEngine

        return DuckDBEngine(request["path"], request["options"], folder)
    from skyrl_gym.envs.sql.db_sqlite import SQLiteEngine

    return SQLiteEngine(request["path"], request["options"], folder)


def serve(frames_in: int = 0, frames_out: int | None = None) -> None:
    """A worker's main loop: open the file the first request names, then answer requests until EOF.

    ``frames_in`` / ``frames_out``: the pipes from and to the caller (by default stdin and stdout, for a
    worker started as a fresh interpreter).
    """
    import resource

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a temporary file past its limit fails the query instead
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if frames_out is None:
        frames_out = os.dup(1)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 1)  # a stray print must not corrupt the frames
    parent = os.getppid()
    try:
        request = _recv_blocking(frames_in)
    except EOFError:
        return
    folder, _owner_fd = _make_private_folder(request["temp_root"], request.get("caller", parent))
    engine = None
    try:
        _limit(resource.RLIMIT_FSIZE, TEMP_FILE_LIMIT_BYTES)
        try:
            engine = _open_engine(request, folder)
            memory = engine.memory_bytes() + MEMORY_SLACK_BYTES
            _limit(resource.RLIMIT_DATA, memory)
        except Exception as exc:  # the file cannot be opened: say why, then end
            _send(frames_out, {"error": "open", "message": f"{type(exc).__name__}: {exc}"})
            return
        watchdog = _Watchdog(engine, parent, folder)
        watchdog.start()
        _send(frames_out, {"ok": True, "folder": folder})
        while True:
            try:
                request = _recv_blocking(frames_in)
            except EOFError:
                return
            if request["op"] == "close":
                return
            _send(frames_out, _answer(engine, watchdog, request, memory))
    finally:
        if engine is not None:
            with contextlib.suppress(Exception):
                engine.close()
        shutil.rmtree(folder, ignore_errors=True)


def _answer(
    engine: Any, watchdog: _Watchdog, request: Mapping[str, Any], memory_limit: int
) -> dict[str, Any]:
    if request["op"] == "describe":
        try:
            return engine.describe()
        except Exception as exc:
            return {"error": "execution", "message": f"{type(exc).__name__}: {exc}"}
    reply = _query(engine, watchdog, request)
    if reply.get("error") == "resources" or (
        request.get("internal") and engine.changes_state(request["sql"])
    ):
        reply["retire"] = True  # out of memory, or trusted SQL that may have changed this connection
    elif _data_bytes() > memory_limit // 2:
        reply["retire"] = True  # the engine keeps what a big query allocated: a fresh worker has all its room
    return reply


def _query(engine: Any, watchdog: _Watchdog, request: Mapping[str, Any]) -> dict[str, Any]:
    """Run one query within the request's time and size limits; its rows, or ``{"error", "message"}``."""
    timeout = request.get("timeout_s")
    deadline = math.inf if timeout is None else time.monotonic() + timeout
    sql, internal = request["sql"], bool(request.get("internal"))
    engine.set_deadline(deadline)
    watchdog.arm(deadline)
    lenient = False
    try:
        while True:
            cursor = None
            try:
                cursor = engine.execute(sql, internal=internal, lenient=lenient)
                return _fetch(cursor, request, deadline, engine.first_batch)
            except _TooLarge as exc:
                return {"error": "resources", "message": str(exc)}
            except MemoryError:
                return {"error": "resources", "message": _out_of_memory(engine)}
            except Exception as exc:
                if not lenient and engine.retry_lenient(exc):
                    lenient = True
                    continue
                described = engine.error(exc, time.monotonic() >= deadline)
                if described is None:
                    described = ("execution", f"{type(exc).__name__}: {exc}")
                kind, message = described
                if kind == "resources" and not message:
                    message = _out_of_memory(engine)
                return {"error": kind, "message": message}
            finally:
                if cursor is not None:
                    with contextlib.suppress(Exception):
                        cursor.close()
    finally:
        watchdog.arm(math.inf)
        engine.set_deadline(math.inf)


def _data_bytes() -> int:
    """This process's private writable memory (what ``RLIMIT_DATA`` counts)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[5]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _out_of_memory(engine: Any) -> str:
    return (
        f"the query needed more memory than the {_megabytes(engine.memory_bytes() + MEMORY_SLACK_BYTES)} "
        "a query may use; write a cheaper query (filter early, avoid cross joins, aggregate less)"
    )


# -- the caller's side ---------------------------------------------------------------------------------------
class WorkerGone(Exception):
    """The worker ended (crashed, was killed) before it answered."""


class WorkerLate(Exception):
    """The worker did not answer by the hard deadline."""


class WorkerTooLarge(Exception):
    """The worker's answer was larger than the request allows."""


_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Workers run without the package's __init__ modules (they import gymnasium and numpy): empty stand-ins for
# the three packages let them import this module and the engine modules, which need only the standard
# library, skyrl_gym.errors and the engine itself.
_BOOT = (
    "import sys, types\n"
    "root = sys.argv[1]\n"
    "for name, sub in (('skyrl_gym', ''), ('skyrl_gym.envs', '/envs'), ('skyrl_gym.envs.sql', '/envs/sql')):\n"
    "    module = types.ModuleType(name)\n"
    "    module.__path__ = [root + sub]\n"
    "    sys.modules[name] = module\n"
    "from skyrl_gym.envs.sql import db_worker\n"
    "db_worker.zygote_main(int(sys.argv[2])) if len(sys.argv) > 2 else db_worker.serve()\n"
)


class _Child:
    """A worker process seen from the caller: a pidfd (a forked child of the zygote) or a ``Popen``."""

    def __init__(self, pid: int, pidfd: int | None = None, popen: subprocess.Popen | None = None):
        self.pid, self.pidfd, self.popen = pid, pidfd, popen

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return not self.wait(0)

    def wait(self, timeout: float | None) -> bool:
        """Whether the process ended within ``timeout`` seconds (``None``: wait as long as it takes)."""
        if self.popen is not None:
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        if self.pidfd is None:
            return True
        ready, _, _ = select.select([self.pidfd], [], [], timeout)
        return bool(ready)

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            if self.popen is not None:
                self.popen.kill()
            elif self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def release(self) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = None


def zygote_main(control_fd: int) -> None:
    """The zygote: a single-threaded process that has imported the engines and forks a worker on request.

    A fork costs a few milliseconds where a fresh interpreter that imports DuckDB costs a few hundred, which
    matters because a worker is started for every file and after every query that had to be killed. The
    zygote ends when its caller does (its socket closes); its workers then end too (their parent changed).
    """
    import socket

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the workers; the caller holds pidfds
    control = socket.socket(fileno=control_fd)
    from skyrl_gym.envs.sql import db_sqlite  # noqa: F401  (imported once, shared by every fork)

    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, 1 << 16, 2)
        except OSError:
            return
        if not data:
            return
        request = pickle.loads(data)
        try:
            if request.get("engine") == "duckdb":
                import duckdb  # noqa: F401  (once, here: importing it costs ~100 ms, a fork ~1 ms)
            pid = os.fork()
        except BaseException as exc:
            for fd in fds:
                os.close(fd)
            socket.send_fds(control, [pickle.dumps({"error": f"{type(exc).__name__}: {exc}"})], [])
            continue
        if pid == 0:  # the worker
            try:
                control.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                serve(fds[0], fds[1])
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as exc:
            socket.send_fds(control, [pickle.dumps({"error": f"pidfd_open: {exc}"})], [])
            continue
        socket.send_fds(control, [pickle.dumps({"pid": pid})], [pidfd])
        os.close(pidfd)


class _Zygote:
    """The caller's handle on the zygote (started on first use; restarted if it dies)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.sock: Any = None
        self.broken = not (hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal"))

    def spawn(self, engine: str) -> tuple[_Child, int, int] | None:
        """A forked worker: (its process, the fd to write requests to, the fd to read answers from)."""
        import socket

        if self.broken:
            return None
        with self.lock:
            for _ in range(2):
                if self.proc is None or self.proc.poll() is not None:
                    self._start()
                    if self.broken:
                        return None
                to_worker_r, to_worker_w = os.pipe()
                from_worker_r, from_worker_w = os.pipe()
                try:
                    socket.send_fds(
                        self.sock, [pickle.dumps({"engine": engine})], [to_worker_r, from_worker_w]
                    )
                    data, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 1)
                except OSError:
                    data, fds = b"", []
                finally:
                    os.close(to_worker_r)
                    os.close(from_worker_w)
                reply = pickle.loads(data) if data else {"error": "the zygote ended"}
                if "pid" in reply and fds:
                    return _Child(reply["pid"], pidfd=fds[0]), to_worker_w, from_worker_r
                for fd in (to_worker_w, from_worker_r, *fds):
                    os.close(fd)
                self._stop()
        return None

    def _start(self) -> None:
        import socket

        self._stop()
        try:
            parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError:
            self.broken = True
            return
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-s", "-c", _BOOT, _PACKAGE_ROOT, str(child_end.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=[child_end.fileno()],
            )
        except OSError:
            parent_end.close()
            self.broken = True
            return
        finally:
            child_end.close()
        self.sock = parent_end

    def _stop(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None
        if self.proc is not None:
            try:
                self.proc.wait(1.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def close(self) -> None:
        """End the zygote (at exit)."""
        with self.lock:
            self._stop()

    def after_fork(self) -> None:
        """In a forked child: drop the parent's zygote (closing the child's copy of its socket, so that the
        zygote still sees its caller end), without touching the process."""
        self.lock = threading.Lock()
        if self.sock is not None:
            with contextlib.suppress(OSError):
                os.close(self.sock.detach())
        self.proc, self.sock = None, None


_ZYGOTE = _Zygote()
_WORKERS: weakref.WeakSet[Worker] = weakref.WeakSet()
_REAPERS: set[threading.Thread] = set()
_REAPERS_LOCK = threading.Lock()
_KILL_WAIT_S = 0.2


def live_workers() -> list[int]:
    """The pids of this process's query workers that are running now (the zygote's children)."""
    zygote = _ZYGOTE.proc
    if zygote is None or zygote.poll() is not None:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == zygote.pid and fields[0] != "Z":
            pids.append(int(entry))
    return pids


class Worker:
    """The caller's handle on one query worker process (see the module docstring)."""

    def __init__(self, engine: str, path: str, options: Mapping[str, Any]):
        self.folder: str | None = None
        spawned = _ZYGOTE.spawn(engine)
        if spawned is not None:
            self.child, self._in, self._out = spawned
        else:  # no zygote (no pidfds here): a fresh interpreter
            popen = subprocess.Popen(
                [sys.executable, "-s", "-c", _BOOT, _PACKAGE_ROOT],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
            assert popen.stdin is not None and popen.stdout is not None
            self.child = _Child(popen.pid, popen=popen)
            self._in, self._out = os.dup(popen.stdin.fileno()), os.dup(popen.stdout.fileno())
            popen.stdin.close()
            popen.stdout.close()
        self.pid = self.child.pid
        _WORKERS.add(self)
        os.set_blocking(self._out, False)
        self._poller = select.poll()
        self._poller.register(self._out, select.POLLIN | select.POLLHUP | select.POLLERR)
        request = {
            "engine": engine,
            "path": path,
            "options": dict(options),
            "temp_root": tempfile.gettempdir(),
            "caller": os.getpid(),
        }
        try:
            reply = self.call(request, time.monotonic() + OPEN_TIMEOUT_S, 1 << 20)
        except (WorkerGone, WorkerLate, WorkerTooLarge) as exc:
            self.kill()
            raise OSError(f"the SQL query worker did not start ({type(exc).__name__}: {exc})") from None
        except BaseException:
            self.kill()
            raise
        if "error" in reply:
            self.kill()
            raise ValueError(f"could not open {path!r}: {reply['message']}")
        self.folder = reply["folder"]

    def call(self, message: Any, deadline: float, max_frame: float) -> Any:
        """Send ``message`` and return the answer, read by ``deadline`` and at most ``max_frame`` bytes long."""
        try:
            _send(self._in, message)
        except OSError as exc:  # a broken pipe: the worker is gone
            raise WorkerGone(f"could not send the request ({exc.strerror or exc})") from None
        data = self._read(_HEADER.size, deadline, greedy=True)  # a small answer comes in this one read
        (size,) = _HEADER.unpack_from(data)
        if size > max_frame:
            raise WorkerTooLarge(f"{size} bytes")
        body = data[_HEADER.size :]
        if len(body) < size:
            body += self._read(size - len(body), deadline)
        answer = _Unpickler(io.BytesIO(body)).load()
        if isinstance(answer, dict) and "chunks" in answer:  # rows, pickled in the worker a batch at a time
            rows: list[tuple] = []
            for chunk in answer.pop("chunks"):
                rows.extend(_Unpickler(io.BytesIO(chunk)).load())
            answer["rows"] = rows
        return answer

    def _read(self, size: int, deadline: float, greedy: bool = False) -> bytes:
        """``size`` bytes from the worker (with ``greedy``, whatever more is there at once, up to 64 KB)."""
        chunks: list[bytes] = []
        got = 0
        while got < size:
            wait = None if deadline == math.inf else max(0.0, deadline - time.monotonic())
            if not self._poller.poll(None if wait is None else wait * 1000):
                raise WorkerLate
            try:
                chunk = os.read(self._out, max(size - got, 1 << 16) if greedy else min(size - got, 1 << 20))
            except BlockingIOError:
                continue
            except OSError as exc:
                raise WorkerGone(exc.strerror or str(exc)) from None
            if not chunk:
                raise WorkerGone("it ended")
            chunks.append(chunk)
            got += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.child.alive()

    def forget(self) -> None:
        """In a forked child: close this process's copies of the worker's pipes, leaving the worker be."""
        for fd in (self._in, self._out, self.child.pidfd):
            if fd is not None and fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._in = self._out = -1
        self.child.pidfd, self.child.popen, self.folder = None, None, None

    def stop(self, wait_s: float = 1.0) -> None:
        """Ask the worker to end (it removes its folder), and kill it if it has not after ``wait_s``."""
        self.hang_up()
        if not self.child.wait(wait_s):
            self.kill()
            return
        self._cleanup()

    def hang_up(self) -> None:
        """Close the request pipe: the worker ends after the request it is answering."""
        if self._in >= 0:
            with contextlib.suppress(OSError):
                os.close(self._in)
            self._in = -1

    def kill(self) -> None:
        """Kill the worker now and remove its folder; one that takes long to die (freeing gigabytes, stuck
        in the kernel) is finished off by a reaper thread, so that the caller does not wait for it."""
        self.child.kill()
        if not self.child.wait(_KILL_WAIT_S):
            reaper = threading.Thread(target=self._reap, name="skyrl-sql-reaper", daemon=True)
            with _REAPERS_LOCK:
                _REAPERS.add(reaper)
            reaper.start()
            return
        self._cleanup()

    def _reap(self) -> None:
        try:
            self.child.wait(None)
            self._cleanup()
        finally:
            with _REAPERS_LOCK:
                _REAPERS.discard(threading.current_thread())

    def _cleanup(self) -> None:
        self.hang_up()
        if self._out >= 0:
            with contextlib.suppress(OSError):
                os.close(self._out)
            self._out = -1
        self.child.release()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def sweep_stale_folders(temp_root: str | None = None) -> int:
    """Remove the private folders of workers that are gone (see the module docstring); returns how many.

    A folder whose ``.owner`` lock can be taken has no living owner. One without a lock file (being made, or
    made by an older version) is removed only when the process its name starts with is gone.
    """
    root = temp_root or tempfile.gettempdir()
    uid = os.getuid()
    swept = 0
    try:
        entries = list(os.scandir(root))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.startswith(PRIVATE_PREFIX):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != uid:
                continue
        except OSError:
            continue
        owner = entry.name[len(PRIVATE_PREFIX) :].split("-", 1)[0]
        try:
            fd = os.open(os.path.join(entry.path, _OWNER_FILE), os.O_RDWR | os.O_NOFOLLOW)
        except FileNotFoundError:
            if owner.isdigit() and int(owner) != os.getpid() and not _pid_alive(int(owner)):
                shutil.rmtree(entry.path, ignore_errors=True)
                swept += 1
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
        else:
            shutil.rmtree(entry.path, ignore_errors=True)
            swept += 1
        finally:
            os.close(fd)
    return swept


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Pool:
    """The workers of one (engine, file, settings): idle ones wait here between queries.

    While databases are open on it, it keeps at most as many idle workers as there are open databases (each
    query takes one, so concurrent queries run in parallel); once the last database closed, one idle worker
    stays :data:`WORKER_LINGER_S` seconds.
    """

    def __init__(self, pools: Pools, key: tuple, engine: str, path: str, options: Mapping[str, Any]):
        self.pools, self.key = pools, key
        self.engine, self.path, self.options = engine, path, dict(options)
        self.users = 0
        self.busy = 0
        self.idle: list[Worker] = []
        self.idle_since: float | None = None
        self.owner_pid = os.getpid()

    def request(self, message: dict[str, Any], deadline: float, timeout_s: float | None) -> dict[str, Any]:
        """Run one request on a worker; the answer, or ``{"error": kind, "message": text}``.

        The worker stops the query at ``deadline`` itself; one that has not answered
        :data:`~.db_base.KILL_GRACE_S` later is killed (kind ``timeout``), as is one whose answer would be
        larger than the request's ``max_bytes`` (kind ``resources``).
        """
        from skyrl_gym.envs.sql.db_base import KILL_GRACE_S

        if self.owner_pid != os.getpid():
            raise RuntimeError(
                "this database was opened in another process (before a fork); open it again in this one"
            )
        worker = self._acquire()
        remaining = None if deadline == math.inf else max(0.0, deadline - time.monotonic())
        max_bytes = message.get("max_bytes")
        max_frame = math.inf if max_bytes is None or message["op"] != "query" else max_bytes + _FRAME_SLACK
        try:
            reply = worker.call({**message, "timeout_s": remaining}, deadline + KILL_GRACE_S, max_frame)
        except WorkerLate:
            self._discard(worker)
            return {"error": "timeout", "message": ""}
        except WorkerTooLarge:
            self._discard(worker)
            return {
                "error": "resources",
                "message": f"the result is larger than {_megabytes(max_bytes)}; select fewer or shorter values",
            }
        except WorkerGone:
            self._discard(worker)
            return {
                "error": "resources",
                "message": (
                    "the query stopped the database engine (it ran out of memory or crashed); "
                    "write a cheaper query"
                ),
            }
        except BaseException:
            self._discard(worker)  # interrupted mid-answer: the pipe is out of step
            raise
        if reply.get("retire"):
            self._discard(worker)  # killed, not asked: the caller need not wait for a big engine to close
        else:
            self._release(worker)
        return reply

    def _acquire(self) -> Worker:
        with self.pools.lock:
            while self.idle:
                worker = self.idle.pop()
                if worker.alive():
                    self.busy += 1
                    return worker
                worker.kill()
            self.busy += 1
        try:
            return Worker(self.engine, self.path, self.options)
        except BaseException:
            with self.pools.lock:
                self.busy -= 1
            raise

    def _release(self, worker: Worker) -> None:
        with self.pools.lock:
            self.busy -= 1
            keep = len(self.idle) < max(self.users, 1) and self.pools.pools.get(self.key) is self
            if keep:
                self.idle.append(worker)
        if not keep:
            worker.stop()

    def _discard(self, worker: Worker, kill: bool = True) -> None:
        with self.pools.lock:
            self.busy -= 1
        if kill:
            worker.kill()
        else:
            worker.stop()

    def leave(self) -> None:
        """A database on this pool closed."""
        if self.owner_pid != os.getpid():
            return  # a copy made by fork: the workers are the other process's
        self.pools.leave(self)


class Pools:
    """Every :class:`Pool` of this process, and the thread that ends the lingering ones."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.pools: dict[tuple, Pool] = {}
        self._janitor: threading.Thread | None = None
        self._wake = threading.Condition(self.lock)
        self.closing = False

    def join(self, engine: str, path: Any, options: Mapping[str, Any], stamp: tuple) -> Pool:
        """The pool for a database that opens, with a worker ready (so that opening errors show now)."""
        sweep_stale_folders()
        key = (engine, str(path), _freeze(options), stamp)
        with self.lock:
            pool = self.pools.get(key)
            if pool is None:
                pool = self.pools[key] = Pool(self, key, engine, str(path), options)
            pool.users += 1
            pool.idle_since = None
            ready = bool(pool.idle) or pool.busy > 0
            if not ready:
                pool.busy += 1  # the worker being started counts as busy, so a second opener waits for none
        if not ready:
            try:
                worker = Worker(engine, str(path), options)
            except BaseException:
                with self.lock:
                    pool.busy -= 1
                    pool.users -= 1
                    if pool.users == 0 and pool.busy == 0 and not pool.idle and self.pools.get(key) is pool:
                        del self.pools[key]
                raise
            pool._release(worker)
        return pool

    def leave(self, pool: Pool) -> None:
        stop: list[Worker] = []
        with self.lock:
            pool.users -= 1
            if pool.users > 0:
                return
            if WORKER_LINGER_S <= 0 or self.closing or sys.is_finalizing():  # no new threads at exit
                if self.pools.get(pool.key) is pool:
                    del self.pools[pool.key]
                stop, pool.idle = pool.idle, []
            else:
                pool.idle_since = time.monotonic()
                stop, pool.idle = pool.idle[1:], pool.idle[:1]
                self._start_janitor()
        for worker in stop:
            worker.stop()

    def _start_janitor(self) -> None:
        if self._janitor is None or not self._janitor.is_alive():
            self._janitor = threading.Thread(target=self._run_janitor, name="skyrl-sql-pools", daemon=True)
            self._janitor.start()
        else:
            self._wake.notify()

    def _run_janitor(self) -> None:
        while True:
            with self.lock:
                now = time.monotonic()
                expired = [
                    p
                    for p in self.pools.values()
                    if p.users == 0 and p.busy == 0 and (p.idle_since or math.inf) + WORKER_LINGER_S <= now
                ]
                for pool in expired:
                    del self.pools[pool.key]
                waiting = [
                    p.idle_since + WORKER_LINGER_S
                    for p in self.pools.values()
                    if p.users == 0 and p.idle_since
                ]
                if not expired and not waiting:
                    self._janitor = None
                    return
                if not expired:
                    self._wake.wait(max(0.01, min(waiting) - now))
                    continue
            for pool in expired:
                for worker in pool.idle:
                    worker.stop()
                pool.idle = []

    def close_idle(self) -> int:
        """End at once every pool no database uses (and their workers); returns how many."""
        with self.lock:
            idle = [p for p in self.pools.values() if p.users == 0 and p.busy == 0]
            for pool in idle:
                del self.pools[pool.key]
            janitor = self._janitor
            self._wake.notify()
        workers = [w for pool in idle for w in pool.idle]
        for pool in idle:
            pool.idle = []
        for worker in workers:  # EOF to all first, so that they end together
            worker.hang_up()
        for worker in workers:
            worker.stop()
        if janitor is not None:
            janitor.join(1.0)
        with _REAPERS_LOCK:
            reapers = list(_REAPERS)
        for reaper in reapers:  # the folders of killed workers are gone once this returns
            reaper.join(10.0)
        return len(idle)

    def close_all(self) -> None:
        """End every worker (at exit)."""
        with self.lock:
            self.closing = True
            pools, self.pools = list(self.pools.values()), {}
        for pool in pools:
            if pool.owner_pid == os.getpid():
                for worker in pool.idle:
                    worker.stop(0.5)
            pool.idle = []
        _ZYGOTE.close()

    def _after_fork(self) -> None:
        # The child has copies of the parent's pipes: it must never use them, nor keep them open (a worker
        # would not see its caller hang up), nor stop the parent's workers.
        for worker in list(_WORKERS):
            worker.forget()
        self.lock = threading.RLock()
        self._wake = threading.Condition(self.lock)
        self.pools = {}
        self._janitor = None
        _ZYGOTE.after_fork()


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


POOLS = Pools()
atexit.register(POOLS.close_all)
os.register_at_fork(after_in_child=POOLS._after_fork)
