"""``skyrl-train`` (also ``python -m skyrl_train``): train, evaluate, and inspect configs.

    skyrl-train train sql_cpu trainer.epochs=2 generator.n_samples_per_prompt=4
    skyrl-train eval sql_cpu trainer.resume_mode=latest generator.eval_n_samples_per_prompt=8
    skyrl-train config sql_qwen7b_8gpu          # print the validated config
    skyrl-train config sql_cpu --describe       # every key: type, default, this recipe's value, what it does
    skyrl-train recipes                         # list the shipped recipes

The first argument after the command is a recipe name (``skyrl_train/recipes/<name>.yaml``) or a YAML path;
the rest are dotted ``key=value`` overrides.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

# Idle OpenMP threads spin by default; on a small CPU shared with environments and databases they steal the
# cores the engine needs (a decode step measured 10-40x slower). Set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _load(args: argparse.Namespace) -> Any:
    from skyrl_train.config import ConfigError, load_config

    try:
        return load_config(args.recipe, args.overrides)
    except ConfigError as exc:
        raise SystemExit(str(exc)) from None


def _train(args: argparse.Namespace) -> int:
    from skyrl_train.trainer import Trainer

    cfg = _load(args)
    with Trainer(cfg) as trainer:
        summary = trainer.fit()
    print(json.dumps({k: v for k, v in summary.items() if k not in ("evaluations", "stages")}, indent=2))
    if summary["stages"]:
        print(f"{'evaluation':16} {'step':>5} {'correct':>12} {'accuracy':>9} {'valid format':>13}")
        for st in summary["stages"]:
            share = f"{st['correct']}/{st['questions']}"
            print(
                f"{st['stage']:16} {st['step']:5d} {share:>12} {st['accuracy']:9.1%} {st['valid_format_rate']:13.1%}"
            )
    print(f"run folder: {cfg.trainer.run_dir}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    from skyrl_train.trainer import Trainer

    cfg = _load(args)
    cfg.trainer.eval_before_train = False
    with Trainer(cfg) as trainer:
        metrics = trainer.evaluate()
    print(json.dumps({"step": trainer.step, **metrics}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="skyrl-train", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("train", "train with a recipe and overrides"),
        ("eval", "only evaluate (pass@k with generator.eval_n_samples_per_prompt > 1)"),
        ("config", "print the validated config as YAML"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("recipe", nargs="?", default="sql_cpu", help="recipe name or YAML path")
        p.add_argument("overrides", nargs="*", help="dotted key=value overrides")
        if name == "config":
            p.add_argument(
                "--describe", action="store_true", help="one line per key: value, type, default and docstring"
            )
    sub.add_parser("recipes", help="list the shipped recipes")
    args = parser.parse_args(argv)
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
