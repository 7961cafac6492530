"""What the rollout record (``trainer.record``) costs the main job, and what replaying it takes.

The main job's recipe (``sql_cpu``) runs a few RL steps twice, side by side in this script, each in its own
process: once with the record off, once on (every trajectory, with the trainer's log-probs). The warm-up and
the evaluations are left out: they do not change with the record. The table gives each run's seconds per step
(median) and of the update, the record's bytes per trajectory and on disk, the peak resident memory, and the
ratio on/off. Then ``skyrl-train replay`` reruns the recorded run's last step from its checkpoint (no engine,
no environment) and says whether the losses and weights came out bitwise equal, and how long it took.

For trajectories like the main job's, start from its trained model (``skyrl-train export runs/sql_cpu M``):

    python benchmarks/record_overhead.py --model M [--steps 3] [--out runs/record_overhead]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from skyrl_train.tracking import read_metrics


def run(model: str | None, steps: int, run_dir: Path, record: bool) -> dict[str, float]:
    overrides = [
        f"trainer.run_dir={run_dir}",
        f"trainer.max_steps={steps}",
        "trainer.sft_warmup.steps=0",
        "trainer.eval_before_train=false",
        "trainer.eval_interval=0",
        "data.eval_sets={}",
        "data.val_data=[]",
        "trainer.ckpt_interval=1",
        "trainer.max_ckpts_to_keep=2",
        f"trainer.record.enabled={str(record).lower()}",
        *([f"trainer.policy.model.path={model}"] if model else []),
    ]
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "skyrl_train.cli", "train", "sql_cpu", *overrides]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    rows = read_metrics(run_dir / "metrics.jsonl")
    rl = [r for r in rows if "time/step_s" in r]
    summary = json.loads((run_dir / "summary.json").read_text())
    folder = run_dir / "rollouts"
    record_bytes = sum(p.stat().st_size for p in folder.glob("*.parquet")) if folder.exists() else 0
    trajectories = sum(r.get("record/trajectories", 0.0) for r in rl)
    return {
        "steps": len(rl),
        "step_s": statistics.median(r["time/step_s"] for r in rl),
        "train_s": statistics.median(r["time/train_s"] for r in rl),
        "generate_s": statistics.median(r["time/generate_s"] for r in rl),
        "trajectories": trajectories,
        "record_bytes": record_bytes,
        "bytes_per_trajectory": record_bytes / trajectories if trajectories else 0.0,
        "peak_rss_gb": summary["peak_rss_gb"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", help="the policy to start from (default: the recipe's, the bundled model)")
    parser.add_argument("--steps", type=int, default=3, help="RL steps per run")
    parser.add_argument("--out", default="runs/record_overhead", help="folder of the two runs")
    args = parser.parse_args()
    out = Path(args.out)
    results = {name: run(args.model, args.steps, out / name, name == "on") for name in ("off", "on")}
    off, on = results["off"], results["on"]
    print(f"{'':24}{'record off':>14}{'record on':>14}{'on/off':>10}")
    for key, unit in (("step_s", "s"), ("generate_s", "s"), ("train_s", "s"), ("peak_rss_gb", "GiB")):
        print(f"{key + ' (' + unit + ')':24}{off[key]:>14.2f}{on[key]:>14.2f}{on[key] / off[key]:>10.3f}")
    print(
        f"record: {on['trajectories']:.0f} trajectories, {on['record_bytes'] / 2**20:.2f} MiB, "
        f"{on['bytes_per_trajectory']:.0f} bytes per trajectory"
    )

    started = time.perf_counter()
    replay = subprocess.run(
        [sys.executable, "-m", "skyrl_train.cli", "replay", str(out / "on")], capture_output=True, text=True
    )
    print(f"replay ({time.perf_counter() - started:.1f} s, exit {replay.returncode}):")
    print(replay.stdout.strip() or replay.stderr.strip()[-2000:])
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    return replay.returncode


if __name__ == "__main__":
    sys.exit(main())
