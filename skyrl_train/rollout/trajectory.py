"""``Trajectory``: one (row, sample) played out as a staged job, token in, token out.

The stages a dispatcher schedules (see :mod:`skyrl_train.rollout.dispatch.base`)::

    initialize   env = skyrl_gym.make(row["env_class"], env_config=..., extras=<the row's other columns>)
                 env.defer_verification()          # when the env supports it: verification gets its own stage
                 observations = env.init(prompt)
    generate     prompt_ids = template(observations, add_generation_prompt=True)          # tokenised once
                 loop:  model tokens <- engine.generate(prompt_ids + response_ids)          # loss_mask 1
                        end-of-turn  <- what the template puts after an assistant message  # loss_mask 0
                        step         <- env.step(decoded model text)                        # the turn's reward
                        observation  <- template delta of the new messages                  # loss_mask 0
    evaluate     env.evaluate() (deferred verification; its reward is added to the last turn's), get_metrics
    release      close the environment

End-of-turn tokens: the end-of-turn token the model generated itself (its EOS, ``<|im_end|>`` for ChatML) is
a model token and trainable: the model must learn to end its turn. Whatever the template puts after an
assistant message that the model did not generate (the ``\\n`` after ``<|im_end|>``, or the whole
``<|im_end|>\\n`` when the turn ended on one of the environment's stop strings or ran out of tokens) is appended
with loss mask 0, so that the next observation follows a well-formed assistant message. An EOS that is not
the template's end-of-turn (``<|endoftext|>`` from a ChatML model) stays in the message text, followed by
the template's end-of-turn, so the ids still decode to the conversation; the environment gets the text
without it.

A failure of the environment or the engine ends the trajectory in error (``result.end == "error"``) and
never raises: the trajectory is masked alone, its group goes on. Environment calls run on threads with
deadlines (:mod:`skyrl_gym.vector`), so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import logging
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from skyrl_train.config.base import PartSettings
from skyrl_train.rollout.records import END_STATES, TrajectoryResult
from skyrl_train.rollout.template import sample_seed, stop_strings_for

if TYPE_CHECKING:
    from skyrl_train.rollout.dispatch.base import WorkerSlot

__all__ = ["RolloutContext", "Trajectory", "split_row"]

logger = logging.getLogger("skyrl_train.rollout")


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def split_row(row: Mapping[str, Any], default_env_class: str | None) -> tuple[str, Any, dict[str, Any]]:
    """``(env_class, prompt, extras)`` of a dataset row (see :func:`skyrl_train.data.row_to_env_args`)."""
    from skyrl_train.data import row_to_env_args

    if "prompt" not in row:
        raise ValueError(f"dataset row has no 'prompt' column (columns: {sorted(row)})")
    if isinstance(row["prompt"], str):
        row = {**row, "prompt": [{"role": "user", "content": row["prompt"]}]}
    env_class, prompt, extras = row_to_env_args(row, default_env_class)
    # copies per trajectory: the samples of one row must not share mutable state through them
    return env_class, [dict(m) for m in prompt], copy.deepcopy(extras)


@dataclasses.dataclass(frozen=True)
class RolloutContext:
    """What a trajectory reads from the runner that schedules it: the engine, the chat template, how to make
    an environment, and the budgets and deadlines of the episode. The runner builds one per trajectory
    (:meth:`~skyrl_train.rollout.runner.AgentRunner.context`)."""

    engine: Any
    """The inference engine."""
    template: Any
    """The :class:`~skyrl_train.rollout.template.ChatTemplate`."""
    make_env: Callable[[str, dict[str, Any]], Any]
    """``make_env(env_class, extras)``: a new environment of the class with the runner's settings for it."""
    default_env_class: str | None = None
    """The environment of a row without an ``env_class`` column."""
    max_turns: int | None = None
    """Turns of an episode (None: the environment's own budget)."""
    max_input_length: int | None = None
    """Tokens of the context a turn may start from (None: no cap)."""
    max_tokens_per_trajectory: int | None = None
    """Tokens the model may generate over the episode (None: no cap)."""
    stop: Sequence[str] = ()
    """Stop strings of every turn, beside the environment's and the sampling parameters'."""
    env_timeout_s: float | None = 300.0
    """Deadline of each environment call (None: none)."""
    env_close_timeout_s: float | None = 30.0
    """Deadline of an environment's ``close()``."""
    reuse_envs: bool = True
    """Whether a worker slot may keep an environment for the next trajectory that asks for the same one."""
    env_types: dict[str, type] = dataclasses.field(default_factory=dict)
    """The runner's record of each environment class's type (filled as environments are made)."""


class Trajectory:
    """The staged job of one sample of one dataset row; ``result`` is its :class:`TrajectoryResult`.

    It plays the environment's own protocol (the ``"multi_turn"`` agent). Subclasses change what the model
    plays against through :meth:`wrap_env` (the ReAct agent wraps the environment in its tool loop).

    Args:
        context: the :class:`RolloutContext` of the runner that schedules it: engine, chat template,
            environments, budgets and deadlines.
        row: the dataset row (``prompt``, ``env_class``, extra columns).
        sampling_params: the engine's sampling parameters (``max_tokens``, ``stop``, ``seed``...).
        group_id: which prompt of the batch this is a sample of.
        sample_index: which of the prompt's samples this is.
    """

    settings: type[PartSettings] = PartSettings
    """The class of this agent's settings (``generator.agent``); ``multi_turn`` has none but ``type``, an agent
    built on another inherits its settings. The runner hands the rest of the section to the constructor as
    ``agent_kwargs`` (see :func:`~skyrl_train.rollout.runner.agent_kwargs_from_config`)."""

    def __init__(
        self,
        context: RolloutContext,
        row: Mapping[str, Any],
        sampling_params: Any,
        *,
        group_id: int = 0,
        sample_index: int = 0,
    ):
        self.context = context
        self.row = row
        self.sampling_params = sampling_params
        self.env: Any = None
        """The environment (as :meth:`wrap_env` returned it) once set up."""
        self.task_env: Any = None
        """The row's environment itself (before :meth:`wrap_env`): its ``evaluate()`` verifies the episode."""
        self.slot: WorkerSlot | None = None
        """The dispatcher's worker slot, when it gives one."""
        self.deferred = False
        """Whether the environment verifies in :meth:`evaluate_trajectory` (it supports deferral)."""
        self.prompt: list[dict[str, Any]] | None = None
        self._metrics_taken = False
        self._released = False
        self.reused = False
        """Whether the environment is one an earlier trajectory of the same worker kept (see ``reuse_envs``)."""
        self.on_done: Callable[[TrajectoryResult], None] | None = None
        """Called with :attr:`result` once the trajectory is released (its reward and end final)."""
        result = TrajectoryResult(prompt_ids=[], group_id=group_id, sample_index=sample_index)
        data_source = row.get("data_source")
        result.data_source = data_source if isinstance(data_source, str) else None
        self._result = result

    # -- what the stages use ----------------------------------------------------------------------------
    @property
    def engine(self) -> Any:
        """The inference engine."""
        return self.context.engine

    @property
    def template(self) -> Any:
        """The :class:`~skyrl_train.rollout.template.ChatTemplate`."""
        return self.context.template

    @property
    def result(self) -> TrajectoryResult:
        """The token-in/token-out record (complete after :meth:`release`)."""
        return self._result

    @property
    def failed(self) -> bool:
        """Whether the trajectory ended in error (later stages are skipped)."""
        return self._result.end == "error" and self._result.error is not None

    def fail(self, stage: str, message: str) -> None:
        """End the trajectory in error with ``message`` (the first failure is kept)."""
        if not self.failed:
            self._fail(message)

    def wrap_env(self, env: Any) -> Any:
        """What the model plays against, made from the row's environment (the environment itself here)."""
        return env

    # -- stages -----------------------------------------------------------------------------------------
    async def initialize_trajectory(self, slot: WorkerSlot | None = None) -> None:
        """Make the environment, ask it to defer verification when it can, and init it."""
        from skyrl_gym.vector import ainit

        context, result = self.context, self._result
        self.slot = slot
        try:
            env_class, prompt, extras = split_row(self.row, context.default_env_class)
            result.env_class = env_class
            started = time.monotonic()
            env = None
            if slot is not None and context.reuse_envs:
                env = await self._reuse_kept(slot, env_class, extras)
            if env is None:
                env = await self._make_env(env_class, extras)
            self.env = self.task_env = env
            context.env_types.setdefault(env_class, type(getattr(env, "unwrapped", env)))
            if getattr(env, "supports_deferred_verification", False) is True:
                env.defer_verification()
                self.deferred = True
            self.env = env = self.wrap_env(env)
            start = await ainit(env, prompt, timeout_s=context.env_timeout_s)
            result.env_s += time.monotonic() - started
            if not start.ok:
                self._fail(f"environment init failed: {start.error}")
            else:
                self.prompt = start.observations
        except Exception as exc:  # make, init: the trajectory ends in error, the batch goes on
            self._log_failure()
            self._fail(_describe(exc))

    async def _reuse_kept(self, slot: WorkerSlot, env_class: str, extras: dict[str, Any]) -> Any:
        """The environment an earlier trajectory of this worker kept in ``slot``, now holding this row's task
        (:meth:`skyrl_gym.Env.reuse`), or ``None`` (nothing kept, or it does not fit: it is closed)."""
        from skyrl_gym.vector import acall, aclose

        kept = slot.take(_slot_key(env_class))
        if kept is None:
            return None
        try:
            taken = await acall(functools.partial(kept.reuse, extras), self.context.env_timeout_s)
        except asyncio.CancelledError:
            self.env = self.task_env = kept  # release() closes it
            raise
        except Exception:
            logger.warning("reuse() of %s failed:\n%s", kept, traceback.format_exc())
            taken = False
        if taken is True:
            self.reused = True
            return kept
        failure = await aclose(kept, self.context.env_close_timeout_s)
        if failure is not None:
            logger.warning("%s: %s", kept, failure)
        return None

    def _keeps_env(self) -> bool:
        """Whether :meth:`release` hands the environment to the worker's slot instead of closing it: a
        fixed_pool worker, reuse on, the environment supports it, and the trajectory did not fail."""
        return (
            self.slot is not None
            and self.context.reuse_envs
            and not self.failed
            and getattr(self.task_env, "supports_reuse", False) is True
        )

    async def _make_env(self, env_class: str, extras: dict[str, Any]) -> Any:
        """The row's environment, made on a thread within ``env_timeout_s``.

        An environment that is made after the trajectory gave up on it is closed, whether the trajectory gave
        up at the deadline or was cancelled (the dispatcher's initialize deadline, a cancelled run): one made
        while the stage was being cancelled is handed to :meth:`release`, one made later is closed on the
        thread that made it.
        """
        from skyrl_gym.vector import acall

        lock = threading.Lock()
        state: dict[str, Any] = {"given_up": False, "env": None}

        def make() -> Any:
            env = self.context.make_env(env_class, extras)
            with lock:
                state["env"] = env
                late = state["given_up"]
            if late:
                _close_late_env(env)
            return env

        try:
            return await acall(make, self.context.env_timeout_s, on_late=_close_late_env)
        except asyncio.CancelledError:
            with lock:
                state["given_up"] = True
                made = state["env"]
            if made is not None:
                self.env = self.task_env = made  # made, not yet returned: release() closes it
            raise

    async def generate_trajectory(self) -> None:
        """The turn loop: model turns and environment steps until the episode or a budget ends."""
        try:
            await self._play(self.prompt)
        except Exception as exc:  # template, engine: the trajectory ends in error, the batch goes on
            self._log_failure()
            self._fail(_describe(exc))

    async def evaluate_trajectory(self) -> None:
        """The deferred verification (``env.evaluate()``) when the environment defers, then its metrics."""
        from skyrl_gym.vector import CallTimedOut, acall

        context, result, env = self.context, self._result, self.env
        if env is None:
            return
        if self.deferred:
            started = time.monotonic()
            try:
                verdict = await acall(self.task_env.evaluate, context.env_timeout_s)
            except CallTimedOut:
                self._fail(f"environment evaluate() did not return within {context.env_timeout_s:g} s")
                return
            except Exception as exc:  # the verifier's infrastructure failed: an error, never a score of 0
                self._log_failure()
                self._fail(f"environment evaluate() failed: {_describe(exc)}")
                return
            finally:
                result.env_s += time.monotonic() - started
            if verdict is not None:
                reward = verdict.get("reward") if isinstance(verdict, Mapping) else None
                if isinstance(reward, bool) or not isinstance(reward, (int, float)):
                    self._fail(
                        f"environment evaluate() returned {verdict!r:.200}, not {{'reward': float, ...}}"
                    )
                    return
                result.verification = dict(verdict)
                if result.turn_rewards:
                    result.turn_rewards[-1] += float(reward)
        await self._take_metrics()

    async def release(self) -> None:
        """Close the environment (metrics first, if a failure skipped them); never raises."""
        if self._released:
            return
        self._released = True
        result = self._result
        try:
            if self.env is not None:
                await self._take_metrics()
                from skyrl_gym.vector import aclose

                if self._keeps_env():
                    assert self.slot is not None
                    self.slot.keep(_slot_key(result.env_class or ""), self.task_env, _close_kept_env)
                    return

                started = time.monotonic()
                failure = await aclose(self.env, self.context.env_close_timeout_s)
                result.env_s += time.monotonic() - started
                if failure is not None:
                    logger.warning("%s: %s", self.env, failure)
                    if result.end != "error":
                        self._fail(f"environment {failure}")
        except Exception as exc:
            logger.warning("release of %s failed:\n%s", self.env, traceback.format_exc())
            if result.end != "error":
                self._fail(f"environment close failed: {_describe(exc)}")
        finally:
            result.reward = float(sum(result.turn_rewards))
            if self.on_done is not None:
                try:
                    self.on_done(result)
                except Exception:
                    logger.warning("on_done of %r raised:\n%s", self, traceback.format_exc())

    async def run(self) -> TrajectoryResult:
        """All stages in order, one after the other (no dispatcher); returns :attr:`result`."""
        try:
            await self.initialize_trajectory(None)
            if not self.failed:
                await self.generate_trajectory()
            if not self.failed:
                await self.evaluate_trajectory()
        finally:
            await self.release()
        return self._result

    # -- the episode --------------------------------------------------------------------------------------
    async def _take_metrics(self) -> None:
        """``env.get_metrics()`` once, within ``env_close_timeout_s`` (an overrun ends the trajectory in error)."""
        from skyrl_gym.vector import CallTimedOut, acall

        if self._metrics_taken:
            return
        self._metrics_taken = True
        result, env, timeout_s = self._result, self.env, self.context.env_close_timeout_s
        get_metrics = getattr(env, "get_metrics", None)
        if not callable(get_metrics):
            return
        started = time.monotonic()
        try:
            result.env_metrics = dict(await acall(get_metrics, timeout_s) or {})
        except CallTimedOut:
            if result.end != "error":
                self._fail(f"environment get_metrics() did not return within {timeout_s:g} s")
        except Exception:
            logger.warning("get_metrics() of %s failed:\n%s", env, traceback.format_exc())
        finally:
            result.env_s += time.monotonic() - started

    async def _play(self, prompt: Any) -> None:
        from skyrl_gym.vector import astep

        context, trajectory, env, params = self.context, self._result, self.env, self.sampling_params
        template = context.template
        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        messages = [dict(m) for m in prompt]
        trajectory.messages = messages  # grows with the conversation, also when a later turn fails
        trajectory.prompt_ids = template.prompt_ids(messages)
        stop = stop_strings_for(env, [*context.stop, *(getattr(params, "stop", None) or [])])
        seed = getattr(params, "seed", None)
        max_input_length = context.max_input_length
        max_tokens_per_trajectory = context.max_tokens_per_trajectory

        while True:
            input_length = len(trajectory.prompt_ids) + len(trajectory.response_ids)
            if max_input_length is not None and input_length > max_input_length:
                # only the prompt can get here: later turns stop before an observation overflows
                self._fail(
                    f"the prompt has {input_length} tokens, more than generator.max_input_length "
                    f"({max_input_length})",
                )
                break
            max_tokens = params.max_tokens
            if max_tokens_per_trajectory is not None:
                # at least 1: a trajectory with nothing left ended after its last step
                max_tokens = min(max_tokens, max_tokens_per_trajectory - trajectory.num_model_tokens)
            turn_params = params.model_copy(
                update={
                    "max_generate_length": max_tokens,
                    "stop": stop or None,
                    "seed": None
                    if seed is None
                    else sample_seed(
                        seed, trajectory.group_id, trajectory.sample_index, trajectory.num_turns
                    ),
                }
            )

            started = time.monotonic()
            (output,) = await self.engine.generate([trajectory.input_ids], turn_params)
            trajectory.generate_s += time.monotonic() - started
            trajectory.stop_reason = output.stop_reason
            if output.stop_reason == "abort":
                self._fail("the inference engine aborted the generation")
                break
            action, content = self._append_model_turn(output)
            messages.append({"role": "assistant", "content": content})
            trajectory.actions.append(action)
            trajectory.num_turns += 1

            started = time.monotonic()
            step = await astep(env, action, timeout_s=context.env_timeout_s)
            trajectory.env_s += time.monotonic() - started
            trajectory.turn_rewards.append(float(step.get("reward", 0.0)))
            metadata = step.get("metadata") or {}
            observations = [dict(m) for m in step.get("observations") or []]
            trajectory.final_observations = observations
            if step.get("done"):
                end = metadata.get("end", "terminated")
                if end == "error":
                    self._fail(f"environment error: {metadata.get('error', 'unknown')}")
                elif end == "truncated":
                    self._end("truncated", truncated_by=metadata.get("truncated_by"))
                else:
                    self._end("terminated")
                break
            # Out of budget: end here, leaving out the observation, since no model turn would follow it.
            if context.max_turns is not None and trajectory.num_turns >= context.max_turns:
                self._end("truncated", truncated_by="generator.max_turns")
                break
            if (
                max_tokens_per_trajectory is not None
                and trajectory.num_model_tokens >= max_tokens_per_trajectory
            ):
                self._end("context_exhausted", truncated_by="max_tokens_per_trajectory")
                break

            delta = template.encode(template.observation_delta(messages, observations))
            if max_input_length is not None and (
                len(trajectory.prompt_ids) + len(trajectory.response_ids) + len(delta) > max_input_length
            ):
                self._end("context_exhausted", truncated_by="max_input_length")
                break
            _extend(trajectory, delta, trainable=False)
            messages.extend(observations)
            trajectory.final_observations = []

    def _append_model_turn(self, output: Any) -> tuple[str, str]:
        """Append the model's tokens (trainable) and any missing end-of-turn (not).

        Returns the action for the environment and the assistant message's content.
        """
        trajectory, template = self._result, self.context.template
        tokens = list(output.token_ids)
        start = len(trajectory.response_ids)
        _extend(
            trajectory,
            tokens,
            trainable=True,
            logprobs=output.logprobs,
            versions=getattr(output, "policy_versions", None),
        )
        trajectory.turn_spans.append((start, len(trajectory.response_ids)))

        # The model ended its turn itself when its last token is the start of the template's end-of-turn
        # (``<|im_end|>``); only the rest of it (``\n``) is added. Another special token it ended with
        # (``<|endoftext|>``) stays in the message text, so that the ids still decode to the conversation,
        # the template's whole end-of-turn follows, and the environment gets the text without it.
        end_of_turn = template.end_of_turn_text
        action = message = template.decode(tokens)
        if output.stop_reason == "stop" and output.stop_string is None and tokens:
            last = tokens[-1]
            eos_text = template.decode([last]) if last in template.special_ids else ""
            if eos_text:
                action = template.decode(tokens[:-1])
            if eos_text and end_of_turn.startswith(eos_text):
                message = action
                end_of_turn = end_of_turn[len(eos_text) :]
        if end_of_turn:
            _extend(trajectory, template.encode(end_of_turn), trainable=False)
        return action, message

    def _end(self, end: str, truncated_by: str | None = None) -> None:
        assert end in END_STATES
        self._result.end = end  # type: ignore[assignment]
        self._result.truncated_by = truncated_by

    def _fail(self, message: str) -> None:
        self._result.end = "error"
        self._result.error = message

    def _log_failure(self) -> None:
        result = self._result
        logger.warning(
            "trajectory %d/%d failed:\n%s", result.group_id, result.sample_index, traceback.format_exc()
        )

    def __repr__(self) -> str:
        result = self._result
        return f"{type(self).__name__}({result.env_class or '?'} {result.group_id}/{result.sample_index})"


def _extend(
    trajectory: TrajectoryResult,
    ids: Sequence[int],
    *,
    trainable: bool,
    logprobs: Sequence[float] | None = None,
    versions: Sequence[int] | None = None,
) -> None:
    trajectory.response_ids.extend(ids)
    trajectory.loss_mask.extend([1 if trainable else 0] * len(ids))
    if trajectory.policy_versions is not None:
        if trainable and versions is None:
            trajectory.policy_versions = None  # the engine does not track versions
        elif trainable:
            if len(versions) != len(ids):
                raise ValueError(f"the engine returned {len(versions)} policy versions for {len(ids)} tokens")
            trajectory.policy_versions.extend(int(v) for v in versions)
        else:
            trajectory.policy_versions.extend([-1] * len(ids))
    if trajectory.logprobs is None:
        return
    if trainable and logprobs is None:
        trajectory.logprobs = None  # the engine gives none: the trainer recomputes them
    elif trainable:
        if len(logprobs) != len(ids):
            raise ValueError(f"the engine returned {len(logprobs)} logprobs for {len(ids)} tokens")
        trajectory.logprobs.extend(float(x) for x in logprobs)
    else:
        trajectory.logprobs.extend([0.0] * len(ids))


def _close_late_env(env: Any) -> None:
    """Close an environment whose ``make`` returned after the trajectory gave up on it."""
    try:
        env.close()
    except Exception:
        logger.warning("close() of a late environment %s failed:\n%s", env, traceback.format_exc())


def _slot_key(env_class: str) -> str:
    return f"env:{env_class}"


def _close_kept_env(env: Any) -> None:
    """Close an environment a worker kept for reuse (at the end of the dispatcher's run)."""
    try:
        env.close()
    except Exception:
        logger.warning("close() of a kept environment %s failed:\n%s", env, traceback.format_exc())
