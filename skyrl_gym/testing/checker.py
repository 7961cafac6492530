"""``check_env``: the conformance checker every environment passes.

It plays real episodes through the environment and checks the rules in :data:`RULES`. Each failure names
the rule it broke, so a message reads like "[reward-is-finite-float] step('') returned reward nan".
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from skyrl_gym.core import Env, Task
from skyrl_gym.errors import EpisodeEndedError
from skyrl_gym.guard import ContractViolation, EpisodeGuard

__all__ = [
    "RULES",
    "CheckReport",
    "ConformanceError",
    "Failure",
    "adversarial_action_list",
    "check_env",
    "check_step_output",
    "play_episode",
]

RULES: dict[str, str] = {
    "make-returns-env": "the factory returns a skyrl_gym.Env",
    "has-tasks": "there are episodes to play: check_env's tasks=[...] or the environment's default task set "
    "(sample_task)",
    "reset-returns-prompt": "reset()/init() return (a list of {'role', 'content'} messages, a dict)",
    "observations-are-messages": "step() observations are a list of {'role': str, 'content': str} messages",
    "reward-is-finite-float": "step() reward is a finite float",
    "done-is-bool": "step() done is a bool",
    "metadata-is-json": "step() metadata is a JSON-serialisable dict",
    "end-is-named": "when done, metadata['end'] is 'terminated', 'truncated' or 'error'",
    "step-after-done-raises": "step() after the end raises EpisodeEndedError",
    "deterministic": "equal seeds (or tasks) and actions give equal episodes",
    "no-shared-state": "two instances share no state: one's steps do not change the other's episode",
    "close-is-idempotent": "close() can be called twice, also on an environment never started",
    "budget-max-turns": "a max-turns budget ends the episode in time, named as truncated by max_turns",
    "budget-observation-length": "an observation-length budget caps every observation",
    "survives-adversarial-actions": "adversarial actions (empty, 1 MB, unicode, emoji, NUL, lone surrogates, "
    "unbalanced, nested and repeated tags, broken tool calls) get an observation, not an exception or an error end",
    "model-failures-are-not-errors": "the environment's own hostile actions (its hostile_actions attribute: code "
    "that kills its interpreter, queries that exhaust its database...) end as the model's failure, never in error",
    "oracle-earns-full-reward": "the reference action of a task earns the full reward and terminates, and so "
    "does its reference episode where the environment declares one (reference_episode)",
    "noop-earns-nothing": "a no-op action, repeated until the end, earns no positive reward",
    "deferred-verification": "an environment that supports deferred verification earns the same total reward "
    "for its reference episode deferred (step rewards plus evaluate()['reward']) as verified in its last step, "
    "and evaluate() returns None when verification was not deferred",
    "reuse": "an environment that supports reuse plays a task after reuse(extras) as a fresh one plays it "
    "(the same rewards and ends for the reference episodes), or declines with False",
    "gymnasium-check-env": "gymnasium.utils.env_checker.check_env passes on the Gymnasium view of the environment",
}
"""Every rule ``check_env`` checks, with what it means."""


@dataclasses.dataclass
class Failure:
    """One broken rule."""

    rule: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.message}"


class ConformanceError(AssertionError):
    """An environment broke one or more rules; ``failures`` lists them."""

    def __init__(self, failures: Sequence[Failure], env_name: str = "environment"):
        self.failures = list(failures)
        lines = "\n".join(f"  - {f}" for f in self.failures)
        super().__init__(f"{env_name} broke {len(self.failures)} conformance rule(s):\n{lines}")


@dataclasses.dataclass
class CheckReport:
    """What ``check_env`` found: the rules that passed, were skipped (and why) or failed."""

    env_name: str
    passed: list[str] = dataclasses.field(default_factory=list)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    failures: list[Failure] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        lines = [
            f"{self.env_name}: {len(self.passed)} passed, {len(self.failures)} failed, {len(self.skipped)} skipped"
        ]
        lines += [f"  FAIL {f}" for f in self.failures]
        lines += [f"  skip [{rule}] {why}" for rule, why in self.skipped.items()]
        return "\n".join(lines)


class _Broken(Exception):
    def __init__(self, rule: str, message: str):
        super().__init__(message)
        self.rule = rule


def adversarial_action_list(tags: Sequence[str] = ()) -> list[str]:
    """Hostile actions every environment must answer with an observation.

    Generic ones (empty, whitespace, 1 MB of text, unicode and emoji, NUL and control characters, a lone
    surrogate, broken tool calls) and, for each tag, unbalanced, nested, repeated and oversized tag blocks.
    """
    actions = [
        "",
        " ",
        "\n" * 1000,
        "x" * 1_000_000,
        "Ünïcødé ✓ 漢字 العربية עברית ℵ₀ ∑∫ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
        "🙂🔥💥🧪" * 500,
        "\x00" * 64 + "a\x00b\x00",
        "\x1b[31mred\x1b[0m\r\t\x07\x08\x7f",
        "lone surrogate \ud800 here",
        "<tool_call>{not json</tool_call>",
        '<tool_call>{"name": "nope", "arguments": 5}</tool_call>',
        '<tool_call>{"name": "' + "n" * 10_000 + '", "arguments": {}}</tool_call>',
        "<tool_call>",
        "<<<>>>" * 1000,
        "</" * 5000,
    ]
    for tag in dict.fromkeys(("answer", "think", *tags)):
        actions += [
            f"<{tag}>",
            f"</{tag}>",
            f"<{tag}>unclosed",
            f"<{tag}><{tag}>1</{tag}></{tag}>",
            f"<{tag}>1</{tag}>" * 2000,
            f"<{tag}>" * 2000,
            f"<{tag}>" + "9" * 100_000 + f"</{tag}>",
            f"<{tag}>\x00🙂\ud800</{tag}>",
            f"<{tag.upper()}>1</{tag.upper()}>",
        ]
    return actions


def check_step_output(output: Any, where: str = "step()") -> list[Failure]:
    """The rules one step output breaks (empty when it follows the contract)."""
    failures: list[Failure] = []
    if not isinstance(output, dict):
        return [Failure("observations-are-messages", f"{where} returned {type(output).__name__}, not a dict")]
    observations = output.get("observations")
    if not isinstance(observations, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in observations
    ):
        failures.append(
            Failure("observations-are-messages", f"{where} returned observations {observations!r:.200}")
        )
    reward = output.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        failures.append(Failure("reward-is-finite-float", f"{where} returned reward {reward!r}"))
    done = output.get("done")
    if not isinstance(done, bool):
        failures.append(Failure("done-is-bool", f"{where} returned done {done!r}"))
    metadata = output.get("metadata", {})
    try:
        json.dumps(metadata, allow_nan=False)
        if not isinstance(metadata, dict):
            raise TypeError(f"metadata is a {type(metadata).__name__}")
    except (TypeError, ValueError) as exc:
        failures.append(Failure("metadata-is-json", f"{where} returned metadata that is not JSON: {exc}"))
    if (
        done is True
        and isinstance(metadata, dict)
        and metadata.get("end") not in ("terminated", "truncated", "error")
    ):
        failures.append(
            Failure("end-is-named", f"{where} ended with metadata['end'] = {metadata.get('end')!r}")
        )
    return failures


def _describe(action: Any) -> str:
    text = repr(action)
    return text if len(text) <= 60 else f"{text[:40]}...({len(action)} chars)"


def _start(env: Env, source: tuple[str, Any]) -> Any:
    kind, value = source
    if kind == "task":
        return env.reset(options={"prompt": value["prompt"], "extras": value.get("extras")})
    return env.reset(seed=value)


def _comparable(output: dict[str, Any]) -> dict[str, Any]:
    return {k: output.get(k) for k in ("observations", "reward", "done", "metadata")}


def play_episode(
    env: Env,
    actions: Sequence[Any],
    *,
    seed: int | None = None,
    task: Task | None = None,
) -> list[dict[str, Any]]:
    """Reset ``env`` (with ``task`` or ``seed``), play ``actions`` until the episode ends, return the outputs.

    Every output is checked against the contract, and a step that ended in error fails: raises
    :class:`ConformanceError` naming the rule. Use it inside hypothesis tests with
    :func:`skyrl_gym.testing.strategies.episodes`.
    """
    name = str(env)
    _start(env, ("task", task) if task is not None else ("seed", seed))
    outputs: list[dict[str, Any]] = []
    for action in actions:
        where = f"step({_describe(action)})"
        try:
            output = env.step(action)
        except Exception as exc:
            raise ConformanceError(
                [Failure("survives-adversarial-actions", f"{where} raised {type(exc).__name__}: {exc}")], name
            ) from exc
        failures = check_step_output(output, where)
        if isinstance(output, dict) and (output.get("metadata") or {}).get("end") == "error":
            failures.append(
                Failure(
                    "survives-adversarial-actions",
                    f"{where} ended in error: {output['metadata'].get('error')}",
                )
            )
        if failures:
            raise ConformanceError(failures, name)
        outputs.append(output)
        if output["done"]:
            break
    return outputs


class _Checker:
    def __init__(self, factory: Callable[[], Env], sources: list[tuple[str, Any]], report: CheckReport):
        self.factory = factory
        self.sources = sources
        self.report = report

    def fresh(self, budget: dict[str, Any] | None = None) -> EpisodeGuard:
        """A new instance, guarded so that contract violations raise instead of ending in error."""
        env = self.factory()
        if not isinstance(env, Env):
            raise _Broken(
                "make-returns-env", f"the factory returned {type(env).__name__}, not a skyrl_gym.Env"
            )
        inner = env.env if isinstance(env, EpisodeGuard) else env
        base = env.budget if isinstance(env, EpisodeGuard) else None
        guard = EpisodeGuard(inner, base.merged(budget) if base else budget, errors="raise")
        return guard

    @contextlib.contextmanager
    def rule(self, name: str) -> Iterator[None]:
        failures_before = len(self.report.failures)
        try:
            yield
        except _Broken as broken:
            self.report.failures.append(Failure(broken.rule, str(broken)))
        except ConformanceError as err:
            self.report.failures.extend(err.failures)
        except Exception as exc:
            self.report.failures.append(Failure(name, f"raised {type(exc).__name__}: {exc}"))
        if len(self.report.failures) == failures_before:
            self.report.passed.append(name)

    def step(self, env: Env, action: Any) -> dict[str, Any]:
        where = f"step({_describe(action)})"
        try:
            output = env.step(action)
        except ContractViolation as exc:
            raise _Broken(exc.rule, f"{where}: {exc}") from exc
        except Exception as exc:
            raise _Broken(
                "survives-adversarial-actions", f"{where} raised {type(exc).__name__}: {exc}"
            ) from exc
        failures = check_step_output(output, where)
        if failures:
            raise ConformanceError(failures, self.report.env_name)
        return output

    def play(self, env: Env, actions: Sequence[Any], source: tuple[str, Any]) -> list[dict[str, Any]]:
        _start(env, source)
        outputs = []
        for action in actions:
            output = self.step(env, action)
            outputs.append(output)
            if output["done"]:
                break
        return outputs


def check_env(
    factory: Callable[[], Env] | str,
    *,
    tasks: Sequence[Task] | None = None,
    seeds: Sequence[int] = (0, 1),
    full_reward: float = 1.0,
    noop_action: Any = "",
    oracle: bool = True,
    tags: Sequence[str] = (),
    actions: Sequence[Any] = ("hello", "I don't know."),
    gymnasium_check: bool = True,
    raise_on_failure: bool = True,
) -> CheckReport:
    """Check that the environment made by ``factory`` follows the contract; see :data:`RULES`.

    Args:
        factory: makes a fresh environment, e.g. ``lambda: skyrl_gym.make("math")``, or a registered id
            (``"math"``), which is made with its registered settings.
        tasks: episodes to play (``{"prompt", "extras"}``); without them ``reset(seed=s)`` for ``seeds``,
            which needs the environment's default task set (without one, only the rule ``has-tasks`` is
            reported, failed).
        full_reward: what the reference action must earn.
        noop_action: the action that must earn nothing.
        oracle: check :meth:`~skyrl_gym.Env.reference_action`; it fails when that returns ``None`` for every
            task (``False`` leaves the rule out, reported as skipped).
        tags: protocol tags to build adversarial actions from (the environment's ``protocol_tags``
            attribute is used too).
        actions: ordinary actions played in the determinism and isolation checks.
        gymnasium_check: also run Gymnasium's checker on ``gymnasium.make("skyrl_gym/<id>")`` when the
            environment comes from the registry and has a default task set.
        raise_on_failure: raise :class:`ConformanceError` listing the broken rules (else just report).
    """
    if isinstance(factory, str):
        env_id = factory

        def factory() -> Env:
            import skyrl_gym

            return skyrl_gym.make(env_id)

    sources = [("task", t) for t in tasks] if tasks else [("seed", s) for s in seeds]
    if not sources:
        raise ValueError("check_env needs at least one task or seed")
    probe = factory()
    report = CheckReport(env_name=str(probe))
    checker = _Checker(factory, sources, report)
    with checker.rule("make-returns-env"):
        if not isinstance(probe, Env):
            raise _Broken(
                "make-returns-env", f"the factory returned {type(probe).__name__}, not a skyrl_gym.Env"
            )
    if report.failures:
        with contextlib.suppress(Exception):
            probe.close()
        return _finish(report, raise_on_failure)
    if not tasks and probe.sample_task(sources[0][1]) is None:
        probe.close()
        report.failures.append(Failure("has-tasks", _NO_TASKS.format(env=report.env_name)))
        return _finish(report, raise_on_failure)
    probe.close()
    all_tags = tuple(dict.fromkeys((*tags, *getattr(probe.unwrapped, "protocol_tags", ()))))

    with checker.rule("reset-returns-prompt"):
        for source in sources:
            env = checker.fresh()
            result = _start(env, source)
            if not (isinstance(result, tuple) and len(result) == 2):
                raise _Broken(
                    "reset-returns-prompt",
                    f"reset returned {type(result).__name__}, not (observations, info)",
                )
            observations, info = result
            if not isinstance(observations, list) or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in observations
            ):
                raise _Broken("reset-returns-prompt", f"reset returned observations {observations!r:.200}")
            if not isinstance(info, dict):
                raise _Broken("reset-returns-prompt", f"reset returned info {info!r:.200}")
            env.close()

    with checker.rule("step-after-done-raises"):
        env = checker.fresh()
        outputs = checker.play(env, [noop_action] * 50, sources[0])
        if not outputs[-1]["done"]:
            raise _Broken("step-after-done-raises", "50 no-op steps did not end the episode; set max_turns")
        try:
            env.step(noop_action)
        except EpisodeEndedError:
            pass
        else:
            raise _Broken("step-after-done-raises", "step() after the end returned instead of raising")
        env.close()

    with checker.rule("survives-adversarial-actions"):
        env = checker.fresh()
        for action in adversarial_action_list(all_tags):
            for output in checker.play(env, [action], sources[0]):
                if output["metadata"].get("end") == "error":
                    raise _Broken(
                        "survives-adversarial-actions",
                        f"step({_describe(action)}) ended in error: {output['metadata'].get('error')}",
                    )
        env.close()

    hostile = tuple(getattr(probe.unwrapped, "hostile_actions", ()) or ())
    if not hostile:
        report.skipped["model-failures-are-not-errors"] = "the environment declares no hostile_actions"
    else:
        with checker.rule("model-failures-are-not-errors"):
            env = checker.fresh()
            for action in hostile:
                for output in checker.play(env, [action, action], sources[0]):
                    if output["metadata"].get("end") == "error":  # play() flags it; this names the rule
                        raise _Broken(
                            "model-failures-are-not-errors",
                            f"step({_describe(action)}) ended in error: {output['metadata'].get('error')}",
                        )
            env.close()

    probe_actions = [*actions, noop_action]
    nondeterministic = getattr(getattr(probe, "spec", None), "nondeterministic", False)
    if nondeterministic:
        report.skipped["deterministic"] = "the spec declares the environment nondeterministic"
    else:
        with checker.rule("deterministic"):
            for source in sources:
                first, second = checker.fresh(), checker.fresh()
                if _start(first, source) != _start(second, source):
                    raise _Broken(
                        "deterministic", f"two resets with {source} returned different prompts or info"
                    )
                a = [_comparable(o) for o in checker.play(first, probe_actions, source)]
                b = [_comparable(o) for o in checker.play(second, probe_actions, source)]
                if a != b:
                    raise _Broken(
                        "deterministic", f"two episodes of {source} with the same actions differ:\n{a}\n{b}"
                    )
                first.close()
                second.close()

    if not nondeterministic:
        with checker.rule("no-shared-state"):
            for source in sources:
                first, second = checker.fresh(), checker.fresh()
                _start(first, source)
                _start(second, source)
                a_first = _comparable(checker.step(first, probe_actions[0]))
                if not a_first["done"]:
                    checker.step(first, probe_actions[1])
                b_first = _comparable(checker.step(second, probe_actions[0]))
                if a_first != b_first:
                    raise _Broken(
                        "no-shared-state",
                        f"an instance's first step changed after another instance stepped:\n{a_first}\n{b_first}",
                    )
                first.close()
                second.close()

    with checker.rule("close-is-idempotent"):
        env = checker.fresh()
        env.close()
        env.close()
        env = checker.fresh()
        _start(env, sources[0])
        env.close()
        env.close()

    with checker.rule("budget-max-turns"):
        for limit in (1, 2):
            env = checker.fresh({"max_turns": limit})
            outputs = checker.play(env, [noop_action] * (limit + 3), sources[0])
            if len(outputs) > limit or not outputs[-1]["done"]:
                raise _Broken(
                    "budget-max-turns", f"with max_turns={limit} the episode took {len(outputs)} steps"
                )
            last = outputs[-1]["metadata"]
            if len(outputs) == limit and last.get("end") == "truncated" and last.get("truncated_by") is None:
                raise _Broken("budget-max-turns", "a truncated end does not name its budget (truncated_by)")
            env.close()

    with checker.rule("budget-observation-length"):
        cap = 32
        env = checker.fresh({"max_observation_chars": cap})
        for action in [*probe_actions, "x" * 100_000]:
            for output in checker.play(env, [action], sources[0]):
                for message in output["observations"]:
                    if len(message["content"]) > cap + 40:
                        raise _Broken(
                            "budget-observation-length",
                            f"an observation of {len(message['content'])} chars passed a cap of {cap}",
                        )
        env.close()

    if oracle:
        _check_oracle(checker, full_reward)
    else:
        report.skipped["oracle-earns-full-reward"] = "check_env(..., oracle=False)"
    _check_noop(checker, noop_action)
    _check_deferred_verification(checker, noop_action)
    _check_reuse(checker, noop_action)
    if gymnasium_check:
        _check_gymnasium(checker, probe)
    return _finish(report, raise_on_failure)


_NO_TASKS = (
    "{env} has no default task set (sample_task returns None), so no episode can start and no other rule was "
    "checked: give it tasks, check_env(factory, tasks=[{{'prompt': [...], 'extras': {{...}}}}]), or on the "
    'command line skyrl-gym check ID --tasks FILE (a JSON list or JSON lines of {{"prompt": ..., "extras": ...}})'
)


def _check_oracle(checker: _Checker, full_reward: float) -> None:
    found = False
    with checker.rule("oracle-earns-full-reward"):
        for source in checker.sources:
            env = checker.fresh()
            _start(env, source)
            reference = env.reference_action()
            if reference is None:
                continue
            found = True
            steps = list(reference) if isinstance(reference, (list, tuple)) else [reference]
            outputs = [checker.step(env, a) for a in steps]
            total = sum(o["reward"] for o in outputs)
            if not math.isclose(total, full_reward, abs_tol=1e-9):
                raise _Broken(
                    "oracle-earns-full-reward",
                    f"the reference action {_describe(reference)} for {source} earned {total}, not {full_reward}",
                )
            if not outputs[-1]["done"] or outputs[-1]["metadata"].get("end") != "terminated":
                raise _Broken(
                    "oracle-earns-full-reward",
                    f"the reference action for {source} did not terminate the episode",
                )
            env.close()
            if type(env.unwrapped).reference_episode is not Env.reference_episode:
                _check_reference_episode(checker, source, full_reward)
        if not found:  # an oracle asked for and never run is not a pass: say so, or pass oracle=False
            raise _Broken(
                "oracle-earns-full-reward",
                "reference_action() returned None for every task: give the environment a reference action, "
                "or call check_env(..., oracle=False) to leave this rule out on purpose",
            )


def _check_reference_episode(checker: _Checker, source: tuple[str, Any], full_reward: float) -> None:
    """Play an overridden ``reference_episode()`` turn by turn: full reward, terminated on its last action."""
    env = checker.fresh()
    _start(env, source)
    episode = env.reference_episode()
    if episode is None:
        env.close()
        return
    outputs = []
    for number, action in enumerate(episode, 1):
        output = checker.step(env, action)
        outputs.append(output)
        if output["done"] and number < len(episode):
            raise _Broken(
                "oracle-earns-full-reward",
                f"the reference episode for {source} ended at action {number} of {len(episode)}",
            )
    total = sum(o["reward"] for o in outputs)
    if not outputs or not math.isclose(total, full_reward, abs_tol=1e-9):
        raise _Broken(
            "oracle-earns-full-reward",
            f"the reference episode {_describe(episode)} for {source} earned {total}, not {full_reward}",
        )
    if not outputs[-1]["done"] or outputs[-1]["metadata"].get("end") != "terminated":
        raise _Broken(
            "oracle-earns-full-reward", f"the reference episode for {source} did not terminate the episode"
        )
    env.close()


def _check_noop(checker: _Checker, noop_action: Any) -> None:
    with checker.rule("noop-earns-nothing"):
        for source in checker.sources:
            env = checker.fresh()
            outputs = checker.play(env, [noop_action] * 50, source)
            total = sum(o["reward"] for o in outputs)
            if total > 0:
                raise _Broken(
                    "noop-earns-nothing", f"the no-op {_describe(noop_action)} earned {total} for {source}"
                )
            env.close()


def _episode_actions(env: Env, noop_action: Any) -> tuple[list[Any], bool]:
    """The reference episode of the started ``env`` (and ``True``), or no-ops until the end (``False``).

    The reference episode is the overridden ``reference_episode()``, else the reference action (a list of
    actions is played one per turn, as the oracle check plays it).
    """
    if type(env.unwrapped).reference_episode is not Env.reference_episode:
        episode = env.reference_episode()
    else:
        reference = env.reference_action()
        episode = (
            None if reference is None else reference if isinstance(reference, (list, tuple)) else [reference]
        )
    if episode is None:
        return [noop_action] * 50, False
    return list(episode), True


def _check_deferred_verification(checker: _Checker, noop_action: Any) -> None:
    """Deferred and in-step verification give the same total; ``evaluate()`` is ``None`` without deferral."""
    supports = compared = False
    with checker.rule("deferred-verification"):
        probe = checker.fresh()
        supports = bool(probe.supports_deferred_verification)
        probe.close()
        # without deferral one episode shows that evaluate() has nothing to do; with it, every task is compared
        for source in checker.sources if supports else checker.sources[:1]:
            in_step = checker.fresh()
            _start(in_step, source)
            actions, is_reference = _episode_actions(in_step, noop_action)
            outputs = checker.play(in_step, actions, source)
            # after the episode ended, as a runner calls it: nothing was deferred, so nothing to verify
            leftover = in_step.evaluate()
            in_step.close()
            if leftover is not None:
                raise _Broken(
                    "deferred-verification",
                    f"evaluate() returned {leftover!r:.200} for {source} although verification was not deferred",
                )
            if not supports or not is_reference:
                continue
            deferred = checker.fresh()
            deferred.defer_verification()
            deferred_outputs = checker.play(deferred, actions, source)
            verdict = deferred.evaluate()
            deferred.close()
            if not isinstance(verdict, dict) or not isinstance(verdict.get("reward"), (int, float)):
                raise _Broken(
                    "deferred-verification",
                    f"evaluate() after a deferred episode of {source} returned {verdict!r:.200}, "
                    "not {'reward': float, ...}",
                )
            total = sum(o["reward"] for o in outputs)
            total_deferred = sum(o["reward"] for o in deferred_outputs) + float(verdict["reward"])
            if not math.isclose(total, total_deferred, abs_tol=1e-9):
                raise _Broken(
                    "deferred-verification",
                    f"the reference episode of {source} earned {total} verified in its last step but "
                    f"{total_deferred} deferred",
                )
            compared = True
    if supports and not compared and "deferred-verification" in checker.report.passed:
        checker.report.passed.remove("deferred-verification")
        checker.report.skipped["deferred-verification"] = "no task has a reference episode to compare"


def _task_of(env: Env, source: tuple[str, Any]) -> Task | None:
    kind, value = source
    return value if kind == "task" else env.sample_task(value)


def _outcome(outputs: Sequence[dict[str, Any]]) -> list[tuple[float, bool, Any]]:
    return [(float(o["reward"]), bool(o["done"]), (o.get("metadata") or {}).get("end")) for o in outputs]


def _check_reuse(checker: _Checker, noop_action: Any) -> None:
    """Each task, played after ``reuse()`` of an environment that played the previous one, ends as fresh."""
    supports = compared = False
    with checker.rule("reuse"):
        probe = checker.fresh()
        supports = bool(probe.supports_reuse)
        probe.close()
        if not supports:
            return
        sources = checker.sources
        # another sample of the same task (what a group of samples does), then the next tasks
        pairs = [(sources[0], sources[0]), *list(zip(sources, sources[1:], strict=False))[:2]]
        for first, second in pairs:
            kept = checker.fresh()
            task = _task_of(kept, second)
            if task is None:
                kept.close()
                continue
            _start(kept, first)
            actions, _ = _episode_actions(kept, noop_action)
            checker.play(kept, actions, first)
            if not kept.reuse(task.get("extras")):
                kept.close()  # declining is allowed: the kept resources did not fit
                continue
            kept.init(task["prompt"])
            actions, _ = _episode_actions(kept, noop_action)
            after_reuse = []
            for action in actions:
                after_reuse.append(checker.step(kept, action))
                if after_reuse[-1]["done"]:
                    break
            kept.close()
            fresh = checker.fresh()
            as_fresh = checker.play(fresh, actions, ("task", task))
            fresh.close()
            if _outcome(after_reuse) != _outcome(as_fresh):
                raise _Broken(
                    "reuse",
                    f"{second} after reuse() ended {_outcome(after_reuse)} (reward, done, end per step), "
                    f"fresh {_outcome(as_fresh)}",
                )
            compared = True
    if supports and not compared and "reuse" in checker.report.passed:
        checker.report.passed.remove("reuse")
        checker.report.skipped["reuse"] = "every reuse() was declined: nothing to compare"


def _check_gymnasium(checker: _Checker, probe: Env) -> None:
    report = checker.report
    env_spec = getattr(probe, "spec", None)
    from skyrl_gym.envs.registration import registry

    if env_spec is None or registry.get(env_spec.id) is not env_spec:
        report.skipped["gymnasium-check-env"] = "the environment does not come from the registry"
        return
    if probe.sample_task(0) is None:
        report.skipped["gymnasium-check-env"] = "the environment has no default task set for reset()"
        return
    import warnings

    import gymnasium
    from gymnasium.utils.env_checker import check_env as gymnasium_check_env

    with checker.rule("gymnasium-check-env"):
        env = gymnasium.make(f"skyrl_gym/{env_spec.id}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gymnasium_check_env(env.unwrapped, skip_render_check=True)
        env.close()


def _finish(report: CheckReport, raise_on_failure: bool) -> CheckReport:
    if raise_on_failure and report.failures:
        raise ConformanceError(report.failures, report.env_name)
    return report
