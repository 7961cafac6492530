"""``AgentRunner``: dataset rows in, trajectories out, through an agent, a dispatcher and an inference engine.

The one rollout path of the trainer, the evaluation command and the warm-up: each (row, sample) becomes a
:class:`~skyrl_train.rollout.trajectory.Trajectory` of the configured agent (``generator.agent``), a staged job
the dispatcher (``generator.dispatcher``) schedules; the results come back ordered by row, then sample.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from skyrl_train.rollout.agents import agent_class
from skyrl_train.rollout.dispatch.async_batch import AsyncBatchDispatcher
from skyrl_train.rollout.dispatch.base import Dispatcher, DispatcherSettings, StageTimeouts
from skyrl_train.rollout.dispatch.fixed_pool import FixedPoolSettings
from skyrl_train.rollout.metrics import rollout_metrics
from skyrl_train.rollout.react import ReActSettings
from skyrl_train.rollout.records import Generator, GeneratorOutput, TrajectoryResult
from skyrl_train.rollout.template import ChatTemplate
from skyrl_train.rollout.trajectory import RolloutContext, Trajectory, split_row

if TYPE_CHECKING:
    from skyrl_train.config.schema import GeneratorConfig

__all__ = ["AgentRunner", "agent_kwargs_from_config", "dispatcher_from_config"]


class AgentRunner(Generator):
    """Plays dataset rows out as multi-turn trajectories in skyrl_gym environments.

    Args:
        engine: an :class:`~skyrl_train.inference.base.InferenceEngine` (``async generate(prompts, params)``).
        tokenizer: the model's tokenizer (default: ``engine.tokenizer``).
        dispatcher: how trajectories run concurrently (default: ``async_batch`` with
            ``max_concurrent_trajectories``).
        env_configs: ``env_config`` per environment id (``environment.skyrl_gym``).
        agent: the agent's name in :data:`~skyrl_train.rollout.agents.AGENTS` (``generator.agent``:
            ``multi_turn``, ``react``...) or a :class:`~skyrl_train.rollout.trajectory.Trajectory` subclass.
        agent_kwargs: extra keyword arguments for the agent's trajectory class (its own settings).
        default_env_class: the environment of rows without ``env_class`` (``environment.env_class``).
        max_turns: most model turns per trajectory (``None``: the environment's own limit decides).
        max_input_length: most tokens fed to the engine (prompt + history); a trajectory that would need
            more ends as ``context_exhausted``.
        max_tokens_per_trajectory: most model-generated tokens over all turns; a turn gets at most what is
            left, and a trajectory with nothing left ends as ``context_exhausted``.
        stop: stop strings added to every environment's own (as are ``sampling_params.stop``).
        max_concurrent_trajectories: the default dispatcher's concurrency limit.
        env_timeout_s: a deadline for each environment ``make``/``init``/``step``/``evaluate`` call (on top of
            the environment's own budget); a call past it is abandoned (``env.abandon()`` stops its work) and
            the trajectory ends in error, without holding up the batch.
        env_close_timeout_s: the same for ``get_metrics`` and ``close`` at the end of a trajectory.
        pass_threshold: a trajectory with ``reward >= pass_threshold`` counts as passed in the metrics.
        chat_template_kwargs: extra arguments for ``apply_chat_template``.
        reuse_envs: under a dispatcher that gives worker slots (``fixed_pool``), an environment that supports
            reuse (:meth:`skyrl_gym.Env.reuse`: the terminal keeps its started container) is kept by the
            worker after a trajectory and takes the worker's next task of the same environment, instead of
            being closed and made again.
    """

    def __init__(
        self,
        engine: Any,
        tokenizer: Any = None,
        *,
        dispatcher: Dispatcher | None = None,
        env_configs: Mapping[str, Any] | None = None,
        agent: str | type[Trajectory] = "multi_turn",
        agent_kwargs: Mapping[str, Any] | None = None,
        default_env_class: str | None = None,
        max_turns: int | None = None,
        max_input_length: int | None = None,
        max_tokens_per_trajectory: int | None = None,
        stop: Sequence[str] | None = None,
        max_concurrent_trajectories: int | None = 64,
        env_timeout_s: float | None = 300.0,
        env_close_timeout_s: float | None = 30.0,
        pass_threshold: float = 1.0,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        reuse_envs: bool = True,
    ):
        for name, value in (
            ("max_turns", max_turns),
            ("max_input_length", max_input_length),
            ("max_tokens_per_trajectory", max_tokens_per_trajectory),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"generator.{name} must be a positive int or None, got {value!r}")
        self.engine = engine
        self.tokenizer = tokenizer if tokenizer is not None else engine.tokenizer
        self.template = ChatTemplate(self.tokenizer, chat_template_kwargs)
        self.env_configs = dict(env_configs or {})
        if isinstance(agent, str):
            self.agent = agent
            self.trajectory_class = agent_class(agent)
        elif isinstance(agent, type) and issubclass(agent, Trajectory):
            self.agent = getattr(agent, "__name__", "custom")
            self.trajectory_class = agent
        else:
            raise TypeError(f"agent must be an agent name or a Trajectory subclass, got {agent!r}")
        self.agent_kwargs = dict(agent_kwargs or {})
        self.default_env_class = default_env_class
        self.max_turns = max_turns
        self.max_input_length = max_input_length
        self.max_tokens_per_trajectory = max_tokens_per_trajectory
        self.stop = list(stop or [])
        # A trajectory bounds every environment call itself; the default dispatcher adds no stage deadline.
        self.dispatcher = dispatcher or AsyncBatchDispatcher(
            max_concurrent_trajectories, timeouts=StageTimeouts(release=None)
        )
        self.env_timeout_s = env_timeout_s
        self.env_close_timeout_s = env_close_timeout_s
        self.pass_threshold = pass_threshold
        self.reuse_envs = reuse_envs
        self._env_types: dict[str, type] = {}

    @classmethod
    def from_config(cls, config: Any, engine: Any, tokenizer: Any = None, **overrides: Any) -> AgentRunner:
        """Build from the config's ``generator`` and ``environment`` sections (``overrides`` win).

        ``from_config(config, engine)``; the trainer's older order ``from_config(engine, config)`` is read
        the same way.
        """
        if not _is_config(config) and _is_config(engine):
            config, engine = engine, config
        gen, environment = config.generator, config.environment
        kwargs: dict[str, Any] = dict(
            env_configs=environment.skyrl_gym,
            default_env_class=environment.env_class,
            agent=gen.agent.type,
            max_turns=gen.max_turns,
            max_input_length=gen.max_input_length,
            max_tokens_per_trajectory=gen.max_tokens_per_trajectory,
            env_timeout_s=gen.env_timeout_s,
            env_close_timeout_s=gen.env_close_timeout_s,
            dispatcher=dispatcher_from_config(gen),
            reuse_envs=gen.dispatcher.reuse_envs if isinstance(gen.dispatcher, FixedPoolSettings) else True,
            agent_kwargs=agent_kwargs_from_config(gen),
        )
        kwargs.update(overrides)
        return cls(engine, tokenizer, **kwargs)

    # -- the batch ----------------------------------------------------------------------------------
    def context(self) -> RolloutContext:
        """What a trajectory reads from the runner, as the runner stands now (its engine, budgets...)."""
        return RolloutContext(
            engine=self.engine,
            template=self.template,
            make_env=self._make_env,
            default_env_class=self.default_env_class,
            max_turns=self.max_turns,
            max_input_length=self.max_input_length,
            max_tokens_per_trajectory=self.max_tokens_per_trajectory,
            stop=tuple(self.stop),
            env_timeout_s=self.env_timeout_s,
            env_close_timeout_s=self.env_close_timeout_s,
            reuse_envs=self.reuse_envs,
            env_types=self._env_types,
        )

    def trajectory(
        self, row: Mapping[str, Any], sampling_params: Any, *, group_id: int = 0, sample_index: int = 0
    ) -> Trajectory:
        """The staged job of one sample of ``row`` (of the runner's agent)."""
        return self.trajectory_class(
            self.context(),
            row,
            sampling_params,
            group_id=group_id,
            sample_index=sample_index,
            **self.agent_kwargs,
        )

    async def run(
        self,
        rows: Sequence[Mapping[str, Any]],
        n_samples: int,
        sampling_params: Any,
        group_offset: int = 0,
        on_result: Callable[[TrajectoryResult], None] | None = None,
    ) -> GeneratorOutput:
        """Play ``n_samples`` trajectories of each row, concurrently through the dispatcher.

        Trajectories come back ordered by row, then sample: row ``i``'s samples have ``group_id ==
        group_offset + i`` and ``sample_index`` 0..n-1. With ``sampling_params.seed`` set, each turn of each
        sample gets its own seed (:func:`~skyrl_train.rollout.template.sample_seed`), so a run is reproducible
        for the same ``group_offset``; use a global prompt index as ``group_offset`` to keep seeds distinct
        across steps. A trajectory that fails is returned with ``end == "error"``; the batch never fails for
        it, and the other samples of its group are kept. ``on_result(trajectory)`` (optional) is called as each
        trajectory finishes (after its release), in the order they finish, e.g. to show progress.
        """
        if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:
            raise ValueError(f"n_samples must be a positive int, got {n_samples!r}")
        started = time.monotonic()
        jobs = [
            self.trajectory(row, sampling_params, group_id=group_offset + i, sample_index=k)
            for i, row in enumerate(rows)
            for k in range(n_samples)
        ]
        if on_result is not None:
            for job in jobs:
                job.on_done = on_result
        await self.dispatcher.run(jobs)
        # the jobs' own records: a dispatcher's failure (a stage past its deadline) is already marked on them
        trajectories = [job.result for job in jobs]
        wall_s = time.monotonic() - started
        metrics = rollout_metrics(
            trajectories, pass_threshold=self.pass_threshold, wall_s=wall_s, env_types=self._env_types
        )
        metrics["generate/max_concurrent"] = float(self.dispatcher.stats.max_in_flight)
        metrics["generate/env_reuses"] = float(sum(getattr(job, "reused", False) for job in jobs))
        metrics.update(self.dispatcher.stats.as_metrics())
        return GeneratorOutput(trajectories=trajectories, metrics=metrics)

    async def generate(
        self,
        rows: Sequence[Mapping[str, Any]],
        n_samples: int,
        sampling_params: Any,
        *,
        group_offset: int = 0,
    ) -> GeneratorOutput:
        """The :class:`~skyrl_train.rollout.records.Generator` interface: :meth:`run`."""
        return await self.run(rows, n_samples, sampling_params, group_offset)

    # -- one trajectory -------------------------------------------------------------------------------
    async def rollout(
        self, row: Mapping[str, Any], sampling_params: Any, *, group_id: int = 0, sample_index: int = 0
    ) -> TrajectoryResult:
        """Play one trajectory of ``row``, its stages one after the other; never raises for a failure of the
        environment or the engine."""
        job = self.trajectory(row, sampling_params, group_id=group_id, sample_index=sample_index)
        return await job.run()

    def _make_env(self, env_class: str, extras: dict[str, Any]) -> Any:
        import skyrl_gym

        return skyrl_gym.make(env_class, env_config=self.env_configs.get(env_class), extras=extras)

    def make_env(self, row: Mapping[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
        """The environment of a dataset row as the model plays it in a rollout (the row's ``env_class`` or the
        default, its ``env_config``, the row's other columns as extras, wrapped by the agent: e.g. inside the
        ReAct tool loop, so that a warm-up asks the wrapper for its reference), and the row's prompt."""
        env_class, prompt, extras = split_row(row, self.default_env_class)
        env = self._make_env(env_class, extras)
        try:
            return self.trajectory(row, None).wrap_env(env), prompt
        except BaseException:
            env.close()
            raise


def _is_config(obj: Any) -> bool:
    return hasattr(obj, "generator") and hasattr(obj, "environment")


# -- the config's readers ---------------------------------------------------------------------------------
def _accepts(factory: Any, name: str) -> bool:
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def dispatcher_from_config(gen: GeneratorConfig) -> Dispatcher:
    """The dispatcher of ``generator.dispatcher`` built with its settings.

    Every dispatcher gets ``max_concurrency`` (``generator.max_concurrent_trajectories``) and, when its
    factory takes them, the per-stage deadlines (``generator.stage_timeouts``); its own settings (a
    :class:`~skyrl_train.rollout.dispatch.base.DispatcherSettings`) add theirs: ``fixed_pool`` its
    ``num_workers``, ``async_pipeline`` its caps.
    """
    from skyrl_train.rollout.dispatch import DISPATCHERS

    settings = gen.dispatcher
    factory = DISPATCHERS.get(settings.type)
    kwargs: dict[str, Any] = {"max_concurrency": gen.max_concurrent_trajectories}
    if _accepts(factory, "timeouts"):
        kwargs["timeouts"] = StageTimeouts(**gen.stage_timeouts.model_dump())
    if isinstance(settings, DispatcherSettings):
        kwargs.update(settings.factory_kwargs())
    return factory(**kwargs)


def agent_kwargs_from_config(gen: GeneratorConfig) -> dict[str, Any]:
    """The agent's own settings from ``generator.agent``, as its constructor's keyword arguments: ``react=``
    (its ``max_turns`` defaulting to ``generator.max_turns``) for the react agent and agents built on it;
    every setting but ``type`` by name for an agent with settings of another class; none for one without."""
    settings = gen.agent
    if isinstance(settings, ReActSettings):
        react = settings.model_dump(exclude={"type"})
        if react["max_turns"] is None:
            react["max_turns"] = gen.max_turns
        if react["tools"] is not None:
            react["tools"] = tuple(react["tools"])
        return {"react": react}
    return settings.model_dump(exclude={"type"})


class MultiTurnGenerator(AgentRunner):
    """The :class:`AgentRunner` under the name the trainer, the warm-up and SkyRL users know (same arguments,
    same behaviour): ``from_config(engine, config)`` (the trainer's order) and ``from_config(config,
    engine)`` both work."""
