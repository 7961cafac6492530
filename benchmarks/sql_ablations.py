"""Ablations of the main job (recipe sql_cpu): which choices make GRPO itself improve the model.

Each variant is the main job with a few overrides, run as its own ``skyrl-train train sql_cpu`` in
``runs/<variant>`` with the same stage evaluations (the 200 held-out questions before training, after the
warm-up and after RL); the table gives, per variant, the GRPO steps that fitted in the budget, the held-out
accuracy after the warm-up and after RL, RL's own paired change (after RL - after warm-up, on the same
questions) with its standard error and its size in standard errors, the whole change from the base model,
and the wall time and peak memory of the run.

    python benchmarks/sql_ablations.py                      # every variant, one after the other (hours)
    python benchmarks/sql_ablations.py --only light_warmup,dapo --steps 12 --rl-stages-only
    python benchmarks/sql_ablations.py --table-only         # the table of the runs already in runs/
    python benchmarks/sql_ablations.py --run-name main=sql_cpu --table-only   # a run under another name
    python benchmarks/sql_ablations.py --from-model runs/warm_model --only g8 --steps 10   # RL from a saved warm-up

``--in-domain`` also scores the 54 validation questions (the training set's domains) at the same stages, so a
change RL makes in its own domains can be told from one that reaches the held-out domains; ``--eval-set
validation --table-only`` prints their table.

Runs already finished (their summary.json exists) are not run again unless ``--rerun``. On a shared or slow
machine a wall-time budget gives each variant whatever steps the load left it: ``--steps N`` replaces the
recipe's ``trainer.max_wall_time_s`` by N GRPO steps for every variant, and ``--rl-stages-only`` evaluates the
held-out set only after the warm-up and after RL (what RL's own change needs; no Chinook set).

The warm-up is the same in every variant that keeps the recipe's (it is seeded) and takes about as long as
the RL steps. ``--from-model DIR`` starts each variant's RL from a saved warm-up instead: a model folder
written by ``skyrl-train export`` from a run that stopped after its warm-up (for example
``skyrl-train train sql_cpu trainer.max_steps=1 trainer.policy.optimizer_config.lr=1e-30
trainer.run_name=warm`` then ``skyrl-train export runs/warm runs/warm_model``). Each variant then evaluates
the held-out set before RL (the warm-up model) and after, so RL's own change is paired as usual; variants
that change the warm-up are refused.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: groups of 8 samples (a micro-batch holds two whole groups, so each prompt is computed once in the update),
#: the groups without reward variance dropped and no further batches sampled
GROUPS_OF_8 = [
    "generator.n_samples_per_prompt=8",
    "trainer.algorithm.dynamic_sampling.type=filter",
    "trainer.algorithm.dynamic_sampling.max_sample_batches=1",
    "trainer.micro_train_batch_size_per_gpu=16",
    "trainer.micro_forward_batch_size_per_gpu=16",
    "generator.max_concurrent_trajectories=32",
]

#: training data a variant reads that the main job does not build: folder -> build_compact.py arguments (built
#: by run_variant when missing). Easy and medium questions of the training domains (the main job trains on
#: easy ones alone, and half of the held-out set is medium)
EASY_MEDIUM_DATA = "data/text2sql_easy_medium"
DATA_BUILDS = {
    EASY_MEDIUM_DATA: "--levels easy medium --train 512 --validation 64 --heldout 0".split(),
}

#: variant name -> overrides of sql_cpu (the recipe itself is "main")
VARIANTS: dict[str, list[str]] = {
    "main": [],
    # a shorter warm-up leaves accuracy for RL to gain; a larger learning rate makes each RL step count
    "light_warmup": ["trainer.sft_warmup.steps=6", "trainer.policy.optimizer_config.lr=4.0e-5"],
    # DAPO's dynamic sampling on top: only groups whose rewards differ are trained on
    "dapo": [
        "trainer.sft_warmup.steps=6",
        "trainer.policy.optimizer_config.lr=4.0e-5",
        "trainer.algorithm.dynamic_sampling.type=filter",
        "trainer.algorithm.dynamic_sampling.max_sample_batches=3",
    ],
    # the recipe's full warm-up (a policy that already answers in the protocol, so fewer format failures and
    # shorter, cheaper episodes) with dapo's larger learning rate and dynamic sampling
    "dapo_full_warmup": [
        "trainer.policy.optimizer_config.lr=4.0e-5",
        "trainer.algorithm.dynamic_sampling.type=filter",
        "trainer.algorithm.dynamic_sampling.max_sample_batches=3",
    ],
    # dapo_full_warmup sampling hotter: the warm-up leaves a policy of ~0.1 nats per token, so a group's
    # samples are often the same answer and earn the same reward; temperature 1.3 spreads them (the training
    # forward divides its logits by the same temperature)
    "dapo_full_warmup_hot": [
        "trainer.policy.optimizer_config.lr=4.0e-5",
        "trainer.algorithm.dynamic_sampling.type=filter",
        "trainer.algorithm.dynamic_sampling.max_sample_batches=3",
        "generator.sampling_params.temperature=1.3",
    ],
    # the recipe's warm-up and learning rate with GROUPS_OF_8: twice the episodes a step
    "g8": GROUPS_OF_8,
    # g8 with RAFT's advantages: a supervised step on the model's own best answer of each group that has a
    # correct one (reward-ranked fine-tuning), nothing pushed down. At the warm-up's learning rate (1e-4)
    # the policy collapsed within 5 steps (train pass rate 0.38 -> 0); the recipe's 1e-5 here
    "raft": ["trainer.algorithm.advantage_estimator=raft", *GROUPS_OF_8],
    # raft at 3e-5, reached over 3 steps (a fresh Adam's first steps move every weight by about lr)
    "raft_3e5": [
        "trainer.algorithm.advantage_estimator=raft",
        "trainer.policy.optimizer_config.lr=3.0e-5",
        "trainer.policy.optimizer_config.num_warmup_steps=3",
        *GROUPS_OF_8,
    ],
    # g8 sampling hotter: the warm-up leaves ~0.1 nats per token, so a group's samples are often one answer;
    # temperature 1.2 spreads them, for more groups with reward variance
    "g8_hot": [*GROUPS_OF_8, "generator.sampling_params.temperature=1.2"],
    # warm-up and RL on easy and medium questions (297 of the 512 are medium): the recipe trains on easy ones
    # only, so neither stage can teach the held-out set's medium half (joins, grouping)
    "easy_medium": [f"data.train_data=[{EASY_MEDIUM_DATA}/train.parquet]"],
    # larger groups: more chances of reward variance per prompt, fewer prompts per step
    "groups8": [
        "trainer.sft_warmup.steps=6",
        "trainer.policy.optimizer_config.lr=4.0e-5",
        "trainer.train_batch_size=2",
        "trainer.policy_mini_batch_size=2",
        "generator.n_samples_per_prompt=8",
    ],
}


def stage_evals(*stages: str, in_domain: bool = False) -> str:
    """The override that evaluates the held-out set at ``stages`` and no other set (``in_domain``: also the
    validation questions, from the training set's own domains, at the same stages)."""
    sets = {"heldout": "data/text2sql/heldout.parquet"}
    if in_domain:
        sets["validation"] = "data/text2sql/validation.parquet"
    stage_list = ", ".join(stages)
    body = ", ".join(f"{name}: {{paths: [{path}], stages: [{stage_list}]}}" for name, path in sets.items())
    return f"data.eval_sets={{{body}}}"


def run_variant(name: str, overrides: list[str], run_name: str, common: list[str]) -> float:
    """Train one variant (``common``: overrides of every variant); returns its wall time in seconds."""
    command = [
        str(Path(sys.executable).with_name("skyrl-train")),
        "train",
        "sql_cpu",
        f"trainer.run_name={run_name}",
        *common,
        *overrides,
    ]
    for folder, build_args in DATA_BUILDS.items():
        if any(folder in o for o in overrides) and not (REPO / folder / "train.parquet").exists():
            build = [sys.executable, "datasets/sql/build_compact.py", "--out", folder, *build_args]
            subprocess.run(build, cwd=REPO, check=True)
    print(f"== {name}: {' '.join(command[3:])}", flush=True)
    start = time.perf_counter()
    subprocess.run(command, cwd=REPO, check=True)
    return time.perf_counter() - start


def _stage(stages: list[dict[str, Any]], label: str) -> dict[str, Any] | None:
    return next((s for s in stages if s["stage"] == label), None)


def _change(changes: list[dict[str, Any]], a: str, b: str) -> dict[str, Any] | None:
    return next((c for c in changes if c["from"] == a and c["to"] == b), None)


def from_model_overrides(model: str, in_domain: bool = False) -> list[str]:
    """Overrides that start RL from the saved warm-up model ``model`` and evaluate it before RL."""
    return [
        f"trainer.policy.model.path={model}",
        "trainer.sft_warmup.steps=0",
        stage_evals("before", "after_rl", in_domain=in_domain),
    ]


def row_of(name: str, summary: dict[str, Any], eval_set: str, from_model: bool = False) -> dict[str, Any]:
    """The table row of one finished run (``from_model``: a run started from a saved warm-up, whose
    "before" stage is the warm-up model; it has no base-model stage)."""
    table = (summary.get("eval_sets") or {}).get(eval_set) or {}
    stages, changes = table.get("stages", []), table.get("changes", [])
    warm_label = "before" if from_model else "after warm-up"
    warm, rl = _stage(stages, warm_label), _stage(stages, "after RL")
    own = _change(changes, warm_label, "after RL")
    whole = None if from_model else _change(changes, "before", "after RL")
    return {
        "variant": name,
        "steps": summary.get("steps"),
        "n": (rl or {}).get("n"),
        "after_warmup": warm and (warm["accuracy"], warm["se"]),
        "after_rl": rl and (rl["accuracy"], rl["se"]),
        "rl_change": own and (own["mean"], own["se"]),
        "whole_change": whole and (whole["mean"], whole["se"]),
        "wall_s": summary.get("wall_time_s"),
        "peak_rss_gb": summary.get("peak_rss_gb"),
    }


def _pct(pair: tuple[float, float | None] | None, sign: bool = False) -> str:
    if not pair or pair[0] is None:
        return "-"
    mean, se = pair
    text = f"{mean * 100:+.1f}" if sign else f"{mean * 100:.1f}"
    return f"{text} ± {se * 100:.1f}" if se is not None else text


def _in_se(pair: tuple[float, float | None] | None) -> str:
    if not pair or pair[0] is None or not pair[1]:
        return "-"
    return f"{pair[0] / pair[1]:+.1f}"


def format_table(rows: list[dict[str, Any]], eval_set: str) -> str:
    """The ablation table (Markdown)."""
    lines = [
        f"held-out set: {eval_set} (accuracy %, ± standard error; changes paired on the same questions)",
        "",
        "| variant | GRPO steps | n | after warm-up | after RL | RL's own change | in SE | base -> after RL "
        "| wall s | peak RSS GB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {r['steps']} | {r['n']} | {_pct(r['after_warmup'])} | {_pct(r['after_rl'])} "
            f"| {_pct(r['rl_change'], True)} | {_in_se(r['rl_change'])} | {_pct(r['whole_change'], True)} "
            f"| {r['wall_s']} | {r['peak_rss_gb']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="", help="comma-separated variants (default: all)")
    parser.add_argument("--table-only", action="store_true", help="print the table of finished runs only")
    parser.add_argument("--rerun", action="store_true", help="run variants whose summary.json exists again")
    parser.add_argument("--eval-set", default="heldout")
    parser.add_argument(
        "--steps", type=int, default=None, help="N GRPO steps instead of the wall-time budget"
    )
    parser.add_argument(
        "--rl-stages-only", action="store_true", help="held-out set after warm-up and RL only"
    )
    parser.add_argument(
        "--in-domain",
        action="store_true",
        help="with --rl-stages-only or --from-model: also score the validation questions (training's domains)",
    )
    parser.add_argument(
        "--from-model",
        default=None,
        metavar="DIR",
        help="start every variant's RL from this saved warm-up model (skyrl-train export) instead of warming up",
    )
    parser.add_argument(
        "--run-name",
        action="append",
        default=[],
        metavar="VARIANT=RUN",
        help="the run folder name of a variant (default: ablation_<variant>)",
    )
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {sorted(VARIANTS)}")
    if args.in_domain and not (args.from_model or args.rl_stages_only):
        parser.error("--in-domain needs --rl-stages-only or --from-model (the recipe's own evaluations stay)")
    if args.from_model:
        changes_warmup = [n for n in names if any(o.startswith("trainer.sft_warmup.") for o in VARIANTS[n])]
        if changes_warmup:
            parser.error(f"--from-model keeps the saved warm-up; these variants change it: {changes_warmup}")
    prefix = "ablation_rl_" if args.from_model else "ablation_"
    run_names = {n: f"{prefix}{n}" for n in names}
    for item in args.run_name:
        variant, _, run = item.partition("=")
        run_names[variant] = run
    common = []
    if args.steps is not None:
        common += ["trainer.max_wall_time_s=null", f"trainer.max_steps={args.steps}"]
    if args.from_model:
        common += from_model_overrides(args.from_model, in_domain=args.in_domain)
    elif args.rl_stages_only:
        common.append(stage_evals("after_warmup", "after_rl", in_domain=args.in_domain))
    rows = []
    for name in names:
        summary_path = REPO / "runs" / run_names[name] / "summary.json"
        if not args.table_only and (args.rerun or not summary_path.exists()):
            run_variant(name, VARIANTS[name], run_names[name], common)
        if summary_path.exists():
            summary = json.loads(summary_path.read_text())
            rows.append(row_of(name, summary, args.eval_set, from_model=bool(args.from_model)))
        else:
            print(f"{name}: no finished run at {summary_path.parent}", file=sys.stderr)
    print(format_table(rows, args.eval_set))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
