"""What RL could win by teaching the main job's model to query first: after the recipe's warm-up, the held-out
set scored three ways, greedy, question by question:

- ``natural``: the model chooses (what the stage evaluations measure);
- ``query_first``: the model writes its ``<think>`` line, then its first turn is forced to go on with
  ``<sql>``: it must run a query, read the database's answer, and answer in its second turn;
- ``direct``: the same, forced to go on with ``<solution>``: it answers at once.

The paired gap ``query_first - direct`` (same questions, its standard error) bounds what learning *when* to
query can add; the share of ``query_first``'s correct answers that followed an error or an empty result shows
how much of it is self-correction. The warm-up is the recipe's, with ``--corrections`` of its reference
episodes being correction episodes (``environment.skyrl_gym.text2sql.reference_corrections``).

    python benchmarks/sql_query_first.py                       # about 15 CPU-minutes
    python benchmarks/sql_query_first.py --corrections 0 --warmup-steps 12 --out runs/qf_copy.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FORCED = {"query_first": "\n<sql>", "direct": "\n<solution>"}
"""What a forced first turn goes on with after the model's ``</think>``."""
EXAMPLES = 12
"""Episodes kept per mode in the JSON result, of those whose first query failed or came back empty."""
THINK_TOKENS = 48
"""Most tokens of the model's own ``<think>`` line before the forced tag."""


class ForcedFirstTurn:
    """An engine that forces the first turn of each episode to go on with ``tag`` after the model's
    ``<think>...</think>``, and passes every later turn to ``inner`` unchanged.

    A prompt is a later turn when an earlier served sequence (prompt + response) is its prefix: each episode's
    first turn is served before its second.
    """

    def __init__(self, inner: Any, tag: str):
        self.inner = inner
        self.tag_ids = list(inner.tokenizer.encode(tag, add_special_tokens=False))
        self.close_ids = list(inner.tokenizer.encode("</think>", add_special_tokens=False))
        self.served: list[tuple[int, ...]] = []
        self.forced = 0

    @property
    def tokenizer(self) -> Any:
        return self.inner.tokenizer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _later_turn(self, prompt: Sequence[int]) -> bool:
        key = tuple(prompt)
        return any(len(s) <= len(key) and key[: len(s)] == s for s in self.served)

    async def _one(self, prompt: list[int], params: Any) -> Any:
        from skyrl_train.inference.base import GenerationOutput

        if self._later_turn(prompt):
            [out] = await self.inner.generate([prompt], params)
            return out
        think_params = params.model_copy(
            update={"stop": ["</think>"], "max_generate_length": min(THINK_TOKENS, params.max_tokens)}
        )
        [think] = await self.inner.generate([prompt], think_params)
        head = list(think.token_ids)
        if think.stop_string != "</think>":
            if think.stop_reason == "stop" and head:
                head = head[:-1]  # the model ended its turn: drop its end-of-turn token, close the thought
            head += self.close_ids
        head += self.tag_ids
        budget = max(params.max_tokens - len(head), 1)
        [rest] = await self.inner.generate(
            [prompt + head], params.model_copy(update={"max_generate_length": budget})
        )
        self.forced += 1
        tokens = head + list(rest.token_ids)
        self.served.append(tuple(prompt + tokens))
        return GenerationOutput(tokens, None, rest.stop_reason, rest.stop_string)

    async def generate(self, prompts: Sequence[Sequence[int]], params: Any) -> list[Any]:
        outs = await asyncio.gather(*(self._one(list(p), params) for p in prompts))
        return list(outs)

    async def update_weights(self, named_tensors: Iterable[Any]) -> None:
        await self.inner.update_weights(named_tensors)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--warmup-steps", type=int, default=None, help="default: the recipe's")
    parser.add_argument("--episode-fraction", type=float, default=None, help="default: the recipe's")
    parser.add_argument("--corrections", type=float, default=0.6, help="share of correction episodes")
    parser.add_argument("--limit", type=int, default=None, help="held-out questions (default: all)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--override", action="append", default=[], help="more sql_cpu overrides")
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    parser.add_argument(
        "--save-model",
        type=Path,
        default=None,
        help="also save the warmed-up policy here as a Hugging Face model folder (RL can start from it: "
        "benchmarks/sql_ablations.py --from-model DIR)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from skyrl_train.config import load_config
    from skyrl_train.evaluation.stages import StageEvaluator
    from skyrl_train.evaluation.stats import mean_se, paired_change
    from skyrl_train.loop.trainer import Trainer
    from skyrl_train.rollout import MultiTurnGenerator

    run_dir = Path(tempfile.mkdtemp(prefix="sql_query_first_"))
    overrides = [
        f"trainer.run_dir={run_dir}",
        "trainer.logger=[jsonl]",
        f"trainer.seed={args.seed}",
        "data.eval_sets={}",
        f"environment.skyrl_gym.text2sql.reference_corrections={args.corrections}",
        *(["trainer.sft_warmup.steps=" + str(args.warmup_steps)] if args.warmup_steps is not None else []),
        *(
            ["trainer.sft_warmup.episode_fraction=" + str(args.episode_fraction)]
            if args.episode_fraction is not None
            else []
        ),
        *args.override,
    ]
    config = load_config("sql_cpu", overrides)
    heldout_rows = [
        json.loads(line) for line in (REPO / "data/text2sql/heldout.jsonl").read_text().splitlines() if line
    ]
    if args.limit:
        heldout_rows = heldout_rows[: args.limit]
    started = time.perf_counter()
    result: dict[str, Any] = {"corrections": args.corrections, "seed": args.seed, "modes": {}}
    with Trainer(config) as trainer:
        trainer.warmup()
        result["warmup_s"] = time.perf_counter() - started
        if args.save_model:
            trainer.policy.model.save_pretrained(args.save_model)
            trainer.tokenizer.save_pretrained(args.save_model)
        from skyrl_train.evaluation.stages import EvalSet

        outcomes: dict[str, dict[int, float]] = {}
        for mode in ("natural", "query_first", "direct"):
            engine = trainer.engine if mode == "natural" else ForcedFirstTurn(trainer.engine, FORCED[mode])
            generator = MultiTurnGenerator.from_config(engine, config)
            evaluator = StageEvaluator.from_config(config)
            evaluator.sets = [EvalSet("heldout", heldout_rows, ("after_warmup",))]
            evaluator.records = {"heldout": []}
            begun = time.perf_counter()
            evaluator.run(generator, "after_warmup", 0)
            record = evaluator.records["heldout"][0]
            outcomes[mode] = record.outcomes
            levels: dict[str, list[float]] = {}
            for i, value in record.outcomes.items():
                levels.setdefault(str(heldout_rows[i]["extra_info"]["level"]), []).append(value)
            result["modes"][mode] = {
                "accuracy": mean_se(list(record.outcomes.values())),
                "levels": {level: mean_se(values) for level, values in sorted(levels.items())},
                "behaviour": record.behaviour,
                "errors": record.errors,
                "seconds": time.perf_counter() - begun,
                # what the model did after its first query failed or came back empty: does it read the answer?
                "surprised": sum(bool(f.get("surprised")) for f in record.flags.values()),
                "after_a_surprise": [
                    {"question": i, "correct": record.outcomes.get(i), "turns": record.episodes[i]}
                    for i, flags in sorted(record.flags.items())
                    if flags.get("surprised")
                ][:EXAMPLES],
            }
        result["gap_query_first_minus_direct"] = paired_change(outcomes["direct"], outcomes["query_first"])
        result["gap_query_first_minus_natural"] = paired_change(outcomes["natural"], outcomes["query_first"])
    result["wall_s"] = time.perf_counter() - started
    result["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"warm-up {result['warmup_s']:.0f} s; reference_corrections={args.corrections}")
    for mode, entry in result["modes"].items():
        acc = entry["accuracy"]
        per_level = ", ".join(f"{k} {v['mean']:.1%}" for k, v in entry["levels"].items())
        b = entry["behaviour"]
        print(
            f"{mode:12s} {acc['mean']:.1%} ± {acc['se']:.1%} (n={acc['n']}; {per_level}); queried first "
            f"{b['queried_first']:.0%}, correct after an error or empty result {b['self_corrected'] or 0:.0%}"
            f" ({entry['surprised']} answered after one); {entry['seconds']:.0f} s"
        )
    gap = result["gap_query_first_minus_direct"]
    print(f"query_first - direct: {gap['mean'] * 100:+.1f} ± {gap['se'] * 100:.1f} points (n={gap['n']})")
    print(f"wall {result['wall_s']:.0f} s, peak RSS {result['peak_rss_gb']:.2f} GB")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
