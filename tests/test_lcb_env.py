"""``lcb``: SkyRL's LiveCodeBench rules (extraction, comparison, functional tests), judged in the real sandbox."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import DictConfig

import skyrl_gym
from skyrl_gym.envs.base_text_env import MissingGroundTruthError
from skyrl_gym.envs.code.env import shared_sandbox
from skyrl_gym.envs.lcb import tasks
from skyrl_gym.envs.lcb.env import LCBEnv
from skyrl_gym.envs.lcb.scoring import (
    LCBTests,
    build_program,
    compute_score,
    extract_code_from_model,
    functional_outputs_match,
    stdio_outputs_match,
)
from skyrl_gym.runtime import available_backends
from skyrl_gym.testing import check_env, play_episode
from skyrl_gym.testing.strategies import episodes, text_actions

SECOND_LARGEST = """```python
def main():
    N = int(input())
    A = list(map(int, input().split()))
    B = sorted(A, reverse=True)
    second = B[1]
    print(A.index(second) + 1)

if __name__ == "__main__":
    main()
```"""

LARGEST = """```python
def main():
    N = int(input())
    A = list(map(int, input().split()))
    print(A.index(max(A)) + 1)

if __name__ == "__main__":
    main()
```"""

NEVER_CALLED = """```python
def main():
    A = list(map(int, input().split()))
    B = sorted(A, reverse=True)
    print(A.index(B[1]) + 1)

# main() is never called
```"""


def _stdin_tests(*pairs: tuple[str, str]) -> str:
    return json.dumps([{"input": i, "output": o, "testtype": "stdin"} for i, o in pairs])


def _env(tests: str | list, **config) -> LCBEnv:
    return skyrl_gym.make(
        "lcb",
        env_config=DictConfig({"env_class": "lcb", **config}),
        extras={"reward_spec": {"method": "rule", "ground_truth": tests}},
    )


@pytest.mark.parametrize(
    "response, tests, expected",
    [
        (SECOND_LARGEST, _stdin_tests(("4\n8 2 5 1\n", "3\n"), ("3\n3 2 1\n", "2\n")), 1.0),
        (LARGEST, _stdin_tests(("4\n8 2 5 1\n", "3\n")), 0.0),
        (NEVER_CALLED, _stdin_tests(("4\n8 2 5 1\n", "3\n")), 0.0),
    ],
)
def test_skyrl_cases_through_make_without_init(response, tests, expected):
    env = _env(tests)
    assert isinstance(env, LCBEnv)
    step = env.step(response)
    assert step["reward"] == expected
    assert step["done"] is True and step["observations"] == []
    assert step["metadata"]["parsed_code"] == extract_code_from_model(response)
    assert step["metadata"]["sandbox"] == shared_sandbox("auto").name


def test_an_answer_without_a_code_block_scores_zero_without_running():
    step = _env(_stdin_tests(("", "1\n"))).step("print(1)")
    assert step["reward"] == 0.0
    assert step["metadata"]["parsed_code"] is None and step["metadata"]["verdict"] == "no_code"


def test_extraction_takes_the_last_fenced_block_of_any_language():
    assert extract_code_from_model("```python\na\n```\ntext\n```cpp\nb\n```") == "b"
    assert extract_code_from_model("```\n  c  \n```") == "c"
    assert extract_code_from_model("```python a\n```") is None  # a space in the tag: not an opening
    assert extract_code_from_model("```python\nunclosed") is None
    assert extract_code_from_model("````\nx\n```") == "x"  # the fence's fourth backtick opens it
    assert extract_code_from_model(None) is None


def test_extraction_is_linear_on_hostile_text():
    assert extract_code_from_model("```\n" * 200_000) is not None
    assert extract_code_from_model("```x" * 300_000) is None


@pytest.mark.parametrize(
    "got, expected, match",
    [
        ("3\n", "3", True),
        ("  3  \n\n", "3\n", True),  # the whole text and every line are stripped
        ("3.0\n", "3\n", True),  # equal as decimals
        ("1 2.50\n", "1 2.5\n", True),
        ("1e1\n", "10\n", True),
        ("3\n4\n", "3\n", False),  # line counts differ
        ("three\n", "3\n", False),
        ("3 4\n", "3\n", False),
        ("\n3\n", "3\n", True),  # a leading blank line goes with the strip
        ("3\n\n4", "3\n4", False),  # but not one in the middle
    ],
)
def test_stdio_comparison(got, expected, match):
    assert stdio_outputs_match(got, expected) is match


def test_stdio_comparison_on_a_real_run():
    tests = _stdin_tests(("2\n", "2.0\n1\n"))
    assert _env(tests).step("```python\nn = int(input())\nprint(n)\nprint('  1  ')\n```")["reward"] == 1.0


def _functional(name: str, *cases: tuple[str, str]) -> str:
    return json.dumps(
        [
            {"input": i, "output": o, "testtype": "functional", "metadata": {"func_name": name}}
            for i, o in cases
        ]
    )


def test_functional_tests_call_the_solution_method():
    tests = _functional("twoSum", ("[2,7,11,15]\n9", "[0, 1]"), ("[3,2,4]\n6", "[1, 2]"))
    code = """```python
class Solution:
    def twoSum(self, nums: List[int], target: int) -> List[int]:
        print("looking")  # what the method prints is not its result
        seen = {}
        for i, n in enumerate(nums):
            if target - n in seen:
                return (seen[target - n], i)  # a tuple is read as a list
            seen[n] = i
```"""
    step = _env(tests).step(code)
    assert step["reward"] == 1.0 and step["metadata"]["tests_passed"] == 2
    wrong = code.replace("return (seen[target - n], i)", "return [i, seen[target - n]]")
    assert _env(tests).step(wrong)["metadata"]["verdict"] == "wrong_answer"


def test_functional_tests_call_a_plain_function_too():
    tests = _functional("add", ("1\n2", "3"), ('"a"\n"b"', '"ab"'))
    assert _env(tests).step("```python\ndef add(a, b):\n    return a + b\n```")["reward"] == 1.0
    assert _env(tests).step("```python\ndef plus(a, b):\n    return a + b\n```")["reward"] == 0.0


def test_functional_comparison():
    assert functional_outputs_match("[1,2]", "[1, 2]")
    assert functional_outputs_match("true", "1")  # Python's True == 1, as in SkyRL's comparison
    assert not functional_outputs_match("not JSON: {1}", "[1]")


def test_prelude_names_work_without_imports_and_can_be_turned_off():
    tests = _stdin_tests(("a a b\n", "2\n"))
    code = "```python\nprint(Counter(sys.stdin.read().split())['a'])\n```"
    assert _env(tests).step(code)["reward"] == 1.0
    step = _env(tests, prelude=False).step(code)
    assert step["reward"] == 0.0 and step["metadata"]["verdict"] == "runtime_error"


def test_prelude_follows_future_imports_and_leaves_bisect_the_module():
    program = build_program('"""doc"""\nfrom __future__ import annotations\nprint(1)')
    assert program.startswith('"""doc"""\nfrom __future__ import annotations\n')
    tests = _stdin_tests(("", "1\n"))
    code = "```python\nfrom __future__ import annotations\nprint(bisect.bisect([1, 2], 1))\n```"
    assert _env(tests).step(code)["reward"] == 1.0


def test_time_limit_per_test():
    step = _env(_stdin_tests(("", "1\n")), time_limit_s=0.5).step("```python\nwhile True:\n    pass\n```")
    assert step["reward"] == 0.0 and step["metadata"]["verdict"] == "time_limit_exceeded"


def test_a_fork_bomb_is_judged_a_failure_under_bwrap():
    if "bwrap" not in available_backends():
        pytest.skip("needs bubblewrap: without its cgroup a fork bomb run as root is not contained")
    env = _env(_stdin_tests(("", "1\n")), sandbox="bwrap")
    step = env.step("```python\nimport os\nwhile True:\n    os.fork()\n```")
    assert step["reward"] == 0.0 and step["metadata"]["verdict"] == "runtime_error"


def test_compute_score_keeps_skyrls_signature():
    tests = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]
    assert compute_score("```python\nprint(sum(map(int, input().split())))\n```", tests) == (
        "print(sum(map(int, input().split())))",
        1.0,
    )
    assert compute_score("no code", tests) == (None, 0.0)


@pytest.mark.parametrize(
    "ground_truth, message",
    [
        ("not json", "JSON list"),
        ("[]", "non-empty list"),
        ('[{"input": 1, "output": "2"}]', "string 'input'"),
        ('[{"input": "1"}]', "string 'output'"),
        ('[{"input": "1", "output": "2", "testtype": "functional"}]', "func_name"),
    ],
)
def test_malformed_tests_are_refused_when_made(ground_truth, message):
    with pytest.raises(ValueError, match=message):
        _env(ground_truth)


def test_rows_without_a_ground_truth_are_refused_at_make():
    with pytest.raises(MissingGroundTruthError):
        skyrl_gym.make("lcb", extras={"max_turns": 1})


def test_tests_accept_a_decoded_list_and_string_metadata():
    tests = LCBTests.parse(
        [{"input": "1", "output": "1", "testtype": "functional", "metadata": '{"func_name": "f"}'}]
    )
    assert tests.fn_name == "f" and tests.kind == "functional" and len(tests) == 1


# -- the bundled tasks ----------------------------------------------------------------------------------------


def test_every_bundled_reference_solution_passes():
    assert len(tasks.lcb_problems()) >= 30
    sandbox = shared_sandbox("auto")
    failed = []
    for problem in tasks.lcb_problems():
        code, reward = compute_score(
            "```python\n" + problem.reference_solution + "\n```", tasks.ground_truth(problem), sandbox=sandbox
        )
        if reward != 1.0:
            failed.append(problem.id)
    assert failed == []


def test_bundled_tasks_hide_no_float_tolerance_and_are_deterministic():
    assert all(p.float_tol is None for p in tasks.lcb_problems())
    assert tasks.task_for_seed(5) == tasks.task_for_seed(5)
    prompt = tasks.task_for_seed(5)["prompt"][0]["content"]
    assert prompt.endswith(tasks.FORMAT_INSTRUCTION) and "Example 1" in prompt


def test_check_env_with_hostile_programs():
    report = check_env(lambda: skyrl_gym.make("lcb"))
    assert {
        "oracle-earns-full-reward",
        "noop-earns-nothing",
        "model-failures-are-not-errors",
        "gymnasium-check-env",
    } <= set(report.passed)


_PROGRAMS = st.one_of(
    text_actions(200),
    st.lists(st.integers(-5, 5), max_size=4).map(lambda xs: "```python\n" + f"print({xs!r})\n```"),
    st.text(max_size=60).map(lambda t: f"```py\n{t}\n```"),
)


@settings(max_examples=15, deadline=None)
@given(episodes(_PROGRAMS, max_turns=2))
def test_any_answer_is_judged_zero_or_one(actions):
    outputs = play_episode(skyrl_gym.make("lcb"), actions, seed=1)
    assert len(outputs) == 1 and outputs[0]["reward"] in (0.0, 1.0)
    assert outputs[0]["metadata"]["verdict"] in (
        "accepted", "wrong_answer", "runtime_error", "time_limit_exceeded", "memory_limit_exceeded", "no_code",
    )  # fmt: skip
