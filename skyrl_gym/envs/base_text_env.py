"""``BaseTextEnv``: the base class of text-in, text-out environments (SkyRL compatible).

A subclass is written the way SkyRL documents it::

    class MyEnv(BaseTextEnv):
        def __init__(self, env_config=None, extras=None):
            super().__init__()
            self.ground_truth = extras["reward_spec"]["ground_truth"]
            self.max_turns = extras.get("max_turns", 1)

        def step(self, action: str) -> BaseTextEnvStepOutput:
            self.turns += 1
            ...
            return BaseTextEnvStepOutput(observations=[], reward=1.0, done=True, metadata={})

``super().__init__(env_config, extras)`` works too, and then ``self.env_config`` and ``self.extras`` are set.
"""

from __future__ import annotations

from typing import Any, TypedDict

from skyrl_gym.core import ConversationType, Env, MessageType
from skyrl_gym.errors import BudgetExceeded
from skyrl_gym.settings import env_config_values

__all__ = [
    "BaseTextEnv",
    "BaseTextEnvStepOutput",
    "ConversationType",
    "MessageType",
    "MissingGroundTruthError",
    "env_config_values",
    "positive_int",
    "task_ground_truth",
]


def positive_int(value: Any, what: str) -> int:
    """``value`` as a positive int (e.g. ``max_turns`` from a dataset row, which may hold numpy integers or
    integral floats); a clear ``ValueError`` naming ``what`` otherwise."""
    try:
        number = int(value)
        valid = not isinstance(value, bool) and number == value and number >= 1
    except (TypeError, ValueError, OverflowError):
        valid = False
    if not valid:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return number


class MissingGroundTruthError(ValueError, AssertionError):
    """A dataset row without ``reward_spec`` / ``ground_truth``.

    Both a ``ValueError`` and an ``AssertionError``: SkyRL's environments refuse such rows with an assertion,
    and code written against them catches that.
    """


def task_ground_truth(extras: dict[str, Any] | None, env_name: str, key: str = "reward_spec") -> Any:
    """The task's ``extras[key]["ground_truth"]``, checked the way SkyRL checks it when an env is made.

    ``extras=None`` (made without a task, Gymnasium style: ``reset()`` brings one) returns ``None``. Extras that
    are given but lack ``key`` or its ``ground_truth`` raise :class:`MissingGroundTruthError` at construction,
    in SkyRL's words, as SkyRL's environments refuse such a row in ``make()``.
    """
    if extras is None:
        return None
    spec = extras.get(key)
    if not hasattr(spec, "get"):
        raise MissingGroundTruthError(
            f"{key} field is required: {env_name} needs extras[{key!r}] = "
            f"{{'method': 'rule', 'ground_truth': ...}}; the extras given have keys {sorted(extras)}"
        )
    if spec.get("ground_truth") is None:
        raise MissingGroundTruthError(
            f"ground_truth is required in {key} field: {env_name} got {key} = {dict(spec)!r:.200}"
        )
    return spec["ground_truth"]


class BaseTextEnvStepOutput(TypedDict, total=False):
    """What a text environment's ``step`` returns.

    - ``observations``: new chat messages (``[{"role": "user", "content": "..."}]``), ``[]`` for none;
    - ``reward``: a finite float;
    - ``done``: whether the episode is over;
    - ``metadata``: JSON-serialisable details about the turn;
    - ``postprocessed_action``: the action as the environment understood it (for example cut at a stop
      tag), when it differs from what the model wrote; optional.
    """

    observations: ConversationType
    reward: float
    done: bool
    metadata: dict[str, Any]
    postprocessed_action: str | None


class BaseTextEnv(Env[ConversationType, str]):
    """Base class for text environments with tools and multiple turns.

    Attributes:
        turns: the number of ``step`` calls in this episode (subclasses increment it in ``step``).
        max_turns: the most turns an episode may take; the framework truncates the episode after it.
        tool_groups: the :class:`~skyrl_gym.tools.ToolGroup` objects the environment calls.
        tool_calls: how many tool calls ``_execute_tool`` ran in this episode.
        max_tool_calls: the tool-call budget (``None``: unlimited); set by the framework from the spec.
    """

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__()
        self.env_config = env_config
        self.extras = dict(extras or {})
        self.turns = 0
        self.max_turns = 1
        self.tool_groups: list[Any] = []
        self.tool_to_toolgroup: dict[str, str] = {}
        self.tool_calls = 0
        self.max_tool_calls: int | None = None

    # -- tools ------------------------------------------------------------------------------------------
    def init_tool_groups(self, tool_groups: list[Any] | None = None) -> None:
        """Attach tool groups and index which group owns each tool name."""
        self.tool_groups = list(tool_groups or [])
        self.tool_to_toolgroup = {}
        for group in self.tool_groups:
            self.tool_to_toolgroup.update(group.get_tool_to_group_mapping())

    # SkyRL spells it with a leading underscore in some versions.
    _init_tool_groups = init_tool_groups

    def _execute_tool(self, tool_group_name: str, tool_name: str, tool_input: Any) -> Any:
        """Run ``tool_name`` of the group ``tool_group_name``.

        ``tool_input`` is a list or tuple of positional arguments (SkyRL's convention) or a dict of keyword
        arguments. Counts against the tool-call budget: past it, :class:`BudgetExceeded` is raised and the
        framework ends the episode as truncated.
        """
        if self.max_tool_calls is not None and self.tool_calls >= self.max_tool_calls:
            raise BudgetExceeded("max_tool_calls", f"tool-call budget of {self.max_tool_calls} used up")
        for group in self.tool_groups:
            if group.get_name() == tool_group_name:
                self.tool_calls += 1
                if isinstance(tool_input, dict):
                    return group.execute_tool(tool_name, **tool_input)
                return group.execute_tool(tool_name, *tool_input)
        known = ", ".join(g.get_name() for g in self.tool_groups) or "none"
        raise ValueError(f"tool group '{tool_group_name}' not found; groups attached: {known}")

    # -- the contract -------------------------------------------------------------------------------
    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Return the prompt to give the model, and an info dict. Override to add to the prompt."""
        return prompt, {}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Play one turn. Subclasses must override it."""
        raise NotImplementedError(f"{type(self).__name__} does not implement step()")

    def close(self) -> None:
        """Release resources; override if the environment holds any."""

    def turns_left(self) -> int:
        """The turns the model has left after the current one, for the text of an observation.

        The smaller of the environment's own (``max_turns - turns``) and the ones an outside budget leaves
        (:attr:`~skyrl_gym.Env.turns_left_by_budget`). Decide the end of the episode on the own count only: the
        guard truncates at the budget's.
        """
        own = self.max_turns - self.turns
        budget = self.turns_left_by_budget
        return own if budget is None else min(own, budget)

    # -- metrics --------------------------------------------------------------------------------------
    def get_metrics(self) -> dict[str, Any]:
        """Numbers about the finished episode that a trainer logs (for example the number of queries)."""
        return {}

    @staticmethod
    def aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, Any]:
        """Combine per-episode metrics into batch metrics: the mean of every numeric key."""
        totals: dict[str, list[float]] = {}
        for episode in metrics:
            for key, value in episode.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    totals.setdefault(key, []).append(float(value))
                elif isinstance(value, bool):
                    totals.setdefault(key, []).append(float(value))
        return {key: sum(values) / len(values) for key, values in totals.items()}
