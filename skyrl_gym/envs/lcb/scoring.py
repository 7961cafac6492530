"""LiveCodeBench judging with SkyRL's rules, run in this project's sandbox by the ``code`` environment's judge
(SkyRL's ``skyrl_gym.envs.lcb.livecodebench``, a name :mod:`skyrl_gym.compat` keeps for this module).

What SkyRL's ``lcb`` environment does, and this module does the same way:

- **The program** is the last fenced block of the answer: three backticks, an optional word (any language
  tag), a newline, then everything up to the next three backticks, stripped (:func:`extract_code_from_model`).
  No block: reward 0.0 and ``parsed_code`` ``None``.
- **The tests** are the row's ground truth, a JSON list of ``{"input", "output", "testtype"}``. With
  ``testtype: "stdin"`` the program reads the input on stdin and must print the output; with
  ``"functional"`` (LeetCode style, ``metadata.func_name`` on the first test) each input line is a JSON
  argument, the function (a method of ``Solution`` when the code defines ``class Solution``) is called with
  them, and its result (a tuple read as a list) must equal the JSON output.
- **Comparison** (stdin): both texts stripped and split into lines, each line stripped; the line counts must
  be equal and every line equal as text or, token by token, as decimal numbers (``3.0`` matches ``3``).
- **Names available without an import**, as in SkyRL's runner: the usual ``itertools``, ``collections``,
  ``math``, ``heapq``, ``bisect``, ``functools`` names and modules, ``sys``, ``re``, ``np`` and ``pd`` (see
  :data:`PRELUDE`).
- **Reward** 1.0 when every test passes, else 0.0; each test has a time limit (6 s, SkyRL's).

How it runs here instead: one sandbox run judges all tests (:func:`skyrl_gym.envs.code.stdio.judge_stdio`;
a fresh process per test; no network; a memory limit), and the verdicts of programs that ran to the end are
re-read with the comparison above. Differences from SkyRL: the program runs as a script rather than wrapped
in a function (code at the top level behaves the same; ``global`` statements work), a program that exits with
a non-zero status fails its test (SkyRL ignores ``SystemExit``), and an empty last line of a functional
test's input is ignored rather than failing every test.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from skyrl_gym.envs.code.stdio import StdioTest, judge_stdio

__all__ = [
    "DEFAULT_TIME_LIMIT_S",
    "PRELUDE",
    "LCBJudgement",
    "LCBTests",
    "build_program",
    "compute_score",
    "extract_code_from_model",
    "functional_outputs_match",
    "judge",
    "stdio_outputs_match",
]

DEFAULT_TIME_LIMIT_S = 6.0
"""Seconds each test may run (SkyRL's ``timeout``)."""
STDIN = "stdin"
FUNCTIONAL = "functional"
_FENCE = "```"

# -- the program ---------------------------------------------------------------------------------------------


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"  # what \w matches in a str pattern


def extract_code_from_model(model_response: Any) -> str | None:
    """The last fenced code block of ``model_response``, stripped, or ``None`` when there is none.

    The same blocks as SkyRL's pattern ```` ```(?:\\w+)?\\n(.*?)``` ```` (matched left to right, non-overlapping),
    found in one linear pass: a fence opens a block when a newline follows it after an optional word.
    """
    if not isinstance(model_response, str):
        return None
    text, position, last = model_response, 0, None
    while True:
        start = text.find(_FENCE, position)
        if start < 0:
            break
        cursor = start + len(_FENCE)
        while cursor < len(text) and _is_word_char(text[cursor]):
            cursor += 1
        if cursor >= len(text) or text[cursor] != "\n":
            position = start + 1  # not an opening fence: the next backtick may start one
            continue
        end = text.find(_FENCE, cursor + 1)
        if end < 0:
            break  # no later opening can find a closing fence either
        last = text[cursor + 1 : end]
        position = end + len(_FENCE)
    return None if last is None else last.strip()


_PRELUDE_NAMES = (
    ("itertools", "accumulate chain combinations count cycle groupby islice pairwise permutations product repeat "
     "zip_longest"),
    ("copy", "deepcopy"),
    ("string", "ascii_lowercase ascii_uppercase"),
    ("math", "atan2 ceil comb factorial floor gcd inf isqrt log log10 log2 pi prod sqrt"),
    ("collections", "Counter OrderedDict defaultdict deque"),
    ("bisect", "bisect bisect_left bisect_right insort"),
    ("heapq", "heapify heappop heappush heapreplace merge nlargest nsmallest"),
    ("functools", "cache cmp_to_key lru_cache partial reduce"),
    ("random", "randrange shuffle"),
    ("operator", "iand itemgetter or_ sub xor"),
    ("os.path", "commonprefix"),
    ("typing", "Any Callable Deque Dict Generator Iterable Iterator List Optional Set Tuple Union"),
)  # fmt: skip
# imported after the names, so a module wins where both share a name (``bisect`` is the module, as in SkyRL)
_PRELUDE_MODULES = (
    "bisect collections copy datetime functools heapq io itertools math operator os random re string sys"
)

PRELUDE = f"""\
def _lcb_prelude(scope):
    import importlib

    for module, names in {[(module, tuple(names.split())) for module, names in _PRELUDE_NAMES]!r}:
        try:
            found = importlib.import_module(module)
        except ImportError:
            continue
        for name in names:
            if hasattr(found, name):
                scope[name] = getattr(found, name)
    for module in {tuple(_PRELUDE_MODULES.split())!r}:
        scope[module] = importlib.import_module(module)
    scope["re_search"] = scope["re"].search
    scope["time"] = importlib.import_module("time").time

    class LazyModule:
        # numpy and pandas are imported when first used, not by every program
        def __init__(self, module, alias):
            self._module, self._alias = module, alias

        def __getattr__(self, attribute):
            module = importlib.import_module(self._module)
            scope[self._alias] = module
            return getattr(module, attribute)

    scope["np"] = LazyModule("numpy", "np")
    scope["pd"] = LazyModule("pandas", "pd")


_lcb_prelude(globals())
del _lcb_prelude
"""
"""What runs before the program: the names SkyRL's runner makes available without an import."""

_SILENCE_STDOUT = """\
import os as _lcb_os
import sys as _lcb_sys
_lcb_result_stream = _lcb_os.fdopen(_lcb_os.dup(1), "w")
_lcb_sys.stdout.flush()
_lcb_os.dup2(2, 1)  # what the program prints goes to stderr: stdout carries only the result
"""

_DRIVER = """

def _lcb_call():
    import json
    import sys
    lines = sys.stdin.read().split("\\n")
    while lines and not lines[-1].strip():
        lines.pop()
    arguments = [json.loads(line) for line in lines]
    target = {target}
    result = getattr(target, {fn_name!r})(*arguments)
    if isinstance(result, tuple):
        result = list(result)
    try:
        text = json.dumps(result, separators=(",", ":"))
    except (TypeError, ValueError):
        text = "not JSON: " + repr(result)
    _lcb_result_stream.write(text + "\\n")
    _lcb_result_stream.flush()


_lcb_call()
"""


def _future_imports_end(code: str) -> int:
    """The number of the last line of the ``from __future__`` imports at the top of ``code`` (0: none)."""
    try:
        body = ast.parse(code).body
    except Exception:  # not Python (or too deeply nested to parse): the run will say so
        return 0
    end = 0
    for index, node in enumerate(body):
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            end = node.end_lineno or end
        elif not (index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            break  # past the docstring and the future imports
    return end


def build_program(code: str, fn_name: str | None = None, prelude: bool = True) -> str:
    """The script the sandbox runs: the prelude (after any ``from __future__`` imports), the code and, for a
    functional problem, a driver that calls ``fn_name`` with the JSON arguments read from stdin."""
    head = PRELUDE if prelude else ""
    if fn_name is not None:
        head += _SILENCE_STDOUT
    if head:
        lines = code.split("\n")
        cut = _future_imports_end(code)
        code = "\n".join([*lines[:cut], head, *lines[cut:]])
    if fn_name is not None:
        target = "Solution()" if "class Solution" in code else "__import__('sys').modules[__name__]"
        code += _DRIVER.format(target=target, fn_name=fn_name)
    return code


# -- the tests -----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LCBTests:
    """A problem's tests: inputs and expected outputs, and ``fn_name`` for a functional problem."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    fn_name: str | None = None

    @property
    def kind(self) -> str:
        """``"functional"`` or ``"stdin"``."""
        return FUNCTIONAL if self.fn_name is not None else STDIN

    def __len__(self) -> int:
        return len(self.inputs)

    @classmethod
    def parse(cls, ground_truth: Any) -> LCBTests:
        """Read a row's ground truth: a JSON string (SkyRL's form) or the decoded list of tests.

        Raises ``ValueError`` naming what is wrong (not JSON, not a non-empty list, a test without a string
        ``input``/``output``, a functional problem without ``metadata.func_name``).
        """
        if isinstance(ground_truth, LCBTests):
            return ground_truth
        tests = ground_truth
        if isinstance(ground_truth, (str, bytes)):
            try:
                tests = json.loads(ground_truth)
            except ValueError as exc:
                raise ValueError(f"lcb's ground truth must be a JSON list of tests: {exc}") from None
        if not isinstance(tests, Sequence) or isinstance(tests, (str, bytes)) or not tests:
            raise ValueError(
                "lcb's ground truth must be a non-empty list of tests "
                '[{"input": "...", "output": "...", "testtype": "stdin"}, ...], '
                f"got {type(tests).__name__}"
            )
        for index, test in enumerate(tests):
            if not isinstance(test, dict) or not isinstance(test.get("input"), str):
                raise ValueError(f"lcb test {index} must be a dict with a string 'input', got {test!r:.120}")
            if not isinstance(test.get("output"), str):
                raise ValueError(f"lcb test {index} must have a string 'output', got {test!r:.120}")
        first = tests[0]
        fn_name = None
        if first.get("testtype") == FUNCTIONAL:
            metadata = first.get("metadata") or {}
            if isinstance(metadata, str):
                try:
                    metadata = json.loads(metadata)
                except ValueError:
                    metadata = {}
            fn_name = metadata.get("func_name") if isinstance(metadata, dict) else None
            if not isinstance(fn_name, str) or not fn_name.isidentifier():
                raise ValueError(
                    "a functional lcb problem needs the function's name in its first test's "
                    f"metadata['func_name'], got metadata {first.get('metadata')!r:.120}"
                )
        return cls(tuple(t["input"] for t in tests), tuple(t["output"] for t in tests), fn_name)


# -- comparing -----------------------------------------------------------------------------------------------


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except ArithmeticError:
        return None


def stdio_outputs_match(got: str, expected: str) -> bool:
    """SkyRL's stdin/stdout rule: equal stripped lines, or lines whose tokens are equal decimal numbers."""
    got_lines, expected_lines = _stripped_lines(got), _stripped_lines(expected)
    if len(got_lines) != len(expected_lines):
        return False
    for got_line, expected_line in zip(got_lines, expected_lines, strict=True):
        if got_line == expected_line:
            continue
        got_numbers, expected_numbers = _decimals(got_line), _decimals(expected_line)
        try:
            if got_numbers is None or expected_numbers is None or got_numbers != expected_numbers:
                return False
        except ArithmeticError:  # a signalling NaN refuses to be compared
            return False
    return True


def functional_outputs_match(got: str, expected: str) -> bool:
    """Whether the function's result (the JSON the driver printed) equals the expected JSON value."""
    try:
        return json.loads(got) == json.loads(expected)
    except ValueError:
        return False


# -- judging -------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LCBJudgement:
    """The verdict on a program: per-test ``verdicts`` (``accepted``, ``wrong_answer``, ``runtime_error``,
    ``time_limit_exceeded``, ``memory_limit_exceeded``, ``not_run``) and the ``sandbox`` backend that ran it."""

    verdicts: tuple[str, ...]
    sandbox: str

    @property
    def passed(self) -> bool:
        """Every test passed."""
        return bool(self.verdicts) and all(v == "accepted" for v in self.verdicts)

    @property
    def tests_passed(self) -> int:
        """How many tests passed."""
        return sum(v == "accepted" for v in self.verdicts)

    @property
    def first_failure(self) -> int | None:
        """The index of the first failed test, ``None`` when all passed."""
        return next((i for i, v in enumerate(self.verdicts) if v != "accepted"), None)

    @property
    def verdict(self) -> str:
        """``accepted``, or the verdict of the first failed test."""
        failed = self.first_failure
        return "accepted" if failed is None else self.verdicts[failed]


def judge(
    sandbox: Any,
    code: str,
    tests: LCBTests,
    *,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    memory_mb: int = 512,
    prelude: bool = True,
) -> LCBJudgement:
    """Run ``code`` on every test in one sandbox run and judge the outputs with SkyRL's rules.

    Raises :class:`~skyrl_gym.envs.code.judging.JudgeUnavailable` when the sandbox cannot run the judge.
    """
    program = build_program(code, tests.fn_name, prelude)
    run_tests = [StdioTest(i, o) for i, o in zip(tests.inputs, tests.outputs, strict=True)]
    judgement = judge_stdio(sandbox, program, run_tests, time_limit_s=time_limit_s, memory_mb=memory_mb)
    matches = functional_outputs_match if tests.fn_name is not None else stdio_outputs_match
    verdicts = []
    for outcome, expected in zip(judgement.outcomes, tests.outputs, strict=True):
        if outcome.verdict in ("accepted", "wrong_answer"):  # it ran to the end: compare SkyRL's way
            verdicts.append("accepted" if matches(outcome.got, expected) else "wrong_answer")
        else:
            verdicts.append(outcome.verdict)
    return LCBJudgement(tuple(verdicts), judgement.run.backend or getattr(sandbox, "name", ""))


def compute_score(
    model_response: Any,
    tests: Any,
    *,
    sandbox: Any = "auto",
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    memory_mb: int = 512,
    prelude: bool = True,
) -> tuple[str | None, float]:
    """SkyRL's ``compute_score``: ``(parsed_code, 1.0)`` when the answer's program passes every test,
    ``(parsed_code, 0.0)`` otherwise, ``(None, 0.0)`` without a code block.

    ``tests``: the decoded list of tests, its JSON text or :class:`LCBTests`; ``sandbox``: a sandbox or a
    backend name (``"auto"``: the strongest available).
    """
    code = extract_code_from_model(model_response)
    if code is None:
        return None, 0.0
    if isinstance(sandbox, str):
        from skyrl_gym.envs.code.env import shared_sandbox

        sandbox = shared_sandbox(sandbox)
    verdict = judge(
        sandbox, code, LCBTests.parse(tests), time_limit_s=time_limit_s, memory_mb=memory_mb, prelude=prelude
    )
    return code, 1.0 if verdict.passed else 0.0
