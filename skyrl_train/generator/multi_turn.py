"""``MultiTurnGenerator``: multi-turn rollouts of a model in skyrl_gym environments, token in, token out.

One trajectory, as a coroutine::

    env = skyrl_gym.make(row["env_class"], env_config=..., extras=<the row's other columns>)
    prompt_ids = template(env.init(prompt), add_generation_prompt=True)          # tokenised once
    loop:  model tokens  <- engine.generate(prompt_ids + response_ids)           # loss_mask 1
           end-of-turn   <- what the template puts after an assistant message   # loss_mask 0, if missing
           step          <- env.step(decoded model text)                         # reward for the turn
           observation   <- template delta of the new messages                   # loss_mask 0

Nothing already in the token list is ever re-tokenised: each observation is appended as the *text delta* of
the chat template (``render(history + observations, add_generation_prompt=True)`` minus
``render(history)``), tokenised on its own. For templates that render every message the same wherever it
sits (ChatML, Llama 3, Qwen 2.5, SmolLM2), the decoded token ids equal the template's rendering of the
visible conversation.

End-of-turn tokens: the end-of-turn token the model generated itself (its EOS, ``<|im_end|>`` for ChatML) is
a model token and trainable: the model must learn to end its turn. Whatever the template puts after an
assistant message that the model did not generate (the ``\\n`` after ``<|im_end|>``, or the whole
``<|im_end|>\\n`` when the turn ended on one of the environment's stop strings or ran out of tokens) is appended
with loss mask 0, so that the next observation follows a well-formed assistant message. An EOS that is not
the template's end-of-turn (``<|endoftext|>`` from a ChatML model) stays in the message text, followed by
the template's end-of-turn, so the ids still decode to the conversation; the environment gets the text
without it.

Environment calls (make, init, step, close) run on threads, so the event loop never blocks; many
trajectories run at once through a :class:`~skyrl_train.dispatch.Dispatcher`.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import logging
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from skyrl_train.dispatch import AsyncBatchDispatcher, Dispatcher
from skyrl_train.generator.base import END_STATES, Generator, GeneratorOutput, Trajectory

if TYPE_CHECKING:
    from skyrl_train.config import Config

__all__ = [
    "ChatTemplate",
    "MultiTurnGenerator",
    "rollout_metrics",
    "sample_seed",
    "stop_strings_for",
]

logger = logging.getLogger("skyrl_train.generator")

_SENTINEL = "\x00skyrl-end-of-turn-probe\x00"


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


class ChatTemplate:
    """The one place where the generator applies a tokenizer's chat template.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        chat_template_kwargs: extra keyword arguments for ``apply_chat_template`` (``tools=...``,
            ``enable_thinking=...``).
    """

    _BASE_CONVERSATION = ({"role": "user", "content": "base"}, {"role": "assistant", "content": "base"})

    def __init__(self, tokenizer: Any, chat_template_kwargs: Mapping[str, Any] | None = None):
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.end_of_turn_text = self._probe_end_of_turn()
        """What the template writes after an assistant message's content (``<|im_end|>\\n`` for ChatML)."""
        self.special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])
        eos = getattr(tokenizer, "eos_token_id", None)
        if isinstance(eos, int):
            self.special_ids.add(eos)

    def render(self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool) -> str:
        """The template's text for ``messages``."""
        return self.tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **self.chat_template_kwargs,
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of template text (special tokens in it are recognised; none are added)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids, special tokens kept, nothing cleaned up."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def prompt_ids(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """The prompt's token ids, ending with the generation prompt."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def observation_delta(
        self, history: Sequence[Mapping[str, str]], observations: Sequence[Mapping[str, str]]
    ) -> str:
        """The text the template adds for ``observations`` after ``history``, up to the next generation prompt.

        ``history`` ends with an assistant message. If the template renders the history differently once
        more messages follow (some drop earlier reasoning), the delta is taken after a fixed two-message
        conversation instead, which gives the same text for templates that render each message on its own.
        """
        before = self.render(history, add_generation_prompt=False)
        after = self.render([*history, *observations], add_generation_prompt=True)
        if after.startswith(before):
            return after[len(before) :]
        base = list(self._BASE_CONVERSATION)
        before = self.render(base, add_generation_prompt=False)
        after = self.render([*base, *observations], add_generation_prompt=True)
        if not after.startswith(before):
            raise ValueError(
                "the chat template renders earlier messages differently once observations follow; "
                "the observation delta cannot be computed without re-tokenising the history"
            )
        return after[len(before) :]

    def _probe_end_of_turn(self) -> str:
        messages = [*self._BASE_CONVERSATION[:1], {"role": "assistant", "content": _SENTINEL}]
        text = self.render(messages, add_generation_prompt=False)
        at = text.find(_SENTINEL)
        if at < 0:
            return getattr(self.tokenizer, "eos_token", None) or ""
        return text[at + len(_SENTINEL) :]


def stop_strings_for(env: Any, extra: Sequence[str] | None = None) -> list[str]:
    """The stop strings of a turn: the environment's own (its ``stop_strings``, see
    :attr:`skyrl_gym.Env.stop_strings`), then ``extra`` (``generator.stop``), without duplicates."""
    declared = getattr(env, "stop_strings", None) or ()
    if isinstance(declared, str):
        declared = [declared]
    found: list[str] = []
    for stop in [*declared, *(extra or [])]:
        if stop and stop not in found:
            found.append(stop)
    return found


def sample_seed(seed: int, group_id: int, sample_index: int, turn: int) -> int:
    """The sampling seed of one turn of one sample: a 31-bit hash, different for every sample and turn."""
    digest = hashlib.blake2b(f"{seed}/{group_id}/{sample_index}/{turn}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF


def _split_row(row: Mapping[str, Any], default_env_class: str | None) -> tuple[str, Any, dict[str, Any]]:
    """``(env_class, prompt, extras)`` of a dataset row (see :func:`skyrl_train.data.row_to_env_args`)."""
    from skyrl_train.data import row_to_env_args

    if "prompt" not in row:
        raise ValueError(f"dataset row has no 'prompt' column (columns: {sorted(row)})")
    if isinstance(row["prompt"], str):
        row = {**row, "prompt": [{"role": "user", "content": row["prompt"]}]}
    env_class, prompt, extras = row_to_env_args(row, default_env_class)
    # copies per trajectory: the samples of one row must not share mutable state through them
    return env_class, [dict(m) for m in prompt], copy.deepcopy(extras)


class MultiTurnGenerator(Generator):
    """Plays dataset rows out as multi-turn trajectories in skyrl_gym environments.

    Args:
        engine: an :class:`~skyrl_train.inference.base.InferenceEngine` (``async generate(prompts, params)``).
        tokenizer: the model's tokenizer (default: ``engine.tokenizer``).
        env_configs: ``env_config`` per environment id (``environment.skyrl_gym``).
        default_env_class: the environment of rows without ``env_class`` (``environment.env_class``).
        max_turns: most model turns per trajectory (``None``: the environment's own limit decides).
        max_input_length: most tokens fed to the engine (prompt + history); a trajectory that would need
            more ends as ``context_exhausted``.
        max_tokens_per_trajectory: most model-generated tokens over all turns; a turn gets at most what is
            left, and a trajectory with nothing left ends as ``context_exhausted``.
        stop: stop strings added to every environment's own (as are ``sampling_params.stop``).
        dispatcher: how trajectories run concurrently (default: ``async_batch`` with
            ``max_concurrent_trajectories``).
        max_concurrent_trajectories: the default dispatcher's concurrency limit.
        env_timeout_s: a deadline for each environment ``make``/``init``/``step`` call (on top of the
            environment's own budget); a call past it is abandoned (``env.abandon()`` stops its work) and the
            trajectory ends in error, without holding up the batch.
        env_close_timeout_s: the same for ``get_metrics`` and ``close`` at the end of a trajectory.
        pass_threshold: a trajectory with ``reward >= pass_threshold`` counts as passed in the metrics.
        chat_template_kwargs: extra arguments for ``apply_chat_template``.
    """

    def __init__(
        self,
        engine: Any,
        tokenizer: Any = None,
        *,
        env_configs: Mapping[str, Any] | None = None,
        default_env_class: str | None = None,
        max_turns: int | None = None,
        max_input_length: int | None = None,
        max_tokens_per_trajectory: int | None = None,
        stop: Sequence[str] | None = None,
        dispatcher: Dispatcher | None = None,
        max_concurrent_trajectories: int | None = 64,
        env_timeout_s: float | None = 300.0,
        env_close_timeout_s: float | None = 30.0,
        pass_threshold: float = 1.0,
        chat_template_kwargs: Mapping[str, Any] | None = None,
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
        self.default_env_class = default_env_class
        self.max_turns = max_turns
        self.max_input_length = max_input_length
        self.max_tokens_per_trajectory = max_tokens_per_trajectory
        self.stop = list(stop or [])
        self.dispatcher = dispatcher or AsyncBatchDispatcher(max_concurrent_trajectories)
        self.env_timeout_s = env_timeout_s
        self.env_close_timeout_s = env_close_timeout_s
        self.pass_threshold = pass_threshold
        self._env_types: dict[str, type] = {}

    @classmethod
    def from_config(
        cls, engine: Any, config: Config, tokenizer: Any = None, **overrides: Any
    ) -> MultiTurnGenerator:
        """Build from the config's ``generator`` and ``environment`` sections (``overrides`` win)."""
        from skyrl_train.dispatch import make_dispatcher

        gen, environment = config.generator, config.environment
        kwargs: dict[str, Any] = dict(
            env_configs=environment.skyrl_gym,
            default_env_class=environment.env_class,
            max_turns=gen.max_turns,
            max_input_length=gen.max_input_length,
            max_tokens_per_trajectory=gen.max_tokens_per_trajectory,
            env_timeout_s=gen.env_timeout_s,
            env_close_timeout_s=gen.env_close_timeout_s,
            dispatcher=make_dispatcher(gen.dispatcher, max_concurrency=gen.max_concurrent_trajectories),
        )
        kwargs.update(overrides)
        return cls(engine, tokenizer, **kwargs)

    # -- the batch ----------------------------------------------------------------------------------
    async def generate(
        self,
        rows: Sequence[Mapping[str, Any]],
        n_samples: int,
        sampling_params: Any,
        *,
        group_offset: int = 0,
    ) -> GeneratorOutput:
        """Play ``n_samples`` trajectories of each row, concurrently.

        Trajectories come back ordered by row, then sample: row ``i``'s samples have ``group_id ==
        group_offset + i`` and ``sample_index`` 0..n-1. With ``sampling_params.seed`` set, each turn of each
        sample gets its own seed (:func:`sample_seed`), so a run is reproducible for the same
        ``group_offset``; use a global prompt index as ``group_offset`` to keep seeds distinct across steps.
        A trajectory that fails is returned with ``end == "error"``; the batch never fails for it.
        """
        if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:
            raise ValueError(f"n_samples must be a positive int, got {n_samples!r}")
        started = time.monotonic()
        jobs = []
        for i, row in enumerate(rows):
            for k in range(n_samples):
                jobs.append(self._job(row, group_offset + i, k, sampling_params))
        trajectories = await self.dispatcher.run(jobs)
        wall_s = time.monotonic() - started
        metrics = rollout_metrics(
            trajectories, pass_threshold=self.pass_threshold, wall_s=wall_s, env_types=self._env_types
        )
        metrics["generate/max_concurrent"] = float(self.dispatcher.stats.max_in_flight)
        return GeneratorOutput(trajectories=trajectories, metrics=metrics)

    def _job(self, row: Mapping[str, Any], group_id: int, sample_index: int, params: Any):
        async def job() -> Trajectory:
            return await self.rollout(row, params, group_id=group_id, sample_index=sample_index)

        return job

    # -- one trajectory -------------------------------------------------------------------------------
    async def rollout(
        self, row: Mapping[str, Any], sampling_params: Any, *, group_id: int = 0, sample_index: int = 0
    ) -> Trajectory:
        """Play one trajectory of ``row``; never raises for a failure of the environment or the engine."""
        from skyrl_gym.vector import acall, ainit

        trajectory = Trajectory(prompt_ids=[], group_id=group_id, sample_index=sample_index)
        trajectory.data_source = row.get("data_source") if isinstance(row.get("data_source"), str) else None
        env = None
        try:
            env_class, prompt, extras = _split_row(row, self.default_env_class)
            trajectory.env_class = env_class
            started = time.monotonic()
            env = await acall(
                functools.partial(self._make_env, env_class, extras),
                self.env_timeout_s,
                on_late=_close_late_env,
            )
            self._env_types.setdefault(env_class, type(getattr(env, "unwrapped", env)))
            start = await ainit(env, prompt, timeout_s=self.env_timeout_s)
            trajectory.env_s += time.monotonic() - started
            if not start.ok:
                self._fail(trajectory, f"environment init failed: {start.error}")
            else:
                await self._play(env, env_class, start.observations, trajectory, sampling_params)
        except Exception as exc:  # make, template, engine: the trajectory ends in error, the batch goes on
            logger.warning("trajectory %d/%d failed:\n%s", group_id, sample_index, traceback.format_exc())
            self._fail(trajectory, _describe(exc))
        finally:
            if env is not None:
                started = time.monotonic()
                trajectory.env_metrics, problem = await self._finish_env(env)
                trajectory.env_s += time.monotonic() - started
                if problem is not None and trajectory.end != "error":
                    self._fail(trajectory, f"environment {problem}")
        trajectory.reward = float(sum(trajectory.turn_rewards))
        return trajectory

    async def _finish_env(self, env: Any) -> tuple[dict[str, Any], str | None]:
        """The environment's metrics, then close it, each within ``env_close_timeout_s``.

        Returns the metrics and ``None``, or what went wrong: a ``close`` that raised, or one that overran and
        was abandoned (``env.abandon()`` stops its work), ends the trajectory in error (the environment's
        machinery failed) instead of holding up the batch.
        """
        from skyrl_gym.vector import CallTimedOut, acall, aclose

        metrics: dict[str, Any] = {}
        problem = None
        get_metrics = getattr(env, "get_metrics", None)
        if callable(get_metrics):
            try:
                metrics = dict(await acall(get_metrics, self.env_close_timeout_s) or {})
            except CallTimedOut:
                problem = f"get_metrics() did not return within {self.env_close_timeout_s:g} s"
            except Exception:
                logger.warning("get_metrics() of %s failed:\n%s", env, traceback.format_exc())
        failure = await aclose(env, self.env_close_timeout_s)
        if failure is not None:
            logger.warning("%s: %s", env, failure)
        return metrics, problem or failure

    def _make_env(self, env_class: str, extras: dict[str, Any]) -> Any:
        import skyrl_gym

        return skyrl_gym.make(env_class, env_config=self.env_configs.get(env_class), extras=extras)

    def make_env(self, row: Mapping[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
        """The environment of a dataset row, made as a rollout makes it (the row's ``env_class`` or the
        default, its ``env_config``, the row's other columns as extras), and the row's prompt."""
        env_class, prompt, extras = _split_row(row, self.default_env_class)
        return self._make_env(env_class, extras), prompt

    async def _play(self, env: Any, env_class: str, prompt: Any, trajectory: Trajectory, params: Any) -> None:
        from skyrl_gym.vector import astep

        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        messages = [dict(m) for m in prompt]
        trajectory.messages = messages  # grows with the conversation, also when a later turn fails
        trajectory.prompt_ids = self.template.prompt_ids(messages)
        stop = stop_strings_for(env, [*self.stop, *(getattr(params, "stop", None) or [])])
        seed = getattr(params, "seed", None)

        while True:
            input_length = len(trajectory.prompt_ids) + len(trajectory.response_ids)
            if self.max_input_length is not None and input_length > self.max_input_length:
                # only the prompt can get here: later turns stop before an observation overflows
                self._fail(
                    trajectory,
                    f"the prompt has {input_length} tokens, more than generator.max_input_length "
                    f"({self.max_input_length})",
                )
                break
            max_tokens = params.max_tokens
            if self.max_tokens_per_trajectory is not None:
                # at least 1: a trajectory with nothing left ended after its last step
                max_tokens = min(max_tokens, self.max_tokens_per_trajectory - trajectory.num_model_tokens)
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
                self._fail(trajectory, "the inference engine aborted the generation")
                break
            action, content = self._append_model_turn(trajectory, output)
            messages.append({"role": "assistant", "content": content})
            trajectory.num_turns += 1

            started = time.monotonic()
            step = await astep(env, action, timeout_s=self.env_timeout_s)
            trajectory.env_s += time.monotonic() - started
            trajectory.turn_rewards.append(float(step.get("reward", 0.0)))
            metadata = step.get("metadata") or {}
            if step.get("done"):
                end = metadata.get("end", "terminated")
                if end == "error":
                    self._fail(trajectory, f"environment error: {metadata.get('error', 'unknown')}")
                elif end == "truncated":
                    self._end(trajectory, "truncated", truncated_by=metadata.get("truncated_by"))
                else:
                    self._end(trajectory, "terminated")
                break
            # Out of budget: end here, leaving out the observation, since no model turn would follow it.
            if self.max_turns is not None and trajectory.num_turns >= self.max_turns:
                self._end(trajectory, "truncated", truncated_by="generator.max_turns")
                break
            if (
                self.max_tokens_per_trajectory is not None
                and trajectory.num_model_tokens >= self.max_tokens_per_trajectory
            ):
                self._end(trajectory, "context_exhausted", truncated_by="max_tokens_per_trajectory")
                break

            observations = [dict(m) for m in step.get("observations") or []]
            delta = self.template.encode(self.template.observation_delta(messages, observations))
            if self.max_input_length is not None and (
                len(trajectory.prompt_ids) + len(trajectory.response_ids) + len(delta) > self.max_input_length
            ):
                self._end(trajectory, "context_exhausted", truncated_by="max_input_length")
                break
            _extend(trajectory, delta, trainable=False)
            messages.extend(observations)

    def _append_model_turn(self, trajectory: Trajectory, output: Any) -> tuple[str, str]:
        """Append the model's tokens (trainable) and any missing end-of-turn (not).

        Returns the action for the environment and the assistant message's content.
        """
        tokens = list(output.token_ids)
        start = len(trajectory.response_ids)
        _extend(trajectory, tokens, trainable=True, logprobs=output.logprobs)
        trajectory.turn_spans.append((start, len(trajectory.response_ids)))

        # The model ended its turn itself when its last token is the start of the template's end-of-turn
        # (``<|im_end|>``); only the rest of it (``\n``) is added. Another special token it ended with
        # (``<|endoftext|>``) stays in the message text, so that the ids still decode to the conversation,
        # the template's whole end-of-turn follows, and the environment gets the text without it.
        end_of_turn = self.template.end_of_turn_text
        action = message = self.template.decode(tokens)
        if output.stop_reason == "stop" and output.stop_string is None and tokens:
            last = tokens[-1]
            eos_text = self.template.decode([last]) if last in self.template.special_ids else ""
            if eos_text:
                action = self.template.decode(tokens[:-1])
            if eos_text and end_of_turn.startswith(eos_text):
                message = action
                end_of_turn = end_of_turn[len(eos_text) :]
        if end_of_turn:
            _extend(trajectory, self.template.encode(end_of_turn), trainable=False)
        return action, message

    @staticmethod
    def _end(trajectory: Trajectory, end: str, truncated_by: str | None = None) -> None:
        assert end in END_STATES
        trajectory.end = end  # type: ignore[assignment]
        trajectory.truncated_by = truncated_by

    @staticmethod
    def _fail(trajectory: Trajectory, message: str) -> None:
        trajectory.end = "error"
        trajectory.error = message


def _extend(
    trajectory: Trajectory, ids: Sequence[int], *, trainable: bool, logprobs: Sequence[float] | None = None
) -> None:
    trajectory.response_ids.extend(ids)
    trajectory.loss_mask.extend([1 if trainable else 0] * len(ids))
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
    """Close an environment whose ``make`` returned after the generator gave up on it."""
    try:
        env.close()
    except Exception:
        logger.warning("close() of a late environment %s failed:\n%s", env, traceback.format_exc())


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def rollout_metrics(
    trajectories: Sequence[Trajectory],
    *,
    pass_threshold: float = 1.0,
    wall_s: float | None = None,
    env_types: Mapping[str, type] | None = None,
) -> dict[str, float]:
    """Batch metrics; rewards and pass rates are over trajectories that did not end in error.

    Keys: ``generate/reward_mean``, ``pass_rate`` (``reward >= pass_threshold``), ``pass_at_n`` (groups with
    a pass), ``num_turns_mean``, ``response_length_mean`` (response tokens), ``model_tokens_mean``,
    ``end/<state>`` counts, ``error_count``, ``stop_reason/<reason>`` counts, ``wall_s``, ``tokens_per_s``,
    ``engine_s_mean``/``env_s_mean`` per trajectory; ``environment/<env>/<key>`` from each environment's
    ``aggregate_metrics`` (a plain mean of numeric keys when it has none).
    """
    scored = [t for t in trajectories if not t.is_error]
    metrics: dict[str, float] = {
        "generate/num_trajectories": float(len(trajectories)),
        "generate/reward_mean": _mean([t.reward for t in scored]),
        "generate/pass_rate": _mean([float(t.reward >= pass_threshold) for t in scored]),
        "generate/num_turns_mean": _mean([t.num_turns for t in trajectories]),
        "generate/response_length_mean": _mean([len(t.response_ids) for t in trajectories]),
        "generate/model_tokens_mean": _mean([t.num_model_tokens for t in trajectories]),
        "generate/error_count": float(len(trajectories) - len(scored)),
        "generate/engine_s_mean": _mean([t.generate_s for t in trajectories]),
        "generate/env_s_mean": _mean([t.env_s for t in trajectories]),
    }
    groups: dict[int, list[Trajectory]] = {}
    for trajectory in scored:
        groups.setdefault(trajectory.group_id, []).append(trajectory)
    metrics["generate/pass_at_n"] = _mean(
        [float(any(t.reward >= pass_threshold for t in group)) for group in groups.values()]
    )
    for state in END_STATES:
        metrics[f"generate/end/{state}"] = float(sum(t.end == state for t in trajectories))
    for trajectory in trajectories:
        if trajectory.stop_reason is not None:
            key = f"generate/stop_reason/{trajectory.stop_reason}"
            metrics[key] = metrics.get(key, 0.0) + 1.0
    if wall_s is not None:
        metrics["generate/wall_s"] = float(wall_s)
        tokens = sum(t.num_model_tokens for t in trajectories)
        metrics["generate/tokens_per_s"] = tokens / wall_s if wall_s > 0 else 0.0
    by_env: dict[str, list[dict[str, Any]]] = {}
    for trajectory in scored:
        by_env.setdefault(trajectory.env_class, []).append(trajectory.env_metrics)
    for env_class, episodes in by_env.items():
        aggregate = getattr((env_types or {}).get(env_class), "aggregate_metrics", None)
        try:
            combined = aggregate(episodes) if callable(aggregate) else _numeric_means(episodes)
        except Exception:
            logger.warning("aggregate_metrics of %s failed:\n%s", env_class, traceback.format_exc())
            combined = _numeric_means(episodes)
        for key, value in combined.items():
            if isinstance(value, (int, float)):
                metrics[f"environment/{env_class}/{key}"] = float(value)
    return metrics


def _numeric_means(episodes: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    totals: dict[str, list[float]] = {}
    for episode in episodes:
        for key, value in episode.items():
            if isinstance(value, (int, float)):
                totals.setdefault(key, []).append(float(value))
    return {key: _mean(values) for key, values in totals.items()}
