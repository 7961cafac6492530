"""The dispatcher's and the agent's keys: validated at load time, read by AgentRunner.from_config."""

from __future__ import annotations

import pytest

from skyrl_gym.tools.react import ReActConfig
from skyrl_train.config import ConfigError, load_config
from skyrl_train.rollout import AgentRunner
from skyrl_train.rollout.dispatch.async_batch import AsyncBatchDispatcher
from skyrl_train.rollout.dispatch.async_pipeline import AsyncPipelineDispatcher
from skyrl_train.rollout.dispatch.fixed_pool import FixedPoolDispatcher


@pytest.fixture
def runner(tokenizer):
    """Builds a runner from overrides as the trainer does (no engine is called)."""

    def build(*overrides: str) -> AgentRunner:
        return AgentRunner.from_config(load_config(None, list(overrides)), object(), tokenizer)

    return build


def test_an_unknown_tool_name_is_refused_with_a_did_you_mean():
    with pytest.raises(
        ConfigError, match=r"unknown agent tool 'bahs' \(generator.react.tools\); did you mean 'bash'"
    ):
        load_config(None, ["generator.agent=react", "generator.react.tools=[bahs,finish]"])


@pytest.mark.parametrize(
    ("override", "needs"),
    [
        ("generator.fixed_pool.num_workers=2", "generator.dispatcher=fixed_pool"),
        ("generator.async_pipeline.max_ahead=2", "generator.dispatcher=async_pipeline"),
        ("generator.async_pipeline.max_eval_parallel_agents=2", "generator.dispatcher=async_pipeline"),
        ("generator.react.max_repeats=2", "generator.agent=react"),
    ],
)
def test_a_section_of_a_dispatcher_or_agent_that_does_not_run_is_refused(override, needs):
    with pytest.raises(ConfigError, match=rf"is set but .* set {needs}"):
        load_config(None, [override])
    load_config(None, [override, needs])  # with its dispatcher or agent it loads


def test_bad_values_are_refused():
    for override in (
        "generator.stage_timeouts.initialize=0",
        "generator.fixed_pool.num_workers=0",
        "generator.react.max_tool_output_chars=10",
        "generator.async_pipeline.headroom=-1",
    ):
        with pytest.raises(ConfigError, match=override.split("=")[0]):
            load_config(None, [override])


def test_from_config_sizes_each_dispatcher_and_gives_the_stage_deadlines(runner):
    batch = runner(
        "generator.max_concurrent_trajectories=5", "generator.stage_timeouts.generate=7"
    ).dispatcher
    assert type(batch) is AsyncBatchDispatcher and batch.max_concurrency == 5
    assert (batch.timeouts.initialize, batch.timeouts.generate, batch.timeouts.release) == (None, 7.0, 120.0)

    pool = runner("generator.dispatcher=fixed_pool", "generator.fixed_pool.num_workers=3").dispatcher
    assert type(pool) is FixedPoolDispatcher and pool.max_concurrency == 3
    pool = runner("generator.dispatcher=fixed_pool", "generator.max_concurrent_trajectories=4").dispatcher
    assert pool.max_concurrency == 4  # num_workers null: the trajectories in flight

    pipeline = runner(
        "generator.dispatcher=async_pipeline",
        "generator.max_concurrent_trajectories=8",
        "generator.async_pipeline.initialize_concurrency=2",
        "generator.async_pipeline.max_eval_parallel_agents=3",  # SkyRL-Agent's name
        "generator.async_pipeline.max_ahead=4",
        "generator.stage_timeouts.evaluate=9",
    ).dispatcher
    assert type(pipeline) is AsyncPipelineDispatcher
    assert (pipeline.generate_concurrency, pipeline.initialize_concurrency) == (8, 2)
    assert (pipeline.evaluate_concurrency, pipeline.max_ahead, pipeline.max_behind) == (3, 4, 3)
    assert pipeline.adapting == frozenset() and pipeline.timeouts.evaluate == 9.0


def test_from_config_gives_the_react_agent_its_settings(runner):
    react = runner(
        "generator.agent=react",
        "generator.max_turns=6",
        "generator.react.tools=[bash,finish]",
        "generator.react.max_repeats=2",
        "generator.react.max_context=5000",
    )
    job = react.trajectory({"prompt": "q", "env_class": "x"}, None)
    assert job.react_config == ReActConfig(
        tools=("bash", "finish"), max_turns=6, max_repeats=2, max_context=5000
    )
    assert runner().agent_kwargs == {}  # multi_turn takes none


def test_a_registered_dispatcher_takes_the_section_of_the_built_in_it_builds_on(runner):
    """A dispatcher's settings section is the one its class declares (``family``, inherited from the built-in
    it extends); a plain factory has none, so a section set for it is refused."""
    from skyrl_train.rollout.dispatch import DISPATCHERS

    class MyPool(FixedPoolDispatcher):
        """The fixed pool with a name of its own."""

    DISPATCHERS.register("agent_keys_pool", MyPool)
    DISPATCHERS.register("agent_keys_factory", lambda **kwargs: AsyncBatchDispatcher(**kwargs))
    try:
        pool = runner("generator.dispatcher=agent_keys_pool", "generator.fixed_pool.num_workers=3").dispatcher
        assert type(pool) is MyPool and pool.max_concurrency == 3
        with pytest.raises(ConfigError, match="generator.fixed_pool.num_workers is set but"):
            load_config(
                None, ["generator.dispatcher=agent_keys_factory", "generator.fixed_pool.num_workers=3"]
            )
        assert type(runner("generator.dispatcher=agent_keys_factory").dispatcher) is AsyncBatchDispatcher
    finally:
        DISPATCHERS.unregister("agent_keys_pool")
        DISPATCHERS.unregister("agent_keys_factory")
