"""skyrl_gym.vector: concurrent init/step, order kept, failures and timeouts isolated, asyncio API.

Nothing here reads a clock. Calls that must overlap meet at a barrier (run one after another, they would
break it); a call given up on hangs until the test releases it, so the batch's answer is seen to come while
that call still runs; calls that must not overlap count how many ran at once.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.errors import EpisodeNotStartedError, Error, UnknownEnvironmentError
from skyrl_gym.guard import guard_of
from skyrl_gym.vector import (
    AsyncVectorEnv,
    BatchStats,
    InitResult,
    VectorEnv,
    ainit,
    astep,
    error_output,
    make_vec,
)

_LOCK = threading.Lock()
_RELEASED: dict[str, threading.Event] = {}
_HANGING: set[str] = set()
_BARRIERS: dict[str, threading.Barrier] = {}
_IN_FLIGHT: dict[str, int] = {}
MOST_IN_FLIGHT: dict[str, int] = {}
"""The most ``sleep:<s>:<name>`` calls of each name that ran at the same time."""


def _released(name: str) -> threading.Event:
    with _LOCK:
        return _RELEASED.setdefault(name, threading.Event())


def release(name: str) -> None:
    """Let every ``hang:<name>`` call return."""
    _released(name).set()


def hanging(name: str) -> bool:
    """Whether a ``hang:<name>`` call is still running."""
    with _LOCK:
        return name in _HANGING


def _act(text: str) -> None:
    """What the scripted environment does for a command (anything else: nothing):

    - ``raise``: raises;
    - ``sleep:<seconds>`` or ``sleep:<seconds>:<name>``: sleeps (named sleeps count into ``MOST_IN_FLIGHT``);
    - ``hang:<name>``: blocks until ``release(name)`` (at most two minutes, so no thread outlives the run);
    - ``meet:<name>:<n>``: returns once ``n`` calls of that name run at once (a barrier that breaks, and so
      raises, when they cannot all be in flight together).
    """
    if text == "raise":
        raise ValueError(f"asked to raise on {text!r}")
    kind, _, rest = text.partition(":")
    if kind == "sleep":
        seconds, _, name = rest.partition(":")
        if name:
            with _LOCK:
                _IN_FLIGHT[name] = _IN_FLIGHT.get(name, 0) + 1
                MOST_IN_FLIGHT[name] = max(MOST_IN_FLIGHT.get(name, 0), _IN_FLIGHT[name])
        try:
            time.sleep(float(seconds))
        finally:
            if name:
                with _LOCK:
                    _IN_FLIGHT[name] -= 1
    elif kind == "hang":
        with _LOCK:
            _HANGING.add(rest)
        try:
            _released(rest).wait(120)
        finally:
            with _LOCK:
                _HANGING.discard(rest)
    elif kind == "meet":
        name, _, parties = rest.partition(":")
        with _LOCK:
            barrier = _BARRIERS.setdefault(name, threading.Barrier(int(parties), timeout=30))
        barrier.wait()


class ScriptedEnv(BaseTextEnv):
    """Echoes each action; the commands of :func:`_act` (in a prompt or an action) and ``done`` do what they
    say."""

    def __init__(self, env_config=None, extras=None):
        super().__init__(env_config, extras)
        self.max_turns = 100
        self.name = self.extras.get("name", "")
        self.close_calls = 0

    def init(self, prompt):
        _act(prompt[-1]["content"] if prompt else "")
        return prompt, {"name": self.name}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        _act(action)
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": f"{self.name} echo: {action}"}],
            reward=float(self.turns),
            done=action == "done",
            metadata={},
        )

    def close(self) -> None:
        self.close_calls += 1

    def sample_task(self, seed=None):
        return {"prompt": [{"role": "user", "content": f"task {seed}"}]}


class BadCloseEnv(ScriptedEnv):
    def close(self) -> None:
        super().close()
        raise OSError("the container is gone")


class MalformedEnv(ScriptedEnv):
    """Returns something outside the contract: from ``init`` for the prompt ``bad``, from every ``step``."""

    def init(self, prompt):
        return "not a pair" if prompt == user("bad") else super().init(prompt)

    def step(self, action: str):
        return f"not a dict: {action}"


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def scripted(n: int, **kwargs) -> VectorEnv:
    return VectorEnv([ScriptedEnv(extras={"name": f"e{i}"}) for i in range(n)], **kwargs)


def contents(outputs) -> list[str | None]:
    return [
        None if out is None else (out["observations"][0]["content"] if out["observations"] else "")
        for out in outputs
    ]


# -- order, isolation, timeouts --------------------------------------------------------------------------
def test_results_keep_the_order_of_the_inputs_not_of_completion():
    with scripted(5) as vec:
        starts = vec.init([user(f"p{i}") for i in range(5)])
        assert [s.observations for s in starts] == [user(f"p{i}") for i in range(5)]
        assert [s.info for s in starts] == [{"name": f"e{i}"} for i in range(5)]
        assert all(isinstance(s, InitResult) and s.ok for s in starts)
        # the first environments finish last
        outputs = vec.step([f"sleep:{0.05 * (4 - i)}" for i in range(5)])
        assert contents(outputs) == [f"e{i} echo: sleep:{0.05 * (4 - i)}" for i in range(5)]
        assert vec.dones == [False] * 5
        assert vec.last_stats == BatchStats("step", ok=5, wall_s=vec.last_stats.wall_s)


def test_an_exception_in_one_env_is_an_error_result_for_that_env_only():
    with scripted(3) as vec:
        vec.init([user("go")] * 3)
        outputs = vec.step(["a", "raise", "c"])
        assert outputs[1] == error_output("step failed: ValueError: asked to raise on 'raise'")
        assert outputs[1]["metadata"]["end"] == "error" and outputs[1]["done"] is True
        assert contents(outputs)[0::2] == ["e0 echo: a", "e2 echo: c"]
        assert vec.dones == [False, True, False]
        stats = vec.last_stats
        assert (stats.ok, stats.errors, stats.timeouts) == (2, 1, 0)
        # the batch goes on; the failed env is skipped
        assert contents(vec.step(["b", "b", "d"])) == ["e0 echo: b", None, "e2 echo: d"]


def test_a_timeout_in_one_env_is_an_error_result_for_that_env_only():
    with scripted(3, step_timeout_s=0.3) as vec:
        vec.init([user("go")] * 3)
        outputs = vec.step(["a", "hang:one_env", "sleep:0.1"])
        assert hanging("one_env")  # the batch answered without waiting for the hung step
        assert outputs[1] == {
            "observations": [],
            "reward": 0.0,
            "done": True,
            "metadata": {"end": "error", "error": "step timed out after 0.3 s"},
        }
        assert contents(outputs)[0::2] == ["e0 echo: a", "e2 echo: sleep:0.1"]
        assert vec.dones == [False, True, False]
        assert (vec.last_stats.ok, vec.last_stats.timeouts) == (2, 1)
        assert contents(vec.step(["b", "b", "b"])) == ["e0 echo: b", None, "e2 echo: b"]
        # the abandoned step still runs in env 1: a new episode there is refused, the others start
        starts = vec.init([user("again")] * 3)
        assert starts[0].ok and starts[2].ok
        assert not starts[1].ok and "still running an earlier call that timed out" in starts[1].error
        release("one_env")


def test_each_deadline_counts_from_when_its_call_started():
    # one worker: the three 0.2 s steps run one after another (0.6 s in all), each well within 0.5 s
    with scripted(3, max_workers=1, step_timeout_s=0.5) as vec:
        vec.init([user("go")] * 3)
        outputs = vec.step(["sleep:0.2:one_worker"] * 3)
        assert MOST_IN_FLIGHT["one_worker"] == 1
        assert all(not out["metadata"] for out in outputs), outputs


def test_a_hung_call_does_not_keep_its_worker_from_the_others():
    with scripted(3, max_workers=1, step_timeout_s=0.3) as vec:
        vec.init([user("go")] * 3)
        outputs = vec.step(["hang:worker", "b", "c"])
        assert hanging("worker")  # b and c ran elsewhere while the only worker is still stuck
        assert outputs[0]["metadata"]["error"] == "step timed out after 0.3 s"
        assert contents(outputs)[1:] == ["e1 echo: b", "e2 echo: c"]
        release("worker")


def test_timeouts_can_differ_per_env():
    with scripted(2, step_timeout_s=[0.2, None]) as vec:
        vec.init([user("go")] * 2)
        outputs = vec.step(["sleep:0.5", "sleep:0.5"])
        assert outputs[0]["metadata"]["error"] == "step timed out after 0.2 s"
        assert contents(outputs)[1] == "e1 echo: sleep:0.5"


def test_failed_init_is_an_init_result_with_an_error():
    with scripted(3, init_timeout_s=0.3) as vec:
        starts = vec.init([user("raise"), user("hang:init"), user("hello")])
        assert hanging("init")
        release("init")
        assert starts[0].error == "init failed: ValueError: asked to raise on 'raise'"
        assert starts[1].error == "init timed out after 0.3 s"
        assert (starts[1].observations, starts[1].info) == ([], {})
        assert starts[2].ok and starts[2].observations == user("hello")
        assert vec.dones == [True, True, False]
        assert (vec.last_stats.ok, vec.last_stats.errors, vec.last_stats.timeouts) == (1, 1, 1)
        assert contents(vec.step(["x"] * 3)) == [None, None, "e2 echo: x"]


def test_results_outside_the_contract_are_errors_for_that_env_only():
    with VectorEnv([MalformedEnv(), MalformedEnv(), ScriptedEnv()]) as vec:
        starts = vec.init([user("go"), user("bad"), user("go")])
        assert starts[1].error == "init returned str, expected (observations, info)"
        assert starts[0].ok and starts[2].ok
        outputs = vec.step(["a", "b", "c"])
        assert outputs[0] == error_output("step returned str, expected a dict (EnvStepOutput)")
        assert contents(outputs)[1:] == [None, " echo: c"]
        assert vec.last_stats.errors == 1


# -- masks, finished episodes, misuse --------------------------------------------------------------------
def test_masked_out_envs_are_not_called():
    with scripted(3) as vec:
        vec.init([user("go")] * 3)
        outputs = vec.step(["a", "b", "c"], mask=[True, False, True])
        assert contents(outputs) == ["e0 echo: a", None, "e2 echo: c"]
        assert [env.turns for env in vec.envs] == [1, 0, 1]
        assert vec.last_stats.skipped == 1
        starts = vec.init([user("new"), None, None], mask=[True, False, False])
        assert starts[0].ok and starts[1:] == [None, None]


def test_finished_envs_are_skipped_until_a_new_episode_starts():
    with scripted(2) as vec:
        vec.init([user("go")] * 2)
        assert [out["done"] for out in vec.step(["done", "a"])] == [True, False]
        assert vec.dones == [True, False]
        assert contents(vec.step(["b", "b"])) == [None, "e1 echo: b"]
        vec.step(["x", "done"])
        assert vec.step(["x", "x"]) == [None, None]
        assert vec.last_stats.skipped == 2
        vec.init([user("again")] * 2)
        assert vec.dones == [False, False]
        assert contents(vec.step(["c", "c"])) == ["e0 echo: c", "e1 echo: c"]


def test_misuse_raises_a_clear_error():
    with scripted(2) as vec:
        with pytest.raises(EpisodeNotStartedError, match="before init"):
            vec.step(["a", "b"])
        with pytest.raises(ValueError, match="prompts has 1 entries; expected one per environment"):
            vec.init([user("go")])
        vec.init([user("go")] * 2)
        with pytest.raises(ValueError, match="mask has 3 entries"):
            vec.step(["a", "b"], mask=[True] * 3)
        with pytest.raises(TypeError, match="actions must be a list"):
            vec.step("ab")
    with pytest.raises(ValueError, match="at least one environment"):
        VectorEnv([])
    with pytest.raises(ValueError, match="positive finite"):
        scripted(1, step_timeout_s=0)


def test_close_is_idempotent_and_closes_every_env_even_if_one_fails():
    envs = [ScriptedEnv(), BadCloseEnv(), ScriptedEnv()]
    with VectorEnv(envs) as vec:
        vec.init([user("go")] * 3)
    assert vec.closed and [env.close_calls for env in envs] == [1, 1, 1]
    assert (vec.last_stats.ok, vec.last_stats.errors) == (2, 1)
    vec.close()
    vec.close()
    assert [env.close_calls for env in envs] == [1, 1, 1]
    with pytest.raises(Error, match="closed"):
        vec.step(["a"] * 3)


def test_reset_seeds_each_env():
    with scripted(3) as vec:
        starts = vec.reset(seeds=7)
        assert [s.observations for s in starts] == [user("task 7"), user("task 8"), user("task 9")]
        starts = vec.reset(options=[{"prompt": "hi"}, None, {"prompt": user("raise")}])
        assert starts[0].observations == user("hi") and starts[1].observations == user("task None")
        assert starts[2].error.startswith("reset failed: ValueError")
        assert vec.dones == [False, False, True]


def test_factories_are_called_and_a_failing_factory_closes_the_others():
    with VectorEnv([ScriptedEnv, lambda: ScriptedEnv(extras={"name": "f"})]) as vec:
        assert [env.name for env in vec.envs] == ["", "f"]
    made = []

    def tracked():
        made.append(ScriptedEnv())
        return made[-1]

    def broken():
        raise RuntimeError("no database")

    with pytest.raises(Error, match="making environment 1 failed: RuntimeError: no database"):
        VectorEnv([tracked, broken])
    assert [env.close_calls for env in made] == [1]
    with pytest.raises(TypeError, match="neither an environment nor a factory"):
        VectorEnv([42])


def test_steps_run_concurrently():
    with scripted(8) as vec:
        vec.init([user("go")] * 8)
        outputs = vec.step(["meet:steps:8"] * 8)  # all eight in flight at once, or the barrier breaks
        assert all(out["done"] is False and not out["metadata"] for out in outputs), outputs


def test_a_hung_call_does_not_block_interpreter_exit():
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_vector import ScriptedEnv, user
        from skyrl_gym.vector import VectorEnv
        vec = VectorEnv([ScriptedEnv()], step_timeout_s=0.2, close_timeout_s=0.2)
        vec.init([user("go")])
        print(vec.step(["sleep:60"])[0]["metadata"]["error"])
        """
    )
    # the hung step sleeps 60 s: an exit that waited for it would not end within the 30 s allowed
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "step timed out after 0.2 s"


# -- through the registry -----------------------------------------------------------------------------
@pytest.fixture
def registered():
    ids = ["vector_test_callable", "vector_test_string"]
    skyrl_gym.register(ids[0], entry_point=ScriptedEnv)
    skyrl_gym.register(ids[1], entry_point=f"{ScriptedEnv.__module__}:ScriptedEnv")
    yield ids
    for env_id in ids:
        skyrl_gym.deregister(env_id)


def test_make_vec_makes_guarded_envs_from_the_registry(registered):
    for env_id in registered:
        kwargs = [{"extras": {"name": f"r{i}"}} for i in range(3)]
        with make_vec(env_id, 3, make_kwargs=kwargs, step_timeout_s=0.3) as vec:
            assert vec.num_envs == 3
            assert all(guard_of(env) is not None for env in vec.envs)
            assert all(s.ok for s in vec.init([user("go")] * 3))
            outputs = vec.step(["a", "raise", "sleep:5"])
            assert contents(outputs)[0] == "r0 echo: a"
            # the guard turns the exception into an error end; the vector's deadline ends the hung step
            assert (
                outputs[1]["metadata"]["end"] == "error"
                and "asked to raise" in outputs[1]["metadata"]["error"]
            )
            assert outputs[2]["metadata"] == {"end": "error", "error": "step timed out after 0.3 s"}
            assert vec.dones == [False, True, True]
            starts = vec.reset(seeds=1, mask=[True, True, False])
            assert [s.observations for s in starts[:2]] == [user("task 1"), user("task 2")]


def test_make_vec_isolates_exceptions_the_guard_lets_through(registered):
    with make_vec(registered[0], 2, make_kwargs={"errors": "raise"}) as vec:
        vec.init([user("go")] * 2)
        outputs = vec.step(["raise", "b"])
        assert outputs[0]["metadata"]["error"] == "step failed: ValueError: asked to raise on 'raise'"
        assert contents(outputs)[1] == " echo: b"


def test_make_vec_rejects_bad_arguments(registered):
    with pytest.raises(UnknownEnvironmentError, match="vector_test_callable"):
        make_vec("vector_test_calable", 2)
    with pytest.raises(ValueError, match="make_kwargs has 1 entries"):
        make_vec(registered[0], 2, make_kwargs=[{}])
    with pytest.raises(ValueError, match="num_envs"):
        make_vec(registered[0], 0)


# -- asyncio ----------------------------------------------------------------------------------------------
def test_async_vector_env_isolates_failures_without_blocking_the_loop(registered):
    async def main():
        vec = make_vec(registered[0], 4, asynchronous=True, step_timeout_s=0.3, init_timeout_s=0.3)
        assert isinstance(vec, AsyncVectorEnv)
        async with vec:
            starts = await vec.ainit([user("go"), user("go"), user("go"), user("hang:async_init")])
            assert [s.ok for s in starts] == [True, True, True, False]
            assert starts[3].error == "init timed out after 0.3 s"
            release("async_init")

            async def ticker():
                # the first step is released by the event loop: it returns only if the loop keeps running
                await asyncio.sleep(0)
                release("loop")

            ticking = asyncio.create_task(ticker())
            outputs = await vec.astep(["hang:loop", "raise", "hang:async_step", "x"])
            await ticking
            assert hanging("async_step")
            release("async_step")
            assert contents(outputs)[0] == " echo: hang:loop"
            assert outputs[1]["metadata"]["end"] == "error"
            assert outputs[2]["metadata"]["error"] == "step timed out after 0.3 s"
            assert outputs[3] is None
            starts = await vec.areset(seeds=0, mask=[True, False, False, False])
            assert starts[0].observations == user("task 0") and starts[1:] == [None] * 3
        assert vec.closed
        await vec.aclose()

    asyncio.run(main())


def test_async_steps_run_concurrently():
    async def main():
        async with AsyncVectorEnv([ScriptedEnv() for _ in range(8)]) as vec:
            await vec.ainit([user("go")] * 8)
            return await vec.astep(["meet:async_steps:8"] * 8)  # all in flight at once, or the barrier breaks

    outputs = asyncio.run(main())
    assert all(out["done"] is False and not out["metadata"] for out in outputs), outputs


def test_cancelling_astep_gives_up_on_its_calls():
    async def main():
        vec = AsyncVectorEnv([ScriptedEnv(), ScriptedEnv()])
        await vec.ainit([user("go")] * 2)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(vec.astep(["sleep:5", "sleep:0.05"]), 0.2)
        assert vec.dones == [True, True]
        starts = await vec.ainit([user("again")] * 2)
        assert not starts[0].ok and "still running" in starts[0].error
        assert starts[1].ok
        await vec.aclose()

    asyncio.run(main())


def test_single_env_astep_and_ainit_return_errors_instead_of_raising():
    async def main():
        env = ScriptedEnv(extras={"name": "s"})
        start = await ainit(env, user("go"), timeout_s=1.0)
        assert start.ok and start.info == {"name": "s"}
        assert (await ainit(ScriptedEnv(), user("raise"))).error.startswith("init failed: ValueError")
        assert (await astep(env, "a"))["observations"] == user("s echo: a")
        assert (await astep(env, "raise"))["metadata"]["error"].startswith("step failed: ValueError")
        timed_out, quick = await asyncio.gather(
            astep(env, "hang:single", timeout_s=0.2), astep(ScriptedEnv(), "b")
        )
        assert hanging("single")  # both answers came while the hung step still runs
        release("single")
        assert timed_out == error_output("step timed out after 0.2 s")
        assert quick["observations"] == user(" echo: b")

    asyncio.run(main())


def test_an_environment_made_after_its_factory_timed_out_is_closed():
    import threading as _threading

    from skyrl_gym.vector import VectorEnv

    closed = _threading.Event()

    class Late(BaseTextEnv):
        def close(self):
            closed.set()

    def slow_factory():
        time.sleep(0.5)
        return Late()

    with pytest.raises(skyrl_gym.Error, match="timed out"):
        VectorEnv([slow_factory], init_timeout_s=0.1)
    assert closed.wait(3.0)
