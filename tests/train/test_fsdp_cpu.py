"""Two CPU processes (gloo) training one FSDP2-sharded policy: the same step as one process, a checkpoint
that a single process can load, and groups that fail loudly and leave no process behind.

One group does all the training checks: each start costs seconds (two interpreters importing torch and
transformers on a busy CPU).
"""

from __future__ import annotations

import os
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from skyrl_train.config import AlgorithmConfig, OptimizerConfig  # noqa: E402
from skyrl_train.training.workers import PolicyWorker, WorkerGroup, WorkerGroupError, WorkerLostError  # noqa: E402

from .tiny_models import VOCAB, tiny_llama  # noqa: E402

pytestmark = pytest.mark.timeout(180)


def broken_model():
    raise RuntimeError("this model cannot be built")


class ExitingPolicyWorker(PolicyWorker):
    """A policy worker that can be told to die, to test the group's handling of a lost process."""

    def exit_now(self, rank: int, code: int) -> None:
        if self.rank == rank:
            os._exit(code)

    def fail_in_a_collective(self, rank: int, code: int | None = None) -> None:
        """Rank ``rank`` exits with ``code`` (or raises, with no code) while the others wait for it in an
        all-reduce."""
        if self.rank == rank:
            if code is not None:
                os._exit(code)
            raise ValueError(f"rank {rank}'s own failure")
        torch.distributed.all_reduce(torch.ones(1))


def make_batch(seed: int = 0, rows: int = 4, prompt_len: int = 5, response_len: int = 6) -> dict:
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, VOCAB, (rows, prompt_len + response_len), generator=gen)
    attention_mask = torch.ones_like(input_ids)
    for row in range(rows):
        attention_mask[row, : row % 2] = 0
        if row:
            attention_mask[row, -row:] = 0
    input_ids = input_ids * attention_mask
    response_mask = attention_mask[:, prompt_len:].clone()
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "response_mask": response_mask,
        "advantages": torch.randn(rows, response_len, generator=gen) * response_mask,
    }


WORKER_KWARGS = {
    "model_factory": tiny_llama,
    "optimizer_cfg": OptimizerConfig(lr=1e-2, weight_decay=0.01, max_grad_norm=1.0),
    "algorithm_cfg": AlgorithmConfig(loss_reduction="token_mean"),
    "micro_batch_size": 1,
    "seed": 0,
}


def _all_gone(pids: list[int], within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                os.kill(pid, 0)
                alive.append(pid)
            except ProcessLookupError:
                pass
        if not alive:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_two_process_fsdp_step_equals_one_process_step_and_failures_are_loud(tmp_path):
    batch = make_batch()
    single = PolicyWorker(**{**WORKER_KWARGS, "micro_batch_size": 4})
    started = time.monotonic()
    group = WorkerGroup(ExitingPolicyWorker, 2, WORKER_KWARGS)
    start_s = time.monotonic() - started
    pids = group.pids
    try:
        old_log_probs = group.compute_log_probs(batch)
        torch.testing.assert_close(old_log_probs, single.compute_log_probs(batch), atol=1e-5, rtol=0)
        batch["old_log_probs"] = old_log_probs

        # One data-parallel step: each rank trains on 2 of the 4 rows with half of every parameter.
        step_started = time.monotonic()
        metrics = group.train_step(batch)
        step_s = time.monotonic() - step_started
        reference = single.train_step(batch)
        for key in ("policy/loss", "policy/grad_norm", "policy/entropy", "policy/lr"):
            assert metrics[key] == pytest.approx(reference[key], rel=1e-4, abs=1e-6), key
        weights = group.full_state_dict()
        expected = single.full_state_dict()
        assert set(weights) == set(expected)
        for name in expected:
            assert weights[name].device.type == "cpu"
            torch.testing.assert_close(weights[name], expected[name], atol=1e-5, rtol=0)
        assert group.global_step == 1

        # A sharded checkpoint written by two processes loads into one (model and optimizer state).
        group.save_checkpoint(tmp_path / "policy")
        resumed = PolicyWorker(**{**WORKER_KWARGS, "seed": 1})
        resumed.load_checkpoint(tmp_path / "policy")
        assert resumed.global_step == 1
        restored = resumed.full_state_dict()
        for name in expected:
            torch.testing.assert_close(restored[name], weights[name], atol=0, rtol=0)
        batch2 = make_batch(seed=1)
        batch2["old_log_probs"] = resumed.compute_log_probs(batch2)
        group.train_step(batch2)
        resumed.train_step(batch2)
        after_group, after_resumed = group.full_state_dict(), resumed.full_state_dict()
        for name in expected:
            torch.testing.assert_close(after_group[name], after_resumed[name], atol=1e-5, rtol=0)

        # Bad input is refused before anything is sent: the group stays usable.
        with pytest.raises(ValueError, match="does not split evenly"):
            group.compute_log_probs(make_batch(rows=3))
        # A rank that dies ends the whole group with an error that names it first, whichever report arrives
        # first: the peer it left waiting in an all-reduce fails too, and is named after it.
        with pytest.raises(
            WorkerLostError, match=r"^policy worker rank 1 \(pid \d+\) died with exit code 7 "
        ) as lost:
            group.call("fail_in_a_collective", 1, 7)
        assert "The other ranks: policy worker rank 0 failed during fail_in_a_collective" in str(lost.value)
        with pytest.raises(WorkerGroupError, match="shut down"):
            group.train_step(batch)
    finally:
        group.shutdown()
    assert _all_gone(pids)
    print(f"\n2-process FSDP: group start {start_s:.1f} s, one train_step {step_s:.2f} s")


def test_a_rank_that_raises_is_named_before_the_peer_its_failure_disconnected():
    group = WorkerGroup(ExitingPolicyWorker, 2, WORKER_KWARGS)
    pids = group.pids
    with pytest.raises(WorkerGroupError) as info:
        group.call("fail_in_a_collective", 1)
    message = str(info.value)
    assert not isinstance(info.value, WorkerLostError)  # nothing died: a rank raised
    assert message.startswith(
        "policy worker rank 1 failed during fail_in_a_collective; the worker group was shut down"
    )
    assert "The other ranks: policy worker rank 0 failed during fail_in_a_collective" in message
    # both tracebacks, the cause's first
    assert message.index("ValueError: rank 1's own failure") < message.index("Worker traceback (rank 0)")
    assert _all_gone(pids)


def test_a_worker_that_fails_to_start_names_the_rank_and_the_cause():
    with pytest.raises(WorkerGroupError, match="this model cannot be built") as info:
        WorkerGroup(PolicyWorker, 2, {**WORKER_KWARGS, "model_factory": broken_model})
    assert "failed during start" in str(info.value)
