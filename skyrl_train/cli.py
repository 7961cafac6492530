"""``skyrl-train`` (also ``python -m skyrl_train``): train, evaluate, and inspect configs.

    skyrl-train train sql_cpu trainer.epochs=2 generator.n_samples_per_prompt=4
    skyrl-train eval sql_cpu 'data.val_data=[data/text2sql/heldout.parquet]' generator.eval_n_samples_per_prompt=8
    skyrl-train eval --env text2sql --n 4                       # pass@k of a model on an environment's tasks
    skyrl-train eval --data rows.jsonl --base-url http://127.0.0.1:8000 --model Qwen/Qwen2.5-7B-Instruct
    skyrl-train eval --env swe --env-config backend=bwrap --limit 4 --max-turns 2
    skyrl-train eval --env terminal --agent react --limit 4 --show 2   # and 2 episodes as the model played them
    skyrl-train config sql_qwen7b_8gpu          # print the validated config
    skyrl-train config sql_cpu --describe       # every key: type, default, this recipe's value, what it does
    skyrl-train recipes                         # list the shipped recipes
    skyrl-train export runs/sql_cpu out/model   # a run's newest checkpoint as a Hugging Face model folder
    skyrl-train serve --port 8000               # the Tinker training API (the official tinker client)
    skyrl-train view runs/sql_cpu               # the run's page: curves, trajectories, coloured tokens

The first argument after the command is a recipe name (``skyrl_train/recipes/<name>.yaml``) or a YAML path,
``sql_cpu`` (the main job) when left out; the rest are dotted ``key=value`` overrides. A user's mistake (an
unknown key or recipe, a missing data file) prints ``error: <message>`` and exits with status 2; ``--debug``
shows the traceback too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

# Idle OpenMP threads spin by default; on a small CPU shared with environments and databases they steal the
# cores the engine needs (a decode step measured 10-40x slower). Set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

DEFAULT_RECIPE = "sql_cpu"
"""The recipe ``train``, ``eval`` and ``config`` use when none is named: the main job (about 35 minutes)."""

USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, KeyError, FileNotFoundError)
"""Errors that are the user's to fix (config validation errors are ValueErrors): printed as one line."""


class UsageError(ValueError):
    """A command line that cannot run as given."""


def _message(exc: BaseException) -> str:
    if isinstance(exc, KeyError) and type(exc).__str__ is KeyError.__str__ and exc.args:
        return str(exc.args[0])  # KeyError's own str() quotes the message
    return str(exc) or type(exc).__name__


def report_error(exc: BaseException, debug: bool) -> int:
    """Print a user's error as ``error: <message>`` on stderr (after the traceback with ``debug``); 2."""
    if debug:
        traceback.print_exception(type(exc), exc, exc.__traceback__)
    print(f"error: {_message(exc)}", file=sys.stderr)
    return 2


def _load(args: argparse.Namespace) -> Any:
    from skyrl_train.config import load_config

    return load_config(args.recipe, args.overrides)


def _announce(args: argparse.Namespace, cfg: Any) -> None:
    """One line before a run starts: the recipe it runs and how to pick another."""
    how = (
        f"`skyrl-train {args.command} RECIPE [key=value ...]` runs another, `skyrl-train recipes` lists them"
    )
    default = f" (the default: {how})" if args.recipe_defaulted else f" ({how})"
    print(f"skyrl-train {args.command}: recipe {args.recipe}{default}", file=sys.stderr, flush=True)
    from skyrl_train.data import check_data_files

    check_data_files(cfg.data)  # before torch and the model load


def _train(args: argparse.Namespace) -> int:
    cfg = _load(args)
    _announce(args, cfg)
    from skyrl_train.loop.trainer import Trainer

    with Trainer(cfg) as trainer:
        summary = trainer.fit()
    shown = {k: v for k, v in summary.items() if k not in ("evaluations", "stages", "eval_sets", "examples")}
    print(json.dumps(shown, indent=2))
    if summary["stages"]:
        print(f"{'evaluation':16} {'step':>5} {'correct':>12} {'accuracy':>9} {'valid format':>13}")
        for st in summary["stages"]:
            share = f"{st['correct']}/{st['questions']}"
            print(
                f"{st['stage']:16} {st['step']:5d} {share:>12} {st['accuracy']:9.1%} {st['valid_format_rate']:13.1%}"
            )
    if summary.get("eval_sets"):
        from skyrl_train.report import stage_tables

        print(stage_tables(summary))
        print(f"report: {cfg.trainer.run_dir}/report.md")
    print(f"run folder: {cfg.trainer.run_dir}")
    return 0


def _eval_tasks(args: argparse.Namespace) -> int:
    """``eval --env``/``--data``: the tasks through the agent runner, pass@k per family and overall."""
    from skyrl_train.evaluation.passk import env_rows, format_episodes, format_table, read_rows, run_eval
    from skyrl_train.inference import make_engine

    if args.show < 0:
        raise UsageError(f"--show takes a number of episodes (0 or more), got {args.show}")
    env_config = _env_config(args.env_config)
    if args.data:
        rows = read_rows(args.data)[: args.limit]
    else:
        rows = env_rows(args.env, args.limit, env_config or None)
    if not rows:
        raise UsageError("no tasks to evaluate")
    # the settings apply to every environment the rows name
    env_classes = {args.env} if args.env else {str(row.get("env_class")) for row in rows}
    env_configs = {name: env_config for name in env_classes} if env_config else None
    if args.base_url:
        engine = make_engine("remote", model_path=args.model, base_url=args.base_url)
    else:
        engine = make_engine("hf", model_path=args.model)
    try:
        table, output = run_eval(
            rows,
            engine,
            n=args.n,
            agent=args.agent,
            max_turns=args.max_turns,
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            family_column=args.family_column,
            env_configs=env_configs,
            max_concurrency=args.max_concurrency,
            progress=args.progress,
        )
    finally:
        close = getattr(engine, "close", None)
        if callable(close):
            close()
    print(format_table(table))
    if args.show:
        print()
        print(format_episodes(rows, output.trajectories, args.show))
    if args.json:
        print(json.dumps({"pass_at_k": table, "metrics": output.metrics}, indent=2))
    return 0


def _env_config(items: list[str]) -> dict[str, Any]:
    """``--env-config KEY=VALUE`` items as a dict; each value is read as YAML (``5``, ``true``, ``bwrap``)."""
    import yaml

    config: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--env-config takes KEY=VALUE, got {item!r}")
        config[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
    return config


def _eval(args: argparse.Namespace) -> int:
    if args.env or args.data:
        return _eval_tasks(args)
    if args.show or args.progress is not None:
        flag = "--show" if args.show else "--progress" if args.progress else "--no-progress"
        raise UsageError(f"{flag} applies to `skyrl-train eval --env/--data`, not to a recipe's evaluation")
    cfg = _load(args)
    _announce(args, cfg)
    if not cfg.data.val_data:
        # the recipe's own evaluation sets make the best example of rows to name
        example = next((p for s in cfg.data.eval_sets.values() for p in s.paths), "path/to/rows.parquet")
        raise UsageError(
            f"nothing to evaluate: recipe {args.recipe} has no data.val_data; name the rows, e.g. "
            f"'data.val_data=[{example}]'"
        )
    from skyrl_train.loop.trainer import Trainer

    cfg.trainer.eval_before_train = False
    with Trainer(cfg, evaluate_only=True) as trainer:
        metrics = trainer.evaluate()
    print(json.dumps({"step": trainer.step, **metrics}, indent=2))
    return 0


def _serve(args: argparse.Namespace) -> int:
    """``serve``: the Tinker-compatible server (skyrl_train.tinker.server) until interrupted."""
    from skyrl_train.tinker.server import serve

    base_models = {}
    for item in args.base_model:
        name, sep, source = item.partition("=")
        if not sep or not name or not source:
            raise UsageError(f"--base-model takes NAME=SOURCE, got {item!r}")
        base_models[name] = source
    serve(args.host, args.port, args.store_dir, args.device, base_models or None)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv``; a user's error prints ``error: <message>`` and returns 2."""
    # MKL must use the threads it is given rather than pick a number per call, or a run's sums (and so its
    # weights) depend on what else the machine was doing: Intel's condition for reproducible results
    os.environ.setdefault("MKL_DYNAMIC", "FALSE")
    args = _parser().parse_args(argv)
    if args.command in ("train", "eval", "config"):
        args.recipe_defaulted = args.recipe is None
        args.recipe = args.recipe or DEFAULT_RECIPE
    try:
        return _run(args)
    except USER_ERRORS as exc:
        return report_error(exc, getattr(args, "debug", False))


def _parser() -> argparse.ArgumentParser:
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show the traceback of an error too"
    )
    parser = argparse.ArgumentParser(prog="skyrl-train", description=__doc__.split("\n")[0], parents=[debug])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("train", "train with a recipe and overrides"),
        ("eval", "only evaluate (pass@k with generator.eval_n_samples_per_prompt > 1)"),
        ("config", "print the validated config as YAML"),
    ):
        p = sub.add_parser(name, help=help_text, parents=[debug])
        p.add_argument(
            "recipe",
            nargs="?",
            default=None,
            help=f"recipe name or YAML path (default: {DEFAULT_RECIPE}, the ~35-minute main job; "
            "skyrl-train recipes lists them)",
        )
        p.add_argument("overrides", nargs="*", help="dotted key=value overrides")
        if name == "config":
            p.add_argument(
                "--describe", action="store_true", help="one line per key: value, type, default and docstring"
            )
        if name == "eval":
            tasks = p.add_mutually_exclusive_group()
            tasks.add_argument("--env", help="evaluate on this environment's default task set (no recipe)")
            tasks.add_argument("--data", help="evaluate on these rows (parquet or JSONL, SkyRL format)")
            p.add_argument(
                "--model", default="embedded:smollm2-135m", help="model name or path (and tokenizer)"
            )
            p.add_argument("--base-url", help="an OpenAI-compatible server to sample from (remote engine)")
            p.add_argument("--n", type=int, default=1, help="samples per task (pass@k for k up to n)")
            p.add_argument("--limit", type=int, default=50, help="most tasks evaluated")
            p.add_argument("--agent", default="multi_turn", help="agent name (multi_turn, react, ...)")
            p.add_argument("--max-turns", type=int, default=None, help="most model turns per trajectory")
            p.add_argument("--max-tokens", type=int, default=512, help="most tokens per model turn")
            p.add_argument("--temperature", type=float, default=None, help="default: 0 for n=1, else 0.7")
            p.add_argument("--family-column", default="data_source", help="column that names a task's family")
            p.add_argument(
                "--env-config",
                action="append",
                default=[],
                metavar="KEY=VALUE",
                help="a setting of the environments' env_config (repeatable), e.g. backend=bwrap",
            )
            p.add_argument("--max-concurrency", type=int, default=16, help="most trajectories at once")
            p.add_argument("--json", action="store_true", help="also print the table and metrics as JSON")
            p.add_argument(
                "--show",
                type=int,
                default=0,
                metavar="N",
                help="after the table, print N episodes as the model played them: the task, each action and "
                "observation, the reward and end (--env/--data)",
            )
            p.add_argument(
                "--progress",
                action=argparse.BooleanOptionalAction,
                default=None,
                help="episodes done, pass rate so far, elapsed and ETA on stderr (default: when stderr is a "
                "terminal; --progress elsewhere writes one line per episode) (--env/--data)",
            )
    sub.add_parser("recipes", help="list the shipped recipes", parents=[debug])
    export = sub.add_parser(
        "export", help="write a checkpoint's policy as a Hugging Face model folder", parents=[debug]
    )
    export.add_argument("source", help="a run folder (its newest checkpoint) or a checkpoints/step_N folder")
    export.add_argument("out", help="the folder to write (weights, config and tokenizer)")
    view = sub.add_parser(
        "view",
        help="write a run's page: curves, trajectories, tokens coloured by mask or advantage",
        parents=[debug],
    )
    view.add_argument("run", help="the run folder (trainer.run_dir)")
    view.add_argument("--out", help="the HTML file to write (default: RUN/view.html)")
    view.add_argument("--serve", action="store_true", help="then serve it on 127.0.0.1 until Ctrl-C")
    view.add_argument("--port", type=int, default=8765, help="port of --serve")
    replay = sub.add_parser(
        "replay",
        help="rerun a run's recorded updates from a checkpoint and compare losses and weights, or (--episodes) "
        "step today's environments with its recorded actions",
        parents=[debug],
    )
    replay.add_argument("run", help="the run folder (trainer.run_dir), with its record (trainer.record)")
    replay.add_argument(
        "--from-step", type=int, help="start from the checkpoint after this step (default: the newest usable)"
    )
    replay.add_argument(
        "--episodes",
        action="store_true",
        help="replay the recorded episodes against the environments instead",
    )
    replay.add_argument("--limit", type=int, help="at most this many episodes (--episodes)")
    serve = sub.add_parser(
        "serve", help="serve the Tinker training API to the official tinker client", parents=[debug]
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on")
    serve.add_argument(
        "--store-dir", default="runs/tinker", help="folder of saved checkpoints (kept across restarts)"
    )
    serve.add_argument("--device", default="cpu", help="torch device of the models (cpu, cuda, cuda:1, ...)")
    serve.add_argument(
        "--base-model",
        action="append",
        default=[],
        metavar="NAME=SOURCE",
        help="a base model clients may name (Hugging Face name or path); default: the embedded SmolLM2",
    )
    return parser


def _replay(args: argparse.Namespace) -> int:
    """``skyrl-train replay``: a line per step (or per episode that did not replay the same); 1 when any
    differs."""
    from skyrl_train.replay import replay_episodes, replay_training

    if not Path(args.run).is_dir():
        raise FileNotFoundError(f"no run folder {args.run}")
    if args.episodes:
        episodes = replay_episodes(args.run, limit=args.limit)
        for e in episodes:
            if e.status != "same":
                at = f" at turn {e.turn}" if e.turn is not None else ""
                print(f"step {e.step} #{e.index} ({e.env_class}) {e.status}{at}: {e.detail}")
        counts = {s: sum(e.status == s for e in episodes) for s in ("same", "diverged", "skipped")}
        print(f"{len(episodes)} episodes: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
        return 1 if counts["diverged"] else 0
    result = replay_training(args.run, from_step=args.from_step)
    print(f"from the checkpoint after step {result.checkpoint_step}:")
    for step in result.steps:
        loss = step.metrics.get("policy/loss")
        shown = f"policy/loss recorded {loss[0]!r} replayed {loss[1]!r}" if loss else "no recorded loss"
        differing = sorted(k for k, (a, b) in step.metrics.items() if a != b)
        if step.equal:
            verdict = "bitwise equal"
        elif differing:
            by = f"; by at most {step.largest_relative:.3g} relative"
            advantages = "" if step.advantages_equal else "advantages, "
            verdict = f"differs ({advantages}{', '.join(differing)}{by})"
        else:
            verdict = "differs (advantages)"
        print(f"step {step.step}: {shown}; {len(step.metrics)} metrics {verdict}")
    print(f"weights after step {result.steps[-1].step}: {result.weights}")
    return 0 if result.equal else 1


def _run(args: argparse.Namespace) -> int:
    if args.command == "serve":
        return _serve(args)
    if args.command == "export":
        from skyrl_train.training.checkpoint import export_model

        print(export_model(args.source, args.out))
        return 0
    if args.command == "view":
        from skyrl_train.viewer import serve_view, write_view

        if not Path(args.run).is_dir():
            raise FileNotFoundError(f"no run folder {args.run}")
        path = write_view(args.run, args.out)
        print(path)
        if args.serve:
            serve_view(path, args.port)
        return 0
    if args.command == "replay":
        return _replay(args)
    if args.command == "recipes":
        from skyrl_train.config import list_recipes

        print("\n".join(list_recipes()))
        return 0
    if args.command == "config":
        cfg = _load(args)
        if args.describe:
            from skyrl_train.config import describe_config

            print("\n".join(describe_config(cfg)))
        else:
            print(cfg.to_yaml(), end="")
        return 0
    return _train(args) if args.command == "train" else _eval(args)


if __name__ == "__main__":
    sys.exit(main())
