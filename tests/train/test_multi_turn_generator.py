"""The multi-turn generator and the async_batch dispatcher, driven by a scripted engine.

The tokenizer is the embedded SmolLM2 one (ChatML); the environments are the real ``math_multi_turn`` and a
small tool-style environment defined here. The central check is the token-in/token-out invariant: the
decoded token ids equal the chat template's rendering of the visible conversation, and the loss mask covers
exactly the tokens the engine produced.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from typing import Any

import pytest

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.math.tasks import build_rows
from skyrl_train.inference.scripted import SamplingParams, ScriptedEngine
from skyrl_train.rollout import (
    ChatTemplate,
    MultiTurnGenerator,
    TrajectoryResult,
    sample_seed,
    stop_strings_for,
)
from skyrl_train.rollout.dispatch import AsyncBatchDispatcher, JobFailure, make_dispatcher

from .tiny_models import tiny_llama

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def template(tokenizer):
    return ChatTemplate(tokenizer)


# -- a tool-style environment with its own stop strings --------------------------------------------------


STEP_BARRIER = threading.Barrier(2, timeout=60)
"""Steps of rows with ``step_barrier`` pass in pairs: a step alone on its thread waits for a second one."""


class ToolEnv(BaseTextEnv):
    """``<call>x</call>`` gets ``<result>x!</result>`` (reward 0.1), ``<answer>...</answer>`` ends (1.0).

    Extras: ``max_turns``, ``raise_on_step`` / ``raise_on_init`` (turn them into errors), ``step_sleep_s``
    (a blocking sleep in ``step``), ``observation`` (a fixed observation text).
    """

    stop_strings = ["</call>", "</answer>"]

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.max_turns = int(self.extras.get("max_turns", 5))
        self.calls = 0

    def init(self, prompt):
        if self.extras.get("raise_on_init"):
            raise RuntimeError("database unavailable")
        return prompt, {}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        if self.extras.get("step_barrier"):
            # a blocking step that returns only once another trajectory's step is running too
            STEP_BARRIER.wait()
        if self.extras.get("step_sleep_s"):
            time.sleep(self.extras["step_sleep_s"])
        if self.extras.get("raise_on_step"):
            raise RuntimeError("the sandbox crashed")
        if "</answer>" in action:
            return BaseTextEnvStepOutput(observations=[], reward=1.0, done=True, metadata={})
        match = re.search(r"<call>(.*?)</call>", action, re.S)
        self.calls += 1
        text = self.extras.get("observation") or (
            f"<result>{match.group(1)}!</result>" if match else "<error>no call</error>"
        )
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": text}], reward=0.1, done=False, metadata={}
        )

    def get_metrics(self) -> dict[str, Any]:
        return {"calls": self.calls}

    @staticmethod
    def aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, Any]:
        return {"calls_total": sum(m["calls"] for m in metrics)}


@pytest.fixture(scope="module", autouse=True)
def tool_env():
    skyrl_gym.register("gen_test_tool", entry_point=ToolEnv)
    yield "gen_test_tool"
    skyrl_gym.deregister("gen_test_tool")


def tool_row(**extras: Any) -> dict[str, Any]:
    return {
        "prompt": [{"role": "user", "content": "Look up x, then answer."}],
        "env_class": "gen_test_tool",
        **extras,
    }


def tool_script(text: str) -> str:
    """First turn: a call with junk after the stop string; later: an answer."""
    if "<result>" not in text:
        return "I will look it up. <call>x</call> and this part is never generated"
    return "<answer>x!</answer>"


# -- helpers -----------------------------------------------------------------------------------------------


def math_rows(n: int, max_turns: int = 3) -> list[dict[str, Any]]:
    return build_rows(n, seed=7, env_class="math_multi_turn", max_turns=max_turns)


def math_script(rows: list[dict[str, Any]], wrong_turns: int = 1):
    """Answer wrong ``wrong_turns`` times (the first with no answer at all), then right."""
    answers = {row["prompt"][-1]["content"]: row["reward_spec"]["ground_truth"] for row in rows}

    def script(text: str) -> str:
        question = next(q for q in answers if q in text)
        turn = text.count("<|im_start|>assistant") - 1
        if turn < wrong_turns:
            return "Let me think.\nIt is about a dozen." if turn == 0 else "Wait.\n#### 1"
        return f"Step by step, the result is {answers[question]}.\n#### {answers[question]}"

    return script


def params(**kwargs: Any) -> SamplingParams:
    kwargs.setdefault("max_tokens", 64)
    return SamplingParams(**kwargs)


def run(coro):
    return asyncio.run(coro)


def assert_token_invariant(
    trajectory: TrajectoryResult, engine: ScriptedEngine, template: ChatTemplate
) -> None:
    """Decoded ids == rendered conversation; loss mask == exactly the engine's tokens; logprobs aligned."""
    decoded = template.decode(trajectory.prompt_ids + trajectory.response_ids)
    assert decoded == template.render(trajectory.messages, add_generation_prompt=False)
    assert len(trajectory.loss_mask) == len(trajectory.response_ids) == len(trajectory.logprobs)
    spans = {i for start, end in trajectory.turn_spans for i in range(start, end)}
    assert {i for i, m in enumerate(trajectory.loss_mask) if m} == spans
    assistant = [m["content"] for m in trajectory.messages if m["role"] == "assistant"]
    assert len(assistant) == len(trajectory.turn_spans) == trajectory.num_turns
    for (start, end), content in zip(trajectory.turn_spans, assistant, strict=True):
        # the history before each turn is exactly what the engine was given: never re-tokenised
        output = engine.output_for(trajectory.prompt_ids + trajectory.response_ids[:start])
        assert trajectory.response_ids[start:end] == output.token_ids
        assert template.decode(output.token_ids).removesuffix("<|im_end|>") == content
        assert trajectory.logprobs[start:end] == [-0.5] * (end - start)
    assert all(trajectory.logprobs[i] == 0.0 for i, m in enumerate(trajectory.loss_mask) if not m)


# -- token in, token out ---------------------------------------------------------------------------------


def test_math_multi_turn_token_invariant_and_turn_rewards(tokenizer, template):
    rows = math_rows(3)
    engine = ScriptedEngine(tokenizer, math_script(rows, wrong_turns=2))
    generator = MultiTurnGenerator(engine)
    output = run(generator.generate(rows, 1, params()))

    assert len(output.trajectories) == 3
    for trajectory in output.trajectories:
        assert trajectory.end == "terminated", trajectory.error
        assert trajectory.num_turns == 3
        assert trajectory.turn_rewards == [0.0, 0.0, 1.0]
        assert trajectory.reward == 1.0
        assert trajectory.stop_reason == "stop"
        assert_token_invariant(trajectory, engine, template)
        # the environment's feedback is in the conversation, as user turns, not trained on
        feedback = [m["content"] for m in trajectory.messages[2:] if m["role"] == "user"]
        assert "could not find a final answer" in feedback[0] and "incorrect" in feedback[1]
        # the model's own <|im_end|> is trainable; the template's "\n" after it is not
        im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        for _, end in trajectory.turn_spans:
            assert trajectory.response_ids[end - 1] == im_end and trajectory.loss_mask[end - 1] == 1
            assert tokenizer.decode(trajectory.response_ids[end : end + 1]) == "\n"
            assert trajectory.loss_mask[end] == 0
        assert trajectory.env_metrics["solved"] is True
    metrics = output.metrics
    assert metrics["generate/reward_mean"] == 1.0 and metrics["generate/pass_rate"] == 1.0
    assert metrics["generate/num_turns_mean"] == 3.0
    assert metrics["generate/end/terminated"] == 3.0 and metrics["generate/error_count"] == 0.0
    assert metrics["environment/math_multi_turn/solved"] == 1.0
    assert metrics["environment/math_multi_turn/turns"] == 3.0
    assert metrics["generate/model_tokens_mean"] > 0 and metrics["generate/wall_s"] > 0


def test_environment_truncation_and_generator_max_turns(tokenizer, template):
    rows = math_rows(2, max_turns=2)
    engine = ScriptedEngine(tokenizer, math_script(rows, wrong_turns=5))
    output = run(MultiTurnGenerator(engine).generate(rows, 1, params()))
    for trajectory in output.trajectories:
        assert (trajectory.end, trajectory.truncated_by) == ("truncated", "max_turns")
        assert trajectory.turn_rewards == [0.0, 0.0] and trajectory.reward == 0.0
        assert_token_invariant(trajectory, engine, template)
    assert output.metrics["generate/pass_rate"] == 0.0
    assert output.metrics["generate/end/truncated"] == 2.0

    rows = math_rows(2, max_turns=5)
    engine = ScriptedEngine(tokenizer, math_script(rows, wrong_turns=5))
    output = run(MultiTurnGenerator(engine, max_turns=1).generate(rows, 1, params()))
    for trajectory in output.trajectories:
        assert (trajectory.end, trajectory.truncated_by) == ("truncated", "generator.max_turns")
        assert trajectory.num_turns == 1
        assert_token_invariant(trajectory, engine, template)


# -- stop strings --------------------------------------------------------------------------------------


def test_stop_strings_come_from_the_environment(tokenizer, template):
    engine = ScriptedEngine(tokenizer, tool_script)
    generator = MultiTurnGenerator(engine, stop=["<|stop-extra|>"])
    (trajectory,) = run(generator.generate([tool_row()], 1, params())).trajectories

    assert trajectory.end == "terminated" and trajectory.turn_rewards == [0.1, 1.0]
    first, second = engine.calls
    assert first.params.stop == ["</call>", "</answer>", "<|stop-extra|>"]
    assert (first.output.stop_reason, first.output.stop_string) == ("stop", "</call>")
    assistant = [m["content"] for m in trajectory.messages if m["role"] == "assistant"]
    assert assistant == ["I will look it up. <call>x</call>", "<answer>x!</answer>"]
    assert trajectory.messages[2] == {"role": "user", "content": "<result>x!</result>"}
    # no EOS was generated: the template's whole "<|im_end|>\n" follows the turn, untrained
    start, end = trajectory.turn_spans[0]
    assert template.decode(trajectory.response_ids[end : end + 2]) == "<|im_end|>\n"
    assert trajectory.loss_mask[end : end + 2] == [0, 0]
    assert_token_invariant(trajectory, engine, template)
    assert (
        run(generator.generate([tool_row()], 1, params())).metrics["environment/gen_test_tool/calls_total"]
        == 1.0
    )


def test_stop_strings_are_the_environments_then_the_configs():
    class Plain:
        pass

    assert stop_strings_for(Plain()) == []
    assert stop_strings_for(Plain(), ["</answer>", "\n\n"]) == ["</answer>", "\n\n"]
    tool = ToolEnv()
    assert stop_strings_for(tool, ["</call>"]) == ["</call>", "</answer>"]
    # the built-in protocols declare theirs on the environment class
    for env_id, stops in (
        ("text2sql", ("</sql>", "</solution>")),
        ("search", ("</search>", "</answer>")),
        ("searchcode", ("</tool>", "</solution>")),
        ("python", ("</python>", "```output")),
        ("math", ()),
    ):
        assert skyrl_gym.spec(env_id).load_creator().stop_strings == stops, env_id


def test_turn_cut_by_max_tokens_still_reaches_the_environment(tokenizer, template):
    engine = ScriptedEngine(tokenizer, lambda text: "word " * 50)
    rows = math_rows(1, max_turns=2)
    (trajectory,) = run(MultiTurnGenerator(engine).generate(rows, 1, params(max_tokens=8))).trajectories
    assert trajectory.end == "truncated" and trajectory.num_turns == 2
    assert [end - start for start, end in trajectory.turn_spans] == [8, 8]
    assert trajectory.stop_reason == "length"
    assert_token_invariant(trajectory, engine, template)


# -- samples, groups and seeds ---------------------------------------------------------------------------


def test_n_samples_are_grouped_with_per_sample_seeds(tokenizer):
    rows = math_rows(3)
    engine = ScriptedEngine(tokenizer, math_script(rows, wrong_turns=1))
    generator = MultiTurnGenerator(engine)
    output = run(generator.generate(rows, 4, params(seed=123), group_offset=10))

    keys = [(t.group_id, t.sample_index) for t in output.trajectories]
    assert keys == [(g, k) for g in (10, 11, 12) for k in range(4)]
    groups = output.groups()
    assert sorted(groups) == [10, 11, 12] and all(len(g) == 4 for g in groups.values())
    for trajectory in output.trajectories:
        assert trajectory.prompt_ids == groups[trajectory.group_id][0].prompt_ids
    seeds = sorted(call.params.seed for call in engine.calls)
    assert len(seeds) == 12 * 2 == len(set(seeds))
    expected = sorted(sample_seed(123, g, k, turn) for g in (10, 11, 12) for k in range(4) for turn in (0, 1))
    assert seeds == expected
    assert output.metrics["generate/pass_at_n"] == 1.0

    engine = ScriptedEngine(tokenizer, math_script(rows, wrong_turns=1))
    run(MultiTurnGenerator(engine).generate(rows, 2, params()))
    assert {call.params.seed for call in engine.calls} == {None}


# -- errors -----------------------------------------------------------------------------------------------


def test_failures_end_their_trajectory_in_error_and_the_batch_goes_on(tokenizer, template):
    def script(text: str) -> str:
        if "engine trouble" in text:
            raise RuntimeError("CUDA out of memory")
        return tool_script(text)

    rows = [
        tool_row(),
        tool_row(raise_on_step=True),
        tool_row(raise_on_init=True),
        {"prompt": "engine trouble", "env_class": "gen_test_tool"},
        {"prompt": "hi", "env_class": "no_such_env"},
    ]
    engine = ScriptedEngine(tokenizer, script)
    output = run(MultiTurnGenerator(engine).generate(rows, 1, params()))
    ok, step_error, init_error, engine_error, make_error = output.trajectories

    assert ok.end == "terminated" and not ok.is_error
    assert step_error.is_error and "the sandbox crashed" in step_error.error
    assert step_error.num_turns == 1  # the model's turn is kept, flagged
    assert_token_invariant(step_error, engine, template)
    assert init_error.is_error and "database unavailable" in init_error.error
    assert engine_error.is_error and "CUDA out of memory" in engine_error.error
    assert make_error.is_error and "no_such_env" in make_error.error

    metrics = output.metrics
    assert metrics["generate/error_count"] == 4.0 and metrics["generate/end/error"] == 4.0
    assert metrics["generate/num_trajectories"] == 5.0
    # errors are not scored as 0: the mean is over the one trajectory that played out
    assert metrics["generate/reward_mean"] == pytest.approx(1.1)
    assert metrics["generate/pass_rate"] == 1.0


def test_an_environment_step_past_its_deadline_is_an_error(tokenizer):
    engine = ScriptedEngine(tokenizer, tool_script)
    generator = MultiTurnGenerator(engine, env_timeout_s=0.05)
    rows = [tool_row(step_sleep_s=0.3), tool_row()]
    slow, fast = run(generator.generate(rows, 1, params())).trajectories
    assert slow.is_error and "timed out" in slow.error
    assert fast.end == "terminated"


class HangingEnv(ToolEnv):
    """Hangs in the call named by ``extras["hang_in"]`` (make, init, step, get_metrics or close) until
    ``abandon()`` releases it (or forever, with ``extras["ignore_abandon"]``)."""

    released = threading.Event()  # set at the end of the test, for the calls that ignore abandon()
    abandoned: list[str] = []

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.hang_in = self.extras.get("hang_in")
        self.stop = threading.Event()
        if self.hang_in == "make":
            self._hang()

    def _hang(self) -> None:
        event = HangingEnv.released if self.extras.get("ignore_abandon") else self.stop
        while not event.wait(0.01) and not HangingEnv.released.is_set():
            pass

    def abandon(self) -> None:
        HangingEnv.abandoned.append(self.hang_in)
        self.stop.set()

    def init(self, prompt):
        if self.hang_in == "init":
            self._hang()
        return prompt, {}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        if self.hang_in == "step":
            self._hang()
        return super().step(action)

    def get_metrics(self) -> dict[str, Any]:
        if self.hang_in == "get_metrics":
            self._hang()
        return super().get_metrics()

    def close(self) -> None:
        if self.hang_in == "close":
            self._hang()


def test_an_environment_hung_in_any_call_ends_its_trajectory_and_the_batch_completes(tokenizer):
    skyrl_gym.register("gen_test_hanging", entry_point=HangingEnv)
    HangingEnv.abandoned.clear()
    HangingEnv.released.clear()
    try:
        rows = [
            {**tool_row(hang_in=where, ignore_abandon=ignore), "env_class": "gen_test_hanging"}
            for where in ("make", "init", "step", "get_metrics", "close")
            for ignore in (False, True)
        ]
        rows.append({**tool_row(), "env_class": "gen_test_hanging"})
        generator = MultiTurnGenerator(
            ScriptedEngine(tokenizer, tool_script), env_timeout_s=0.3, env_close_timeout_s=0.3
        )
        output = run(generator.generate(rows, 1, params()))
        *hung, fine = output.trajectories
        assert fine.end == "terminated" and fine.reward == pytest.approx(1.1)
        for row, trajectory in zip(rows, hung, strict=False):
            where = row["hang_in"]
            assert trajectory.is_error, where
            expected = "did not return" if where in ("make", "get_metrics") else "timed out"
            assert expected in trajectory.error, (where, trajectory.error)
        # every hung call but make (no environment to call yet) was abandoned, and abandon() was called for it
        assert sorted(HangingEnv.abandoned) == sorted(["init", "step", "close"] * 2)
    finally:
        HangingEnv.released.set()
        skyrl_gym.deregister("gen_test_hanging")


def test_env_deadlines_come_from_the_generator_config(tokenizer):
    from skyrl_train.config import load_config

    config = load_config(overrides=["generator.env_timeout_s=12.5", "generator.env_close_timeout_s=3"])
    generator = MultiTurnGenerator.from_config(ScriptedEngine(tokenizer, tool_script), config)
    assert (generator.env_timeout_s, generator.env_close_timeout_s) == (12.5, 3.0)
    with pytest.raises(ValueError, match="generator.env_close_timeout_s"):
        load_config(overrides=["generator.env_close_timeout_s=0"])


# -- context exhaustion -----------------------------------------------------------------------------------


def test_context_exhausted_when_the_next_observation_does_not_fit(tokenizer, template):
    row = tool_row(observation="data " * 200)
    engine = ScriptedEngine(tokenizer, lambda text: "<call>x</call>")
    prompt_length = len(template.prompt_ids(row["prompt"]))

    generator = MultiTurnGenerator(engine, max_input_length=prompt_length + 150)
    (trajectory,) = run(generator.generate([row], 1, params())).trajectories
    assert (trajectory.end, trajectory.truncated_by) == ("context_exhausted", "max_input_length")
    assert trajectory.num_turns == 1 and trajectory.turn_rewards == [0.1]
    assert trajectory.messages[-1]["role"] == "assistant"  # the observation that did not fit is left out
    assert_token_invariant(trajectory, engine, template)

    generator = MultiTurnGenerator(engine, max_tokens_per_trajectory=60)
    row = tool_row(observation="short", max_turns=50)
    (trajectory,) = run(generator.generate([row], 1, params())).trajectories
    assert (trajectory.end, trajectory.truncated_by) == ("context_exhausted", "max_tokens_per_trajectory")
    assert 1 < trajectory.num_turns < 50 and trajectory.num_model_tokens <= 60
    assert max(call.params.max_tokens for call in engine.calls) <= 64
    assert_token_invariant(trajectory, engine, template)

    generator = MultiTurnGenerator(engine, max_input_length=prompt_length - 1)
    (trajectory,) = run(generator.generate([row], 1, params())).trajectories
    assert trajectory.is_error and "max_input_length" in trajectory.error


def test_the_last_turn_gets_what_is_left_of_the_trajectory_budget(tokenizer, template):
    engine = ScriptedEngine(tokenizer, lambda text: "<call>" + "y" * 400 + "</call>")
    generator = MultiTurnGenerator(engine, max_tokens_per_trajectory=100)
    (trajectory,) = run(generator.generate([tool_row(observation="ok")], 1, params())).trajectories
    assert [call.params.max_tokens for call in engine.calls] == [64, 36]
    assert trajectory.end == "context_exhausted" and trajectory.num_model_tokens == 100
    assert [call.output.stop_reason for call in engine.calls] == ["length", "length"]
    assert_token_invariant(trajectory, engine, template)


# -- concurrency --------------------------------------------------------------------------------------------


def test_trajectories_overlap_and_the_limit_holds(tokenizer):
    rows = math_rows(12)
    engine = ScriptedEngine(tokenizer, math_script(rows, wrong_turns=1), delay_s=0.2)
    output = run(MultiTurnGenerator(engine, max_concurrent_trajectories=None).generate(rows, 1, params()))
    assert all(t.end == "terminated" for t in output.trajectories)
    assert engine.max_in_flight >= 8  # engine calls of different trajectories were awaited at once
    assert output.metrics["generate/max_concurrent"] == 12.0

    engine = ScriptedEngine(tokenizer, math_script(rows, wrong_turns=1), delay_s=0.01)
    output = run(MultiTurnGenerator(engine, max_concurrent_trajectories=3).generate(rows, 1, params()))
    assert engine.max_in_flight <= 3 and output.metrics["generate/max_concurrent"] == 3.0


def test_blocking_environment_steps_do_not_block_the_event_loop(tokenizer):
    # Each step blocks until a second step runs at the same time: steps run one after another on the event
    # loop would never meet, and the barrier would break (a step error) instead of letting them pass.
    STEP_BARRIER.reset()
    rows = [tool_row(step_barrier=True) for _ in range(8)]
    engine = ScriptedEngine(tokenizer, lambda text: "<answer>1</answer>")
    output = run(MultiTurnGenerator(engine).generate(rows, 1, params()))
    assert [t.end for t in output.trajectories] == ["terminated"] * 8, [t.error for t in output.trajectories]
    assert not STEP_BARRIER.broken


# -- the dispatcher ---------------------------------------------------------------------------------------


def test_async_batch_keeps_order_limits_concurrency_and_keeps_going_past_a_failure():
    dispatcher = make_dispatcher("async_batch", max_concurrency=2)
    assert isinstance(dispatcher, AsyncBatchDispatcher)

    def job(i: int, delay: float):
        async def go() -> int:
            await asyncio.sleep(delay)
            return i

        return go

    results = run(dispatcher.run([job(i, 0.02 * (5 - i)) for i in range(5)]))
    assert results == [0, 1, 2, 3, 4]
    assert dispatcher.stats.max_in_flight == 2 and dispatcher.stats.jobs == 5

    async def boom() -> int:
        await asyncio.sleep(0.01)
        raise ValueError("boom")

    # a job's failure is its own result; the jobs around it finish
    results = run(AsyncBatchDispatcher(None).run([job(0, 0.03), boom, job(1, 0.03)]))
    assert results == [0, JobFailure("generate", "generate raised ValueError: boom"), 1]

    with pytest.raises(ValueError, match="unknown dispatcher 'fifo'"):
        make_dispatcher("fifo")
    with pytest.raises(ValueError, match="max_concurrent_trajectories"):
        AsyncBatchDispatcher(0)


def test_from_config_reads_the_generator_and_environment_sections(tokenizer):
    from skyrl_train.config import load_config

    config = load_config(
        None,
        [
            "generator.max_turns=4",
            "generator.max_input_length=2048",
            "generator.max_concurrent_trajectories=8",
            "environment.env_class=gen_test_tool",
            "environment.skyrl_gym={gen_test_tool: {a: 1}}",
        ],
    )
    engine = ScriptedEngine(tokenizer, tool_script)
    generator = MultiTurnGenerator.from_config(engine, config)
    assert (generator.max_turns, generator.max_input_length) == (4, 2048)
    assert generator.dispatcher.max_concurrency == 8 and generator.env_configs == {"gen_test_tool": {"a": 1}}
    # rows without env_class use environment.env_class; sampling_params.stop adds to the environment's
    output = run(generator.generate([{"prompt": "Look it up."}], 1, params(stop=["</x>"])))
    assert output.trajectories[0].env_class == "gen_test_tool"
    assert output.trajectories[0].end == "terminated"
    assert engine.calls[0].params.stop == ["</call>", "</answer>", "</x>"]


# -- chat templates -------------------------------------------------------------------------------------

# ChatML, but earlier assistant turns lose their <think> block once a user message follows (like Qwen3).
FORGETFUL_TEMPLATE = (
    "{% for m in messages %}{% set c = m['content'] %}"
    "{% if m['role'] == 'assistant' and not loop.last %}{% set c = c.split('</think>')[-1] %}{% endif %}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + c + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def test_observation_delta_when_the_template_rewrites_history(tokenizer):
    template = ChatTemplate(tokenizer, {"chat_template": FORGETFUL_TEMPLATE})
    assert template.end_of_turn_text == "<|im_end|>\n"
    history = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "<think>hmm</think><call>x</call>"},
    ]
    observation = [{"role": "user", "content": "<result>x!</result>"}]
    assert not template.render([*history, *observation], False).startswith(template.render(history, False))
    delta = template.observation_delta(history, observation)
    assert delta == "<|im_start|>user\n<result>x!</result><|im_end|>\n<|im_start|>assistant\n"

    # the trajectory keeps the reasoning the model generated: its tokens are never re-rendered
    def script(text: str) -> str:
        return (
            "<think>a</think><answer>1</answer>" if "<result>" in text else "<think>b</think><call>x</call>"
        )

    engine = ScriptedEngine(tokenizer, script, logprob=None)
    generator = MultiTurnGenerator(engine, chat_template_kwargs={"chat_template": FORGETFUL_TEMPLATE})
    (trajectory,) = run(generator.generate([tool_row()], 1, params())).trajectories
    assert trajectory.end == "terminated"
    assert "<think>b</think><call>x</call><|im_end|>\n<|im_start|>user" in template.decode(
        trajectory.input_ids
    )
    assert trajectory.logprobs is None  # the engine gave none: the trainer recomputes them


# -- text2sql ------------------------------------------------------------------------------------------


def test_text2sql_episode_with_protocol_stop_strings(tokenizer, template, tmp_path):
    import sqlite3

    pytest.importorskip("skyrl_gym.envs.sql.env")
    db_path = tmp_path / "shop.sqlite"
    with sqlite3.connect(db_path) as db:
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, amount REAL)")
        db.executemany("INSERT INTO orders (amount) VALUES (?)", [(3.5,), (4.0,), (10.0,)])
    gold = "SELECT count(*) FROM orders"
    row = {
        "prompt": [{"role": "user", "content": "How many orders are there?"}],
        "env_class": "text2sql",
        "reward_spec": {"method": "rule", "ground_truth": gold},
        "db_path": str(db_path),
        "max_turns": 3,
    }

    def script(text: str) -> str:
        if "<observation>" not in text:  # the model runs on past </sql>; the stop string cuts it there
            return f"<think>Count the rows.</think>\n<sql>{gold}</sql>\n<observation>made up</observation>"
        return f"<think>It is 3.</think>\n<solution>{gold}</solution> and more"

    engine = ScriptedEngine(tokenizer, script)
    output = run(MultiTurnGenerator(engine).generate([row], 2, params()))
    for trajectory in output.trajectories:
        assert trajectory.end == "terminated", trajectory.error
        assert trajectory.turn_rewards == [0.0, 1.0]
        assistant = [m["content"] for m in trajectory.messages if m["role"] == "assistant"]
        assert assistant[0].endswith("</sql>") and assistant[1].endswith("</solution>")
        assert "<observation>" in trajectory.messages[2]["content"]
        assert_token_invariant(trajectory, engine, template)
    assert {tuple(call.params.stop) for call in engine.calls} == {("</sql>", "</solution>")}
    assert sorted(call.output.stop_string for call in engine.calls) == ["</solution>"] * 2 + ["</sql>"] * 2
    assert output.metrics["generate/pass_rate"] == 1.0
    assert output.metrics["environment/text2sql/queries"] == 1.0


def test_an_eos_other_than_the_end_of_turn_stays_in_the_text(tokenizer, template):
    endoftext = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    rows = math_rows(1)
    engine = ScriptedEngine(tokenizer, math_script(rows, wrong_turns=0), eos_token_id=endoftext)
    (trajectory,) = run(MultiTurnGenerator(engine).generate(rows, 1, params())).trajectories
    assert trajectory.end == "terminated" and trajectory.reward == 1.0  # "#### N<|endoftext|>" still parses
    start, end = trajectory.turn_spans[0]
    assert trajectory.response_ids[end - 1] == endoftext and trajectory.loss_mask[end - 1] == 1
    assert trajectory.messages[-1]["content"].endswith("<|endoftext|>")
    assert template.decode(trajectory.response_ids[end:]) == "<|im_end|>\n"
    assert template.decode(trajectory.input_ids) == template.render(trajectory.messages, False)


# -- a real engine: a tiny random model through HFEngine --------------------------------------------------


class RecordingEngine:
    """Forwards to an engine and records each prompt's output, so the test can check the loss mask."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.calls: list[Any] = []

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    async def generate(self, prompts, params):
        outputs = await self.engine.generate(prompts, params)
        for prompt, output in zip(prompts, outputs, strict=True):
            self.calls.append(
                type("Call", (), {"prompt_ids": list(prompt), "params": params, "output": output})
            )
        return outputs

    def output_for(self, prompt_ids: list[int], seed: int) -> Any:
        (output,) = [c.output for c in self.calls if c.prompt_ids == prompt_ids and c.params.seed == seed]
        return output


def test_tiny_random_model_through_hf_engine(tokenizer, template):
    torch = pytest.importorskip("torch")
    hf = pytest.importorskip("skyrl_train.inference.hf")
    torch.manual_seed(0)
    model = tiny_llama(
        vocab_size=len(tokenizer),
        max_position_embeddings=2048,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    ).eval()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small only loses from more threads, on a busy machine a lot
    engine = hf.HFEngine(model, tokenizer, max_batch_size=8)
    try:
        recorder = RecordingEngine(engine)
        rows = [tool_row(observation="<result>ok</result>", max_turns=3)] * 2
        output = run(MultiTurnGenerator(recorder).generate(rows, 2, params(max_tokens=12, seed=5)))
    finally:
        engine.close()
        torch.set_num_threads(threads)

    assert [(t.group_id, t.sample_index) for t in output.trajectories] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for trajectory in output.trajectories:
        assert not trajectory.is_error, trajectory.error
        assert trajectory.num_turns == 3 and trajectory.end == "truncated"
        assert trajectory.turn_rewards == [0.1, 0.1, 0.1]
        assert template.decode(trajectory.input_ids) == template.render(trajectory.messages, False)
        for turn, (start, end) in enumerate(trajectory.turn_spans):
            seed = sample_seed(5, trajectory.group_id, trajectory.sample_index, turn)
            out = recorder.output_for(trajectory.prompt_ids + trajectory.response_ids[:start], seed)
            assert trajectory.response_ids[start:end] == out.token_ids
            assert trajectory.logprobs[start:end] == pytest.approx(out.logprobs)
            assert all(lp <= 0.0 for lp in out.logprobs)
        spans = {i for start, end in trajectory.turn_spans for i in range(start, end)}
        assert {i for i, m in enumerate(trajectory.loss_mask) if m} == spans
    # seeded per sample: the two samples of a group differ, a rerun of the same sample does not
    first, second = output.trajectories[:2]
    assert first.response_ids != second.response_ids
