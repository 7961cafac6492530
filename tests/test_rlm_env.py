"""The ``rlm`` environment: SkyRL's RLM protocol, the REPL in the real sandbox, LM calls reaching host callbacks.

The first sections pin the public behaviour SkyRL's own RLM tests check (the LM functions exist only with a
callback, answer in order, turn failures into error strings; child agents through ``subcall_fn``; the
environment's system prompt and turns), written afresh; the later ones what this project adds: the
sandbox, hostile code, the parsers' linear time, the bundled tasks and the conformance kit.
"""

from __future__ import annotations

import re
import resource
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import skyrl_gym
from skyrl_gym.envs.registration import deregister, register, registry
from skyrl_gym.envs.rlm import BaseRLMEnv, PersistentREPL, RLMEnv, RLMEnvConfig, RLMSandboxError
from skyrl_gym.envs.rlm.env import answers_match, normalise_answer
from skyrl_gym.envs.rlm.parsing import (
    MAX_RESULT_CHARS,
    find_code_block,
    find_final,
    find_final_var,
    format_context_metadata,
    format_execution_result,
)
from skyrl_gym.envs.rlm.prompts import (
    DEFAULT_RLM_SYSTEM_PROMPT,
    LM_TOOLS_SECTION,
    NO_CODE_BLOCK,
    build_user_prompt,
)
from skyrl_gym.envs.rlm.tasks import KINDS, make_task
from skyrl_gym.testing import check_env, play_episode
from skyrl_gym.testing.strategies import adversarial_actions, episodes, json_values

LM_NAMES = ("llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched")


class Recorder:
    """An LM callback that answers ``echo:<prompt>`` and remembers every batch it was sent."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def __call__(self, prompts: list[str]) -> list[str]:
        self.batches.append(list(prompts))
        return [f"echo:{p}" for p in prompts]


def failing_lm(prompts: list[str]) -> list[str]:
    raise RuntimeError("engine down")


@pytest.fixture
def repls():
    """Makes REPLs and stops them all at the end of the test."""
    made: list[PersistentREPL] = []

    def make(**kwargs) -> PersistentREPL:
        repl = PersistentREPL(**kwargs)
        made.append(repl)
        return repl

    yield make
    for repl in made:
        repl.cleanup()


def fenced(code: str, prose: str = "Let me look.") -> str:
    return f"{prose}\n```repl\n{code}\n```"


# -- the REPL: LM functions (the behaviour SkyRL's tests pin) ----------------------------------------------------


def test_the_lm_functions_exist_only_with_a_callback(repls):
    with_lm = repls(lm_callback=Recorder())
    without = repls()
    assert all(name in with_lm.globals for name in LM_NAMES)
    assert not any(name in without.globals for name in LM_NAMES)
    result = without.execute("r = llm_query('x')")
    assert "NameError: name 'llm_query' is not defined" in result.stderr


def test_llm_query_reaches_the_host_callback(repls):
    lm = Recorder()
    repl = repls(lm_callback=lm)
    result = repl.execute("answer = llm_query('What is the capital of France?')\nprint(answer)")
    assert result.stdout == "echo:What is the capital of France?\n" and result.stderr == ""
    assert lm.batches == [["What is the capital of France?"]]
    assert result.locals["answer"] == "str" and "answer" in result.variables


def test_llm_query_batched_is_one_call_with_answers_in_order(repls):
    lm = Recorder()
    repl = repls(lm_callback=lm)
    result = repl.execute("rs = llm_query_batched(['x', 'y', 'z'])\nfor r in rs:\n    print(r)")
    assert result.stdout.splitlines() == ["echo:x", "echo:y", "echo:z"]
    assert lm.batches == [["x", "y", "z"]]


def test_a_failing_callback_comes_back_as_an_error_string(repls):
    repl = repls(lm_callback=failing_lm)
    single = repl.execute("print(llm_query('q'))")
    batch = repl.execute("rs = llm_query_batched(['a', 'b'])\nprint(len(rs))\nprint(rs[1])")
    assert single.stdout == "Error: LM query failed - engine down\n"
    assert batch.stdout == "2\nError: LM query failed - engine down\n"
    assert single.stderr == batch.stderr == ""


def test_a_callback_that_answers_the_wrong_number_of_prompts_is_an_error_string(repls):
    repl = repls(lm_callback=lambda prompts: ["only one"])
    result = repl.execute("print(llm_query_batched(['a', 'b'])[0])")
    assert result.stdout.startswith("Error: LM query failed - lm_callback returned list, not 2 answers")


def test_overwriting_a_scaffold_name_lasts_one_cell_only(repls):
    lm = Recorder()
    repl = repls(lm_callback=lm)
    repl.add_context("the real context")
    repl.execute("llm_query = lambda p, m=None: 'hijacked'\ncontext = 'replaced'\nprint(llm_query('a'))")
    assert repl.globals["llm_query"] == repl._llm_query  # the host's view is untouched
    result = repl.execute("print(llm_query('b'))\nprint(context)")
    assert result.stdout == "echo:b\nthe real context\n" and lm.batches == [["b"]]


def test_rlm_query_runs_a_child_and_reads_its_answer_as_a_literal(repls):
    seen = []

    def child(prompt, context=None):
        seen.append((prompt, context))
        return "['span one', 'span two']"

    repl = repls(lm_callback=Recorder(), subcall_fn=child)
    result = repl.execute(
        "r = rlm_query('find spans', context={'paper': 'text'})\nprint(type(r).__name__, r[1])"
    )
    assert result.stdout == "list span two\n"
    assert seen == [("find spans", {"paper": "text"})]


def test_rlm_query_without_a_child_falls_back_to_the_lm(repls):
    lm = Recorder()
    repl = repls(lm_callback=lm)
    result = repl.execute("print(rlm_query('sub task'))\nprint(rlm_query_batched(['p1', 'p2']))")
    assert result.stdout == "echo:sub task\n['echo:p1', 'echo:p2']\n"
    assert lm.batches == [["sub task"], ["p1", "p2"]]


def test_rlm_query_batched_runs_children_at_once_and_keeps_their_order(repls):
    last_started = threading.Event()
    waited = []

    def child(prompt, context=None):
        if prompt == "first":  # finishes last: it waits for the third child to start
            waited.append(last_started.wait(timeout=30))
        if prompt == "third":
            last_started.set()
        return f"result:{prompt}:{context}"

    repl = repls(lm_callback=Recorder(), subcall_fn=child)
    result = repl.execute(
        "rs = rlm_query_batched(['first', 'second', 'third'], context_list=['a', 'b', 'c'])\n"
        "for r in rs:\n    print(r)"
    )
    assert result.stdout.splitlines() == ["result:first:a", "result:second:b", "result:third:c"]
    assert waited == [True]


def test_one_failing_child_leaves_the_others_alone(repls):
    def child(prompt, context=None):
        if prompt == "bad":
            raise ValueError("this child broke")
        return f"ok:{prompt}"

    repl = repls(lm_callback=Recorder(), subcall_fn=child)
    result = repl.execute("for r in rlm_query_batched(['good', 'bad', 'fine']):\n    print(r)")
    assert result.stdout.splitlines() == ["ok:good", "Error: RLM query failed - this child broke", "ok:fine"]
    single = repl.execute("print(rlm_query('bad'))")
    assert single.stdout == "Error: RLM query failed - this child broke\n"


def test_a_context_list_of_the_wrong_length_is_refused_per_prompt(repls):
    repl = repls(lm_callback=Recorder(), subcall_fn=lambda p, context=None: "x")
    result = repl.execute("print(rlm_query_batched(['a', 'b'], context_list=['only one']))")
    assert result.stdout.count("context_list has 1 entries for 2 prompts") == 2


def test_the_lm_budget_caps_the_prompts_a_repl_sends(repls):
    lm = Recorder()
    repl = repls(lm_callback=lm, max_lm_calls=3)
    over = repl.execute("print(llm_query_batched(['p'] * 5)[4])")
    assert "budget of 3 LM queries is used up" in over.stdout and lm.batches == []
    repl.execute("print(llm_query_batched(['a', 'b', 'c']))")
    last = repl.execute("print(llm_query('d'))")
    assert "used up" in last.stdout and lm.batches == [["a", "b", "c"]] and repl.lm_calls == 3


def test_arguments_that_are_not_plain_data_fail_in_the_cell(repls):
    lm = Recorder()
    repl = repls(lm_callback=lm)
    result = repl.execute("llm_query({1, 2})")
    assert "TypeError: llm_query(): arguments must be plain data" in result.stderr and lm.batches == []


# -- the REPL: namespace, builtins, custom tools ------------------------------------------------------------------


def test_variables_live_across_cells_and_are_reported_by_name_and_type(repls):
    repl = repls()
    repl.add_context({"a": "first paper", "b": "second"})
    repl.execute("n = len(context)\ndef f(x):\n    return x * n\n_hidden = 1")
    result = repl.execute("print(f(21), _hidden, sorted(context))")
    assert result.stdout == "42 1 ['a', 'b']\n"
    assert result.locals == {"context_0": "dict", "context": "dict", "n": "int", "f": "function"}
    assert result.variables == ["context_0", "context", "n"]  # SkyRL lists plain data only, never _names


def test_final_var_and_show_vars_answer_as_in_skyrl(repls):
    repl = repls()
    empty = repl.execute("print(SHOW_VARS())\nFINAL_VAR('missing')")
    assert empty.stdout.splitlines() == [
        "No variables created yet. Use ```repl``` blocks to create variables.",
        "Error: Variable 'missing' not found. No variables have been created yet. You must create and assign "
        "a variable in a ```repl``` block BEFORE calling FINAL_VAR on it.",
    ]
    assert empty.final_answer is None
    result = repl.execute("total = 6 * 7\nFINAL_VAR(' \"total\" ')")
    assert result.final_answer == "42"
    assert repl.execute("FINAL_VAR([1, 2])").final_answer == "[1, 2]"
    missing = repl.execute("FINAL_VAR('nope')")
    assert "Available variables: ['total']" in missing.stdout and missing.final_answer is None
    assert repl._final_var("total") == "42" and repl._show_vars() == "Available variables: {'total': 'int'}"


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("import os", "TypeError: 'NoneType' object is not callable"),
        ("open('/etc/passwd')", "TypeError: 'NoneType' object is not callable"),
        ("eval('1 + 1')", "TypeError: 'NoneType' object is not callable"),
        ("class A:\n    pass", "NameError: __build_class__ not found"),
        ("x = 1 / 0", "ZeroDivisionError: division by zero"),
    ],
)
def test_skyrl_builtins_table_by_default(repls, code, error):
    result = repls().execute(code)
    assert result.stderr.endswith(error + "\n"), result.stderr
    assert result.stderr.startswith('Traceback (most recent call last):\n  File "<string>", line')
    assert "/" not in result.stderr.split("\n", 2)[1].replace('"<string>"', "")  # no host path in the frames


def test_all_of_python_when_asked_but_still_inside_the_sandbox(repls):
    repl = repls(restricted_builtins=False, sandbox="bwrap")
    code = (
        "import os, socket\n"
        "print(os.path.exists('/work/main'), os.path.exists('/root'), os.getuid())\n"
        "s = socket.socket()\n"
        "try:\n    s.connect(('1.1.1.1', 80))\nexcept OSError as e:\n    print('no network')"
    )
    result = repl.execute(code)
    assert result.stdout == "False False 65534\nno network\n", result.stderr


def test_custom_tools_run_on_the_host_and_values_are_bound(repls):
    calls = []

    def search(text, keyword, window=10):
        calls.append((len(text), keyword, window))
        return [text[i : i + window] for i in range(len(text)) if text.startswith(keyword, i)]

    def broken():
        raise KeyError("nothing here")

    tools = {"search": {"tool": search, "description": "find a keyword"}, "broken": broken, "limit": 3}
    repl = repls(custom_tools=tools)
    repl.add_context("alpha beta alpha gamma")
    result = repl.execute("hits = search(context, 'alpha', window=7)\nprint(hits, limit)")
    assert result.stdout == "['alpha b', 'alpha g'] 3\n" and calls == [(22, "alpha", 7)]
    failed = repl.execute("broken()")
    assert "RuntimeError: broken() raised KeyError: 'nothing here'" in failed.stderr
    assert repl.globals["search"] is search


def test_a_tool_result_that_cannot_enter_the_sandbox_is_an_error_in_the_cell(repls):
    repl = repls(custom_tools={"lock": lambda: threading.Lock()})
    result = repl.execute("lock()")
    assert (
        "RuntimeError: the result of lock() is a lock, which cannot enter the sandboxed REPL" in result.stderr
    )


def test_custom_tools_cannot_take_reserved_names():
    with pytest.raises(ValueError, match="cannot override reserved REPL names: \\['context', 'llm_query'\\]"):
        PersistentREPL(custom_tools={"llm_query": len, "context": 1})
    with pytest.raises(ValueError, match="identifiers"):
        PersistentREPL(custom_tools={"__builtins__": {}})


def test_a_context_added_while_the_interpreter_runs_is_bound_at_once(repls):
    repl = repls()
    repl.execute("x = 1")
    repl.add_context(["chunk a", "chunk b"], context_index=1)
    result = repl.execute("print(x, context_1[1])")
    assert result.stdout == "1 chunk b\n" and not result.restarted


def test_the_process_backend_runs_the_repl_too(repls):
    lm = Recorder()
    repl = repls(lm_callback=lm, sandbox="process")
    result = repl.execute("print(llm_query('p'))")
    assert result.stdout == "echo:p\n" and repl.backend == "process"


# -- the REPL: time, crashes and hostile code ------------------------------------------------------------------


def test_a_cell_past_its_timeout_is_interrupted_and_the_state_survives(repls):
    repl = repls(timeout=1)
    result = repl.execute("n = 5\nprint('before')\nwhile True:\n    n = n + 1 - 1")
    assert result.timed_out and not result.restarted and result.stdout == "before\n"
    assert result.stderr == "Timeout after 1 seconds\n"
    assert repl.execute("print(n)").stdout == "5\n"


def test_code_that_stops_the_alarm_is_killed_and_the_context_comes_back(repls):
    repl = repls(timeout=1)
    repl.add_context("CTX")
    repl.execute("kept = 1")
    stop_alarm = (
        "g = FINAL_VAR.__func__.__globals__\n"
        "g['signal'].setitimer(g['signal'].ITIMER_REAL, 0)\n"
        "while True:\n    pass"
    )
    result = repl.execute(stop_alarm)
    assert result.timed_out and result.restarted and "variables from earlier cells are gone" in result.stderr
    after = repl.execute("print(context)\nprint(kept)")
    assert after.stdout == "CTX\n" and "NameError: name 'kept' is not defined" in after.stderr
    assert repl.timeouts == 1 and repl.restarts == 1


@pytest.mark.parametrize("action", RLMEnv.hostile_actions, ids=lambda a: a.split("\n", 3)[3][:40])
def test_hostile_code_is_the_cells_own_failure(repls, action):
    code = find_code_block(action)
    repl = repls(lm_callback=Recorder())
    repl.add_context("CTX")
    growth_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    first = repl.execute(code)
    second = repl.execute("print(context, llm_query('still here'))")
    if not second.stdout:  # the first cell left the interpreter broken: this cell found out and restarted it
        assert second.crashed and second.restarted
        second = repl.execute("print(context, llm_query('still here'))")
    assert second.stdout == "CTX echo:still here\n"
    assert first.crashed or first.stderr or second.restarted
    assert "/work/main" not in first.stderr + second.stderr
    growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - growth_before) / 1024
    assert growth_mb < 64


FRAME_KEYS = ["op", "seq", "id", "fn", "args", "kwargs", "stdout", "stderr", "error", "final", "timed_out"]


@st.composite
def forged_frames(draw) -> dict:
    """Frames the code could write on the REPL's channel: any fields, of any JSON type, often nearly right."""
    frame = draw(st.dictionaries(st.sampled_from([*FRAME_KEYS, "variables"]), json_values(), max_size=8))
    if draw(st.booleans()):
        frame["op"] = draw(st.sampled_from(["call", "done", "reply", "ok", "ready"]))
    if draw(st.booleans()):
        frame["seq"] = "current"
    if frame.get("op") == "call" and draw(st.booleans()):
        frame["fn"] = draw(st.sampled_from(["llm_query", "rlm_query_batched", "tool", "open"]))
    return frame


@settings(max_examples=25, deadline=None)
@given(forged_frames())
def test_any_forged_frame_is_the_cells_own_failure(frame):
    repl = PersistentREPL(lm_callback=Recorder(), custom_tools={"tool": lambda *a, **k: [a, k]})
    try:
        code = (
            f"m = {frame!r}\n"
            "if m.get('seq') == 'current':\n    m['seq'] = FINAL_VAR.__self__.seq\n"
            "FINAL_VAR.__self__.channel.send(m)"
        )
        repl.execute(code)  # must not raise, whatever the frame says
        after = repl.execute("print(llm_query('alive'))")
        if (
            after.stdout != "echo:alive\n"
        ):  # the forged frame put the channel out of step: this cell found out
            assert after.crashed
            after = repl.execute("print(llm_query('alive'))")
        assert after.stdout == "echo:alive\n"
    finally:
        repl.cleanup()


def test_running_out_of_memory_is_named(repls):
    repl = repls(memory_mb=256, sandbox="bwrap")
    result = repl.execute("x = b'a' * (1024 ** 3)")
    assert result.crashed and result.stderr.startswith("MemoryError: the REPL ran out of memory (256 MB)")


def test_a_fork_bomb_is_contained(repls):
    repl = repls(restricted_builtins=False, sandbox="bwrap", timeout=5)
    repl.execute("import os\nwhile True:\n    os.fork()")
    assert repl.execute("print('alive')").stdout in ("alive\n", "")
    assert repl.execute("print('alive')").stdout == "alive\n"


def test_abandon_and_close_end_a_running_cell_without_waiting_for_it(repls):
    for stop in ("abandon", "cleanup"):
        repl = repls(timeout=600)
        repl.execute("x = 1")
        outcome = {}

        def run(repl=repl, outcome=outcome):
            try:
                outcome["result"] = repl.execute("while True:\n    pass")
            except RuntimeError as exc:
                outcome["raised"] = str(exc)

        worker = threading.Thread(target=run)
        worker.start()
        while repl.cells < 2:
            threading.Event().wait(0.01)
        getattr(repl, stop)()
        worker.join(timeout=30)
        assert not worker.is_alive()
        if stop == "abandon":
            assert outcome["result"].crashed and repl.execute("print(1)").stdout == "1\n"
        else:
            assert outcome == {"raised": "the REPL was closed while a cell ran"}


# -- the parsers ---------------------------------------------------------------------------------------------------

# SkyRL reads replies with these expressions; the parsers must give the same answers in linear time
SKYRL_BLOCK = re.compile(r"```repl\s*\n(.*?)\n```", re.DOTALL)
SKYRL_FINAL_VAR = re.compile(r"^\s*FINAL_VAR\((.*?)\)", re.MULTILINE | re.DOTALL)
SKYRL_FINAL = re.compile(r"^\s*FINAL\((.*)\)\s*$", re.MULTILINE | re.DOTALL)


def skyrl_reading(text: str) -> tuple:
    blocks, names, finals = (
        SKYRL_BLOCK.findall(text),
        SKYRL_FINAL_VAR.findall(text),
        SKYRL_FINAL.findall(text),
    )
    return (
        blocks[-1].strip() if blocks else None,
        names[-1] if names else None,
        finals[-1].strip() if finals else None,
    )


PIECES = [
    "```repl",
    "```",
    "\n",
    " ",
    "\t",
    "x",
    "FINAL(",
    "FINAL_VAR(",
    ")",
    "(",
    "\r",
    "\u2028",
    "\x85",
    "a b",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=16).map("".join))
def test_the_parsers_read_replies_as_skyrl_does(text):
    assert (find_code_block(text), find_final_var(text), find_final(text)) == skyrl_reading(text)


PATHOLOGICAL = {
    "fences without a newline": ("```repl " * 200_000, (None, None, None)),
    "fences that pair up": ("```repl\n" * 200_000, ("```repl", None, None)),
    "one late close": ("```repl\n" * 100_001 + "x\n```", ("```repl\nx", None, None)),  # blocks pair up
    "unclosed FINAL_VAR": ("FINAL_VAR(" * 200_000, (None, None, None)),
    "blank lines then FINAL": ("\n" * 500_000 + "FINAL(x)", (None, None, "x")),
    "FINAL with no line-ending paren": ("FINAL(" + ")x" * 200_000, (None, None, None)),
    "FINAL of many parens": ("FINAL(" + "(" * 200_000 + ")", (None, None, "(" * 200_000)),
    "many FINAL_VAR lines": ("\nFINAL_VAR(a)" * 100_000, (None, "a", None)),
}


@pytest.mark.parametrize("case", sorted(PATHOLOGICAL))
def test_the_parsers_are_linear_on_pathological_replies(case):
    text, expected = PATHOLOGICAL[case]
    assert (find_code_block(text), find_final_var(text), find_final(text)) == expected


def test_execution_results_read_as_in_skyrl():
    assert format_execution_result("", "", []) == "No output"
    assert format_execution_result("hi\n", "oops\n", ["context", "x"]) == (
        "\nhi\n\n\n\noops\n\n\nREPL variables: ['context', 'x']\n"
    )
    long = format_execution_result("y" * 25_000, "", [])
    assert len(long) == MAX_RESULT_CHARS + len("... + [5001 chars...]") and long.endswith(
        "... + [5001 chars...]"
    )


def test_the_context_is_described_by_type_and_chunk_lengths():
    assert format_context_metadata("abc") == (
        "Your context is a str with 3 total characters, and is broken up into chunks of char lengths: [3]."
    )
    assert format_context_metadata({"a": "xy", "b": [1, 2]}).startswith("Your context is a dict with 8 total")
    assert format_context_metadata(["ab", 123]).endswith("chunks of char lengths: [2, 3].")


# -- the environment ----------------------------------------------------------------------------------------------


class ScriptedRLMEnv(BaseRLMEnv):
    """BaseRLMEnv with SkyRL's placeholder reward (any non-empty answer earns 1.0)."""


@pytest.fixture(scope="module")
def scripted_id():
    env_id = "_test_rlm_scripted"
    if env_id not in registry:
        register(id=env_id, entry_point=ScriptedRLMEnv)
    yield env_id
    deregister(env_id)


def make_scripted(env_id: str, **extras) -> BaseRLMEnv:
    row = {"reward_spec": {"ground_truth": "Paris"}, "max_turns": 5}
    row["extra_info"] = {"context_text": extras.pop("context", "The capital of France is Paris.")}
    row.update(extras)
    return skyrl_gym.make(env_id, extras=row)


PROMPT = [{"role": "user", "content": "What is the capital of France?"}]


def test_the_system_prompt_lists_the_lm_functions_only_with_a_callback(scripted_id):
    plain = make_scripted(scripted_id)
    messages, info = plain.init(PROMPT)
    assert [m["role"] for m in messages] == ["system", "user", "user"] and info == {}
    assert messages[0]["content"] == DEFAULT_RLM_SYSTEM_PROMPT.replace("{custom_tools_section}", "")
    assert "llm_query" not in messages[0]["content"]
    assert messages[1]["content"] == format_context_metadata("The capital of France is Paris.")
    assert messages[2] == build_user_prompt("What is the capital of France?", 0)
    plain.close()
    with_lm = make_scripted(scripted_id, lm_callback=Recorder())
    system = with_lm.init(PROMPT)[0][0]["content"]
    assert LM_TOOLS_SECTION in system and all(name in system for name in LM_NAMES)
    with_lm.close()


def test_custom_tools_are_numbered_after_the_lm_functions():
    class ToolEnv(BaseRLMEnv):
        def _get_repl_tools(self):
            text = self._context
            return {"count": {"tool": lambda word: text.count(word), "description": "count a word"}, "k": 2}

    env = ToolEnv(extras={"extra_info": {"context_text": "a b a"}, "lm_callback": Recorder()})
    system = env.init(PROMPT)[0][0]["content"]
    assert (
        "\n5. Custom tools and data available in the REPL:\n- `count`: count a word\n- `k`: A custom int value"
        in system
    )
    output = env.step(fenced("print(count('a'), k)"))
    assert "REPL output:\n\n2 2\n" in output["observations"][0]["content"]
    env.close()
    bare = ToolEnv(extras={"extra_info": {"context_text": "a"}})
    assert "\n4. Custom tools and data available in the REPL:" in bare.init(PROMPT)[0][0]["content"]
    bare.close()


def test_a_turn_runs_the_code_and_shows_its_output_then_the_next_instruction(scripted_id):
    env = make_scripted(scripted_id, lm_callback=Recorder())
    env.init(PROMPT)
    output = env.step(fenced("answer = llm_query('What is the capital of France?')\nprint(answer)"))
    assert output["done"] is False and output["reward"] == 0.0
    shown, instruction = output["observations"]
    assert shown == {
        "role": "user",
        "content": "Code executed:\n```python\nanswer = llm_query('What is the capital of France?')\n"
        "print(answer)\n```\n\nREPL output:\n\necho:What is the capital of France?\n\n\n"
        "REPL variables: ['context_0', 'context', 'answer']\n",
    }
    assert instruction == build_user_prompt("What is the capital of France?", 1)
    assert output["metadata"]["action"] == "code" and output["metadata"]["repl"]["backend"]
    env.close()


def test_rlm_query_reaches_the_child_from_a_turn(scripted_id):
    env = make_scripted(scripted_id, lm_callback=Recorder(), subcall_fn=lambda p, context=None: f"child:{p}")
    env.init(PROMPT)
    output = env.step(fenced("print(rlm_query('solve this subtask'))"))
    assert "\nchild:solve this subtask\n" in output["observations"][0]["content"]
    env.close()


def test_without_a_callback_the_lm_functions_are_a_name_error(scripted_id):
    env = make_scripted(scripted_id)
    env.init(PROMPT)
    content = env.step(fenced("r = llm_query('test')"))["observations"][0]["content"]
    assert "NameError: name 'llm_query' is not defined" in content
    env.close()


def test_the_stale_instruction_leaves_the_generators_history(scripted_id):
    env = make_scripted(scripted_id, max_turns=6)
    history, _ = env.init(PROMPT)
    for reply in ["no code here", fenced("x = 1"), fenced("print(x)")]:
        output = env.step(reply)
        history += [{"role": "assistant", "content": reply}, *output["observations"]]
    instructions = [m for m in history if m["content"].startswith(("You have not", "The history before"))]
    assert instructions == [history[-1]] == [build_user_prompt("What is the capital of France?", 3)]
    assert [m["role"] for m in history[:2]] == ["system", "user"]
    env.close()


def test_a_copied_history_is_left_alone(scripted_id):
    env = make_scripted(scripted_id, max_turns=8)
    first, _ = env.init(PROMPT)
    history = [dict(m) for m in first]  # a generator that copies: the environment must not touch its own list
    for _ in range(6):
        output = env.step("no code")
        history += output["observations"]
    assert len(first) == 2 and len(history) == 3 + 6 * 2
    env.close()


def test_final_var_called_in_the_code_ends_the_episode(scripted_id):
    env = make_scripted(scripted_id)
    env.init(PROMPT)
    output = env.step(fenced("city = context.split()[-1].rstrip('.')\nFINAL_VAR('city')"))
    assert (output["done"], output["reward"], output["observations"]) == (True, 1.0, [])
    assert output["metadata"]["end"] == "terminated" and output["metadata"]["final_answer"] == "Paris"
    assert env.get_metrics() == {
        "turns_used": 1,
        "final_value_set": True,
        "final_answer": "Paris",
        "reward": 1.0,
        "repl_cells": 1,
        "repl_timeouts": 0,
        "repl_restarts": 0,
        "lm_calls": 0,
    }
    env.close()


def test_final_in_the_reply_counts_only_with_a_code_block(scripted_id):
    env = make_scripted(scripted_id)
    env.init(PROMPT)
    alone = env.step("I know it.\nFINAL(Paris)")
    assert not alone["done"] and alone["observations"][0]["content"] == NO_CODE_BLOCK
    output = env.step(fenced("print('checked')") + "\nFINAL(Paris)")
    assert output["done"] and output["metadata"]["final_answer"] == "Paris"
    env.close()


def test_final_var_in_the_reply_reads_the_variable_and_a_missing_one_goes_on(scripted_id):
    env = make_scripted(scripted_id)
    env.init(PROMPT)
    missing = env.step(fenced("x = 1") + "\nFINAL_VAR(nothing)")
    assert (
        not missing["done"]
        and "REPL variables: ['context_0', 'context', 'x']" in missing["observations"][0]["content"]
    )
    found = env.step(fenced("best = 'Paris'") + '\nFINAL_VAR("best")')
    assert found["done"] and found["metadata"]["final_answer"] == "Paris"
    env.close()


def test_max_turns_without_an_answer_ends_truncated_with_nothing(scripted_id):
    env = make_scripted(scripted_id, max_turns=2)
    env.init(PROMPT)
    assert not env.step(fenced("x = 1"))["done"]
    last = env.step(fenced("y = 2"))
    assert (last["done"], last["reward"], last["observations"]) == (True, 0.0, [])
    assert last["metadata"]["end"] == "truncated" and last["metadata"]["truncated_by"] == "max_turns"
    env.close()


def test_step_before_init_starts_the_repl_from_the_extras(scripted_id):
    env = make_scripted(scripted_id)
    output = env.step(fenced("print(context)"))
    assert "The capital of France is Paris." in output["observations"][0]["content"]
    env.close()


def test_a_json_object_context_becomes_a_dict(scripted_id):
    env = make_scripted(scripted_id, context='{"p1": "alpha", "p2": "beta"}')
    messages, _ = env.init(PROMPT)
    assert messages[1]["content"].startswith("Your context is a dict with 9 total characters")
    output = env.step(fenced("print(context['p2'])"))
    assert "\nbeta\n" in output["observations"][0]["content"]
    env.close()


def test_a_child_rollout_through_subcall_fn_is_a_real_episode():
    """``subcall_fn`` the way SkyRL's generator builds it: a child episode with the sub-task's context, whose
    final answer (from its metrics) goes back to the parent's REPL."""
    children = []

    def subcall_fn(prompt, context=None):
        child = ScriptedRLMEnv(extras={"extra_info": {"context_text": context}, "depth": 1})
        child.init([{"role": "user", "content": prompt}])
        child.step(fenced("names = [w for w in context.split() if w.istitle()]\nFINAL_VAR('names')"))
        metrics = child.get_metrics()
        children.append(metrics)
        child.close()
        return metrics["final_answer"]

    parent = RLMEnv(
        extras={
            "reward_spec": {"ground_truth": "Ada, Alan"},
            "extra_info": {"context_text": "intro\n---\nbooks by Ada and Alan\n---\nthe end"},
            "lm_callback": Recorder(),
            "subcall_fn": subcall_fn,
        }
    )
    parent.init([{"role": "user", "content": "Who wrote the books?"}])
    code = (
        "parts = context.split('---')\n"
        "found = rlm_query_batched(['names?'] * len(parts), context_list=parts)\n"
        "answer = ', '.join(n for names in found for n in names)\n"
        "FINAL_VAR('answer')"
    )
    output = parent.step(fenced(code))
    assert output["reward"] == 1.0 and output["metadata"]["final_answer"] == "Ada, Alan"
    assert sorted(c["final_answer"] for c in children) == ["['Ada', 'Alan']", "[]", "[]"]  # in any order
    assert parent.get_metrics()["lm_calls"] == 3
    parent.close()


# -- the registered environment: tasks, reward, conformance ------------------------------------------------------


def test_a_row_without_ground_truth_is_refused_when_made():
    with pytest.raises(ValueError, match="rlm needs extras\\['reward_spec'\\]"):
        skyrl_gym.make("rlm", extras={"extra_info": {"context_text": "x"}})
    env = skyrl_gym.make("rlm")
    with pytest.raises(ValueError, match="reset\\(seed=...\\)"):
        env.init(PROMPT)
    env.close()


@pytest.mark.parametrize(
    ("answer", "truth", "match"),
    [
        ("Paris", "paris", True),
        ('"Paris."', "Paris", True),
        ("  Kraków ", "Kraków", True),
        ("12", "12.0", True),
        ("1,024", "1024", True),
        ("Lyon", ["Paris", "Lyon"], True),
        ("Paris, France", "Paris", False),
        ("13", "12", False),
        ("", "Paris", False),
    ],
)
def test_answers_match(answer, truth, match):
    assert answers_match(answer, truth) is match
    assert normalise_answer("  A   b. ") == "a b"


@pytest.mark.parametrize("seed", range(6))
def test_each_bundled_task_is_solved_by_its_reference_through_the_repl(seed):
    env = skyrl_gym.make("rlm")
    messages, _ = env.reset(seed=seed)
    again = make_task(seed)
    assert messages[1]["content"] == format_context_metadata(again["extras"]["extra_info"]["context_text"])
    assert len(again["extras"]["extra_info"]["context_text"]) > 50_000
    output = env.step(env.reference_action())
    assert output["reward"] == 1.0 and output["metadata"]["end"] == "terminated"
    assert output["metadata"]["final_answer"] == str(again["extras"]["reward_spec"]["ground_truth"])
    env.close()


def test_the_tasks_are_deterministic_and_cover_every_kind():
    assert make_task(7) == make_task(7) and make_task(7) != make_task(8)
    assert {make_task(seed)["extras"]["extra_info"]["task"] for seed in range(3)} == set(KINDS)
    with pytest.raises(ValueError, match="unknown rlm task kind"):
        make_task(0, kind="riddle")


def test_a_wrong_or_missing_answer_earns_nothing():
    env = skyrl_gym.make("rlm")
    env.reset(seed=0)
    assert env.step(fenced("FINAL_VAR('context_0'[:0] + 'wrong')"))["reward"] == 0.0
    env.close()
    env = skyrl_gym.make("rlm")
    env.reset(seed=0)
    outputs = [env.step("") for _ in range(10)]
    assert sum(o["reward"] for o in outputs) == 0.0 and outputs[-1]["metadata"]["end"] == "truncated"
    env.close()


@pytest.mark.parametrize(
    ("env_config", "message"),
    [
        ({"memory_mb": 0}, "memory_mb must be a positive integer"),
        ({"repl_timeout_s": "soon"}, "repl_timeout_s must be a number"),
        ({"restricted_builtins": "yes"}, "restricted_builtins must be true or false"),
        ({"sandbox_backend": "bwrap"}, "did you mean 'sandbox'"),
    ],
)
def test_bad_settings_are_refused_with_a_fix(env_config, message):
    with pytest.raises(ValueError, match=message):
        RLMEnvConfig.from_env_config(env_config)


def test_the_row_sets_the_cell_timeout_and_the_config_the_builtins():
    env = skyrl_gym.make(
        "rlm",
        env_config={"restricted_builtins": False},
        extras={
            "reward_spec": {"ground_truth": "3"},
            "repl_timeout": 1,
            "extra_info": {"context_text": "abc"},
        },
    )
    env.init(PROMPT)
    assert env.repl.timeout == 1.0
    content = env.step(fenced("import json\nprint(json.dumps(len(context)))\nwhile True:\n    pass"))
    assert (
        "\n3\n" in content["observations"][0]["content"]
        and "Timeout after 1 seconds" in content["observations"][0]["content"]
    )
    env.close()


def test_a_step_past_its_budget_is_abandoned_and_its_sandbox_killed():
    extras = {
        "reward_spec": {"ground_truth": "x"},
        "repl_timeout": 600,
        "extra_info": {"context_text": "abc"},
    }
    env = skyrl_gym.make("rlm", extras=extras, budget={"step_timeout_s": 1})
    env.init(PROMPT)
    output = env.step(fenced("while True:\n    pass"))
    assert output["done"] and output["metadata"]["truncated_by"] == "step_timeout"
    process = env.repl._process
    assert process is None or not process.alive()  # abandon() ended it before the step returned
    env.close()


class BrokenSandboxRLMEnv(RLMEnv):
    """An RLM environment whose sandbox cannot start Python."""

    def _make_repl(self) -> PersistentREPL:
        from skyrl_gym.runtime.process import ProcessSandbox

        return PersistentREPL(sandbox=ProcessSandbox(python="/nonexistent/python3"))


def test_a_sandbox_that_cannot_start_is_the_environments_error_not_the_models():
    with pytest.raises(RLMSandboxError, match="could not start in the process sandbox"):
        PersistentREPL(sandbox="process", memory_mb=1).execute("print(1)")
    register(id="_test_rlm_broken", entry_point=BrokenSandboxRLMEnv)
    try:
        env = skyrl_gym.make("_test_rlm_broken")
        env.reset(seed=0)
        output = env.step(fenced("print(1)"))
        assert output["metadata"]["end"] == "error" and "RLMSandboxError" in output["metadata"]["error"]
        env.close()
    finally:
        deregister("_test_rlm_broken")


def test_the_rlm_environment_conforms():
    report = check_env(lambda: skyrl_gym.make("rlm"), seeds=(0, 1))
    assert report.ok
    for rule in ("oracle-earns-full-reward", "model-failures-are-not-errors", "gymnasium-check-env"):
        assert rule in report.passed


def any_reply() -> st.SearchStrategy[str]:
    """Replies a policy might write: fenced code (sensible, broken, hostile), FINAL lines, hostile text."""
    code = st.one_of(
        st.sampled_from(
            [
                "print(context[:50])",
                "x = len(context)",
                "FINAL_VAR('x')",
                "print(SHOW_VARS())",
                "import os",
                "raise SystemExit(1)",
                "print(llm_query('p'))",
                "def f(:",
                "print('\\x00\\ud800')",
            ]
        ),
        st.text(max_size=40),
    )
    return st.one_of(
        code.map(fenced),
        st.sampled_from(RLMEnv.hostile_actions),
        st.text(max_size=20).map(lambda t: f"```repl\nprint(1)\n```\nFINAL({t})"),
        st.text(max_size=20).map(lambda t: f"```repl\nx = 1\n```\nFINAL_VAR({t})"),
        adversarial_actions(),
    )


@settings(max_examples=25, deadline=None)
@given(episodes(any_reply(), max_turns=4))
def test_the_rlm_environment_survives_any_episode(actions):
    task = make_task(3)
    task["extras"]["repl_timeout"] = 2
    env = skyrl_gym.make("rlm")
    outputs = play_episode(env, actions, task=task)
    for output in outputs:
        assert output["reward"] in (0.0, 1.0)
        if not output["done"]:
            assert output["observations"][-1]["content"].startswith("The history before")
    env.close()
