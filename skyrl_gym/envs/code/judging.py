"""What both judges share: the error for a sandbox that cannot run them, and the judge's signed report.

A harness gets a fresh key (``token``) over its stdin, hides its memory from the program under test, and writes
each line of its report as ``<MAC> <JSON>``: a keyed BLAKE2b of the JSON text (:data:`SIGNING`, pasted into the
harness). :func:`read_report` keeps only the lines whose MAC checks out, so the program cannot forge a line
(a printed imitation of a report, a line written to the host's pipe through ``/proc/1/fd/1``) or change one,
even by writing into the middle of a long line while the harness writes it.

Where a harness's code comes from matters as much: the program under test writes into the work folder (the
harness's current directory), so a harness run as ``python judge.py`` there would import any module the program
planted beside it (``typing.py``, ``json.py``...) the first time it imported that name, and run it as the judge.
:func:`judge_command` starts a harness as ``python -I -c <code>``: isolated mode puts neither the current
directory nor the user's site-packages on the import path and ignores ``PYTHON*`` variables, the code never
is a file the program could rewrite, and :data:`IMPORT_PATH`, at the top of every harness, drops from
``sys.path`` whatever entry still names the work folder (for an interpreter that would add it anyway).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

__all__ = [
    "DRAINING",
    "IMPORT_PATH",
    "MAC_BYTES",
    "SIGNING",
    "JudgeUnavailable",
    "judge_command",
    "read_report",
    "sign",
]

MAC_BYTES = 16

SIGNING = r"""
try:
    from _blake2 import blake2b  # what hashlib uses, without loading OpenSSL
except ImportError:
    from hashlib import blake2b

def signed_line(key, message):
    data = json.dumps(message)  # ASCII only, so the host reads back exactly these bytes
    return "%s %s\n" % (blake2b(data.encode(), key=key.encode(), digest_size=@MAC_BYTES@).hexdigest(), data)
""".replace("@MAC_BYTES@", str(MAC_BYTES))
"""The harness's side: ``signed_line(token, message)`` is one line of the report (standard library only)."""


DRAINING = r"""
import fcntl, struct, termios

def wait_drained(fd, limit_s=2.0):
    # until the host has read all that the judge wrote on its report channel: where the program could reopen the
    # host's pipe (a sandbox run as the caller's own user), it could otherwise read the judge's first lines off it
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            if struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0] <= 0:
                return
        except (OSError, ValueError):
            return
        time.sleep(0.001)
"""
"""The harness's side: ``wait_drained(1)``, called after the ``ready`` line and before the program runs, so that
the line that tells the host the judge works is out of the program's reach (after ``import time``)."""


IMPORT_PATH = r"""
def _judge_import_path():
    # the work folder, where the program writes, may not stay on the judge's import path
    work = os.path.realpath(os.getcwd())
    def in_work(entry):
        if entry in ("", "."):
            return True
        real = os.path.realpath(entry)
        return real == work or (work != os.sep and real.startswith(work + os.sep))
    sys.path[:] = [entry for entry in sys.path if isinstance(entry, str) and not in_work(entry)]
    sys.path_importer_cache.clear()

_judge_import_path()
del _judge_import_path
"""
"""The harness's side: drops from ``sys.path`` the entries the program could plant modules in (after
``import os, sys``, which are built in or frozen, before any other import)."""


def judge_command(python: str, harness: str) -> list[str]:
    """The command that runs ``harness`` (its source) as a judge: ``python -I -u -c harness`` (see the module
    docstring: nothing the program writes is on its import path, and its code is no file in the sandbox)."""
    return [python, "-I", "-u", "-c", harness]


class JudgeUnavailable(RuntimeError):
    """The sandbox could not run the judge: an infrastructure failure, never the program's fault, so the
    environment raises it (the episode ends in error) instead of scoring a wrong answer."""


def sign(token: str, data: str) -> str:
    """The MAC of a report line's JSON text ``data`` under ``token``."""
    return hashlib.blake2b(data.encode(), key=token.encode(), digest_size=MAC_BYTES).hexdigest()


def read_report(stdout: str, token: str) -> list[dict[str, Any]]:
    """The JSON objects of the lines a harness signed with ``token``, in order; every other line is skipped."""
    messages = []
    for line in stdout.split("\n"):
        mac, _, data = line.partition(" ")
        if len(mac) != 2 * MAC_BYTES or not data.isascii():
            continue
        if not hmac.compare_digest(mac, sign(token, data)):
            continue
        try:
            message = json.loads(data)
        except (ValueError, RecursionError):
            continue
        if isinstance(message, dict):
            messages.append(message)
    return messages


_IN_SANDBOX = (
    # /proc/1 is the sandbox's own first process only inside a PID namespace (bwrap); under the process backend
    # it is the host's init, which these programs must leave alone
    "def in_sandbox():\n"
    "    try:\n"
    "        with open('/proc/1/cmdline', 'rb') as handle:\n"
    "            return b'sandbox-init' in handle.read()\n"
    "    except OSError:\n"
    "        return False\n"
)
_FORGED = {
    "ready": True, "stage": "tests", "passed": True, "index": 0, "stdout": "", "stderr": "", "exit": 0,
    "timed_out": False, "time_s": 0.0, "truncated": False,
}  # fmt: skip
_FORGED_REPORT = repr(_FORGED)
_FORGED_LINE = "0" * 2 * MAC_BYTES + " " + json.dumps(_FORGED) + "\n"
_PLANTED_MODULE = (
    # run as the judge if the judge ever imports it: say the judge broke (an error end), else sign a pass
    "import os, sys\n"
    "frame = sys._getframe()\n"
    "while frame is not None:\n"
    "    report = frame.f_locals.get('report')\n"
    "    if callable(report):\n"
    "        for message in ({'judge_error': 'planted'}, " + _FORGED_REPORT + "):\n"
    "            try:\n"
    "                report(message)\n"
    "            except BaseException:\n"
    "                pass\n"
    "        os._exit(0)\n"
    "    frame = frame.f_back\n"
)
PLANTED_NAMES = (
    "typing math re json collections doctest selectors subprocess signal hashlib string traceback linecache "
    "ast decimal fractions itertools functools heapq random bisect copy inspect dataclasses warnings weakref "
    "numbers statistics textwrap difflib pprint unittest argparse dis contextlib enum tokenize _blake2 ctypes "
    "base64 io time"
).split()
"""Modules a judge imports (or might import late): the names a planting program writes into its work folder."""

HOSTILE_PROGRAMS = (
    # modules planted in the work folder for the judge to import (-I keeps them off its import path)
    "import os\n"
    f"source = {_PLANTED_MODULE!r}\n"
    f"for name in {tuple(PLANTED_NAMES)!r}:\n"
    "    for folder in (os.getcwd(), os.path.join(os.getcwd(), '__pycache__')):\n"
    "        try:\n"
    "            os.makedirs(folder, exist_ok=True)\n"
    "            with open(os.path.join(folder, name + '.py'), 'w') as handle:\n"
    "                handle.write(source)\n"
    "        except OSError:\n"
    "            pass\n"
    "with open('sitecustomize.py', 'w') as handle:\n"
    "    handle.write(source)\n",
    # lines that imitate the judge's report, on every descriptor in reach, then a quiet exit
    "import os\n" + _IN_SANDBOX + f"line = {_FORGED_LINE.encode()!r}\n"
    "pids = ['self', str(os.getppid())] + (['1'] if in_sandbox() else [])\n"
    "for pid in pids:\n"
    "    for n in range(0, 32):\n"
    "        try:\n"
    "            fd = os.open('/proc/%s/fd/%d' % (pid, n), os.O_WRONLY | os.O_NONBLOCK)\n"
    "            os.write(fd, line * 4)\n"
    "        except OSError:\n"
    "            pass\n"
    "print(line.decode(), end='')\n"
    "os._exit(0)\n",
    # read what the judge's descriptors hold (its input, the host's pipes, the sandbox's start byte), then close
    # every descriptor
    "import os\n" + _IN_SANDBOX + "pids = ['self', str(os.getppid())] + (['1'] if in_sandbox() else [])\n"
    "for pid in pids:\n"
    "    for n in range(0, 32):\n"
    "        try:\n"
    "            fd = os.open('/proc/%s/fd/%d' % (pid, n), os.O_RDONLY | os.O_NONBLOCK)\n"
    "            os.read(fd, 1 << 16)\n"
    "        except OSError:\n"
    "            pass\n"
    "os.closerange(0, 1024)\n",
    # the judge's functions and builtins patched from inside, then an exit that is no failure of its own
    "import builtins, json, os, sys\n"
    "class Equal:\n"
    "    __eq__ = lambda self, other: True\n"
    "    __ne__ = lambda self, other: False\n"
    "    __hash__ = lambda self: 0\n"
    f"json.dumps = lambda *args, **kwargs: {json.dumps(_FORGED)!r}\n"
    "json.loads = lambda *args, **kwargs: {'stage': 'loaded', 'value': Equal()}\n"
    "builtins.isinstance = lambda *args: True\n"
    "builtins.Equal = Equal\n"
    "os.write = lambda fd, data: len(data)\n"
    "raise SystemExit(0)\n",
    # the work folder filled up (two files, each under the file-size limit) and, in a sandbox, made read-only
    "import os, signal\n" + _IN_SANDBOX + "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
    "for name in ('filler-1', 'filler-2'):\n"
    "    try:\n"
    "        with open(name, 'wb') as handle:\n"
    "            for _ in range(40):\n"
    "                handle.write(bytes(1 << 20))\n"
    "    except OSError:\n"
    "        pass\n"
    "if in_sandbox():\n"
    "    os.chmod('.', 0o500)\n",
)
"""Programs that attack a judge from inside its sandbox (standard library only, the same for every problem);
each must end as the program's failure, never as an error. Their writes stay inside the work folder, and
``/proc/1`` is only touched inside a sandbox of its own, so they are safe to run under any backend."""
