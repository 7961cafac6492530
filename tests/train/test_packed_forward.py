"""The packed training forward (each group's prompt once, no padding, chunked log-softmax) against the plain
padded one: the same log-probs, entropies, gradients and steps; and the forwards an on-policy step skips."""

from __future__ import annotations

import functools
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from skyrl_train.config import AlgorithmConfig, OptimizerConfig  # noqa: E402
from skyrl_train.training.algorithms.logits import (  # noqa: E402
    chunked_token_scores,
    entropy_from_logits,
    log_probs_from_logits,
)
from skyrl_train.training.workers import PolicyWorker, RefWorker  # noqa: E402
from skyrl_train.training.workers.batching import pack_micro_batch  # noqa: E402


def grouped_batch(vocab: int, prompt_lengths=(5, 11), group: int = 3, seed: int = 0) -> dict:
    """Groups of ``group`` responses (different lengths, one with observation tokens) on prompts of the given
    lengths, left-padded and right-padded as TrainingBatch lays them out, with random advantages."""
    gen = torch.Generator().manual_seed(seed)
    items = []
    for prompt_len in prompt_lengths:
        prompt = torch.randint(1, vocab, (prompt_len,), generator=gen)
        for j in range(group):
            response = torch.randint(1, vocab, (4 + 3 * j,), generator=gen)
            loss_mask = torch.ones(len(response))
            if j == 1:
                loss_mask[2:4] = 0  # an observation inside the response
            items.append((prompt, response, loss_mask))
    width_p = max(len(p) for p, _, _ in items)
    width_r = max(len(r) for _, r, _ in items)
    rows = len(items)
    input_ids = torch.zeros((rows, width_p + width_r), dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    response_mask = torch.zeros((rows, width_r))
    for i, (prompt, response, loss_mask) in enumerate(items):
        input_ids[i, width_p - len(prompt) : width_p] = prompt
        input_ids[i, width_p : width_p + len(response)] = response
        attention_mask[i, width_p - len(prompt) : width_p + len(response)] = 1
        response_mask[i, : len(response)] = loss_mask
    advantages = torch.randn((rows, width_r), generator=gen) * response_mask
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "response_mask": response_mask,
        "advantages": advantages,
    }


@pytest.fixture(scope="module")
def tiny_factory(tiny_model):
    from skyrl_train.models import load_model

    return functools.partial(load_model, tiny_model)


def make_policy(factory, packed: bool, micro_batch_size: int = 8, **algorithm) -> PolicyWorker:
    return PolicyWorker(
        factory,
        OptimizerConfig(lr=1e-2, max_grad_norm=1.0),
        AlgorithmConfig(**algorithm),
        micro_batch_size=micro_batch_size,
        seed=0,
        packed=packed,
    )


def scores_and_grads(worker: PolicyWorker, batch: dict, entropy_grad: bool = False):
    worker.model.train()
    log_probs, entropy = worker._log_probs_and_entropy(batch, with_entropy=True, entropy_grad=entropy_grad)
    mask = batch["response_mask"]
    loss = (log_probs * batch["advantages"]).sum()
    if entropy_grad:
        loss = loss + (entropy * mask).sum()
    loss.backward()
    grads = {name: p.grad.clone() for name, p in worker.model.named_parameters() if p.grad is not None}
    worker.model.zero_grad(set_to_none=True)
    return log_probs * mask, entropy * mask, grads


def test_pack_lays_each_group_prompt_out_once(tokenizer):
    batch = grouped_batch(len(tokenizer))
    packed = pack_micro_batch(batch)
    responses = int(batch["attention_mask"][:, -batch["response_mask"].shape[1] :].sum())
    assert packed.tokens == 5 + 11 + responses  # two prompts, once each, and every response token
    assert packed.labels.numel() == responses
    # a response token attends to its prompt and its own earlier tokens only
    mask = packed.attention_mask[:, 0]
    row, col = int(packed.rows[-1]), int(packed.cols[-1])
    assert int(mask[row, col].sum()) == int(packed.position_ids[row, col]) + 1


@pytest.mark.parametrize("micro_batch_size", [8, 4])
def test_packed_log_probs_entropy_and_gradients_equal_the_padded_path(
    tiny_factory, tokenizer, micro_batch_size
):
    """Two groups of different prompt lengths; a micro-batch of 4 splits the second group across two."""
    batch = grouped_batch(len(tokenizer))
    plain = make_policy(tiny_factory, packed=False, micro_batch_size=micro_batch_size)
    packed = make_policy(tiny_factory, packed=True, micro_batch_size=micro_batch_size)
    torch.testing.assert_close(
        packed.compute_log_probs(batch), plain.compute_log_probs(batch), atol=1e-5, rtol=0
    )
    mb = {k: v[:micro_batch_size] for k, v in batch.items()}
    for entropy_grad in (False, True):
        lp_a, ent_a, grads_a = scores_and_grads(plain, mb, entropy_grad)
        lp_b, ent_b, grads_b = scores_and_grads(packed, mb, entropy_grad)
        torch.testing.assert_close(lp_b, lp_a, atol=1e-5, rtol=0)
        torch.testing.assert_close(ent_b, ent_a, atol=1e-5, rtol=0)
        assert grads_a.keys() == grads_b.keys()
        for name in grads_a:
            torch.testing.assert_close(grads_b[name], grads_a[name], atol=1e-5, rtol=1e-4)


def train_step_grads(worker: PolicyWorker, batch: dict) -> tuple[dict, dict]:
    """One training step's metrics and the gradients its optimizer step was given."""
    grads: dict = {}

    def record(*_):
        grads.update({n: p.grad.clone() for n, p in worker.model.named_parameters() if p.grad is not None})

    hook = worker.optimizer.register_step_pre_hook(record)
    try:
        return worker.train_step(batch), grads
    finally:
        hook.remove()


def assert_same_grads(got: dict, expected: dict) -> None:
    """The gradients an optimizer step is given agree. The weights after the step are not compared: Adam's
    first step divides by the gradient's size, so the last bits of a tiny gradient, summed in another order,
    can move its weight by a sizeable part of lr."""
    assert got and got.keys() == expected.keys()
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, atol=1e-6, rtol=1e-4)


def test_packed_train_step_equals_the_padded_step(tiny_factory, tokenizer):
    batch = grouped_batch(len(tokenizer), seed=3)
    steps = []
    for packed in (False, True):
        worker = make_policy(tiny_factory, packed=packed, micro_batch_size=4, use_entropy_loss=True)
        metrics, grads = train_step_grads(worker, batch)
        steps.append((metrics, grads, worker.full_state_dict()))
    (m_plain, g_plain, _), (m_packed, g_packed, w_packed) = steps
    for key in ("policy/loss", "policy/entropy", "policy/grad_norm"):
        assert m_packed[key] == pytest.approx(m_plain[key], rel=1e-4, abs=1e-6)
    assert_same_grads(g_packed, g_plain)
    initial = make_policy(tiny_factory, packed=True).full_state_dict()
    moved = any(not torch.equal(initial[name], w_packed[name]) for name in initial)
    assert moved, "the step did not move the weights"


def test_rows_with_distinct_prompts_pack_without_padding(tiny_factory, tokenizer):
    """No shared prefix (groups of one): each row is its own segment, packed first-fit without padding."""
    batch = grouped_batch(len(tokenizer), prompt_lengths=(2, 3, 4, 12), group=1, seed=7)
    packed = pack_micro_batch(batch)
    assert packed.tokens == int(batch["attention_mask"].sum())
    assert packed.input_ids.numel() < batch["input_ids"].numel()
    plain, fast = make_policy(tiny_factory, packed=False), make_policy(tiny_factory, packed=True)
    torch.testing.assert_close(
        fast.compute_log_probs(batch), plain.compute_log_probs(batch), atol=1e-5, rtol=0
    )


def test_ref_worker_packs_too(tiny_factory, tokenizer):
    batch = grouped_batch(len(tokenizer))
    ref = RefWorker(tiny_factory, micro_batch_size=8, forward_micro_batch_size=8, seed=0)
    plain = RefWorker(tiny_factory, micro_batch_size=8, seed=0, packed=False)
    torch.testing.assert_close(
        ref.compute_log_probs(batch), plain.compute_log_probs(batch), atol=1e-5, rtol=0
    )


@pytest.mark.parametrize("chunk_size", [1, 7, 1000])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_scores_equal_the_full_ones(chunk_size, temperature):
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(23, 16, generator=gen, requires_grad=True)
    head = torch.nn.Linear(16, 300, bias=False)
    labels = torch.randint(0, 300, (23,), generator=gen)
    weights = torch.randn(23, generator=gen)

    logits = head(hidden) / temperature
    full_lp, full_ent = log_probs_from_logits(logits, labels), entropy_from_logits(logits)
    ((full_lp + full_ent) * weights).sum().backward()
    expected = (hidden.grad.clone(), head.weight.grad.clone())
    hidden.grad, head.weight.grad = None, None

    lp, ent = chunked_token_scores(
        hidden,
        labels,
        head=head,
        temperature=temperature,
        with_entropy=True,
        entropy_grad=True,
        chunk_size=chunk_size,
    )
    torch.testing.assert_close(lp, full_lp, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent, full_ent, atol=1e-5, rtol=0)
    ((lp + ent) * weights).sum().backward()
    torch.testing.assert_close(hidden.grad, expected[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(head.weight.grad, expected[1], atol=1e-5, rtol=1e-5)

    # on logits (no head), without entropy: the same log-probs
    lp_only, none = chunked_token_scores(
        logits.detach(), labels, with_entropy=False, chunk_size=chunk_size, temperature=1.0
    )
    assert none is None
    torch.testing.assert_close(lp_only, full_lp.detach(), atol=1e-5, rtol=0)


def test_chunked_scores_without_entropy_grad_keep_it_out_of_the_graph():
    hidden = torch.randn(5, 8, requires_grad=True)
    head = torch.nn.Linear(8, 50, bias=False)
    lp, ent = chunked_token_scores(hidden, torch.zeros(5, dtype=torch.long), head=head, with_entropy=True)
    assert lp.requires_grad and not ent.requires_grad
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_token_scores(hidden, torch.zeros(5, dtype=torch.long), head=head, chunk_size=0)


def test_on_policy_step_runs_one_forward_per_micro_batch(tiny_factory, tokenizer):
    """Without old log-probs (one mini-batch, one epoch) the step scores each micro-batch once: no separate
    old-log-prob forward."""
    batch = grouped_batch(len(tokenizer))
    worker = make_policy(tiny_factory, packed=True, micro_batch_size=4)
    calls = []
    handle = worker.model.base_model.register_forward_hook(lambda *_: calls.append(1))
    try:
        metrics = worker.train_step(batch)
    finally:
        handle.remove()
    assert len(calls) == 2  # 6 rows in micro-batches of 4
    assert metrics["policy/clip_frac"] == 0.0  # ratio 1: the old log-probs are the current ones


@pytest.fixture(scope="module")
def sql_rows(tmp_path_factory):
    from skyrl_gym.envs.sql.prompts import build_compact_prompt
    from skyrl_gym.envs.sql.tasks import load_split
    from skyrl_gym.runtime.sql.database import open_database

    out = tmp_path_factory.mktemp("sql_rows") / "train.jsonl"
    rows = [r for r in load_split("train") if r["extra_info"]["level"] == "easy"][:4]
    with out.open("w") as handle:
        for row in rows:
            with open_database(row["db_path"]) as db:
                row["prompt"] = build_compact_prompt(db, row["extra_info"]["question"])
            handle.write(json.dumps(row) + "\n")
    return out


@pytest.mark.parametrize("update_epochs", [1, 2])
def test_trainer_skips_the_old_log_prob_forward_when_on_policy(tiny_model, sql_rows, tmp_path, update_epochs):
    from skyrl_train.config import load_config
    from skyrl_train.loop.trainer import Trainer

    cfg = load_config(
        "sql_cpu",
        [
            f"trainer.policy.model.path={tiny_model}",
            f"data.train_data=[{sql_rows}]",
            "data.val_data=[]",
            f"trainer.run_dir={tmp_path / 'run'}",
            "trainer.resume_mode=none",
            "trainer.train_batch_size=2",
            "trainer.policy_mini_batch_size=2",
            "trainer.micro_train_batch_size_per_gpu=4",
            f"trainer.update_epochs_per_batch={update_epochs}",
            "trainer.sft_warmup.steps=0",
            "trainer.logger=[jsonl]",
            "generator.n_samples_per_prompt=2",
            "generator.sampling_params.max_generate_length=8",
            "generator.max_turns=1",
            "trainer.record.trainer_log_probs=false",  # the record's own forward (one per step) is left out
        ],
    )
    with Trainer(cfg) as trainer:
        assert trainer.ref is None  # no KL term: no reference model, no reference forward
        old_calls, train_forwards = [], []
        compute = trainer.policy.compute_log_probs
        trainer.policy.compute_log_probs = lambda batch: old_calls.append(1) or compute(batch)
        train_batch = trainer.policy.train_batch

        def counted_train_batch(*args, **kwargs):
            hook = trainer.policy.model.base_model.register_forward_hook(lambda *_: train_forwards.append(1))
            try:
                return train_batch(*args, **kwargs)
            finally:
                hook.remove()

        trainer.policy.train_batch = counted_train_batch
        trainer.train_step(list(trainer.train_set)[:2])
    assert len(old_calls) == (0 if update_epochs == 1 else 1)
    assert len(train_forwards) == update_epochs  # 4 trajectories in one micro-batch, once per epoch


def test_token_budget_splits_micro_batches_and_gives_the_same_step(tiny_factory, tokenizer):
    from skyrl_train.training.workers.batching import iter_token_micro_batches

    batch = grouped_batch(len(tokenizer), seed=4)
    # group 1: prompt 5 + responses 4, 7, 10 (26 tokens); group 2: prompt 11 + the same lengths (32 tokens)
    pieces = list(iter_token_micro_batches(batch, 8, 20))
    sizes = [len(p["input_ids"]) for p in pieces]
    assert sum(sizes) == 6 and len(pieces) > 2
    for piece in pieces:
        if len(piece["input_ids"]) > 1:
            assert pack_micro_batch(piece).tokens <= 20
    assert [len(p["input_ids"]) for p in iter_token_micro_batches(batch, 8, 1000)] == [6]
    assert [len(p["input_ids"]) for p in iter_token_micro_batches(batch, 4, None)] == [4, 2]

    metrics, grads = [], []
    for budget in (None, 20):
        worker = PolicyWorker(
            tiny_factory,
            OptimizerConfig(lr=1e-2),
            AlgorithmConfig(),
            micro_batch_size=8,
            seed=0,
            max_tokens_per_micro_batch=budget,
        )
        forwards: list[int] = []
        hook = worker.model.base_model.register_forward_hook(lambda *_, seen=forwards: seen.append(1))
        step_metrics, step_grads = train_step_grads(worker, batch)
        metrics.append(step_metrics)
        grads.append(step_grads)
        hook.remove()
        assert len(forwards) == (1 if budget is None else len(pieces))
    for key in ("policy/loss", "policy/grad_norm"):
        assert metrics[1][key] == pytest.approx(metrics[0][key], rel=1e-4, abs=1e-6)
    assert_same_grads(grads[1], grads[0])
