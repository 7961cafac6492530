"""Write the offline terminal task set: Harbor task folders, train/test splits and SkyRL dataset rows.

    python datasets/terminal/build.py                   # seeds 0-4 of every family into datasets/terminal
    python datasets/terminal/build.py --seeds 20 --out /tmp/terminal   # a larger set elsewhere

Seeds below ``--test-from`` go to the train split, the others to the test split, so no task is in both.
Writes ``tasks/<family>-<seed>/`` (instruction.md, task.toml, environment/, solution/solve.sh, tests/),
``splits/{train,test}.txt`` (task names) and ``{train,test}.jsonl`` (rows: ``prompt``, ``env_class``,
``reward_spec``, ``task_path``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from families import FAMILIES, Spec, generate  # noqa: E402

HERE = Path(__file__).resolve().parent
DOCKERFILE = """\
# The terminal environment's image with this task's files in /app, owned by the agent's user.
FROM local/terminal:latest
COPY --chown=agent:agent app/ /app/
USER agent
RUN if [ -f /app/.setup.sh ]; then cd /app && bash .setup.sh && rm -f .setup.sh; fi
WORKDIR /app
"""
TEST_SH = """\
#!/bin/bash
# Harbor's verifier contract: the reward goes to /logs/verifier/reward.txt.
mkdir -p /logs/verifier
if python3 /tests/check.py; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


def task_toml(spec: Spec, family: str, seed: int) -> str:
    tags = ", ".join(json.dumps(t) for t in [family, *spec.tags])
    return textwrap.dedent(
        f"""\
        version = "1.0"

        [metadata]
        author_name = "skyrl"
        difficulty = "{spec.difficulty}"
        category = "{spec.category}"
        tags = [{tags}]
        family = "{family}"
        seed = {seed}

        [verifier]
        timeout_sec = 60.0

        [agent]
        timeout_sec = 600.0

        [environment]
        build_timeout_sec = 300.0
        cpus = 1
        memory_mb = 1024
        storage_mb = 256
        allow_internet = false
        """
    )


def write_task(root: Path, family: str, seed: int) -> str:
    """Write one task folder under ``root``; returns its name."""
    spec = generate(family, seed)
    name = f"{family}-{seed}"
    folder = root / name
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "environment" / "app").mkdir(parents=True)
    (folder / "instruction.md").write_text(textwrap.dedent(spec.instruction).strip() + "\n")
    (folder / "task.toml").write_text(task_toml(spec, family, seed))
    (folder / "environment" / "Dockerfile").write_text(DOCKERFILE)
    for relative, content in spec.files.items():
        path = folder / "environment" / "app" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        path.chmod(0o755 if relative in spec.executable or relative.endswith(".sh") else 0o644)
    (folder / "solution").mkdir()
    (folder / "solution" / "solve.sh").write_text("#!/bin/bash\n" + textwrap.dedent(spec.solution))
    (folder / "tests").mkdir()
    (folder / "tests" / "test.sh").write_text(TEST_SH)
    (folder / "tests" / "check.py").write_text(spec.check)
    return name


def row(root: Path, name: str) -> dict:
    from skyrl_gym.envs.terminal.env import instruction_prompt
    from skyrl_gym.envs.terminal.tasks import load_task

    task = load_task(root / name)
    return {
        "prompt": instruction_prompt(task),
        "env_class": "terminal",
        "reward_spec": {"method": "tests", "ground_truth": name},
        "task_path": name,
        "data_source": "skyrl-terminal",
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=HERE, help="where tasks/ and splits/ go")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per family")
    parser.add_argument("--test-from", type=int, default=4, help="first seed of the test split")
    args = parser.parse_args(argv)
    tasks = args.out / "tasks"
    if tasks.exists():
        shutil.rmtree(tasks)
    tasks.mkdir(parents=True)
    splits: dict[str, list[str]] = {"train": [], "test": []}
    for family in FAMILIES:
        for seed in range(args.seeds):
            name = write_task(tasks, family, seed)
            splits["test" if seed >= args.test_from else "train"].append(name)
    (args.out / "splits").mkdir(exist_ok=True)
    for split, names in splits.items():
        (args.out / "splits" / f"{split}.txt").write_text("".join(f"{n}\n" for n in names))
        with open(args.out / f"{split}.jsonl", "w") as handle:
            for name in names:
                handle.write(json.dumps(row(tasks, name)) + "\n")
    print(f"{len(FAMILIES)} families, {sum(map(len, splits.values()))} tasks "
          f"(train {len(splits['train'])}, test {len(splits['test'])}) in {args.out}")  # fmt: skip


if __name__ == "__main__":
    main()
