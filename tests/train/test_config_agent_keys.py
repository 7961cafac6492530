"""The dispatcher's and the agent's sections (``type`` and the part's own settings): validated at load time against
the settings class the part declares, read by AgentRunner.from_config."""

from __future__ import annotations

import warnings

import pytest
from pydantic import Field

from skyrl_gym.tools.react import ReActConfig
from skyrl_train.config import Config, ConfigError, PartSettings, load_config
from skyrl_train.rollout import AGENTS, AgentRunner, Trajectory
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
        ConfigError, match=r"unknown agent tool 'bahs' \(generator.agent.tools\); did you mean 'bash'"
    ):
        load_config(None, ["generator.agent=react", "generator.agent.tools=[bahs,finish]"])


def test_an_unknown_part_is_refused_with_a_did_you_mean():
    with pytest.raises(ConfigError, match=r"unknown dispatcher 'fixd_pool' .*did you mean 'fixed_pool'"):
        load_config(None, ["generator.dispatcher=fixd_pool"])
    with pytest.raises(ConfigError, match=r"unknown agent 'reac' .*did you mean 'react'"):
        Config.from_dict({"generator": {"agent": {"type": "reac", "tools": ["bash"]}}})


@pytest.mark.parametrize(
    ("override", "part"),
    [
        ("generator.dispatcher.num_workers=2", "generator.dispatcher=fixed_pool"),
        ("generator.dispatcher.max_ahead=2", "generator.dispatcher=async_pipeline"),
        ("generator.dispatcher.max_eval_parallel_agents=2", "generator.dispatcher=async_pipeline"),
        ("generator.agent.max_repeats=2", "generator.agent=react"),
    ],
)
def test_a_setting_the_chosen_part_does_not_take_is_refused(override, part):
    key = override.split("=")[0]
    default = "dispatcher 'async_batch'" if "dispatcher" in key else "agent 'multi_turn'"
    with pytest.raises(ConfigError, match=rf"{key} is not a setting of {default} \(its settings: none\)"):
        load_config(None, [override])
    load_config(None, [override, part])  # with its part it loads, whichever comes first
    load_config(None, [part, override])
    other = (
        "generator.dispatcher=fixed_pool"
        if "async_pipeline" in part
        else "generator.dispatcher=async_pipeline"
    )
    if "dispatcher" in key:
        with pytest.raises(ConfigError, match=rf"{key} is not a setting of dispatcher"):
            load_config(None, [override, other])


def test_bad_values_are_refused():
    for override in (
        ["generator.stage_timeouts.initialize=0"],
        ["generator.dispatcher=fixed_pool", "generator.dispatcher.num_workers=0"],
        ["generator.agent=react", "generator.agent.max_tool_output_chars=10"],
        ["generator.dispatcher=async_pipeline", "generator.dispatcher.headroom=-1"],
    ):
        with pytest.raises(ConfigError, match=override[-1].split("=")[0]):
            load_config(None, override)
    with pytest.raises(ConfigError, match="generator.dispatcher: must be a name or a mapping with type"):
        Config.from_dict({"generator": {"dispatcher": 3}})


def test_a_part_section_round_trips_and_a_name_stands_for_its_type():
    config = load_config(None, ["generator.dispatcher=async_pipeline", "generator.dispatcher.max_ahead=4"])
    assert config.to_dict()["generator"]["dispatcher"] == {
        "type": "async_pipeline", "initialize_concurrency": None, "evaluate_concurrency": None,
        "max_ahead": 4, "max_behind": None, "headroom": 1.5,
    }  # fmt: skip
    assert Config.from_dict(config.to_dict()) == config
    assert (
        Config().generator.dispatcher.type == "async_batch" and Config().generator.agent.type == "multi_turn"
    )
    assert (
        Config.from_dict({"generator": {"agent": "react"}}).generator.agent
        == Config.from_dict({"generator": {"agent": {"type": "react"}}}).generator.agent
    )


def test_the_former_sections_are_read_into_the_part_for_one_release():
    with pytest.warns(DeprecationWarning, match="generator.fixed_pool is deprecated"):
        config = Config.from_dict(
            {"generator": {"dispatcher": "fixed_pool", "fixed_pool": {"num_workers": 3}}}
        )
    assert config.generator.dispatcher.num_workers == 3
    with pytest.warns(DeprecationWarning, match="generator.react is deprecated"):
        config = load_config(None, ["generator.agent=react", "generator.react.max_repeats=2"])
    assert config.generator.agent.max_repeats == 2
    saved = Config().to_dict()  # a run folder's config.yaml of the former release had every section in full
    saved["generator"].update(
        dispatcher="async_batch",
        fixed_pool={"num_workers": None, "reuse_envs": True},
        async_pipeline={"initialize_concurrency": None, "evaluate_concurrency": None, "max_ahead": None,
                        "max_behind": None, "headroom": 1.5},
        react={"tools": None, "max_turns": None, "max_repeats": 3, "max_tool_timeouts": 3, "tool_timeout_s": 30.0,
               "max_context": 200000, "max_calls_per_turn": 4, "max_tool_output_chars": 10000},
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # nothing of them is read: no warning
        assert Config.from_dict(saved) == Config()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ConfigError, match="num_workers is not a setting of dispatcher 'async_pipeline'"):
            load_config(None, ["generator.dispatcher=async_pipeline", "generator.fixed_pool.num_workers=2"])


def test_from_config_sizes_each_dispatcher_and_gives_the_stage_deadlines(runner):
    batch = runner(
        "generator.max_concurrent_trajectories=5", "generator.stage_timeouts.generate=7"
    ).dispatcher
    assert type(batch) is AsyncBatchDispatcher and batch.max_concurrency == 5
    assert (batch.timeouts.initialize, batch.timeouts.generate, batch.timeouts.release) == (None, 7.0, 120.0)

    pool = runner("generator.dispatcher=fixed_pool", "generator.dispatcher.num_workers=3").dispatcher
    assert type(pool) is FixedPoolDispatcher and pool.max_concurrency == 3
    pool = runner("generator.dispatcher=fixed_pool", "generator.max_concurrent_trajectories=4").dispatcher
    assert pool.max_concurrency == 4  # num_workers null: the trajectories in flight

    pipeline = runner(
        "generator.dispatcher=async_pipeline",
        "generator.max_concurrent_trajectories=8",
        "generator.dispatcher.initialize_concurrency=2",
        "generator.dispatcher.max_eval_parallel_agents=3",  # SkyRL-Agent's name
        "generator.dispatcher.max_ahead=4",
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
        "generator.agent.tools=[bash,finish]",
        "generator.agent.max_repeats=2",
        "generator.agent.max_context=5000",
    )
    job = react.trajectory({"prompt": "q", "env_class": "x"}, None)
    assert job.react_config == ReActConfig(
        tools=("bash", "finish"), max_turns=6, max_repeats=2, max_context=5000
    )
    assert runner().agent_kwargs == {}  # multi_turn takes none


def test_a_registered_dispatcher_takes_the_settings_of_the_built_in_it_builds_on(runner):
    """A dispatcher's settings are the class it declares (``settings``, inherited from the built-in it
    extends); a plain factory declares none, so a setting given for it is refused."""
    from skyrl_train.rollout.dispatch import DISPATCHERS

    class MyPool(FixedPoolDispatcher):
        """The fixed pool with a name of its own."""

    DISPATCHERS.register("agent_keys_pool", MyPool)
    DISPATCHERS.register("agent_keys_factory", lambda **kwargs: AsyncBatchDispatcher(**kwargs))
    try:
        pool = runner("generator.dispatcher=agent_keys_pool", "generator.dispatcher.num_workers=3").dispatcher
        assert type(pool) is MyPool and pool.max_concurrency == 3
        with pytest.raises(
            ConfigError,
            match="generator.dispatcher.num_workers is not a setting of dispatcher 'agent_keys_factory'",
        ):
            load_config(
                None, ["generator.dispatcher=agent_keys_factory", "generator.dispatcher.num_workers=3"]
            )
        assert type(runner("generator.dispatcher=agent_keys_factory").dispatcher) is AsyncBatchDispatcher
    finally:
        DISPATCHERS.unregister("agent_keys_pool")
        DISPATCHERS.unregister("agent_keys_factory")


def test_a_registered_agent_declares_its_own_settings_and_gets_them_as_arguments(runner):
    class CountingSettings(PartSettings):
        """Settings of the agent below."""

        budget: int = Field(2, ge=1)
        """A number the agent keeps."""

    class CountingTrajectory(Trajectory):
        """The multi-turn agent with a setting of its own."""

        settings = CountingSettings

        def __init__(self, *args, budget: int, **kwargs):
            super().__init__(*args, **kwargs)
            self.budget = budget

    AGENTS.register("agent_keys_counting", CountingTrajectory)
    try:
        built = runner("generator.agent=agent_keys_counting", "generator.agent.budget=5")
        assert built.agent_kwargs == {"budget": 5}
        assert built.trajectory({"prompt": "q", "env_class": "x"}, None).budget == 5
        with pytest.raises(
            ConfigError, match="generator.agent.budget: Input should be greater than or equal to 1"
        ):
            load_config(None, ["generator.agent=agent_keys_counting", "generator.agent.budget=0"])
    finally:
        AGENTS.unregister("agent_keys_counting")


def test_the_settings_classes_keep_their_former_names_for_one_release():
    from skyrl_train.config import schema
    from skyrl_train.rollout.dispatch import AsyncPipelineSettings, FixedPoolSettings
    from skyrl_train.rollout.react import ReActSettings

    for old, new in (
        ("FixedPoolConfig", FixedPoolSettings),
        ("AsyncPipelineConfig", AsyncPipelineSettings),
        ("ReActSettings", ReActSettings),
    ):
        with pytest.warns(DeprecationWarning, match=f"schema.{old} is deprecated"):
            assert getattr(schema, old) is new
    with pytest.raises(AttributeError):
        schema.NoSuchSettings  # noqa: B018
