"""Run-level checkpoints: exact round trip (weights, optimizer, scheduler, data position, RNG), the
``latest`` marker, pruning, and a training process killed with SIGKILL that resumes where it stopped."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from skyrl_train.config import AlgorithmConfig, OptimizerConfig  # noqa: E402
from skyrl_train.training import checkpoint  # noqa: E402
from skyrl_train.training.workers import PolicyWorker  # noqa: E402

from .tiny_models import VOCAB, tiny_llama  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def policy(seed: int = 0) -> PolicyWorker:
    optimizer = OptimizerConfig(lr=1e-2, num_warmup_steps=3, scheduler="cosine_with_warmup")
    return PolicyWorker(
        tiny_llama, optimizer, AlgorithmConfig(), micro_batch_size=2, seed=seed, total_steps=10
    )


def random_batch(worker: PolicyWorker) -> dict:
    """A batch drawn from the global torch RNG, so resuming must restore the RNG to get the same one."""
    input_ids = torch.randint(1, VOCAB, (4, 10))
    batch = {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "response_mask": torch.ones(4, 5, dtype=torch.long),
        "advantages": torch.randn(4, 5),
    }
    batch["old_log_probs"] = worker.compute_log_probs(batch)
    return batch


def test_round_trip_continues_exactly_like_an_uninterrupted_run(tmp_path):
    torch.manual_seed(123)
    worker = policy()
    for _ in range(2):
        worker.train_step(random_batch(worker))
    saved_at = checkpoint.save_checkpoint(
        tmp_path,
        2,
        {"policy": worker},
        data_state={"epoch": 0, "position": 8},
        config={"trainer": {"seed": 123}},
        extra={"best_accuracy": 0.25},
    )
    assert saved_at == tmp_path / "checkpoints" / "step_2"
    random.random()  # the random states move on after the save...
    uninterrupted = worker.train_step(random_batch(worker))
    expected = worker.full_state_dict()

    fresh = policy(seed=7)
    state = checkpoint.load_checkpoint(checkpoint.find_latest(tmp_path), {"policy": fresh})
    assert state.step == 2
    assert state.data_state == {"epoch": 0, "position": 8}
    assert state.config == {"trainer": {"seed": 123}}
    assert state.extra == {"best_accuracy": 0.25}
    assert fresh.global_step == 2
    resumed = fresh.train_step(random_batch(fresh))  # ...and are put back by the load
    assert resumed["policy/lr"] == uninterrupted["policy/lr"]  # the scheduler is restored
    got = fresh.full_state_dict()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-6, rtol=0)


def test_latest_marker_pruning_and_leftovers(tmp_path):
    class Stub:
        def save_checkpoint(self, path):
            Path(path).mkdir(parents=True)
            (Path(path) / "weights").write_text("w")

        def load_checkpoint(self, path):
            assert (Path(path) / "weights").read_text() == "w"

    assert checkpoint.find_latest(tmp_path) is None
    for step in (1, 2, 3, 4):
        checkpoint.save_checkpoint(tmp_path, step, {"policy": Stub()}, keep_last=2)
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_3", "step_4"]
    assert (root / "latest").read_text().strip() == "step_4"
    assert checkpoint.find_latest(tmp_path) == root / "step_4"
    assert checkpoint.checkpoint_step(root / "step_4") == 4

    # A save killed half way leaves a hidden temporary folder: ignored, then cleaned by the next save.
    (root / ".tmp-step_5-dead").mkdir()
    assert checkpoint.find_latest(tmp_path) == root / "step_4"
    # A marker naming a missing checkpoint falls back to the newest complete one.
    (root / "latest").write_text("step_9\n")
    assert checkpoint.find_latest(tmp_path) == root / "step_4"
    checkpoint.save_checkpoint(tmp_path, 5, {"policy": Stub()})
    assert not (root / ".tmp-step_5-dead").exists()
    assert checkpoint.find_latest(tmp_path) == root / "step_5"

    with pytest.raises(ValueError, match=r"worker state for \['policy'\]"):
        checkpoint.load_checkpoint(root / "step_5", {})
    assert checkpoint.load_checkpoint(root / "step_5", {}, strict=False).step == 5
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        checkpoint.load_checkpoint(root / "step_77", {"policy": Stub()})


TRAIN_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path

    import torch

    from skyrl_train.training import checkpoint
    from skyrl_train.config import AlgorithmConfig, OptimizerConfig
    from skyrl_train.training.workers import PolicyWorker


    def tiny_llama():
        from transformers import LlamaConfig, LlamaForCausalLM

        return LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2))


    class FakeData:
        # A data iterator with a resumable position; the rows themselves come from the torch RNG.
        def __init__(self):
            self.position = 0

        def next_batch(self):
            self.position += 4
            ids = torch.randint(1, 128, (4, 10))
            return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                    "response_mask": torch.ones(4, 5, dtype=torch.long), "advantages": torch.randn(4, 5)}

        def state_dict(self):
            return {"position": self.position}

        def load_state_dict(self, state):
            self.position = state["position"]


    run_dir, total_steps, pause_s = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    torch.manual_seed(0)
    worker = PolicyWorker(tiny_llama, OptimizerConfig(lr=1e-2), AlgorithmConfig(), micro_batch_size=2)
    data = FakeData()
    start = 1
    latest = checkpoint.find_latest(run_dir)
    if latest is not None:
        state = checkpoint.load_checkpoint(latest, {"policy": worker})
        data.load_state_dict(state.data_state)
        start = state.step + 1
        torch.save(worker.full_state_dict(), run_dir / "resumed_weights.pt")
        print(f"RESUMED {state.step} position {data.position}", flush=True)
    for step in range(start, total_steps + 1):
        batch = data.next_batch()
        batch["old_log_probs"] = worker.compute_log_probs(batch)
        worker.train_step(batch)
        torch.save(worker.full_state_dict(), run_dir / f"weights_{step}.pt")
        checkpoint.save_checkpoint(run_dir, step, {"policy": worker}, data_state=data.state_dict(), keep_last=2)
        print(f"SAVED {step}", flush=True)
        time.sleep(pause_s)
    print("DONE", flush=True)
    """
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    return env


@pytest.mark.slow
def test_sigkilled_run_resumes_after_its_last_checkpoint(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = subprocess.Popen(
        [sys.executable, str(script), str(run_dir), "100", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    saved = []
    deadline = time.monotonic() + 120
    try:
        while len(saved) < 2 and time.monotonic() < deadline:
            line = first.stdout.readline()
            if not line:
                break
            if line.startswith("SAVED"):
                saved.append(int(line.split()[1]))
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    assert saved == [1, 2], first.stderr.read()
    assert first.returncode == -signal.SIGKILL

    latest = checkpoint.find_latest(run_dir)
    assert latest is not None
    last_step = int(latest.name.split("_")[1])
    assert last_step >= 2  # the kill may land after a later save completed, never before step 2's

    second = subprocess.run(
        [sys.executable, str(script), str(run_dir), str(last_step + 1), "0"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert second.returncode == 0, second.stderr
    lines = second.stdout.splitlines()
    assert lines[0] == f"RESUMED {last_step} position {4 * last_step}"
    assert lines[1:] == [f"SAVED {last_step + 1}", "DONE"]
    resumed = torch.load(run_dir / "resumed_weights.pt")
    saved_weights = torch.load(run_dir / f"weights_{last_step}.pt")
    assert set(resumed) == set(saved_weights)
    for name in saved_weights:
        assert torch.equal(resumed[name], saved_weights[name]), name
    kept = sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("step_"))
    assert kept == [f"step_{last_step}", f"step_{last_step + 1}"]


def test_export_writes_the_checkpoints_policy_as_a_model_folder(tmp_path, tiny_model, tokenizer):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(5)
    worker = PolicyWorker(
        lambda: AutoModelForCausalLM.from_pretrained(tiny_model),
        OptimizerConfig(lr=1e-2),
        AlgorithmConfig(),
        micro_batch_size=2,
    )
    worker.train_step(random_batch(worker))  # the weights now differ from the model the run started from
    trained = worker.full_state_dict()
    config = {"trainer": {"policy": {"model": {"path": tiny_model}}}}
    checkpoint.save_checkpoint(tmp_path / "run", 1, {"policy": worker}, data_state={}, config=config)

    out = checkpoint.export_model(tmp_path / "run", tmp_path / "model")  # the run folder: its newest
    exported = AutoModelForCausalLM.from_pretrained(out).state_dict()
    started = AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()
    assert any(not torch.equal(started[k], trained[k]) for k in trained)
    for name, tensor in trained.items():
        torch.testing.assert_close(exported[name], tensor, atol=0, rtol=0)
    assert AutoTokenizer.from_pretrained(out).get_vocab() == tokenizer.get_vocab()

    with pytest.raises(ValueError, match="no policy checkpoint"):
        checkpoint.export_model(tmp_path / "elsewhere", tmp_path / "other")
