"""The README's shell commands run: every command of its ```bash blocks is in ``TABLE`` below, which says how
this file runs it (as written, or with a named tiny change such as one training step, a free port or an output
folder in the test's own folder) or why it does not run it. A command missing from the table, or an entry the
README no longer has, fails. Each run checks what the command promises (the checkpoint and summary, the model
folder transformers loads, the printed config, pass@k, the episodes shown, the built splits, the accuracy, a
server's answer), not only its exit status.

Commands run as a user runs them: their own process, the venv's console scripts, relative paths resolved in a
folder of the test's own (``workdir``: the main job's data built small), so nothing is written under runs/ or
data/ of the repository. ``test_readme.py`` checks that every block parses as pasted.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_readme import ROOT, SHELL, _commands

from tests.serving import serving

BIN = Path(sys.executable).parent
"""The running venv's console scripts (``skyrl-train``, ``skyrl-gym``)."""

README_COMMANDS = [" ".join(words) for _, block in SHELL for words in _commands(block)]


@dataclass(frozen=True)
class Run:
    """The command runs in ``test`` (of this file), as written or with ``change``."""

    test: str
    change: str = "as written"


@dataclass(frozen=True)
class NotRun:
    """The command does not run here, for ``reason``."""

    reason: str


MAKE_MAIN = "make main"
TRAIN = "skyrl-train train sql_cpu trainer.epochs=2 generator.n_samples_per_prompt=8"
EVAL = (
    "skyrl-train eval sql_cpu data.val_data=[data/text2sql/heldout.parquet] generator.eval_n_samples_per_prompt=8 "
    "generator.eval_sampling_params.temperature=0.6"
)
CONFIG = "skyrl-train config sql_qwen7b_8gpu"
EXPORT = "skyrl-train export runs/sql_cpu out/model"
VIEW = "skyrl-train view runs/sql_cpu"
REPLAY = "skyrl-train replay runs/sql_cpu"
REPLAY_EPISODES = "skyrl-train replay runs/sql_cpu --episodes"
ASYNC = (
    "skyrl-train train sql_cpu trainer.mode=async generator.engine_process=true "
    "trainer.fully_async.max_staleness_steps=1 trainer.algorithm.off_policy_correction.method=tis"
)
VLLM = (
    ".venv-vllm/bin/skyrl-train train sql_cpu generator.backend=vllm trainer.max_steps=2 trainer.sft_warmup.steps=0 "
    "trainer.run_name=sql_vllm data.eval_sets={}"
)
SERVE = "skyrl-train serve --port 8000 --store-dir runs/tinker"
CLIENT = "TINKER_API_KEY=tml-local python my_script.py"
TERMINAL_TRAIN = "skyrl-train train terminal_react_cpu"
REACT = (
    "skyrl-train train sql_cpu generator.agent=react generator.agent.tools=[sql] "
    "generator.sampling_params.stop=[</tool_call>]"
)
PASS_AT_K = "skyrl-train eval --env terminal --agent react --limit 4 --n 2 --max-turns 3"
SHOW = "skyrl-train eval --env terminal --agent react --limit 4 --max-turns 3 --show 2"
SQL_BUILD = "python datasets/sql/build.py --out data/sql --real"
SQL_EVAL = "skyrl-gym sql-eval --data data/sql/test.jsonl --predictions preds.jsonl"
RETRIEVAL = "python -m skyrl_gym.envs.search.retrieval.server --corpus data/search/corpus.jsonl --retriever bm25 --port 8000"
SEARCH_BUILD = "python datasets/search/build.py --out data/search"

BATCH = (
    "trainer.train_batch_size=1",
    "trainer.policy_mini_batch_size=1",
    "trainer.micro_train_batch_size_per_gpu=4",
)
"""One prompt a step (its 4 or 8 samples in micro-batches of 4)."""

TINY = (
    "trainer.max_steps=1",
    "trainer.sft_warmup.steps=0",
    "data.eval_sets={}",
    *BATCH,
    "generator.sampling_params.max_generate_length=16",
)
"""One RL step on one prompt, 16 tokens a turn, without the warm-up and the stage evaluations."""

TINY_NOTE = "+ " + " ".join(TINY)

TWO_STEPS = ("trainer.max_steps=2", "trainer.ckpt_interval=1")
"""The README's training run takes two tiny steps with a checkpoint after each: replay reruns the second."""

TABLE: dict[str, Run | NotRun] = {
    MAKE_MAIN: Run(
        "test_make_main_is_the_train_command",
        "make -n main: its recipe line is `skyrl-train train sql_cpu`, which test_train runs with a tiny override "
        "(the whole job takes ~35 min)",
    ),
    "make test": NotRun("make test is what runs this suite"),
    TRAIN: Run("test_train", f"{TINY_NOTE} {' '.join(TWO_STEPS)} (in workdir: runs/sql_cpu lands there)"),
    EVAL: Run(
        "test_eval_prints_pass_at_k",
        "+ generator.eval_sampling_params.max_generate_length=16; the tiny data's heldout (2 rows); the recipe's "
        "own batch settings, not the tiny run's (an evaluation does not resume the data iterator)",
    ),
    CONFIG: Run("test_config_prints_the_recipe"),
    EXPORT: Run("test_export_writes_a_model_transformers_loads", "as written, in workdir after test_train"),
    VIEW: Run("test_view_writes_the_runs_page", "as written, in workdir after test_train"),
    REPLAY: Run("test_replay_reruns_the_last_step", "as written, in workdir after test_train"),
    REPLAY_EPISODES: Run("test_replay_replays_the_episodes", "as written, in workdir after test_train"),
    "ray start --head --port=6379": NotRun(
        "stopping it takes `ray stop`, which stops every Ray node on the machine; tests/train/test_ray_cluster.py "
        "starts a cluster with both ray start commands (a free port) and trains a step across it"
    ),
    "ray start --address=HEAD_IP:6379": NotRun(
        "needs a second machine (tests/train/test_ray_cluster.py joins a second node on this one)"
    ),
    (
        "skyrl-train train sql_cpu trainer.placement.backend=ray trainer.placement.ray_address=auto "
        "trainer.placement.policy_num_gpus_per_node=2 generator.env_workers=4"
    ): NotRun(
        "needs the cluster above; two ranks of the embedded model, the engine and 4 environment actors take "
        "minutes on 2 cores (tests/train/test_ray_cluster.py trains this layout with a tiny model)"
    ),
    ASYNC: Run("test_async_training", f"{TINY_NOTE} trainer.run_dir=runs/async"),
    "make vllm-env data": NotRun(
        "make test builds .venv-vllm (minutes of pip); the data is what the Makefile's data target builds, "
        "built small here by the workdir fixture"
    ),
    VLLM: Run(
        "test_vllm_training",
        f"+ trainer.max_steps=1 {' '.join(BATCH)} generator.sampling_params.max_generate_length=16 "
        "(marked vllm: runs in .venv-vllm)",
    ),
    SERVE: Run("test_serve_answers_the_tinker_client", "a free port, the store in workdir"),
    CLIENT: Run(
        "test_serve_answers_the_tinker_client",
        "examples/tinker_client.py stands for my_script.py, given the server's --base-url",
    ),
    TERMINAL_TRAIN: Run(
        "test_terminal_training",
        f"{TINY_NOTE} trainer.run_dir=<tmp> trainer.eval_before_train=false data.val_data=[] (docker)",
    ),
    REACT: Run("test_react_training", f"{TINY_NOTE} trainer.run_dir=runs/react"),
    PASS_AT_K: Run("test_eval_terminal_pass_at_k", "--limit 1 --max-tokens 32 (docker)"),
    (
        "skyrl-train eval --env terminal --agent react --base-url http://127.0.0.1:8000 --model "
        "Qwen/Qwen2.5-7B-Instruct"
    ): NotRun(
        "needs an OpenAI-compatible server with Qwen2.5-7B: nothing in the project serves /v1/completions on the "
        "CPU (skyrl-train serve speaks the Tinker API) and the machine is offline; tests/train/test_eval_cli.py "
        "runs eval --base-url against a fake /v1/completions server"
    ),
    SHOW: Run("test_eval_terminal_show", "--limit 2 --max-tokens 32 (docker)"),
    SQL_BUILD: Run("test_sql_build", "as written, in workdir (the script from the repository)"),
    "python datasets/sql/build.py --out data/sql --import-spider ~/spider --import-bird ~/bird": NotRun(
        "needs the Spider and BIRD downloads; this machine is offline (tests/sql/test_importers.py imports "
        "small fakes of both)"
    ),
    SQL_EVAL: Run(
        "test_sql_eval_prints_accuracy", "preds.jsonl written by the test (gold SQL for half the rows)"
    ),
    RETRIEVAL: Run("test_retrieval_server_answers", "a free port, in workdir after test_search_build"),
    SEARCH_BUILD: Run("test_search_build", "as written, in workdir (the script from the repository)"),
}


def test_the_table_has_every_readme_command_and_no_other():
    missing = [c for c in README_COMMANDS if c not in TABLE]
    assert not missing, f"README commands with no entry in TABLE (add how this file runs them): {missing}"
    gone = [c for c in TABLE if c not in README_COMMANDS]
    assert not gone, f"TABLE entries the README no longer has: {gone}"
    tests = {name for name, value in globals().items() if name.startswith("test_") and callable(value)}
    unknown = [e.test for e in TABLE.values() if isinstance(e, Run) and e.test not in tests]
    assert not unknown, f"TABLE names tests this file does not have: {unknown}"


def readme(command: str) -> list[str]:
    """The README command's words (it must still be in the README and in TABLE)."""
    assert command in README_COMMANDS and isinstance(TABLE[command], Run), command
    return shlex.split(command)


def argv(words: list[str]) -> list[str]:
    """``words`` with the program as the venv's: its console scripts, its python, scripts of the repository."""
    program, rest = words[0], words[1:]
    if program == "python":
        program = sys.executable
        if rest and rest[0].endswith(".py"):
            rest = [str(ROOT / rest[0]), *rest[1:]]
    elif program.startswith(".venv"):
        program = str(ROOT / program)
    elif program in ("skyrl-train", "skyrl-gym"):
        program = str(BIN / program)
    return [program, *rest]


def run(words: list[str], cwd: Path, timeout: float) -> str:
    """Run the command to its end; its stdout (its exit status must be 0)."""
    proc = subprocess.run(argv(words), cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (
        f"{shlex.join(words)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def replaced(words: list[str], flag: str, value: str) -> list[str]:
    """``words`` with ``flag``'s value replaced."""
    i = words.index(flag)
    return [*words[: i + 1], value, *words[i + 2 :]]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Iterator[Path]:
    """The folder the commands run in, with the main job's data (data/text2sql) built small: the Makefile's
    build_compact.py line with 8 training rows and 1 held-out question per level (a few seconds)."""
    folder = tmp_path_factory.mktemp("readme")
    build = (
        "datasets/sql/build_compact.py --out data/text2sql --levels easy --train 8 --validation 4 --heldout 1"
    )
    run(["python", *build.split()], folder, timeout=120)  # a few seconds
    yield folder
    # the runs' checkpoints here come to several GB: removed with the module, not kept for later sessions
    shutil.rmtree(folder, ignore_errors=True)


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


# --- training, evaluation, export --------------------------------------------------------------------------


def test_make_main_is_the_train_command():
    # under `make test` the parent make's variables would make this one print "Entering directory" lines
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", *readme(MAKE_MAIN)[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    last = shlex.split(out.stdout.strip().splitlines()[-1])
    assert last[0].endswith("/bin/skyrl-train") and last[1:] == ["train", "sql_cpu"], out.stdout
    assert readme(TRAIN)[1:3] == last[1:]  # what test_train runs, with the README's overrides and a tiny one


@pytest.fixture(scope="module")
def sql_run(workdir) -> str:
    """The README's training command with one tiny step, run in workdir; its stdout."""
    return run([*readme(TRAIN), *TINY, *TWO_STEPS], workdir, timeout=600)  # about two minutes on 2 cores


@pytest.mark.slow
def test_train(sql_run, workdir):
    assert "run folder: runs/sql_cpu" in sql_run
    found = summary(workdir / "runs/sql_cpu")
    assert found["steps"] == 2 and found["stopped_by"] == "max_steps"
    assert (workdir / "runs/sql_cpu/checkpoints/step_1/policy").is_dir()
    assert (workdir / "runs/sql_cpu/checkpoints/step_2/policy").is_dir()
    assert (workdir / "runs/sql_cpu/metrics.jsonl").read_text().strip()


@pytest.mark.slow
def test_eval_prints_pass_at_k(sql_run, workdir):
    change = ["generator.eval_sampling_params.max_generate_length=16"]
    out = run([*readme(EVAL), *change], workdir, timeout=300)  # 2 questions x 8 samples: seconds
    printed = json.loads(out[out.index("{") :])
    assert printed["step"] == 2  # the last checkpoint's
    for k in (1, 8):
        assert 0.0 <= printed[f"eval/pass@{k}"] <= 1.0, printed


@pytest.mark.slow
def test_export_writes_a_model_transformers_loads(sql_run, workdir):
    out = run(readme(EXPORT), workdir, timeout=300)
    folder = workdir / "out/model"
    assert str(folder.name) in out and (folder / "config.json").is_file()
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    ids = tokenizer("SELECT 1", return_tensors="pt").input_ids
    assert model(ids).logits.shape[-1] == model.config.vocab_size


@pytest.mark.slow
def test_view_writes_the_runs_page(sql_run, workdir):
    out = run(readme(VIEW), workdir, timeout=300)
    page = workdir / "runs/sql_cpu/view.html"
    assert out.strip() == "runs/sql_cpu/view.html" and page.is_file()
    recorded = sorted((workdir / "runs/sql_cpu/rollouts").glob("step_*.parquet"))
    assert recorded and '"env_class": "text2sql"' in page.read_text()


@pytest.mark.slow
def test_replay_reruns_the_last_step(sql_run, workdir):
    proc = subprocess.run(argv(readme(REPLAY)), cwd=workdir, capture_output=True, text=True, timeout=300)
    out = proc.stdout
    assert "from the checkpoint after step 1:" in out, f"{out}\n{proc.stderr[-3000:]}"
    # Bitwise equal where the BLAS library's sums are added in an order fixed by the thread count (mostly
    # so). Where they are not (seen on a loaded machine and on CI's), the sums differ in their last bits: the
    # metrics by about float32's 1e-7, the weights by a share of the step's own change far under a wrong
    # update's (another optimizer state, learning rate or batch: near 1; one changed token: above 0.01).
    metrics = re.search(
        r"step 2: .*; (\d+) metrics (bitwise equal|differs \((.*); by at most (\S+) relative\))", out
    )
    weights = re.search(r"weights after step 2: (equal|differ .*: (\S+) of the change)", out)
    assert metrics and weights, out
    assert int(metrics.group(1)) >= 10 and "advantages" not in (metrics.group(3) or ""), out
    assert metrics.group(2) == "bitwise equal" or float(metrics.group(4)) < 1e-5, out
    assert weights.group(1) == "equal" or float(weights.group(2)) < 0.01, out
    exact = metrics.group(2) == "bitwise equal" and weights.group(1) == "equal"
    assert proc.returncode == (0 if exact else 1), out  # the command says whether it reproduced bit for bit


@pytest.mark.slow
def test_replay_replays_the_episodes(sql_run, workdir):
    out = run(readme(REPLAY_EPISODES), workdir, timeout=300)
    found = re.search(r"(\d+) episodes: (\d+) same, 0 diverged", out)
    assert found and int(found.group(2)) > 0, out  # an episode that ended in error is skipped, not replayed


def test_config_prints_the_recipe(tmp_path):
    import yaml

    printed = yaml.safe_load(run(readme(CONFIG), tmp_path, timeout=120))
    assert printed["trainer"]["policy"]["model"]["path"] == "Qwen/Qwen2.5-Coder-7B-Instruct"
    assert printed["environment"]["env_class"] == "text2sql"


@pytest.mark.slow
def test_async_training(workdir):
    out = run([*readme(ASYNC), *TINY, "trainer.run_dir=runs/async"], workdir, timeout=600)
    assert "run folder: runs/async" in out
    assert summary(workdir / "runs/async")["steps"] == 1
    assert (workdir / "runs/async/checkpoints/step_1").is_dir()


@pytest.mark.slow
def test_react_training(workdir):
    out = run([*readme(REACT), *TINY, "trainer.run_dir=runs/react"], workdir, timeout=600)
    assert "run folder: runs/react" in out
    assert summary(workdir / "runs/react")["steps"] == 1
    assert "environment/text2sql/react" in (workdir / "runs/react/metrics.jsonl").read_text()


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(900)  # vLLM's engine starts in 20-150 s on 2 cores
def test_vllm_training(workdir):
    pytest.importorskip("vllm")  # under CI=true a missing vLLM fails (the repository's conftest)
    change = ["trainer.max_steps=1", *BATCH, "generator.sampling_params.max_generate_length=16"]
    out = run([*readme(VLLM), *change], workdir, timeout=840)
    assert "run folder: runs/sql_vllm" in out
    assert summary(workdir / "runs/sql_vllm")["steps"] == 1
    assert (workdir / "runs/sql_vllm/checkpoints/step_1").is_dir()


# --- servers ---------------------------------------------------------------------------------------------------


def _free_port() -> int:
    sys.path.insert(0, str(Path(__file__).parent / "tinker"))
    from tinker_server import free_port

    return free_port()


@pytest.mark.slow
def test_serve_answers_the_tinker_client(workdir):
    pytest.importorskip("tinker")
    from test_examples import run_example

    port = str(_free_port())
    words = replaced(readme(SERVE), "--port", port)
    env_var, script = readme(CLIENT)[0].split("=", 1), readme(CLIENT)[2]
    assert env_var == ["TINKER_API_KEY", "tml-local"] and script == "my_script.py"  # run_example sets the key
    url = f"http://127.0.0.1:{port}"
    with serving(
        argv(words), ready_url=f"{url}/api/v1/healthz", log=workdir / "server.log", wait_s=180, cwd=workdir
    ):
        out = run_example("tinker_client.py", "--base-url", url, cwd=workdir, timeout=300)
    loss = re.search(r"^loss: (\S+) ", out, re.M)
    assert loss and float(loss.group(1)) > 0, out
    assert re.search(r"^sampled: '.+'$", out, re.M), out
    assert (workdir / "runs/tinker").is_dir()  # the README's store folder


@pytest.fixture(scope="module")
def search_data(workdir) -> str:
    return run(readme(SEARCH_BUILD), workdir, timeout=300)  # about 20 s


@pytest.mark.slow
def test_search_build(search_data, workdir):
    corpus = workdir / "data/search/corpus.jsonl"
    assert re.search(r"corpus: \d+ passages", search_data)
    assert json.loads(corpus.open().readline())["contents"]
    for split, rows in (("train", 2000), ("test", 400)):
        assert len((workdir / f"data/search/{split}.jsonl").read_text().splitlines()) == rows


@pytest.mark.slow
def test_retrieval_server_answers(search_data, workdir):
    import httpx

    port = str(_free_port())
    url = f"http://127.0.0.1:{port}"
    words = replaced(readme(RETRIEVAL), "--port", port)
    with serving(argv(words), ready_url=f"{url}/health", log=workdir / "server.log", wait_s=120, cwd=workdir):
        health = httpx.get(f"{url}/health", timeout=10).json()
        answer = httpx.post(
            f"{url}/retrieve",
            json={"query": "capital of France", "topk": 3, "return_scores": True},
            timeout=30,
        )
    assert health["retriever"] == "bm25" and health["passages"] > 1000, health
    assert answer.status_code == 200, answer.text
    assert "Paris" in answer.text, answer.text[:2000]


# --- SQL data and scoring ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sql_data(workdir) -> str:
    return run(readme(SQL_BUILD), workdir, timeout=300)  # about 30 s


@pytest.mark.slow
def test_sql_build(sql_data, workdir):
    for split in ("train", "dev", "test", "real_test"):
        rows = len((workdir / f"data/sql/{split}.jsonl").read_text().splitlines())
        assert re.search(rf"^{split}\s+{rows} rows", sql_data, re.M), (split, rows, sql_data)
        assert (workdir / f"data/sql/{split}.parquet").is_file()


@pytest.mark.slow
def test_sql_eval_prints_accuracy(sql_data, workdir):
    rows = [json.loads(line) for line in (workdir / "data/sql/test.jsonl").read_text().splitlines()]
    half = len(rows) // 2
    with (workdir / "preds.jsonl").open("w") as preds:  # the gold query for the first half, none for the rest
        for i, row in enumerate(rows[:half]):
            preds.write(json.dumps({"index": i, "sql": row["reward_spec"]["ground_truth"]}) + "\n")
    out = run(readme(SQL_EVAL), workdir, timeout=300)
    overall = re.search(r"^overall\s+(\d+)\s+(\d+)\s+([\d.]+)%", out, re.M)
    assert overall, out
    assert (int(overall.group(1)), int(overall.group(2))) == (len(rows), half), out
    assert float(overall.group(3)) == pytest.approx(100 * half / len(rows), abs=0.1)


# --- the terminal environment (Docker) --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def docker():
    """The Docker engine and the terminal image, or a skip saying how to get them (a failure under CI=true)."""
    from skyrl_gym.runtime.docker import docker_available, engine

    ok, why = docker_available()
    if not ok:
        pytest.skip(f"no Docker engine: {why} (make docker)")
    try:
        engine().api.inspect_image("local/terminal:latest")
    except Exception:
        pytest.skip("image local/terminal:latest not found; build it with images/build.sh (make docker)")


@pytest.mark.docker
@pytest.mark.slow
def test_terminal_training(docker, tmp_path):
    change = [
        *TINY,
        f"trainer.run_dir={tmp_path / 'run'}",
        "trainer.eval_before_train=false",
        "data.val_data=[]",
    ]
    out = run([*readme(TERMINAL_TRAIN), *change], ROOT, timeout=600)  # its data files are the repository's
    assert f"run folder: {tmp_path / 'run'}" in out
    assert summary(tmp_path / "run")["steps"] == 1


@pytest.mark.docker
@pytest.mark.slow
def test_eval_terminal_pass_at_k(docker, tmp_path):
    out = run([*replaced(readme(PASS_AT_K), "--limit", "1"), "--max-tokens", "32"], tmp_path, timeout=600)
    # tasks, errors, pass@1, pass@2
    overall = re.search(r"^overall\s+1\s+\d+\s+([\d.]+)\s+([\d.]+)$", out, re.M)
    assert overall, out
    assert re.search(r"^family\s+tasks\s+errors\s+pass@1\s+pass@2$", out, re.M), out


@pytest.mark.docker
@pytest.mark.slow
def test_eval_terminal_show(docker, tmp_path):
    out = run([*replaced(readme(SHOW), "--limit", "2"), "--max-tokens", "32"], tmp_path, timeout=600)
    assert re.search(r"^overall\s+2\s", out, re.M), out
    shown = re.findall(r"^episode (\d)/(\d): task", out, re.M)
    assert shown == [("1", "2"), ("2", "2")], out
