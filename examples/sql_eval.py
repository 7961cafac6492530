"""Score text-to-SQL predictions with the project's evaluator (what `skyrl-gym sql-eval` runs).

    python examples/sql_eval.py          # writes sql_example/ in the current folder

Builds a tiny synthetic text-to-SQL test set (6 questions on generated SQLite databases, about 2 s, offline),
writes a predictions file that answers half the rows with the gold query and half with a wrong one, and
scores it. The same files work on the command line:

    skyrl-gym sql-eval --data sql_example/test.jsonl --predictions sql_example/preds.jsonl
"""

from __future__ import annotations

import json
from pathlib import Path

from skyrl_gym.datasets.sql.synth.build import build_synthetic
from skyrl_gym.envs.sql.evaluate import evaluate, format_report
from skyrl_gym.rows import read_rows, write_split

out = Path("sql_example")

# The dataset: SkyRL rows (prompt, db_path, reward_spec.ground_truth = the gold SQL, extra_info.level).
splits = build_synthetic(out, seed=0, sizes={"train": 0, "dev": 0, "test": 6}, engine="sqlite")
write_split(splits["test"], out, "test")  # sql_example/test.jsonl
rows = read_rows(out / "test.jsonl")
for row in rows:
    print(f"[{row['extra_info']['level']}] {row['extra_info']['question']}")

# Predictions: JSONL, one object per row, naming the row by its 0-based `index` and carrying a bare `sql`
# query (or a model's whole `completion`, <think>...</think><solution>...</solution>).
predictions = []
for index, row in enumerate(rows):
    gold = row["reward_spec"]["ground_truth"]
    wrong = "SELECT 1 WHERE 1 = 0"  # runs, but returns no rows: a wrong answer, not an error
    predictions.append({"index": index, "sql": gold if index % 2 == 0 else wrong})
with open(out / "preds.jsonl", "w", encoding="utf-8") as file:
    file.writelines(json.dumps(p) + "\n" for p in predictions)

# Score: each prediction's result rows against the gold query's, on the row's database.
lines = (out / "preds.jsonl").read_text(encoding="utf-8").splitlines()
report = evaluate(rows, [json.loads(line) for line in lines])
print(format_report(report))
print(f"accuracy: {report.overall.accuracy:.3f} ({report.overall.correct}/{report.overall.scored})")
