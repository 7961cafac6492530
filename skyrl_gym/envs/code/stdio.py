"""Judging stdin/stdout programs (LiveCodeBench style): run the program on every test, compare the output.

One sandbox run judges a program on all its tests: a small harness (:data:`HARNESS`, standard library only)
starts the program once per test with that test's input on stdin, under that test's own time limit, and
writes back what the program printed. The harness gets the inputs over its stdin, never as a file, and makes
itself non-dumpable, so the program cannot read the other tests' inputs; expected outputs never enter the
sandbox at all: the comparison happens here, outside. Each line of the harness's report is signed with a key it got
with the inputs (see :mod:`.judging`); other lines (a program writing imitations to the host's pipe through
``/proc/1/fd/1``) are ignored, and only the first line for each test counts. After a test that crashes or runs out of time the
harness stops, since the verdict is already a failure. The harness runs as ``python -I -c`` (see
:func:`.judging.judge_command`): nothing the program writes into the work folder can be imported by it, and
its code is no file there. In the ``bwrap`` sandbox (a PID namespace of its own) the harness also ends every
process a test left behind, even one in a session of its own, before the next test starts.

Outputs are compared after normalising: ``\\r\\n`` is read as ``\\n``, trailing whitespace is dropped from every
line and blank lines at the end are ignored. With a float tolerance, lines that differ are compared token by
token, and two tokens that both read as finite numbers match when they are within the tolerance (absolute or
relative).
"""

from __future__ import annotations

import dataclasses
import json
import math
import secrets
from collections.abc import Sequence
from typing import Any

from skyrl_gym.envs.code.judging import (
    DRAINING,
    IMPORT_PATH,
    SIGNING,
    JudgeUnavailable,
    judge_command,
    read_report,
)
from skyrl_gym.runtime import Limits, RunResult, Sandbox

__all__ = [
    "HARNESS",
    "JudgeUnavailable",
    "StdioJudgement",
    "StdioTest",
    "TestOutcome",
    "judge_stdio",
    "normalise_output",
    "outputs_match",
]

VERDICT_ACCEPTED = "accepted"
VERDICT_WRONG = "wrong_answer"
VERDICT_RUNTIME = "runtime_error"
VERDICT_TIME = "time_limit_exceeded"
VERDICT_MEMORY = "memory_limit_exceeded"
VERDICT_NOT_RUN = "not_run"

SOLUTION_FILE = "solution.py"
MIN_OUTPUT_CAP = 64 * 1024
STDERR_TAIL = 2000

# Runs inside the sandbox with its Python (3.8 or newer); the standard library only.
HARNESS = (
    r"""
import os, sys
@IMPORT_PATH@
import ctypes, json, selectors, signal, subprocess, time
@SIGNING@
@DRAINING@

def hide_memory():
    # PR_SET_DUMPABLE 0: no process of the same user (the program) may ptrace us or open our /proc files
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)
        return libc.prctl(3, 0, 0, 0, 0) == 0
    except Exception:
        return False

def sweep_leftovers():
    # what the program left running in a session of its own (out of reach of killpg) dies too, so that nothing
    # of one test runs on into the next; kill(-1) reaches every process of the sandbox but its first one and
    # this one, and is only used where the sandbox has a PID namespace of its own (the host says so)
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    # kill() only queues the signal, which a process acts on when next scheduled (later on a busy machine):
    # the next test starts once every other process of the sandbox has died (a zombie runs nothing), or
    # after 10 s, more than a signal takes on any machine
    deadline = time.monotonic() + 10.0
    while running_others() and time.monotonic() < deadline:
        time.sleep(0.005)

def running_others():
    # whether a process of the sandbox other than its first one and this one has not died yet
    try:
        names = os.listdir("/proc")
    except OSError:
        return False
    for name in names:
        if not name.isdigit() or int(name) in (1, os.getpid()):
            continue
        try:
            with open("/proc/%s/stat" % name) as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            return True
    return False

def run_one(data, time_limit, cap, sweep):
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "solution.py"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,
    )
    chunks = {proc.stdout: [], proc.stderr: []}
    kept = {proc.stdout: 0, proc.stderr: 0}
    limits = {proc.stdout: cap, proc.stderr: 8 * 1024}
    dropped = False
    selector = selectors.DefaultSelector()
    for stream in (proc.stdout, proc.stderr):
        os.set_blocking(stream.fileno(), False)
        selector.register(stream, selectors.EVENT_READ)
    view = memoryview(data)
    if view:
        os.set_blocking(proc.stdin.fileno(), False)
        selector.register(proc.stdin, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    deadline = start + time_limit
    timed_out = False
    open_streams = 2
    while open_streams:
        now = time.monotonic()
        if now >= deadline:
            timed_out = proc.poll() is None
            break
        if proc.poll() is not None and deadline > now + 0.2:
            # the program is done but something it started holds its output open: read a moment longer
            deadline = now + 0.2
        for key, _ in selector.select(min(deadline - now, 0.05)):
            stream = key.fileobj
            if stream is proc.stdin:
                try:
                    view = view[os.write(stream.fileno(), view[:65536]):]
                except (BrokenPipeError, OSError):
                    view = view[:0]
                if not view:
                    selector.unregister(stream)
                    stream.close()
                continue
            try:
                chunk = os.read(stream.fileno(), 65536)
            except BlockingIOError:
                continue
            if not chunk:
                selector.unregister(stream)
                open_streams -= 1
                continue
            room = limits[stream] - kept[stream]
            if room > 0:
                chunks[stream].append(chunk[:room])
                kept[stream] += min(room, len(chunk))
            if len(chunk) > room and stream is proc.stdout:
                dropped = True
    if not timed_out:
        try:
            proc.wait(max(deadline - time.monotonic(), 0.001))
        except subprocess.TimeoutExpired:
            timed_out = True
    elapsed = time.monotonic() - start
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    if sweep:
        sweep_leftovers()
    code = proc.wait()
    selector.close()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        try:
            stream.close()
        except OSError:
            pass
    return {
        "stdout": b"".join(chunks[proc.stdout]).decode("utf-8", "replace"),
        "stderr": b"".join(chunks[proc.stderr])[-2000:].decode("utf-8", "replace"),
        "exit": code, "timed_out": timed_out, "time_s": round(elapsed, 4), "truncated": dropped,
    }

def main():
    hidden = hide_memory()
    payload = json.loads(sys.stdin.buffer.read())
    token = payload["token"]

    def report(message):
        sys.stdout.write(signed_line(token, message))
        sys.stdout.flush()

    if not hidden:
        report({"judge_error": "the judge could not make itself non-dumpable (prctl)"})
        return
    report({"ready": True})
    wait_drained(1)
    # only in a PID namespace of the sandbox's own, whose first process is the sandbox's init (our parent)
    sweep = payload.get("own_pid_namespace") is True and os.getppid() == 1
    for index, (data, limit) in enumerate(zip(payload["inputs"], payload["time_limits"])):
        result = run_one(data.encode("utf-8", "surrogatepass"), limit, payload["output_cap"], sweep)
        result["index"] = index
        report(result)
        if result["timed_out"] or result["exit"] != 0:
            break

main()
""".replace("@SIGNING@", SIGNING)
    .replace("@DRAINING@", DRAINING)
    .replace("@IMPORT_PATH@", IMPORT_PATH)
)


@dataclasses.dataclass(frozen=True)
class StdioTest:
    """One test: what the program reads (``input``) and what it must print (``output``)."""

    input: str
    output: str

    @classmethod
    def from_dict(cls, data: Any) -> StdioTest:
        """Read ``{"input": str, "output": str}``; a clear ``ValueError`` for anything else."""
        if not isinstance(data, dict) or not isinstance(data.get("input"), str):
            raise ValueError(f"a stdin/stdout test is {{'input': str, 'output': str}}, got {data!r:.120}")
        if not isinstance(data.get("output"), str):
            raise ValueError(f"a stdin/stdout test is {{'input': str, 'output': str}}, got {data!r:.120}")
        return cls(data["input"], data["output"])


@dataclasses.dataclass
class TestOutcome:
    """What one test gave: its ``verdict`` (``accepted``, ``wrong_answer``, ``runtime_error``,
    ``time_limit_exceeded``, ``memory_limit_exceeded`` or ``not_run``), the program's output and stderr tail."""

    verdict: str
    got: str = ""
    stderr: str = ""
    exit_code: int | None = None
    time_s: float = 0.0

    @property
    def passed(self) -> bool:
        """Whether the test passed."""
        return self.verdict == VERDICT_ACCEPTED


@dataclasses.dataclass
class StdioJudgement:
    """The judgement of a program on a list of tests (in order); ``passed`` when every test passed."""

    outcomes: list[TestOutcome]
    run: RunResult

    @property
    def passed(self) -> bool:
        """Every test passed."""
        return bool(self.outcomes) and all(o.passed for o in self.outcomes)

    @property
    def tests_passed(self) -> int:
        """How many tests passed."""
        return sum(o.passed for o in self.outcomes)

    @property
    def timed_out(self) -> bool:
        """Some test ran out of time (or the whole run did)."""
        return self.run.timed_out or any(o.verdict == VERDICT_TIME for o in self.outcomes)

    def first_failure(self) -> int | None:
        """The index of the first test that did not pass, ``None`` when all passed."""
        return next((i for i, o in enumerate(self.outcomes) if not o.passed), None)


def normalise_output(text: str) -> list[str]:
    """The lines of ``text`` without trailing whitespace, without blank lines at the end."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _number(token: str) -> float | None:
    try:
        value = float(token)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _tokens_match(got: str, expected: str, tol: float) -> bool:
    if got == expected:
        return True
    a, b = _number(got), _number(expected)
    if a is None or b is None:
        return False
    return abs(a - b) <= tol or abs(a - b) <= tol * abs(b)


def outputs_match(got: str, expected: str, float_tol: float | None = None) -> bool:
    """Whether the program's output ``got`` matches ``expected`` (see the module docstring for the rules)."""
    got_lines, expected_lines = normalise_output(got), normalise_output(expected)
    if got_lines == expected_lines:
        return True
    if float_tol is None or len(got_lines) != len(expected_lines):
        return False
    for got_line, expected_line in zip(got_lines, expected_lines, strict=True):
        got_tokens, expected_tokens = got_line.split(), expected_line.split()
        if len(got_tokens) != len(expected_tokens):
            return False
        if not all(_tokens_match(g, e, float_tol) for g, e in zip(got_tokens, expected_tokens, strict=True)):
            return False
    return True


def judge_stdio(
    sandbox: Sandbox,
    code: str,
    tests: Sequence[StdioTest],
    *,
    time_limit_s: float = 2.0,
    memory_mb: int = 512,
    float_tol: float | None = None,
) -> StdioJudgement:
    """Run ``code`` on every test in one sandbox run and judge each output.

    The harness stops after the first test that crashes or runs out of time; the tests after it are
    ``not_run``. Raises :class:`JudgeUnavailable` when the sandbox could not start the harness.
    """
    if not tests:
        raise ValueError("a stdin/stdout problem needs at least one test")
    longest = max(len(t.output.encode("utf-8", "surrogatepass")) for t in tests)
    # one cap for every test, so that it tells the program nothing about any single expected output
    cap = max(MIN_OUTPUT_CAP, 2 * longest + 1024)
    token = secrets.token_hex(16)
    payload = json.dumps(
        {
            "token": token,
            "inputs": [t.input for t in tests],
            "time_limits": [time_limit_s] * len(tests),
            "output_cap": cap,
            "own_pid_namespace": getattr(sandbox, "isolation", "") == "namespaces",
        }
    )
    limits = Limits(
        timeout_s=time_limit_s * len(tests) + 5.0,
        memory_mb=memory_mb + 64,  # the harness's own share
        # JSON escapes control characters in six bytes: room for output made only of them
        max_output_bytes=len(tests) * 6 * (cap + STDERR_TAIL + 256) + 4096,
    )
    run = sandbox.run(
        judge_command(sandbox.python, HARNESS),
        files={SOLUTION_FILE: code},
        stdin=payload,
        limits=limits,
    )
    results, ready, failure = _read_results(run.stdout, token)
    if run.exit_code is None or failure is not None or not ready:
        raise JudgeUnavailable(
            f"the {run.backend or sandbox.name} sandbox could not run the judge ({run.explain()}): "
            f"{failure or run.stderr.strip()[-500:]}"
        )
    outcomes: list[TestOutcome] = []
    for index, test in enumerate(tests):
        result = results.get(index)
        if result is None:
            if outcomes and outcomes[-1].passed is False and outcomes[-1].verdict != VERDICT_WRONG:
                outcomes.append(TestOutcome(VERDICT_NOT_RUN))
            elif run.oom:
                outcomes.append(TestOutcome(VERDICT_MEMORY))
            elif run.timed_out:
                outcomes.append(TestOutcome(VERDICT_TIME))
            else:  # the program stopped the harness
                outcomes.append(TestOutcome(VERDICT_RUNTIME, stderr="the judge was stopped by the program"))
            continue
        outcomes.append(_outcome(result, test, float_tol, run.oom))
    return StdioJudgement(outcomes, run)


def _read_results(stdout: str, token: str) -> tuple[dict[int, dict[str, Any]], bool, str | None]:
    """The harness's result per test index (its first line for each: only its lines carry the token), whether
    it got as far as saying it was ready, and the harness's own failure, if any."""
    messages = read_report(stdout, token)
    results: dict[int, dict[str, Any]] = {}
    for message in messages:
        if type(message.get("index")) is int:
            results.setdefault(message["index"], message)
    failure = next((m["judge_error"] for m in messages if isinstance(m.get("judge_error"), str)), None)
    return results, any(m.get("ready") is True for m in messages), failure


def _outcome(result: dict[str, Any], test: StdioTest, float_tol: float | None, oom: bool) -> TestOutcome:
    got = str(result.get("stdout", ""))
    stderr = str(result.get("stderr", ""))
    exit_code = result.get("exit")
    time_s = float(result.get("time_s") or 0.0)
    if result.get("timed_out"):
        verdict = VERDICT_TIME
    elif exit_code == -9 and oom or "MemoryError" in stderr:
        verdict = VERDICT_MEMORY  # the cgroup's OOM killer picks the program, the largest process
    elif exit_code != 0:
        verdict = VERDICT_RUNTIME
    elif outputs_match(got, test.output, float_tol):
        verdict = VERDICT_ACCEPTED
    else:
        verdict = VERDICT_WRONG
    return TestOutcome(verdict, got, stderr, exit_code if isinstance(exit_code, int) else None, time_s)
