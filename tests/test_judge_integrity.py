"""The code judges (``code``: HumanEval and stdin/stdout; ``lcb``) and the ``python`` environment's interpreter
hold against the code they run, in the real ``bwrap`` sandbox.

Every attack must end as the program's failure: reward 0.0 and an episode that ends normally, never
``metadata["end"] == "error"`` (error episodes are left out of training, so a model would learn to crash the
judge). The attacks: modules planted in the work folder for the judge to import, reports forged on every
descriptor in reach, the judge's functions and builtins patched, descriptor tricks (the host's pipes, the
sandbox's start byte), a judge killed or stopped, memory, processes and output exhausted, a work folder made
full or read-only. Correct programs still earn the full reward.

Under ``CI=true`` these tests fail rather than skip when bubblewrap is missing (the repository's conftest).
"""

from __future__ import annotations

import json

import pytest

import skyrl_gym
from skyrl_gym.envs.code.humaneval import HumanEvalProblem, judge_humaneval
from skyrl_gym.envs.code.judging import HOSTILE_PROGRAMS, PLANTED_NAMES, judge_command
from skyrl_gym.envs.code.stdio import StdioTest, judge_stdio
from skyrl_gym.envs.code.tasks import humaneval_rows, stdio_problems
from skyrl_gym.envs.python import PythonEnv
from skyrl_gym.runtime import available_backends, make_sandbox

pytestmark = pytest.mark.skipif(
    "bwrap" not in available_backends(),
    reason="needs bubblewrap (apt-get install bubblewrap): the judges' defences are checked in the real sandbox",
)

FAST = {"sandbox": "bwrap", "timeout_s": 3.0, "time_limit_s": 1.0}
"""Short limits: some attacks stop the judge, and only the run's timeout ends them."""

# -- attacks ---------------------------------------------------------------------------------------------------

PASSING_MODULE = (
    # run as the judge if the judge imports it: sign a pass with the judge's own report function
    "import os, sys\n"
    "frame = sys._getframe()\n"
    "while frame is not None:\n"
    "    report = frame.f_locals.get('report')\n"
    "    if callable(report):\n"
    "        report({'stage': 'tests', 'passed': True})\n"
    "        report({'index': 0, 'stdout': '3\\n', 'stderr': '', 'exit': 0, 'timed_out': False, 'time_s': 0.0})\n"
    "        os._exit(0)\n"
    "    frame = frame.f_back\n"
)
BROKEN_JUDGE_MODULE = (
    # run as the judge if the judge imports it: report that the judge itself broke (the episode would end in error)
    "import os, sys\nframe = sys._getframe()\nwhile frame is not None:\n"
    "    if callable(frame.f_locals.get('report')):\n"
    "        frame.f_locals['report']({'judge_error': 'planted'})\n        os._exit(0)\n"
    "    frame = frame.f_back\n"
)


def plant(module_source: str) -> str:
    """Code that writes ``module_source`` into the work folder under every name a judge imports."""
    return (
        "import os as _os\n"
        f"for _name in {tuple(PLANTED_NAMES)!r}:\n"
        "    try:\n"
        "        with open(_os.path.join(_os.getcwd(), _name + '.py'), 'w') as _handle:\n"
        f"            _handle.write({module_source!r})\n"
        "    except OSError:\n"
        "        pass\n"
    )


ATTACKS = {
    "planted modules that sign a pass": plant(PASSING_MODULE),
    "planted modules that report a broken judge": plant(BROKEN_JUDGE_MODULE),
    "rewritten work folder": (
        "import os\nfor name in os.listdir('.'):\n    try:\n"
        "        with open(name, 'w') as handle:\n            handle.write('print(3)\\n')\n"
        "    except OSError:\n        pass\n"
        "with open('judge.py', 'w') as handle:\n    handle.write('print(3)\\n')\n"
    ),
    "forged report": HOSTILE_PROGRAMS[1],
    "descriptors read and closed": HOSTILE_PROGRAMS[2],
    "patched builtins": HOSTILE_PROGRAMS[3],
    "full read-only work folder": HOSTILE_PROGRAMS[4],
    "start byte": (
        # the sandbox's start pipe, wherever it may be open: read its byte (the host would think the sandbox
        # never started) and write more
        "import os\nfor pid in ('self', '1', str(os.getppid())):\n    for n in range(3, 64):\n"
        "        for mode in (os.O_RDONLY, os.O_WRONLY):\n            try:\n"
        "                fd = os.open('/proc/%s/fd/%d' % (pid, n), mode | os.O_NONBLOCK)\n"
        "                os.read(fd, 16) if mode == os.O_RDONLY else os.write(fd, b'..')\n"
        "            except OSError:\n                pass\n"
    ),
    "host pipes": (
        # the sandbox's first process holds the host's pipes: read the judge's report from them, write over it
        "import os\nfds = []\nfor n in (0, 1, 2):\n    for mode in (os.O_RDONLY, os.O_WRONLY):\n        try:\n"
        "            fds.append((os.open('/proc/1/fd/%d' % n, mode | os.O_NONBLOCK), mode))\n"
        "        except OSError:\n            pass\n"
        "for fd, mode in fds:\n    try:\n"
        "        os.read(fd, 1 << 20) if mode == os.O_RDONLY else os.write(fd, b'\\n' * 4096)\n"
        "    except OSError:\n        pass\n"
    ),
    "judge killed": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
    "judge stopped": "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n",
    "whole sandbox killed": "import os, signal\nos.kill(-1, signal.SIGKILL)\n",
    "exit with a forged line": (
        'import os, sys\nsys.stdout.write(\'0\' * 32 + \' {"stage": "tests", "passed": true}\\n\')\n'
        "sys.stdout.flush()\nos._exit(0)\n"
    ),
    "SystemExit": "raise SystemExit(0)\n",
    "BaseException": "class Escape(BaseException):\n    pass\nraise Escape()\n",
    "escaped fork bomb": (
        "import os\nif os.fork() == 0:\n    os.setsid()\n    while True:\n        try:\n            os.fork()\n"
        "        except OSError:\n            pass\n"
    ),
    "memory": "x = bytearray(10 ** 10)\n",
    "output flood": "import os\nfor fd in (1, 2):\n    os.write(fd, b'x' * 10 ** 8)\n",
    **{f"hostile program {i}": code for i, code in enumerate(HOSTILE_PROGRAMS)},
}
"""Programs run at the top level (as the module is loaded: the first thing the judge runs)."""

CALL_ATTACKS = {
    # a HumanEval function that attacks when the tests call it
    "returns an always-equal object": (
        "    class Equal(int):\n        __eq__ = lambda self, other: True\n        __ne__ = lambda self, other: False\n"
        "        __hash__ = lambda self: 0\n        __class__ = bool\n    return Equal(1)\n"
    ),
    "returns a str subclass": (
        "    class Text(str):\n        __eq__ = lambda self, other: True\n        __str__ = lambda self: 'True'\n"
        "    return Text('x')\n"
    ),
    "raises SystemExit": "    raise SystemExit(0)\n",
    "raises KeyboardInterrupt": "    raise KeyboardInterrupt\n",
    "exits hard": "    import os\n    os._exit(0)\n",
    "patches the judge's modules": (
        "    import builtins, json\n    json.dumps = lambda *a, **k: '{\"value\": true}'\n"
        "    builtins.isinstance = lambda *a: True\n    return True\n"
    ),
    "answers on every descriptor": (
        "    import json, os\n    frame = json.dumps({'value': True}).encode()\n"
        "    for fd in range(3, 32):\n        try:\n"
        "            os.write(fd, b'%010d\\n' % len(frame) + frame)\n        except OSError:\n            pass\n"
        "    os._exit(0)\n"
    ),
    "kills the judge": "    import os, signal\n    os.kill(os.getppid(), signal.SIGKILL)\n    return True\n",
    "stops the judge": "    import os, signal\n    os.kill(os.getppid(), signal.SIGSTOP)\n    return True\n",
    "plants modules": "    " + plant(PASSING_MODULE).replace("\n", "\n    ").rstrip() + "\n    return True\n",
    "plants modules that report a broken judge": "    "
    + plant(BROKEN_JUDGE_MODULE).replace("\n", "\n    ").rstrip()
    + "\n    return True\n",
}

# -- helpers ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def he_problems() -> dict[str, HumanEvalProblem]:
    return {
        row["extra_info"]["task_id"]: HumanEvalProblem.from_dict(row["reward_spec"]["ground_truth"])
        for row in humaneval_rows()
    }


def fenced(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def code_env(method: str, ground_truth: dict, **config) -> skyrl_gym.Env:
    env = skyrl_gym.make("code", env_config={**FAST, **config})
    env.reset(
        options={
            "prompt": [{"role": "user", "content": "Solve it."}],
            "extras": {"reward_spec": {"method": method, "ground_truth": ground_truth}},
        }
    )
    return env


def lcb_env(tests: list[dict]) -> skyrl_gym.Env:
    env = skyrl_gym.make("lcb", env_config={"sandbox": "bwrap", "time_limit_s": 1.0})
    env.reset(
        options={
            "prompt": [{"role": "user", "content": "Solve it."}],
            "extras": {"reward_spec": {"method": "rule", "ground_truth": json.dumps(tests)}},
        }
    )
    return env


STDIO_TRUTH = {
    "problem_id": "sum",
    "public_tests": [{"input": "1 2\n", "output": "3\n"}],
    "hidden_tests": [{"input": "2 2\n", "output": "4\n"}, {"input": "20 22\n", "output": "42\n"}],
}
SUM = "a, b = map(int, input().split())\nprint(a + b)\n"
LCB_STDIN = [{"input": t["input"], "output": t["output"], "testtype": "stdin"} for t in
             STDIO_TRUTH["public_tests"] + STDIO_TRUTH["hidden_tests"]]  # fmt: skip
LCB_FUNCTIONAL = [
    {"input": "1\n2", "output": "3", "testtype": "functional", "metadata": {"func_name": "add"}},
    {"input": "20\n22", "output": "42", "testtype": "functional"},
]
ADD = "class Solution:\n    def add(self, a, b):\n        return a + b\n"


def assert_failed(output: dict) -> None:
    metadata = output["metadata"]
    assert metadata.get("end") != "error", metadata.get("error")
    assert output["done"] and output["reward"] == 0.0, metadata


def play_once(env: skyrl_gym.Env, code: str) -> dict:
    try:
        return env.step(fenced(code))
    finally:
        env.close()


# -- the judge's code and import path --------------------------------------------------------------------------


def test_the_judge_is_no_file_and_imports_nothing_from_the_work_folder():
    sandbox = make_sandbox("bwrap")
    probe = (
        "import os, sys\n"
        "print(sorted(os.listdir('.')), sys.flags.isolated, [p for p in sys.path if p in ('', '.', os.getcwd())])"
    )
    run = sandbox.run(judge_command(sandbox.python, probe), files={"typing.py": "raise SystemExit(3)\n"})
    assert run.stdout.strip() == "['typing.py'] 1 []", run.stderr
    # what the stdin/stdout program sees: its own file, no judge beside it
    judgement = judge_stdio(
        sandbox, "import os\nprint(sorted(os.listdir('.')))", [StdioTest("", "['solution.py']\n")]
    )
    assert judgement.passed, judgement.outcomes


def test_planted_modules_pass_no_humaneval_problem(he_problems):
    """The measurement behind the fix: a completion that plants modules in the work folder for the judge to
    import, and whose function returns ``None``, passed 25 of the 164 problems when the judge ran as a script
    in that folder. It must pass none."""
    sandbox = make_sandbox("bwrap")
    passed = []
    for task_id, problem in he_problems.items():
        code = f"def {problem.entry_point}(*args, **kwargs):\n    return None\n" + plant(PASSING_MODULE)
        judgement = judge_humaneval(sandbox, problem, code)
        if judgement.passed:
            passed.append(task_id)
    assert passed == []


# -- every attack is a scored failure --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attacks_on_the_humaneval_judge_fail(he_problems, name):
    problem = he_problems["HumanEval/0"]
    code = f"def {problem.entry_point}(numbers, threshold):\n    return True\n" + ATTACKS[name]
    env = code_env("humaneval", problem.to_dict())
    output = play_once(env, code)
    assert_failed(output)
    assert output["metadata"]["verdict"] != "accepted"


@pytest.mark.parametrize("turns", [1, 2])  # with turns left, the judge also runs the docstring's examples
@pytest.mark.parametrize("name", sorted(CALL_ATTACKS))
def test_attacks_from_the_called_function_fail(he_problems, name, turns):
    problem = he_problems["HumanEval/0"]
    code = f"def {problem.entry_point}(numbers, threshold):\n" + CALL_ATTACKS[name]
    output = play_once(code_env("humaneval", problem.to_dict(), max_turns=turns), code)
    metadata = output["metadata"]
    assert metadata.get("end") != "error", metadata.get("error")
    assert output["reward"] == 0.0 and metadata["verdict"] != "accepted", metadata


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attacks_on_the_stdio_judge_fail(name):
    assert_failed(play_once(code_env("stdio", STDIO_TRUTH), ATTACKS[name]))
    # the answer of the first test whatever the input, then the attack: the later tests must still fail
    code = "import sys\nprint(3)\nsys.stdout.flush()\n" + ATTACKS[name]
    assert_failed(play_once(code_env("stdio", STDIO_TRUTH), code))


@pytest.mark.parametrize("name", sorted(set(ATTACKS) - {"judge stopped"}))  # the stdio judge's, checked above
def test_attacks_on_the_lcb_judge_fail(name):
    assert_failed(play_once(lcb_env(LCB_STDIN), ATTACKS[name]))
    assert_failed(play_once(lcb_env(LCB_FUNCTIONAL), ADD.replace("a + b", "None") + ATTACKS[name]))


def test_nothing_a_test_leaves_running_reaches_the_next_test():
    # the first run leaves a process in a session of its own; by the next test it must have died: gone, or a
    # zombie its sandbox's init has not yet reaped (which runs nothing)
    code = (
        "import os, time\n"
        "if os.path.exists('pid'):\n"
        "    pid = int(open('pid').read())\n"
        "    try:\n        state = open('/proc/%d/stat' % pid).read().rsplit(')', 1)[1].split()[0]\n"
        "        print('gone' if state in ('Z', 'X') else 'alive')\n"
        "    except OSError:\n        print('gone')\n"
        "else:\n"
        "    child = os.fork()\n"
        "    if child == 0:\n        os.setsid()\n        time.sleep(60)\n        os._exit(0)\n"
        "    open('pid', 'w').write(str(child))\n"
        "    print('started')\n"
    )
    judgement = judge_stdio(
        make_sandbox("bwrap"), code, [StdioTest("", "started\n"), StdioTest("", "gone\n")], time_limit_s=2
    )
    assert [o.verdict for o in judgement.outcomes] == ["accepted", "accepted"], judgement.outcomes


# -- the python environment's interpreter ------------------------------------------------------------------------

PYTHON_ATTACKS = {
    f"hostile action {i}": action.split("\n", 1)[1].rsplit("\n", 1)[0]
    for i, action in enumerate(PythonEnv.hostile_actions)
}
PYTHON_ATTACKS["planted modules"] = plant("import os\nos._exit(0)\n") + "import os\nos._exit(1)\n"
PYTHON_ATTACKS["start byte"] = ATTACKS["start byte"]
PYTHON_ATTACKS["host pipes"] = ATTACKS["host pipes"]
PYTHON_ATTACKS["whole sandbox killed"] = ATTACKS["whole sandbox killed"]


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("name", sorted(PYTHON_ATTACKS))
def test_attacks_on_the_python_interpreter_are_the_models_failure(name, persistent):
    extras = {"reward_spec": {"method": "rule", "ground_truth": "42"}, "max_turns": 4}
    env = skyrl_gym.make(
        "python", env_config={"sandbox": "bwrap", "cell_timeout_s": 3, "persistent": persistent}
    )
    try:
        env.reset(options={"prompt": [{"role": "user", "content": "6 * 7?"}], "extras": extras})
        output = env.step(f"```python\n{PYTHON_ATTACKS[name]}\n```")
        assert output["metadata"].get("end") != "error", output["metadata"].get("error")
        assert not output["done"] and output["reward"] == 0.0
        # the interpreter works again (the cell that finds it broken may fail, the next one runs in a fresh
        # interpreter), and only the answer is scored
        shown = []
        for _ in range(2):
            output = env.step("```python\nprint(6 * 7)\n```")
            assert output["metadata"].get("end") != "error", output["metadata"].get("error")
            shown.append(output["observations"][0]["content"])
            if "42" in shown[-1]:
                break
        assert "42" in shown[-1], shown
        output = env.step("\\boxed{41}")
        assert output["done"] and output["reward"] == 0.0 and output["metadata"].get("end") != "error"
    finally:
        env.close()


# -- correct programs still pass -------------------------------------------------------------------------------


def test_humaneval_canonical_solutions_still_pass(he_problems):
    sample = ["HumanEval/0", "HumanEval/2", "HumanEval/32", "HumanEval/38", "HumanEval/50", "HumanEval/163"]
    for task_id in sample:
        problem = he_problems[task_id]
        env = code_env("humaneval", problem.to_dict(), timeout_s=10.0)
        output = play_once(env, problem.prompt + (problem.canonical_solution or ""))
        assert output["reward"] == 1.0, (task_id, output["metadata"])


def test_bundled_stdio_and_lcb_reference_solutions_still_pass():
    sandbox = make_sandbox("bwrap")
    for problem in stdio_problems():
        judgement = judge_stdio(
            sandbox, problem.reference_solution, problem.tests, time_limit_s=problem.time_limit_s,
            float_tol=problem.float_tol,
        )  # fmt: skip
        assert judgement.passed, (problem.id, judgement.outcomes)
    for seed in range(3):
        env = skyrl_gym.make("lcb", env_config={"sandbox": "bwrap"})
        env.reset(seed=seed)
        action = env.reference_action()
        assert action is not None and env.step(action)["reward"] == 1.0
    assert play_once(code_env("stdio", STDIO_TRUTH), SUM)["reward"] == 1.0
    assert play_once(lcb_env(LCB_STDIN), SUM)["reward"] == 1.0
    assert play_once(lcb_env(LCB_FUNCTIONAL), ADD)["reward"] == 1.0
