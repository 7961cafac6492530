"""``EpisodeGuard``: how the framework enforces budgets and names how episodes end.

``skyrl_gym.make`` returns the environment itself (an instance of the registered class, so ``isinstance`` holds
and attribute writes such as ``env.max_turns = 1`` reach it) with a guard installed on that instance: its
``init``, ``reset``, ``step`` and ``close`` are replaced, on the instance only, by the guard's, which call the
class's own. The rules below hold for every environment made that way, built-in or written by a user:

- ``step`` before ``init``/``reset`` starts the episode, as SkyRL's environments allow (trainers and tests step
  an environment made from a dataset row without ``init``); ``step`` after the end raises
  :class:`EpisodeEndedError`; ``close`` is idempotent.
- Budgets (:class:`~skyrl_gym.budget.Budget`): max turns, wall-clock per step and per episode, tool calls
  (counted by ``BaseTextEnv._execute_tool``) and observation length. A budget that runs out ends the
  episode with ``metadata["end"] == "truncated"`` and ``metadata["truncated_by"]`` naming it. Before each
  step the guard sets ``turns_left_by_budget`` on the environment (the turns ``Budget.max_turns`` leaves
  after that step), so that observations stating the turns left tell the truth.
- An exception inside the environment ends the episode with ``metadata["end"] == "error"`` and
  ``metadata["error"]`` describing it (or re-raises, with ``errors="raise"``). Its reward is 0.0 but the
  end state says it is not a score: trainers leave error episodes out of their statistics.
- A step that returns something outside the contract (a non-finite reward, a non-bool ``done``, messages
  that are not ``{"role", "content"}`` dicts) is treated as an environment error.
- An action longer than ``Budget.max_action_chars`` never reaches the environment: the framework answers it
  with an observation saying so (reward 0.0, the turn counts, ``metadata["action_refused"]``), in constant
  time whatever its size.
- When the episode ends, ``metadata["end"]`` is one of ``terminated``, ``truncated`` or ``error``.
- ``evaluate()`` (verification after the episode, see :meth:`skyrl_gym.Env.evaluate`) runs after the end as
  before it; only a closed environment refuses it. ``defer_verification()`` reaches the environment.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import traceback
from typing import Any, Literal

from skyrl_gym._threads import CallTimedOut, TimeoutRunner
from skyrl_gym.budget import END_ERROR, END_TERMINATED, END_TRUNCATED, Budget
from skyrl_gym.core import Env, EnvStepOutput, Task, abandon_quietly
from skyrl_gym.errors import BudgetExceeded, EpisodeEndedError, Error

__all__ = ["ContractViolation", "EpisodeGuard", "guard_of", "install_guard"]

_GUARD_ATTRIBUTE = "_skyrl_episode_guard"
_GUARDED_METHODS = ("init", "reset", "step", "close")

logger = logging.getLogger("skyrl_gym")

_ENDS = (END_TERMINATED, END_TRUNCATED, END_ERROR)


class ContractViolation(Error, TypeError):
    """An environment's ``step`` returned something outside the documented contract.

    ``rule`` names the broken rule in the words of :data:`skyrl_gym.testing.RULES`.
    """

    def __init__(self, rule: str, message: str):
        super().__init__(message)
        self.rule = rule


class EpisodeGuard(Env):
    """Budgets and named ends for one environment.

    ``make`` installs one on the instance it returns (:func:`install_guard`); constructed directly,
    ``EpisodeGuard(env)`` is a wrapper around ``env`` with the same rules (attributes not found on the wrapper
    come from ``env``).

    Args:
        env: the environment to guard.
        budget: the limits (a :class:`Budget` or a dict of its fields).
        errors: ``"end"`` turns an exception in the environment into an error end; ``"raise"`` re-raises.
    """

    def __init__(
        self,
        env: Env,
        budget: Budget | dict[str, Any] | None = None,
        errors: Literal["end", "raise"] = "end",
    ):
        if errors not in ("end", "raise"):
            raise ValueError(f"errors must be 'end' or 'raise', got {errors!r}")
        self.env = env
        self.budget = Budget.coerce(budget)
        self.errors = errors
        self.spec = getattr(env, "spec", None)
        # The environment's own methods: those of a guard already installed on it, never the guarded ones.
        installed = guard_of(env)
        self._own = (
            dict(installed._own) if installed is not None else {m: getattr(env, m) for m in _GUARDED_METHODS}
        )
        self._phase: Literal["new", "running", "ended", "closed"] = "new"
        self._end: str | None = None
        self._turns = 0
        self._started_at = 0.0
        self._local = _calls_of(env)
        self._runner = TimeoutRunner("step")

    # -- forwarding -----------------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not set yet: avoid recursing
            raise AttributeError(name)
        return getattr(self.env, name)

    @property
    def unwrapped(self) -> Env:
        return self.env.unwrapped

    @property
    def end(self) -> str | None:
        """How the current episode ended (``terminated``/``truncated``/``error``), ``None`` while it runs."""
        return self._end

    @property
    def elapsed_s(self) -> float:
        """Seconds since the episode started."""
        return time.monotonic() - self._started_at if self._started_at else 0.0

    def sample_task(self, seed: int | None = None) -> Task | None:
        return self.env.sample_task(seed)

    def reference_action(self) -> Any:
        return self.env.reference_action()

    # -- verification after the episode: the environment's own, also once the episode has ended ----------
    @property
    def supports_deferred_verification(self) -> bool:  # type: ignore[override]
        return bool(getattr(self.env, "supports_deferred_verification", False))

    def defer_verification(self) -> None:
        self._check_open()
        self.env.defer_verification()

    def evaluate(self) -> dict[str, Any] | None:
        """The environment's :meth:`~skyrl_gym.Env.evaluate`; allowed after the end (that is when it runs)."""
        self._check_open()
        return self._own_call_of(self.env.evaluate)

    # -- another task on the same resources (a long-lived worker): the environment's own reuse ------------
    @property
    def supports_reuse(self) -> bool:  # type: ignore[override]
        return bool(getattr(self.env, "supports_reuse", False))

    def reuse(self, extras: dict[str, Any] | None) -> bool:
        """The environment's :meth:`~skyrl_gym.Env.reuse`; the next ``init`` starts a new guarded episode."""
        self._check_open()
        return bool(self._own_call_of(self.env.reuse, extras))

    @property
    def _inside(self) -> bool:
        return getattr(self._local, "depth", 0) > 0

    def _own_call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._own_call_of(self._own[method], *args, **kwargs)

    def _own_call_of(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        self._local.depth = getattr(self._local, "depth", 0) + 1
        try:
            return function(*args, **kwargs)
        finally:
            self._local.depth -= 1

    # -- episode lifecycle ------------------------------------------------------------------------------
    def init(self, *args: Any, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if self._inside:  # e.g. Env.reset calling init: part of the call already guarded
            return self._own["init"](*args, **kwargs)
        self._check_open()
        self._begin()
        return self._own_call("init", *args, **kwargs)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if self._inside:
            return self._own["reset"](seed=seed, options=options)
        self._check_open()
        observations, info = self._own_call("reset", seed=seed, options=options)
        self._begin()
        return observations, info

    def _begin(self) -> None:
        inner = self.env.unwrapped
        if hasattr(inner, "tool_calls"):
            inner.tool_calls = 0
        if self.budget.max_tool_calls is not None and hasattr(inner, "max_tool_calls"):
            inner.max_tool_calls = self.budget.max_tool_calls
        self._phase = "running"
        self._end = None
        self._turns = 0
        self._started_at = time.monotonic()

    def _check_open(self) -> None:
        if self._phase == "closed":
            raise Error(f"{self.env} is closed; make a new environment")

    def close(self) -> None:
        if self._inside:  # the environment closing itself (e.g. in reset): not the end of the guard
            return self._own["close"]()
        if self._phase == "closed":
            return
        self._phase = "closed"
        self._runner.close()
        self._own["close"]()

    # -- stepping -----------------------------------------------------------------------------------
    def step(self, action: Any) -> EnvStepOutput:
        self._check_open()
        if self._inside:
            return self._own["step"](action)
        if self._phase == "new":
            self._begin()
        if self._phase == "ended":
            raise EpisodeEndedError(
                f"step() called on {self.env} after the episode ended ({self._end}); "
                "call init(prompt) or reset() to start a new episode"
            )

        step_limit = self.budget.step_timeout_s
        episode_left = None
        if self.budget.episode_timeout_s is not None:
            episode_left = self.budget.episode_timeout_s - self.elapsed_s
            if episode_left <= 0:
                return self._finish(_truncated("episode_timeout", "the episode's time budget is used up"))
        limit = min((t for t in (step_limit, episode_left) if t is not None), default=None)
        self._tell_turns_left()

        try:
            if isinstance(action, str) and self._too_long(action):
                output = self._refused(action)
            else:
                output = self._runner.call(self._own_call, "step", action, timeout=limit)
            output = _validated(output)
        except CallTimedOut:
            abandon_quietly(self.env)  # the step runs on, abandoned: stop what it runs
            by_episode = episode_left is not None and (step_limit is None or episode_left < step_limit)
            which = "episode_timeout" if by_episode else "step_timeout"
            return self._finish(_truncated(which, f"step did not return within {limit:.3g} s"))
        except BudgetExceeded as exc:
            return self._finish(_truncated(exc.budget, str(exc)))
        except Exception as exc:
            if self.errors == "raise":
                raise
            logger.warning("environment %s failed in step():\n%s", self, traceback.format_exc())
            return self._finish(_errored(exc))

        self._turns += 1
        output["observations"] = self._capped(output["observations"])
        metadata = output["metadata"]
        if not output["done"]:
            max_turns = self.budget.max_turns or getattr(self.env.unwrapped, "max_turns", None)
            if max_turns is not None and self._turns >= max_turns:
                output["done"] = True
                metadata.update(end=END_TRUNCATED, truncated_by="max_turns")
            elif episode_left is not None and self.elapsed_s >= self.budget.episode_timeout_s:
                output["done"] = True
                metadata.update(end=END_TRUNCATED, truncated_by="episode_timeout")
        return self._finish(output) if output["done"] else output

    def _tell_turns_left(self) -> None:
        """Let the environment know the turns the budget leaves after this step, for what it tells the model.

        Only the text changes: the environment still ends by its own ``max_turns``, and the guard truncates at
        the budget's, so an end on the budget's last turn is never mistaken for the task being over.
        """
        max_turns = self.budget.max_turns
        left = None if max_turns is None else max(0, max_turns - self._turns - 1)
        inner = self.env.unwrapped
        if getattr(inner, "turns_left_by_budget", None) != left:
            inner.turns_left_by_budget = left

    def _too_long(self, action: str) -> bool:
        cap = self.budget.max_action_chars
        return cap is not None and len(action) > cap

    def _refused(self, action: str) -> EnvStepOutput:
        cap = self.budget.max_action_chars
        return EnvStepOutput(
            observations=[
                {
                    "role": "user",
                    "content": f"Your turn has {len(action)} characters, more than the {cap} this environment "
                    "reads; nothing in it was run. Write a shorter turn.",
                }
            ],
            reward=0.0,
            done=False,
            metadata={"action_refused": "too_long", "action_chars": len(action)},
        )

    def _finish(self, output: EnvStepOutput) -> EnvStepOutput:
        metadata = output["metadata"]
        end = metadata.setdefault("end", END_TERMINATED)
        if end not in _ENDS:
            raise ContractViolation("end-is-named", f"metadata['end'] must be one of {_ENDS}, got {end!r}")
        self._phase = "ended"
        self._end = end
        return output

    def _capped(self, observations: list[dict[str, Any]]) -> list[dict[str, Any]]:
        cap = self.budget.max_observation_chars
        if cap is None:
            return observations
        capped = []
        for message in observations:
            content = message.get("content")
            if isinstance(content, str) and len(content) > cap:
                cut = len(content) - cap
                message = {**message, "content": content[:cap] + f"\n[... {cut} characters cut]"}
            capped.append(message)
        return capped


def install_guard(
    env: Env, budget: Budget | dict[str, Any] | None = None, errors: Literal["end", "raise"] = "end"
) -> Env:
    """Guard ``env`` in place and return it: its ``init``, ``reset``, ``step`` and ``close`` become the guard's.

    Installing again replaces the guard (a new budget, a new ``errors`` mode) over the same own methods.
    """
    guard = EpisodeGuard(env, budget, errors)
    for method in _GUARDED_METHODS:
        setattr(env, method, getattr(guard, method))
    setattr(env, _GUARD_ATTRIBUTE, guard)
    return env


def _calls_of(env: Env) -> threading.local:
    """Per environment and per thread: how deep the environment's own methods are running there.

    While one runs (it may call the others, as ``Env.reset`` calls ``close`` and ``init``) every guard of that
    environment lets such calls through. Shared by all the guards of one environment (an installed one and a
    wrapping one), and per thread so that a step abandoned at its timeout, still running on its worker thread,
    does not open the guard for the caller.
    """
    calls = vars(env).get("_skyrl_guard_calls")
    if calls is None:
        calls = threading.local()
        env._skyrl_guard_calls = calls
    return calls


def guard_of(env: Any) -> EpisodeGuard | None:
    """The guard installed on ``env`` (or ``env`` itself if it is a wrapping guard); ``None`` for none."""
    if isinstance(env, EpisodeGuard):
        return env
    return vars(env).get(_GUARD_ATTRIBUTE) if hasattr(env, "__dict__") else None


def _truncated(budget: str, message: str) -> EnvStepOutput:
    return EnvStepOutput(
        observations=[],
        reward=0.0,
        done=True,
        metadata={"end": END_TRUNCATED, "truncated_by": budget, "message": message},
    )


def _errored(exc: BaseException) -> EnvStepOutput:
    return EnvStepOutput(
        observations=[],
        reward=0.0,
        done=True,
        metadata={"end": END_ERROR, "error": "".join(traceback.format_exception_only(exc)).strip()},
    )


def _validated(output: Any) -> EnvStepOutput:
    """Check a raw step output against the contract; return a copy with fresh containers."""
    if not isinstance(output, dict):
        raise ContractViolation(
            "observations-are-messages",
            f"step() must return a dict (BaseTextEnvStepOutput), got {type(output).__name__}",
        )
    missing = [key for key in ("observations", "reward", "done") if key not in output]
    if missing:
        raise ContractViolation("observations-are-messages", f"step() output lacks {missing}")
    reward = output["reward"]
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        raise ContractViolation(
            "reward-is-finite-float", f"step() reward must be a finite float, got {reward!r}"
        )
    done = output["done"]
    if not isinstance(done, bool):
        raise ContractViolation("done-is-bool", f"step() done must be a bool, got {done!r}")
    observations = output["observations"]
    if observations is None:
        observations = []
    if not isinstance(observations, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in observations
    ):
        raise ContractViolation(
            "observations-are-messages",
            "step() observations must be a list of {'role': str, 'content': str} messages, "
            f"got {observations!r:.200}",
        )
    metadata = output.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise ContractViolation(
            "metadata-is-json", f"step() metadata must be a dict, got {type(metadata).__name__}"
        )
    validated = dict(output)
    validated.update(
        observations=[dict(m) for m in observations],
        reward=float(reward),
        done=done,
        metadata=dict(metadata),
    )
    return validated  # type: ignore[return-value]
