"""The walk a reader takes from a dataset row to the loss: which of the project's files one RL step runs, in
what order, and how often control comes back to each.

Builds the trainer of a recipe (untraced), takes its first batch of rows, then runs one
``Trainer.train_step`` with a profile hook on every thread it starts. Each call into a function of
``skyrl_gym/`` or ``skyrl_train/`` is one event; consecutive events in the same file are one visit. Prints:

- the walk of each thread: each visit in order (a file visited again later appears again);
- the distinct files (with the SQL service's and the environments' own counted apart), the visits, and the
  files entered more than once, most entered first.

It measures what runs, so it counts what a reader following the code would also meet (logging, metrics,
the record), and nothing that does not run with the recipe's settings. Times are not measured: the hook
slows the step many times over.

    python benchmarks/row_to_loss_walk.py [--recipe sql_cpu] [--walk] [override ...]
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
PACKAGES = tuple(str(REPO / name) + "/" for name in ("skyrl_gym", "skyrl_train"))

SMALL = [
    "trainer.max_steps=1",
    "trainer.train_batch_size=2",
    "trainer.policy_mini_batch_size=2",
    "generator.n_samples_per_prompt=2",
    "trainer.micro_train_batch_size_per_gpu=4",
    "trainer.sft_warmup.steps=0",
    "trainer.eval_before_train=false",
    "trainer.eval_interval=0",
    "data.eval_sets={}",
]
"""One step on two rows with two samples each, no warm-up and no evaluation."""


class Walk:
    """The project files entered, in order, per traced thread, from profile events."""

    def __init__(self) -> None:
        self.threads: dict[int, list[str]] = collections.defaultdict(list)

    def hook(self, frame, event, arg):  # noqa: ANN001 - the profile hook's signature
        if event != "call":
            return
        path = frame.f_code.co_filename
        if not path.startswith(PACKAGES):
            return
        name = path[len(str(REPO)) + 1 :]
        visits = self.threads[threading.get_ident()]  # one list per thread: no lock needed
        if not visits or visits[-1] != name:
            visits.append(name)

    @property
    def visits(self) -> list[str]:
        """Every thread's visits, thread after thread."""
        return [name for visits in self.threads.values() for name in visits]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="sql_cpu")
    parser.add_argument("--walk", action="store_true", help="print every visit, in order")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()

    import tempfile

    from skyrl_train.config import load_config
    from skyrl_train.loop.trainer import Trainer

    with tempfile.TemporaryDirectory() as run_dir:
        config = load_config(args.recipe, [*SMALL, f"trainer.run_dir={run_dir}", *args.overrides])
        with Trainer(config) as trainer:
            rows = next(iter(trainer.iterator))
            walk = Walk()
            threading.setprofile(walk.hook)
            sys.setprofile(walk.hook)
            try:
                metrics = trainer.train_step(rows)
            finally:
                sys.setprofile(None)
                threading.setprofile(None)  # type: ignore[arg-type]

    entered = collections.Counter(walk.visits)
    files = sorted(entered)
    envs = [f for f in files if f.startswith("skyrl_gym/envs/")]
    sql_service = [f for f in files if f.startswith(("skyrl_gym/envs/sql/", "skyrl_gym/runtime/sql"))]
    if args.walk:
        print("files:")
        for name in files:
            print(f"  {name}")
        for number, visits in enumerate(walk.threads.values(), 1):
            print(f"walk of thread {number}:")
            for index, name in enumerate(visits, 1):
                print(f"  {index:4d} {name}")
    print(
        f"recipe {args.recipe}: one step on {len(rows)} rows, loss {metrics.get('policy/loss', float('nan')):.4f}"
    )
    print(f"distinct project files run: {len(files)}")
    print(f"  of them skyrl_gym/envs/: {len(envs)} (the SQL environment and its service: {len(sql_service)})")
    print(f"  the rest (framework and trainer): {len(files) - len(envs)}")
    print(f"threads that ran project code: {len(walk.threads)}")
    print(f"visits (entries into a file from another one, per thread): {len(walk.visits)}")
    print(f"entries into skyrl_train/loop/trainer.py: {entered['skyrl_train/loop/trainer.py']}")
    again = [(name, count) for name, count in entered.most_common() if count > 1]
    print(f"files entered more than once: {len(again)}")
    for name, count in again[:25]:
        print(f"  {count:5d}  {name}")


if __name__ == "__main__":
    main()
