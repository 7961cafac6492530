"""The environment contract.

An environment takes the model's text (an action), runs what it asks and answers with new chat messages,
a reward and a done flag. The names follow SkyRL's ``skyrl_gym`` so that SkyRL code runs unchanged:

- ``init(prompt) -> (observations, info)`` starts an episode from a chat prompt;
- ``step(action) -> EnvStepOutput`` plays one turn;
- ``close()`` releases what the environment holds (idempotent), also through ``with``.

On top of that every environment offers Gymnasium's ``reset(seed=None, options=None)``: ``options`` may
carry ``prompt`` and ``extras`` (the dataset row's other columns); without a prompt the environment draws a
task from its own default task set with :meth:`Env.sample_task`, deterministically for the seed.

This module imports nothing heavy and holds no environment-specific code.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Generic, TypedDict, TypeVar

ObsType = TypeVar("ObsType")
ActType = TypeVar("ActType")

MessageType = dict[str, str]
"""One chat message: ``{"role": "user" | "assistant" | "system" | "tool", "content": str}``."""

ConversationType = list[MessageType]
"""A list of chat messages in the OpenAI format."""


class EnvStepOutput(TypedDict, total=False):
    """What ``step`` returns.

    - ``observations``: new chat messages to append to the conversation (often one user message);
    - ``reward``: a finite float for this turn;
    - ``done``: whether the episode is over; ``step`` must not be called again after it;
    - ``metadata``: JSON-serialisable details; when ``done`` it names the end (see :mod:`skyrl_gym.guard`).
    """

    observations: Any
    reward: float
    done: bool
    metadata: dict[str, Any]


class Task(TypedDict, total=False):
    """One episode's input: the chat prompt and the dataset row's other columns (``extras``)."""

    prompt: ConversationType
    extras: dict[str, Any]


class Misstep(str):
    """An action of a reference episode that is played but must not be imitated: a deliberate mistake (a query
    on a misnamed column, say) whose observation the episode's next actions read and recover from.

    It is a ``str``, so it plays like any text action; a supervised warm-up keeps its tokens out of the loss,
    so that a model learns the recovery, not the mistake. ``keep`` is a prefix of the action that is right to
    imitate and stays in the loss: the decision to run a query at all, say, before the mistaken query itself.
    """

    keep: str
    """The leading part of the action that a warm-up trains on ("" for none)."""

    def __new__(cls, text: str, keep: str = "") -> Misstep:
        if not text.startswith(keep):
            raise ValueError(f"a Misstep's keep must be a prefix of its text; got {keep!r} for {text!r}")
        self = super().__new__(cls, text)
        self.keep = keep
        return self


@dataclasses.dataclass(frozen=True)
class Continuation:
    """What :meth:`Env.reference_continuation` gives: the episode so far and the rest of a known-good one."""

    played: list[Any]
    """The actions played so far, in order, each as it was or as a :class:`Misstep` of it (a mistake the rest
    recovers from: a warm-up keeps it out of the loss but for its ``keep`` prefix)."""
    rest: list[Any]
    """The actions that end the episode with full reward from here."""

    @property
    def episode(self) -> list[Any]:
        """``played`` then ``rest``: the whole episode, to be played again from the start."""
        return [*self.played, *self.rest]


class Env(Generic[ObsType, ActType]):
    """Base class of every environment.

    Subclasses implement :meth:`step` and usually :meth:`init`; they may implement :meth:`sample_task`
    (a default task set, used by ``reset`` without a prompt), :meth:`reference_action` (a known-correct
    action for the current task, used by the conformance kit's oracle check and a trainer's supervised
    warm-up) and :meth:`reference_episode` (a known-good episode of several turns, e.g. a tool call before
    the answer), and declare :attr:`stop_strings`.

    The constructor's arguments are remembered (``_init_args``/``_init_kwargs``) so that ``reset`` can start
    the next episode from a freshly constructed state, with new extras when the options carry them.
    """

    spec: Any = None
    """The :class:`~skyrl_gym.envs.registration.EnvSpec` the environment was made from, if any."""

    stop_strings: tuple[str, ...] = ()
    """Strings after which a model's turn is over (``"</sql>"`` for a protocol whose tool call ends there): a
    trainer stops generating at the first one and steps the environment. Empty: the turn ends at EOS."""

    supports_deferred_verification: bool = False
    """Whether :meth:`defer_verification` is honoured: the environment can leave its verification (hidden
    tests in a fresh container, a slow grader) out of the last ``step`` and run it in :meth:`evaluate`."""

    turns_left_by_budget: int | None = None
    """The turns an outside budget (``Budget.max_turns``, which the guard enforces) leaves after the current
    step; the guard sets it before every step, ``None`` without such a budget. An environment whose
    observations state the turns (guesses, attempts) left tells the smaller of its own count and this one
    (:meth:`~skyrl_gym.envs.base_text_env.BaseTextEnv.turns_left`); its own end state does not change."""

    supports_reuse: bool = False
    """Whether :meth:`reuse` can start another task in this environment keeping what its set-up made (a
    started container), so that a long-lived worker does not pay the set-up again."""

    def __new__(cls, *args: Any, **kwargs: Any):
        self = super().__new__(cls)
        self._init_args = args
        self._init_kwargs = dict(kwargs)
        return self

    # -- the SkyRL contract ---------------------------------------------------------------------------
    def init(self, *args: Any, **kwargs: Any) -> tuple[ObsType, dict[str, Any]]:
        """Start an episode; returns the first observations and an info dict."""
        raise NotImplementedError(f"{type(self).__name__} does not implement init()")

    def step(self, action: ActType) -> EnvStepOutput:
        """Play one turn with ``action``; see :class:`EnvStepOutput` for what comes back."""
        raise NotImplementedError(f"{type(self).__name__} does not implement step()")

    def close(self) -> None:
        """Release databases, sandboxes, connections. Calling it twice has no further effect."""

    # -- optional hooks -------------------------------------------------------------------------------
    def abandon(self) -> None:
        """Stop the work in flight without waiting for it: interrupt a query, kill an interpreter or a sandbox.

        Called from another thread when a ``step``, ``init`` or ``close`` overran its deadline and the caller
        gave up on it, so that the abandoned call returns soon and holds nothing. It must not block and must be
        safe to call at any time, also twice; ``close`` still follows. The default does nothing.
        """

    def sample_task(self, seed: int | None = None) -> Task | None:
        """Return a task from the environment's default task set, the same one for the same seed.

        ``None`` (the default) means the environment has no task set of its own: ``reset`` then needs
        ``options={"prompt": ...}``.
        """
        return None

    def reference_action(self) -> ActType | None:
        """A known-correct action for the current task (it earns full reward), or ``None`` if unknown."""
        return None

    def reference_episode(self) -> list[ActType] | None:
        """The actions of a known-good episode of the current task, in order: played one per turn, they end
        the episode with full reward. ``None`` if unknown.

        It shows the protocol's longer shape where there is one (run a tool, read the observation, then
        answer); it depends only on the task, not on the observations. An action may be a :class:`Misstep`, a
        mistake the next actions recover from, which a warm-up plays but does not imitate. The default is the
        single :meth:`reference_action` (or its steps, when it is a list of them).
        """
        action = self.reference_action()
        if isinstance(action, list | tuple):  # a reference action of several steps is already an episode
            return list(action)
        return None if action is None else [action]

    def reference_continuation(self) -> Continuation | None:
        """Mid-episode (after one or more actions, not done): the rest of a known-good episode from here, with
        the actions played so far marked as a warm-up should treat them; ``None`` if unknown (the default).

        A trainer plays a model's own first turns, then asks for the continuation and trains on the whole: a
        model sees its own mistakes read and recovered from, not only the ones a reference scripted. The rest
        must end the episode with full reward; it may read the observations that came back, since it is asked
        after them.
        """
        return None

    def workspace(self) -> Any:
        """The :class:`~skyrl_gym.tools.workspace.Workspace` the environment lends to tools (a shell, files, a
        database, a search engine), valid while the episode runs; ``None`` (the default) when it lends none."""
        return None

    def finish_action(self, answer: str) -> ActType:
        """The action that hands a final ``answer`` to this environment's verifier in its own protocol (one
        ``step`` with it ends the episode): ``<solution>answer</solution>`` for text-to-SQL, for instance. An
        agent that works through tools calls it when the model finishes. The default is the answer itself."""
        return answer  # type: ignore[return-value]

    # -- verification after the episode ------------------------------------------------------------------
    def defer_verification(self) -> None:
        """Ask the environment to verify in :meth:`evaluate` instead of in its last ``step``.

        Called before ``init`` by a runner that schedules verification as a stage of its own. Afterwards the
        reward of the last ``step`` leaves verification out, and ``evaluate()`` returns it; the total (the
        step rewards plus ``evaluate()["reward"]``) equals what the episode earns without deferral. Used
        standalone, without this call, nothing changes. Raises ``NotImplementedError`` when
        :attr:`supports_deferred_verification` is false.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support deferred verification")

    def evaluate(self) -> dict[str, Any] | None:
        """Verification after the episode has ended.

        Returns ``None`` when there is nothing to verify (the default, and always when verification was not
        deferred), else ``{"reward": float, ...}`` with the verification's reward and any details
        (JSON-serialisable metadata, e.g. ``tests_passed``). It may be called once, after the episode ended
        (a ``done`` step) and before ``close``; an infrastructure failure raises, so that it is never scored
        as reward 0.
        """
        return None

    # -- reuse between tasks -----------------------------------------------------------------------------
    def reuse(self, extras: dict[str, Any] | None) -> bool:
        """Take the task of ``extras`` in this environment after its episode ended, keeping what set-up made.

        Called (instead of ``close``) by a worker that runs one task after another, before ``init`` of the next
        one. ``True``: the environment is now what ``make`` would have made for ``extras`` (same
        ``env_config``), except that its set-up is already done, and nothing of the previous task is left (its
        files, processes, counters); ``defer_verification`` may be asked again before ``init``. ``False``: the
        kept resources do not fit the new task (another image, other limits); the environment is unchanged
        and the caller closes it and makes a new one. Raises ``NotImplementedError`` when
        :attr:`supports_reuse` is false.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot be reused for another task")

    # -- Gymnasium-style reset --------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsType, dict[str, Any]]:
        """Start a new episode, Gymnasium style.

        ``options`` may hold ``prompt`` (chat messages or a string) and ``extras`` (a dict). The environment
        is re-constructed with the same ``env_config`` (and the new ``extras`` if given) so that nothing
        leaks from the previous episode. Without a prompt, :meth:`sample_task` picks one for ``seed``.
        """
        options = dict(options or {})
        extras = options.get("extras")
        prompt = options.get("prompt")
        if prompt is None and extras is not None:
            prompt = extras.get("prompt")
        if prompt is None:
            task = self.sample_task(seed)
            if task is None:
                raise ValueError(
                    f"{type(self).__name__} has no default task set: pass "
                    "reset(options={'prompt': [...], 'extras': {...}})"
                )
            prompt = task["prompt"]
            if extras is None:
                extras = task.get("extras")
        self._reconstruct(extras)
        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        return self.init(prompt)

    def _reconstruct(self, extras: dict[str, Any] | None) -> None:
        """Run the constructor again on this object, replacing ``extras`` when given."""
        args, kwargs = list(self._init_args), dict(self._init_kwargs)
        if extras is not None:
            if "extras" in kwargs or len(args) < 2:
                kwargs["extras"] = extras
            else:
                args[1] = extras
        spec = self.spec
        self.close()
        type(self).__init__(self, *args, **kwargs)
        self._init_args, self._init_kwargs = tuple(args), kwargs
        self.spec = spec

    # -- conveniences -------------------------------------------------------------------------------
    @property
    def unwrapped(self) -> Env:
        """The innermost environment (itself, for an environment that wraps nothing)."""
        return self

    def __enter__(self) -> Env:
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False

    def __str__(self) -> str:
        env_id = getattr(self.spec, "id", None)
        return f"{type(self).__name__}<{env_id}>" if env_id else f"{type(self).__name__}"


def abandon_quietly(env: Any) -> None:
    """Call ``env.abandon()`` (see :meth:`Env.abandon`) if it has one; a failure is logged, never raised."""
    method = getattr(env, "abandon", None)
    if not callable(method):
        return
    try:
        method()
    except Exception:
        logging.getLogger("skyrl_gym").warning("abandon() of %s failed", env, exc_info=True)
